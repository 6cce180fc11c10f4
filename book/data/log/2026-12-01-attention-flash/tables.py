"""Every number of the log entry of 2026-12-01 on attention "flash", from the files beside this script."""
import json
import re
import statistics
from pathlib import Path

here = Path(__file__).parent


def bootstrap(a, b, draws=4000, seed=0):
    """95 % interval of median(a) / median(b), steps taken in pairs (systems.bench.flash_sweep.ratio_interval)."""
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(a), (draws, len(a)))
    return np.percentile(np.median(a[idx], axis=1) / np.median(b[idx], axis=1), [2.5, 97.5])


print((here / "run1_machine.txt").read_text())
for run in ("run1", "run2"):
    log = (here / f"{run}_pytest.log").read_text()
    print(run, "GPU tests:", re.findall(r"=+ (\d+ passed.*?) =+\n", log)[-1])
    print("  failed:", len(re.findall(r" FAILED", log)), "of them test_flash_fastest:",
          len(re.findall(r"test_flash_fastest.py::\S+ PASSED", log)))

print("\nThe small preset's step (bf16, context 1024, 8 sequences), 20 steps of each attention interleaved; ms:")
rows = [json.loads(line) for line in (here / "run1_steps.jsonl").read_text().splitlines() if line.strip()]
for compiled in (False, True):
    times = {r["attention"]: r["step_times_ms"] for r in rows if r["compile"] == compiled}
    print(" compiled" if compiled else " eager")
    for name, t in times.items():
        print(f"   {name:<13} median {statistics.median(t):7.2f}  min {min(t):7.2f}  max {max(t):7.2f}")
    for a, b in (("flash", "flash_hopper"), ("flash", "sdpa"), ("flash_hopper", "sdpa")):
        low, high = bootstrap(times[a], times[b])
        print(f"   {a} / {b}: {statistics.median(times[a]) / statistics.median(times[b]):.3f} "
              f"(95 % interval {low:.3f} to {high:.3f})")

print("\nThe one-GPU leaderboard command at its defaults, 2 blocks (run 4): recipe, ms, MFU")
lines = (here / "run4_model2.txt").read_text().splitlines()
for line in lines[1:]:
    words = line.split()
    print(f"  {' '.join(words[1:words.index('compiled') + 1]):<72} {float(words[-6]):8.1f} {float(words[-1]):.3f}")

print("\nThe small preset's eager step at short contexts, 8,192 tokens a step, 30 steps each interleaved (run 5); ms:")
rows = [json.loads(line) for line in (here / "run5_short.jsonl").read_text().splitlines() if line.strip()]
for context in (256, 512):
    times = {r["attention"]: r["step_times_ms"] for r in rows if r["context_length"] == context}
    print(f"  context {context}: " + ", ".join(f"{name} {statistics.median(t):.2f} ({min(t):.1f} to {max(t):.1f})"
                                              for name, t in times.items()))
    for a, b in (("flash_hopper", "flash_triton"), ("flash_hopper", "sdpa")):
        low, high = bootstrap(times[a], times[b])
        print(f"    {a} / {b}: {statistics.median(times[a]) / statistics.median(times[b]):.3f} "
              f"(95 % interval {low:.3f} to {high:.3f})")

print("\nThe per-call floor, forward and backward, bf16, causal, wall µs a call (median of nine rounds of 300):")
floor = [json.loads(line) for line in (here / "run3_floor.jsonl").read_text().splitlines() if line.strip()]
for shape in dict.fromkeys(r["shape"] for r in floor):
    at = {r["impl"]: r for r in floor if r["shape"] == shape}
    print(" ", shape)
    for name, r in at.items():
        print(f"   {name:<13} eager {r['eager']:6.1f}  compiled {r['compiled']:6.1f}   eager / sdpa_flash "
              f"{r['eager'] / at['sdpa_flash']['eager']:.3f}  compiled / sdpa_flash "
              f"{r['compiled'] / at['sdpa_flash']['compiled']:.3f}")

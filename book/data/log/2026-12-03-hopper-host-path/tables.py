"""Every number of the log entry "The Hopper operators' host path trimmed" (2026-12-03): each C++ operator's host µs
a call beside the unchanged ones of the CUDA C++ kernels and the Triton kernels' host path, in both runs of
call_overhead (run 1 before the forward's change, run 2 after it, on two hosts); the whole calls; the per-call
floor of run 2; and the eager steps of run 3 with chapter 17's interval. Run from anywhere inside the repository."""
from pathlib import Path

import pandas as pd

from systems.bench.flash_sweep import ratio_interval

here = Path(__file__).parent


def overhead(path: Path) -> pd.DataFrame:
    """call_overhead's printed table: impl and what are right- and left-aligned text columns."""
    header, *lines = path.read_text().splitlines()
    impl_end = header.index("impl") + len("impl")
    rows = []
    for line in lines:
        *_, host, wall = line.split()
        rows.append({"impl": line[:impl_end].strip(), "what": line[impl_end:].rsplit(None, 2)[0].strip(),
                     "host_us": float(host), "wall_us": float(wall)})
    return pd.DataFrame(rows).set_index(["impl", "what"]).host_us


OPERATORS = [("flash_hopper", "forward, C++ operator (allocations + launches)"),
             ("flash_cuda", "forward, C++ operator (allocations + launches)"),
             ("flash_triton", "forward, C++ operator (allocation + remembered launch)"),
             ("flash_hopper", "backward, C++ operator (allocations + launches)"),
             ("flash_cuda", "backward, C++ operator (allocations + launches)"),
             ("flash_triton", "backward, C++ operator (allocations + remembered launches)")]
WHOLE = [(impl, "forward + backward") for impl in ("flash", "flash_cuda", "flash_triton", "sdpa_flash", "sdpa_cudnn")]
WHOLE += [(impl, "forward + backward, backward on the calling thread") for impl in ("flash", "flash_triton",
                                                                                     "sdpa_flash")]
runs = {f"run {r}, table {t}": overhead(here / f"run{r}_co{t}.txt") for r in (1, 2) for t in (1, 2)}
for title, keys in (("C++ operators alone, host µs a call", OPERATORS), ("whole calls, host µs", WHOLE)):
    table = pd.DataFrame({name: run.loc[keys] for name, run in runs.items()}).round(2)
    print(title, table.to_string(), sep="\n", end="\n\n")
ops = pd.DataFrame({name: run.loc[OPERATORS] for name, run in runs.items()})
print("the Hopper operator over the CUDA C++ one and over the Triton host path's, forward and backward")
for step in ("forward", "backward"):
    hopper, cuda, triton = (ops.loc[[k for k in OPERATORS if k[1].startswith(step) and k[0] == impl]].iloc[0]
                            for impl in ("flash_hopper", "flash_cuda", "flash_triton"))
    print(f"{step}: over flash_cuda's", (hopper / cuda).round(3).to_dict())
    print(f"{step}: over the Triton host path's", (hopper / triton).round(3).to_dict())
checks = ("flash_triton", "input checks (Python)")
print("\ninput checks (Python), host µs:", {name: round(run.loc[checks], 2) for name, run in runs.items()})

floor = pd.read_fwf(here / "run2_floor.txt").set_index("impl")
print("\nrun 2, per-call floor (wall µs) and over SDPA FlashAttention-2's", floor.round(1).to_string(),
      (floor / floor.loc["sdpa_flash"]).round(3).to_string(), sep="\n")

steps = pd.read_json(here / "run3_steps.jsonl", lines=True)
print("\nrun 3, eager steps (ms, median) and ours over sdpa's with the 95 % interval")
for (size, context), point in steps.groupby(["size", "context_length"], sort=False):
    times, median = point.set_index("attention").step_times_ms, point.set_index("attention").step_ms
    words = []
    for ours in ("flash", "flash_triton"):
        low, high = ratio_interval(times[ours], times["sdpa"])
        words.append(f"{ours} {median[ours] / median['sdpa']:.3f} ({low:.3f} to {high:.3f})")
    spread = {a: f"{min(t):.1f} to {max(t):.1f}" for a, t in times.items()}
    print(size, context, median.round(2).to_dict(), *words, "steps from", spread)

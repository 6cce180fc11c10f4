"""Every number of the log entry of 2026-11-28 on the head-dim-64 dQ shares, from the rows in this folder.

Run 1: the commit before (base) against the shares summed by consumer 1 after its dS^T ("late"); run 2: base, v1
(consumer 1 sums at the point where both used to hand over: the design kept) and v2 (the roles alternating by tile);
run 3: base against the commit with v1 ("new"). Times are do_bench medians in ms; the faster of the rounds.
"""
import collections
import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {"run1_late.jsonl": {"base": "base", "new": "late"},
        "run2_early_and_alternating.jsonl": {"base": "base", "v1": "early", "v2": "alternating"},
        "run3_final.jsonl": {"base": "base", "new": "kept"}}


def best(path):
    times, errors = collections.defaultdict(dict), collections.defaultdict(float)
    for line in (HERE / path).read_text().splitlines():
        row = json.loads(line)
        tree = RUNS[path][row["tree"]]
        key = (row["shape"], row["impl"])
        times[key][tree] = min(times[key].get(tree, float("inf")), row["ms"])
        if "err" in row:
            errors[tree] = max(errors[tree], *row["err"])
    return times, errors


for path, trees in RUNS.items():
    times, errors = best(path)
    others = [t for t in trees.values() if t != "base"]
    print(f"\n{path}: largest error against cuDNN's gradients, by tree:",
          ", ".join(f"{t} {e:.1e}" for t, e in errors.items()))
    print("| shape | base | " + " | ".join(f"{t} | {t} / base" for t in others) + " | cuDNN | " +
          " | ".join(f"{t} / cuDNN" for t in ["base", *others]) + " |")
    for (shape, impl), by_tree in times.items():
        if impl != "hopper backward":
            continue
        cudnn = min(times[(shape, "cudnn backward")].values())
        cells = [f"{by_tree['base']:.3f}"]
        for t in others:
            cells += [f"{by_tree[t]:.3f}" if t in by_tree else "—",
                      f"{by_tree[t] / by_tree['base']:.3f}" if t in by_tree else "—"]
        cells.append(f"{cudnn:.3f}")
        cells += [f"{by_tree[t] / cudnn:.3f}" if t in by_tree else "—" for t in ["base", *others]]
        print(f"| {shape} | " + " | ".join(cells) + " |")

times, _ = best("run3_final.jsonl")
print("\nrun 3, forward+backward (flash_hopper as registered, cuDNN through SDPA), the model's layout:")
print("| shape | flash_hopper, base | flash_hopper, kept | cuDNN | kept / cuDNN |")
for (shape, impl), by_tree in times.items():
    if impl == "flash_hopper fwd+bwd":
        cudnn = min(times[(shape, "sdpa_cudnn fwd+bwd")].values())
        print(f"| {shape} | {by_tree['base']:.3f} | {by_tree['kept']:.3f} | {cudnn:.3f} | {by_tree['kept'] / cudnn:.3f} |")

print("\nrun 4 (at 64a4a4a, the kernels of b57f673): the Hopper backward against the Triton backward, causal, head dim 64,")
print("the model's layout, through their C++ operators; the faster of three rounds, ms; the choice as flash_hopper makes it")
sweep = collections.defaultdict(lambda: collections.defaultdict(lambda: float("inf")))
for line in (HERE / "run4_sweep_at_64a4a4a.jsonl").read_text().splitlines():
    row = json.loads(line)
    key = (row["n"], row["B"], row["H"])
    sweep[key][row["impl"]] = min(sweep[key][row["impl"]], row["ms"])
print("| keys | B×H | blocks of 128 keys | Hopper | Triton | Hopper / Triton | flash_hopper takes |")
for (n, B, H), by_impl in sweep.items():
    blocks = B * H * n // 128
    takes = "Hopper" if n >= 8192 or (n >= 2048 and blocks >= 1536) else "Triton"
    hop, tri = by_impl["bwd hopper"], by_impl["bwd triton"]
    print(f"| {n} | {B}×{H} | {blocks} | {hop:.3f} | {tri:.3f} | {hop / tri:.3f} | {takes} |")

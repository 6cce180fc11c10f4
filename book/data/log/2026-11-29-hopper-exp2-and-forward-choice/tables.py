"""Every number of the log entry of 2026-11-29 on exponentials off the multi-function unit and the forward's choice,
from the rows in this folder (run from it, with the repository's systems on the path)."""
import collections
import json
import re
from pathlib import Path

import numpy as np

from systems.bench.flash_sweep import ratio_interval

HERE = Path(__file__).parent


def lines(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


print("## Run 1: the Hopper forward alone with 0, 2, 4, 6 of 16 exponential groups on the FMA pipes (fwd_ab.py)")
print("fastest of two rounds; cuDNN and Triton: fastest over every tree and round")
rows = [r for r in lines("run1_fwd_ab.jsonl") if "shape" in r]
best = collections.defaultdict(lambda: float("inf"))
for r in rows:
    for key in ("ms", "cudnn_ms", "triton_ms"):
        if key in r:
            tree = r["tree"] if key == "ms" else "all"
            best[r["shape"], tree, key] = min(best[r["shape"], tree, key], r[key])
print("| shape | e0 ms | e2 / e0 | e4 / e0 | e6 / e0 | e0 / cuDNN | Triton / cuDNN |")
for shape in dict.fromkeys(r["shape"] for r in rows):
    e0, cudnn, triton = best[shape, "e0", "ms"], best[shape, "all", "cudnn_ms"], best[shape, "all", "triton_ms"]
    ratios = " | ".join(f"{best[shape, t, 'ms'] / e0:.3f}" for t in ("e2", "e4", "e6"))
    tri = f"{triton / cudnn:.3f}" if triton < float("inf") else ""
    print(f"| {shape} | {e0:.4f} | {ratios} | {e0 / cudnn:.3f} | {tri} |")
oracle = [r for r in lines("run1_fwd_ab.jsonl") if "oracle" in r]
print("largest error against float64 over its largest, ours / cuDNN's, every tree and round:",
      f"{max(r['ours'] for r in oracle):.2e} / {max(r['cudnn'] for r in oracle):.2e};",
      "rows where ours differs from cuDNN's:", sum(r["ours"] != r["cudnn"] for r in oracle), "of", len(oracle))

print("\n## Run 4: the registered attention, (B, H, N, d) inputs, fastest of 3 calls (fwd_bwd.py), ms")
rows = lines("run4_fwd_bwd.jsonl")
best = collections.defaultdict(lambda: float("inf"))
for r in rows:
    key = (r["batch"], r["heads"], r["n_q"], r["mode"])
    tree = r["tree"] if r["impl"] == "flash_hopper" else "cudnn"
    best[key + (tree,)] = min(best[key + (tree,)], r["ms"])
print("| shape | mode | head | sw | sw / head | head / cuDNN | sw / cuDNN |")
for key in sorted({k[:4] for k in best}, key=lambda k: (k[2], k[0] * k[1], k[3])):
    head, sw, cudnn = (best[key + (t,)] for t in ("head", "sw", "cudnn"))
    print(f"| {key[0]}x{key[1]}x{key[2]}x64 | {key[3]} | {head:.4f} | {sw:.4f} | {sw / head:.3f} | {head / cudnn:.3f} "
          f"| {sw / cudnn:.3f} |")

print("\n## Runs 2 and 4: eager steps, flash_hopper over sdpa (ratio of medians, 95 % interval), ms of sdpa")
for run in ("run2", "run4"):
    for tree in ("head", "sw"):
        points = collections.defaultdict(dict)
        for r in lines(f"{run}_preset_steps_{tree}.jsonl"):
            points[r["size"], r["context_length"], r["batch_size"]][r["attention"]] = r["step_times_ms"]
        for (size, context, batch), times in points.items():
            ours, theirs = times["flash_hopper"], times["sdpa"]
            low, high = ratio_interval(ours, theirs)
            print(f"{run} {tree:4s} {size:6s} {context:5d} batch {batch:2d}: sdpa {np.median(theirs):7.2f} ms, "
                  f"ratio {np.median(ours) / np.median(theirs):.4f} ({low:.3f} to {high:.3f})")

print()
for name in ("run2_pytest.log", "run3_pytest.log"):
    text = (HERE / name).read_text()
    print(f"{name}: {len(re.findall(' PASSED', text))} passed, {len(re.findall(' FAILED', text))} failed;",
          "last line:", text.strip().splitlines()[-1][:100])

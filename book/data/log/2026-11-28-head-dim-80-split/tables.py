"""Prints every number of the log entry "Head dim 80 as 64 + 16 columns" from the records in this directory."""
import json
import statistics
from collections import defaultdict
from pathlib import Path

from systems.bench.flash_sweep import ratio_interval

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


print("| shape (B×H×N×d) | fwd: split | padded | cuDNN | fwd+bwd: split | padded | cuDNN | split / padded "
      "| split / cuDNN |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows("d80_attention.jsonl"):
    print(f"| {r['shape'].replace('x', '×')} | {r['split_fwd']:.3f} | {r['padded_fwd']:.3f} | {r['cudnn_fwd']:.3f} "
          f"| {r['split_fwdbwd']:.3f} | {r['padded_fwdbwd']:.3f} | {r['cudnn_fwdbwd']:.3f} "
          f"| {r['split_fwdbwd'] / r['padded_fwdbwd']:.3f} | {r['split_fwdbwd'] / r['cudnn_fwdbwd']:.3f} |")
print("SDPA's FlashAttention-2 back end, fwd+bwd (ms, and over cuDNN's):",
      {r["shape"]: (round(r["flash_fwdbwd"], 3), round(r["flash_fwdbwd"] / r["cudnn_fwdbwd"], 3))
       for r in rows("d80_attention.jsonl")})
print("largest difference from the split kernel's outputs and gradients over their largest value:",
      {k: round(max(r[k] for r in rows("d80_attention.jsonl")), 4) for k in ("padded_err", "cudnn_err", "flash_err")})
print()
print("run 3, the same calls again (fwd, fwd+bwd):")
for r in rows("run3_diag512.jsonl"):
    print(f"  {r['shape']} {r['config']}: {r['fwd']:.3f} {r['fwdbwd']:.3f} tiles chosen {r['chosen']}")
print()
print("| shape (B×H×N×d) | one pass | two passes | as chosen | cuDNN | one / two | as chosen / cuDNN |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows("run4_onepass80.jsonl"):
    print(f"| {r['shape'].replace('x', '×')} | {r['one_pass']:.3f} | {r['two_passes']:.3f} | {r['default']:.3f} "
          f"| {r['cudnn']:.3f} | {r['one_pass'] / r['two_passes']:.3f} | {r['default'] / r['cudnn']:.3f} |")
print("passes chosen (True: one):", sorted(set(v for r in rows("run4_onepass80.jsonl")
                                               for v in r["passes_chosen"].values())))
print()
print("| run | context | batch | compiled | `sdpa` ms | `flash_triton` / `sdpa` (95 % interval) "
      "| `flash_hopper` / `sdpa` (95 % interval) |")
print("|---|---:|---:|---|---:|---:|---:|")
for run in ("run2_steps80.jsonl", "run4_steps80.jsonl"):
    points = defaultdict(dict)
    for r in rows(run):
        points[(r["context_length"], r["batch_size"], r["compile"])][r["attention"]] = r
    for (context, batch, compiled), by in points.items():
        base = by["sdpa"]["step_times_ms"]
        cells = []
        for name in ("flash_triton", "flash_hopper"):
            if name not in by:
                cells.append("—")
                continue
            ours = by[name]["step_times_ms"]
            lo, hi = ratio_interval(ours, base)
            cells.append(f"{statistics.median(ours) / statistics.median(base):.3f} ({lo:.3f} to {hi:.3f})")
        print(f"| {run[:4]} | {context} | {batch} | {'yes' if compiled else 'no'} | {statistics.median(base):.1f} | "
              + " | ".join(cells) + " |")

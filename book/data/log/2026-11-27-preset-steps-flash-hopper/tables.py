"""The log entry's table, from preset_steps.jsonl: python tables.py (in the repository's environment)"""
import json
from pathlib import Path

from systems.bench.flash_sweep import ratio_interval

HERE = Path(__file__).parent
rows = [json.loads(line) for line in open(HERE / "preset_steps.jsonl")]
points = {}
for r in rows:
    points.setdefault((r["size"], r["context_length"], r["batch_size"]), {})[r["attention"]] = r

print("| size | context | batch | `sdpa` (ms) | `flash_triton` / `sdpa` (95 % interval) |"
      " `flash_hopper` / `sdpa` (95 % interval) |")
print("|---|---:|---:|---:|---:|---:|")
for (size, context, batch), by in points.items():
    cells = []
    for ours in ("flash_triton", "flash_hopper"):
        low, high = ratio_interval(by[ours]["step_times_ms"], by["sdpa"]["step_times_ms"])
        cells.append(f"{by[ours]['step_ms'] / by['sdpa']['step_ms']:.3f} ({low:.3f} to {high:.3f})")
    print(f"| {size} | {context} | {batch} | {by['sdpa']['step_ms']:.1f} | {cells[0]} | {cells[1]} |")

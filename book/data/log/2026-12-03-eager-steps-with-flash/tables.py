"""Every number of the log entry "The eager step of every preset with attention='flash'": each attention's median
step (ms) at each point, and ours over sdpa's with the 95 % interval of chapter 17 (a paired bootstrap over the
interleaved steps, flash_sweep.ratio_interval). Run from anywhere inside the repository."""
from pathlib import Path

import numpy as np
import pandas as pd

from systems.bench.flash_sweep import ratio_interval

here = Path(__file__).parent
runs = pd.concat([pd.read_json(here / f"run{n}_steps.jsonl", lines=True) for n in (1, 2)], ignore_index=True)
rows = []
for (size, context), point in runs.groupby(["size", "context_length"], sort=False):
    steps = point.set_index("attention").step_times_ms
    median = point.set_index("attention").step_ms
    row = {"size": size, "context": context, "batch": int(point.batch_size.iloc[0]), **median.round(2).to_dict()}
    for ours in ("flash", "flash_triton"):
        low, high = ratio_interval(steps[ours], steps["sdpa"])
        row[f"{ours}/sdpa"] = round(median[ours] / median["sdpa"], 4)
        row[f"{ours} interval"] = f"{low:.4f} to {high:.4f}"
        row[f"{ours} side"] = "faster" if high < 1 else "slower" if low > 1 else "holds 1"
    rows.append(row)
table = pd.DataFrame(rows)
print(table.to_string(index=False))
for ours in ("flash", "flash_triton"):
    ratio = table[f"{ours}/sdpa"]
    print(f"{ours}/sdpa: {ratio.min():.4f} to {ratio.max():.4f}, geometric mean {np.exp(np.log(ratio).mean()):.4f}, "
          f"above 1 at {(ratio > 1).sum()} of {len(ratio)};", table[f"{ours} side"].value_counts().to_dict())

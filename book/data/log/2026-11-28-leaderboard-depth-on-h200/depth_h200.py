"""Chapter 18's step on one H200 (141 GB), where attention's output fits in every block at depths where it did not
on the H100: our recipe (keep_attention in all blocks, as chapter 18 runs it) and plain PyTorch's at each depth in
argv; a row per try appended to $OUT/depth_h200.csv as it finishes."""
import os, sys, time
from dataclasses import replace

import pandas as pd
import torch

from systems.bench import leaderboard_2026 as lb
from systems.device import allocatable_bytes
from systems.model import LEADERBOARD_2026

cfg = LEADERBOARD_2026
ours = replace(lb.Recipe(), attention=lb.our_attention(cfg, torch.device("cuda")), recompute="keep_attention")
print(torch.cuda.get_device_name(), "allocatable GiB", round(allocatable_bytes() / 2**30, 1), flush=True)
rows, t0 = pd.DataFrame(), time.time()
for n in map(int, sys.argv[1:]):
    for recipe in (ours, lb.PLAIN):
        more = lb.step_at((n, recipe), rows, rep=1000, warmup=300)
        rows = pd.concat([rows, more], ignore_index=True)
        rows.to_csv(os.path.join(os.environ["OUT"], "depth_h200.csv"), index=False)
        print(more[["layers", "recipe", "kept_blocks", "status", "ms", "mfu", "peak_gib"]].to_string(),
              f"{time.time() - t0:.0f} s", flush=True)

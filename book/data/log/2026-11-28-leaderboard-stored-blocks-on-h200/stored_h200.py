"""Chapter 18's step at 16 blocks on one H200 (141 GB) with its last blocks stored (`stored_groups`: run without
recomputation, every activation kept) in the memory that keeping attention in every block leaves: our recipe with
each count of stored blocks in argv, then plain PyTorch's with the largest; a row per try appended to
$OUT/stored_h200.csv as it finishes."""
import os, sys, time
from dataclasses import replace

import pandas as pd
import torch

from systems.bench import leaderboard_2026 as lb
from systems.device import allocatable_bytes
from systems.model import LEADERBOARD_2026

cfg, layers, stored = LEADERBOARD_2026, 16, [int(s) for s in sys.argv[1:]]
ours = replace(lb.Recipe(), attention=lb.our_attention(cfg, torch.device("cuda")), recompute="keep_attention")
points = [replace(ours, stored_groups=s) for s in stored] + [replace(lb.PLAIN, stored_groups=max(stored))]
print(torch.cuda.get_device_name(), "allocatable GiB", round(allocatable_bytes() / 2**30, 1), flush=True)
rows, t0 = pd.DataFrame(), time.time()
for recipe in points:
    more = lb.step_at((layers, recipe), rows, rep=1000, warmup=300)
    rows = pd.concat([rows, more], ignore_index=True)
    rows.to_csv(os.path.join(os.environ["OUT"], "stored_h200.csv"), index=False)
    print(more[["layers", "recipe", "kept_blocks", "status", "ms", "mfu", "peak_gib"]].to_string(),
          f"{time.time() - t0:.0f} s", flush=True)

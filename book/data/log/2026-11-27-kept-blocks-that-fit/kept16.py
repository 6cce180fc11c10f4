"""The 16-block leaderboard step with our recipe keeping attention's output in k blocks: which k fit, and the
memory each reserved and allocated (absolute), to set chapter 18's rule for the most kept blocks that fit."""
import os
import sys
from dataclasses import replace

import pandas as pd
import torch

from systems.bench import leaderboard_2026 as lb
from systems.device import allocatable_bytes
from systems.model import LEADERBOARD_2026

ours = lb.Recipe(attention=lb.our_attention(LEADERBOARD_2026, torch.device("cuda")), recompute="keep_attention")
print("allocatable GiB", allocatable_bytes() / 2**30, "total", torch.cuda.mem_get_info()[1] / 2**30, flush=True)
rows = []
for k in map(int, sys.argv[1:]):
    df = lb.model_step([16], [replace(ours, kept_groups=k)], rep=1000, warmup=300)
    rows.append(df)
    print(df[["layers", "kept_blocks", "status", "ms", "extra_gib", "peak_gib", "reserved_gib"]].to_string(), flush=True)
    pd.concat(rows).to_csv(os.path.join(os.environ["OUT"], "kept16.csv"), index=False)

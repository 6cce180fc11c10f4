"""Prints every number of the log entry "The leaderboard's step at 16 and 20 blocks on one H200" from its record."""
from pathlib import Path

import pandas as pd

rows = pd.read_csv(Path(__file__).with_name("depth_h200.csv"))
rows["who"] = rows.attention.map(lambda a: "plain PyTorch" if a == "sdpa_cudnn" else "ours")
print("| blocks | recipe | attention kept in | ms | MFU | peak GiB | reserved GiB | above the model's state GiB |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for r in rows.itertuples():
    print(f"| {r.layers} | {r.who} | {r.kept_blocks} | {r.ms:.1f} | {100 * r.mfu:.1f} % | {r.peak_gib:.1f} "
          f"| {r.reserved_gib:.1f} | {r.extra_gib:.1f} |")
for n, by in rows.groupby("layers"):
    ours, plain = (by[by.who == w].iloc[0] for w in ("ours", "plain PyTorch"))
    print(f"{n} blocks: plain / ours = {plain.ms / ours.ms:.3f}")

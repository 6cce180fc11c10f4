"""Prints every number of the log entry "The leaderboard's step at 16 blocks on one H200 with its last blocks stored"
from its record (stored_h200.csv), beside the same depth with none stored from the entry before it."""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
rows = pd.read_csv(here / "stored_h200.csv")
before = pd.read_csv(here.parent / "2026-11-28-leaderboard-depth-on-h200" / "depth_h200.csv")
before = before[before.layers == 16]
rows["who"] = rows.attention.map(lambda a: "plain PyTorch" if a == "sdpa_cudnn" else "ours")
before["who"] = before.attention.map(lambda a: "plain PyTorch" if a == "sdpa_cudnn" else "ours")
print("| stored blocks | recipe | ms | MFU | peak GiB | reserved GiB |")
print("|---:|---|---:|---:|---:|---:|")
for r in pd.concat([before, rows]).itertuples():
    print(f"| {r.stored_groups} | {r.who} | {r.ms:.1f} | {100 * r.mfu:.1f} % | {r.peak_gib:.1f} | {r.reserved_gib:.1f} |")
for s, by in rows.groupby("stored_groups"):
    if set(by.who) == {"ours", "plain PyTorch"}:
        ours, plain = (by[by.who == w].iloc[0] for w in ("ours", "plain PyTorch"))
        print(f"{s} stored: plain / ours = {plain.ms / ours.ms:.3f}")
ours = pd.concat([before, rows]).query("who == 'ours'").set_index("stored_groups")
for s in ours.index[1:]:
    print(f"ours, {s} stored against none (the run before): {ours.ms[s] / ours.ms[0]:.3f} of its time, "
          f"{ours.peak_gib[s] - ours.peak_gib[0]:+.1f} GiB peak, "
          f"{(ours.ms[0] - ours.ms[s]) / s:.1f} ms less per stored block")

"""The log entry's tables, from the records beside this file (run from the repository root):
    .venv/bin/python book/data/log/2026-11-27-kept-blocks-that-fit/tables.py"""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
steps = pd.read_csv(here / "chapter18_0bf3356" / "model_step.csv")
print("| blocks | recipe | kept blocks | status | ms | MFU | extra GiB | reserved GiB |\n|---:|---|---:|---|---:|---:|---:|---:|")
for r in steps.itertuples():
    who = "ours" if r.attention == "flash_hopper" else "plain"
    ms = "—" if pd.isna(r.ms) else f"{r.ms:.1f}"
    mfu = "—" if pd.isna(r.mfu) else f"{r.mfu:.1%}"
    gib = lambda x: "—" if pd.isna(x) else f"{x:.2f}"  # noqa: E731
    print(f"| {r.layers} | {who} | {r.kept_blocks} | {r.status} | {ms} | {mfu} | {gib(r.extra_gib)} | {gib(r.reserved_gib)} |")
plain = steps[(steps.attention == "sdpa_cudnn")].set_index("layers").ms
ours = steps[(steps.attention == "flash_hopper") & (steps.status == "ok")].groupby("layers").ms.last()
print("\nplain / ours by depth:", (plain / ours).round(3).to_dict())
kept = pd.read_csv(here / "kept16.csv")
print("\n| kept blocks of 16 | status | ms | MFU | extra GiB | peak GiB | reserved GiB | plain at 0bf3356 / this |"
      "\n|---:|---|---:|---:|---:|---:|---:|---:|")
for r in kept.sort_values("kept_blocks", ascending=False).itertuples():
    ok = r.status == "ok"
    f = lambda x, spec: f"{x:{spec}}" if ok else "—"  # noqa: E731
    print(f"| {r.kept_blocks} | {r.status} | {f(r.ms, '.1f')} | {f(r.mfu, '.1%')} | {f(r.extra_gib, '.2f')} | "
          f"{f(r.peak_gib, '.2f')} | {f(r.reserved_gib, '.2f')} | {f(plain[16] / r.ms, '.3f')} |")

"""The log entry's tables, from the records beside this file and the run the book published then, at f9f4ac6
(run from the repository root):
    .venv/bin/python book/data/log/2026-11-28-chapter-18-stopped-in-its-depth-sweep/tables.py"""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
now = here / "chapter18_efc5776"
published = here.parent / "2026-11-27-chapter-18-at-f9f4ac6" / "chapter18_f9f4ac6"


def rows(name: str, keys: list[str]) -> pd.DataFrame:
    return pd.read_csv(now / f"{name}.csv").merge(pd.read_csv(published / f"{name}.csv")[keys + ["ms"]], on=keys,
                                                  how="left", suffixes=("", "_published"))


def ms(x: float) -> str:
    return "—" if pd.isna(x) else f"{x:.1f}"


def gib(x: float) -> str:
    return "—" if pd.isna(x) else f"{x:.2f}"


print("| part | variant | status | ms | extra GiB | ms in the published run |\n|---|---|---|---:|---:|---:|")
for r in rows("head_and_loss", ["variant"]).itertuples():
    print(f"| head and loss | {r.variant} | {r.status} | {ms(r.ms)} | {gib(r.extra_gib)} | {ms(r.ms_published)} |")
for r in rows("adamw", ["variant"]).itertuples():
    print(f"| AdamW, 0.98e9 fp32 parameters | {r.variant} | {r.status} | {r.ms:.2f} | {r.extra_gib:.2f} | "
          f"{r.ms_published:.2f} |")
block = rows("block", ["attention", "recompute", "compiled"])
for r in block[block.compiled].itertuples():
    print(f"| one block, compiled | {r.attention}, recompute {r.recompute} | {r.status} | {ms(r.ms)} | "
          f"{r.extra_gib:.2f} | {ms(r.ms_published)} |")

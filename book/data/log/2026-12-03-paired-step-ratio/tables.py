"""Every number of the log entry of 2026-12-03, "Interleaved steps compared pair by pair": the recorded steps of
chapter 17's and chapter 20's published runs and of the eager-step runs of 2026-12-03, ours over SDPA's two ways,
the ratio of the two medians with its paired bootstrap (as the tables had it up to this entry) and the median of the
pairs' ratios with its bootstrap over the pairs (systems.bench.attention_steps.paired_ratio and ratio_interval)."""
import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd

from systems.bench.attention_steps import paired_ratio, ratio_interval

here = Path(__file__).parent
book = here.parents[2]


def ratio_of_medians(ours, theirs, draws=4000, seed=0):
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(a), (draws, len(a)))
    low, high = np.percentile(np.median(a[idx], axis=1) / np.median(b[idx], axis=1), [2.5, 97.5])
    return np.median(a) / np.median(b), low, high


def compare(rows: pd.DataFrame, ours: str, source: str) -> pd.DataFrame:
    out = []
    for key, point in rows[rows.status == "ok"].groupby(["size", "context_length", "compile"], sort=False):
        by = point.set_index("attention").step_times_ms
        if ours not in by or "sdpa" not in by:
            continue
        old, old_low, old_high = ratio_of_medians(by[ours], by["sdpa"])
        low, high = ratio_interval(by[ours], by["sdpa"])
        out.append({"source": source, "size": key[0], "context": key[1], "compiled": key[2], "ours": ours,
                    "medians": old, "m_low": old_low, "m_high": old_high, "m_width": old_high - old_low,
                    "pairs": paired_ratio(by[ours], by["sdpa"]), "p_low": low, "p_high": high,
                    "p_width": high - low, "correlation": np.corrcoef(by[ours], by["sdpa"])[0, 1]})
    return pd.DataFrame(out)


def csv_rows(path: Path) -> pd.DataFrame:
    rows = pd.read_csv(path)
    rows["step_times_ms"] = [ast.literal_eval(t) if isinstance(t, str) else t for t in rows.step_times_ms]
    return rows


def jsonl_rows(path: Path) -> pd.DataFrame:
    rows = pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    return rows.assign(compile=rows.get("compile", False))


tables = [compare(csv_rows(book / "data/17_flash_attention_in_training/flash_model_steps.csv"), ours,
                  "chapter 17 at 41a87cc") for ours in ("flash", "flash_triton")]
tables += [compare(csv_rows(path), "flash_hopper", "chapter 20 at d235feb")
           for path in sorted((book / "data/20_flash_attention_hopper").glob("hopper_model_steps_*.csv"))]
for run, path in (("23a599d, run 3", "2026-12-03-hopper-host-path/run3_steps.jsonl"),
                  ("88b69f3, run 4", "2026-12-03-floor-grad-layout/run4_steps.jsonl")):
    tables += [compare(jsonl_rows(here.parent / path), "flash", f"eager steps at {run}")]
table = pd.concat(tables, ignore_index=True)
pd.set_option("display.width", 250)
print(table.round(3).to_string(index=False))

print("\nPer source and attention of ours: points; where the two estimates differ by more than 0.005; the intervals' "
      "widths (median); points whose interval lies wholly above or below 1, each way")
for (source, ours), part in table.groupby(["source", "ours"], sort=False):
    print(f"  {source:28s} {ours:13s} points {len(part):2d}  differ >0.005: {int((abs(part.medians - part.pairs) > 0.005).sum()):2d}"
          f"  width medians {part.m_width.median():.4f} pairs {part.p_width.median():.4f}"
          f"  above 1: {int((part.m_low > 1).sum())} / {int((part.p_low > 1).sum())}"
          f"  below 1: {int((part.m_high < 1).sum())} / {int((part.p_high < 1).sum())}"
          f"  slower (ratio > 1): {int((part.medians > 1).sum())} / {int((part.pairs > 1).sum())}")
quiet = table[table["size"].isin(["large", "xl", "2.7B"])]
print(f"\nlarge, xl and 2.7B (GPU-bound): the two estimates differ by at most {(quiet.medians - quiet.pairs).abs().max():.4f}")

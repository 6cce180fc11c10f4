"""Every number of the log entry "Expandable segments in an 80 GB GPU's memory", from fit_h100.jsonl (calls 1 and
2, fit_h100.py) and cli16.txt (call 3, the one-GPU command's table)."""
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
fit = pd.DataFrame([json.loads(line) for line in (HERE / "fit_h100.jsonl").read_text().splitlines()])
fit["recipe"] = fit.recipe.str.split(",").str[0].map({"flash_hopper": "ours", "sdpa_cudnn": "plain"})

lines = (HERE / "cli16.txt").read_text().splitlines()
fields = lines[0].split()[2:]  # after layers and recipe, one token each
cli = pd.DataFrame([dict(zip(["layers", "recipe", *fields], [t[0], " ".join(t[1:-len(fields)]), *t[-len(fields):]]))
                    for t in (line.split() for line in lines[1:])])
for col in ("ms", "mfu", "peak_gib", "reserved_gib", "kept_blocks"):
    cli[col] = pd.to_numeric(cli[col])
cli["recipe"] = cli.recipe.str.split(",").str[0].map({"flash_hopper": "ours", "sdpa_cudnn": "plain"})
cli[["call", "cap", "alloc_conf"]] = [3, "h100 (another process)", "expandable_segments:True"]

cols = ["call", "cap", "alloc_conf", "recipe", "kept_blocks", "status", "ms", "mfu", "peak_gib", "reserved_gib"]
rows = pd.concat([fit[cols], cli[cols]], ignore_index=True)
with pd.option_context("display.width", 200):
    print(rows.round({"ms": 1, "mfu": 4, "peak_gib": 1, "reserved_gib": 1}).to_string(index=False))
print("allocatable GiB under the cap:", sorted(fit[fit.cap == "h100"].allocatable_gib.round(2).unique()))


def ms(call, cap, conf, recipe):
    return rows[(rows.call == call) & (rows.cap.str.startswith(cap)) & (rows.alloc_conf == conf)
                & (rows.recipe == recipe) & (rows.status == "ok")].ms.iloc[0]


E, DEF = "expandable_segments:True", "default"
print("plain / ours, capped, expandable: call 1 %.4f, call 2 %.4f, call 3 %.4f" % (
    ms(1, "h100", E, "plain") / ms(1, "h100", E, "ours"), ms(2, "h100", E, "plain") / ms(2, "h100", E, "ours"),
    ms(3, "h100", E, "plain") / ms(3, "h100", E, "ours")))
print("plain / ours, neither capped nor expandable (calls 2 and 1): %.4f" % (ms(2, "none", DEF, "plain")
                                                                         / ms(1, "none", DEF, "ours")))
print("ours capped expandable / uncapped default: %.4f, %.4f" % (ms(1, "h100", E, "ours") / ms(1, "none", DEF, "ours"),
                                                                 ms(2, "h100", E, "ours") / ms(1, "none", DEF, "ours")))
print("plain capped expandable / uncapped default (call 2): %.4f" % (ms(2, "h100", E, "plain")
                                                                     / ms(2, "none", DEF, "plain")))

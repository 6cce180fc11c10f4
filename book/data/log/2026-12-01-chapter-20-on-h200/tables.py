"""Every number of the log entry "Chapter 20 at d235feb on one H200": the chapter's raw data as the run wrote it,
and the table and steps of its last run on an H100 80GB (80252bd, 2026-11-27) beside them."""
from pathlib import Path

import pandas as pd

here = Path(__file__).parent
chapter = here.parents[1] / "20_flash_attention_hopper"


def over_cudnn(table):
    table = table.assign(shape=table.batch.astype(str) + "×" + table.heads.astype(str) + "×" + table.n_q.astype(str)
                         + "×" + table.d.astype(str) + table.causal.map({True: "", False: " not causal"}))
    wide = table.pivot_table(index=["shape", "mode"], columns="impl", values="ms")
    return (wide.flash_hopper / wide.sdpa_cudnn).rename("flash_hopper / cuDNN")


h200 = over_cudnn(pd.read_csv(chapter / "hopper_table.csv"))
h100 = over_cudnn(pd.read_csv(here / "h100-80252bd-hopper_table.csv"))
print(pd.concat({"H200, d235feb": h200, "H100, 80252bd": h100}, axis=1).round(3).to_string(), "\n")

backward = pd.read_csv(chapter / "hopper_backward.csv").pivot_table(index="shape", columns="impl", values="ms",
                                                                     sort=False)
print("backward alone, ms\n", backward.round(3).to_string(), "\n")
cuda = [c for c in backward.columns if "CUDA" in c][0]
print("CUDA backward / cuDNN:", (backward[cuda] / backward["SDPA cuDNN"]).round(3).to_dict(), "\n")

for machine, folder, pattern in (("H200, d235feb", chapter, "hopper_model_steps_*.csv"),
                                  ("H100, 80252bd", here, "h100-80252bd-hopper_model_steps_*.csv")):
    steps = pd.concat(pd.read_csv(p) for p in sorted(folder.glob(pattern)))
    steps = steps.pivot_table(index=["size", "batch_size"], columns="attention", values="step_ms")
    print(f"compiled step at context 2048, ms, {machine}\n",
          steps.assign(ratio=steps.flash_hopper / steps.sdpa).round(3).to_string(), "\n")

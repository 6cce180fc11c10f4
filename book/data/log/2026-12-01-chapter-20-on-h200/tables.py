"""Every number of the log entry "Chapter 20 at d235feb on one H200": the chapter's raw data as the run wrote it,
and the table and steps of its last run on an H100 80GB (80252bd, 2026-11-27) beside them. The H200 run's files are
read from the commit that published them (7dc2ba9): the chapter's later runs replace them. Run from anywhere inside
the repository."""
from pathlib import Path

import pandas as pd

from systems.pipeline import published_table

here = Path(__file__).parent


def published(name):
    """One of the chapter's files as the run at d235feb wrote it."""
    return published_table("7dc2ba9", "20_flash_attention_hopper", name)


def shapes(table):
    """B×H×N×d of each row, as the backward's table names its shapes."""
    return (table.batch.astype(str) + "×" + table.heads.astype(str) + "×" + table.n_q.astype(str) + "×"
            + table.d.astype(str))


def over_cudnn(table):
    table = table.assign(shape=shapes(table) + table.causal.map({True: "", False: " not causal"}))
    wide = table.pivot_table(index=["shape", "mode"], columns="impl", values="ms")
    return (wide.flash_hopper / wide.sdpa_cudnn).rename("flash_hopper / cuDNN")


table = published("hopper_table")
h200 = over_cudnn(table)
h100 = over_cudnn(pd.read_csv(here / "h100-80252bd-hopper_table.csv"))
print(pd.concat({"H200, d235feb": h200, "H100, 80252bd": h100}, axis=1).round(3).to_string(), "\n")

backward = published("hopper_backward").pivot_table(index="shape", columns="impl", values="ms", sort=False)
print("backward alone, ms\n", backward.round(3).to_string(), "\n")
cuda = [c for c in backward.columns if "CUDA" in c][0]
print("CUDA backward / cuDNN:", (backward[cuda] / backward["SDPA cuDNN"]).round(3).to_dict(), "\n")

sizes = ("2.7B", "large", "medium", "small", "xl")
for machine, read in (("H200, d235feb", lambda size: published(f"hopper_model_steps_{size}")),
                      ("H100, 80252bd", lambda size: pd.read_csv(here / f"h100-80252bd-hopper_model_steps_{size}.csv"))):
    steps = pd.concat(read(size) for size in sizes)
    steps = steps.pivot_table(index=["size", "batch_size"], columns="attention", values="step_ms")
    print(f"compiled step at context 2048, ms, {machine}\n",
          steps.assign(ratio=steps.flash_hopper / steps.sdpa).round(3).to_string(), "\n")

# The forward and the backward timed apart against the two timed as one call (the chapter's table and its
# backward-alone table are separate measurements of the same run): the sum of the parts over the whole.
table = table.assign(shape=shapes(table))
whole = table.pivot_table(index="shape", columns=["impl", "mode"], values="ms")
parts = pd.DataFrame({name: whole[(impl, "fwd")] + backward[column]
                      for name, impl, column in (("ours", "flash_hopper", cuda), ("cuDNN", "sdpa_cudnn", "SDPA cuDNN"))})
print("forward + backward timed apart, over the two timed as one call\n",
      pd.DataFrame({name: parts[name] / whole[(impl, "fwd_bwd")] for name, impl in
                    (("ours", "flash_hopper"), ("cuDNN", "sdpa_cudnn"))}).round(3).to_string())
print("ours as one call over cuDNN's parts timed apart\n",
      (whole[("flash_hopper", "fwd_bwd")] / parts["cuDNN"]).round(3).to_string())

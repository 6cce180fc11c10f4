"""Every number of the log entry "Chapter 17 at 9cd442a on one H200, stopped before its last measurement": what the
stopped run recorded (measured/, JSON records of systems.resumable), read with the chapter's own functions, beside
the chapter's published run at 41a87cc, read from the commit that published it (4b34013). Run from anywhere inside
the repository."""
import ast
from pathlib import Path

import pandas as pd

from systems.bench.flash_sweep import ratios
from systems.chapters import flash_training as ft
from systems.pipeline import published_table
from systems.resumable import recorded_result

here = Path(__file__).parent
CHAPTER = "17_flash_attention_in_training"


def recorded(name):
    """A measurement as the stopped run recorded it: a table, or a tuple of tables."""
    return recorded_result(here / "measured" / f"{name}.json")


def at_41a87cc(name):
    """One of the chapter's files as the run at 41a87cc wrote it (a step's times, a list in the CSV's text, read
    back as one)."""
    table = published_table("4b34013", CHAPTER, name)
    if "step_times_ms" in table:
        table["step_times_ms"] = [ast.literal_eval(t) if isinstance(t, str) else t for t in table.step_times_ms]
    return table


pd.set_option("display.width", 160)
floors = {"9cd442a": recorded("flash_call_floor"), "41a87cc": at_41a87cc("flash_call_floor")}
for run, floor in floors.items():
    print(f"the per-call floor at {run}, µs\n", floor.round(1).to_string())
    print({k: round(v, 3) for k, v in ft.floor_facts(floor).items()}, "\n")

shapes = {"9cd442a": recorded("flash_training_shapes"), "41a87cc": at_41a87cc("flash_training_shapes")}
for run, runs in shapes.items():
    _, facts = ft.training_summary(runs)
    print(f"training shapes at {run}:", {k: round(v, 3) if isinstance(v, float) else v for k, v in facts.items()})
key = ["d", "n_q", "batch", "heads", "causal"]
both = ratios(shapes["9cd442a"], against=("sdpa_flash", "sdpa_cudnn")).merge(
    ratios(shapes["41a87cc"], against=("sdpa_flash", "sdpa_cudnn")), on=key, suffixes=("_now", "_then"))
for against in ("sdpa_flash", "sdpa_cudnn"):
    now_over_then = (pd.to_numeric(both[f"flash_triton/{against}_now"])
                     / pd.to_numeric(both[f"flash_triton/{against}_then"]))
    long = both.n_q >= ft.KERNEL_BOUND_FROM
    print(f"a shape's ratio to {against}, this run over 41a87cc's: from {ft.KERNEL_BOUND_FROM} tokens on "
          f"{now_over_then[long].min():.3f} to {now_over_then[long].max():.3f}; below "
          f"{now_over_then[~long].min():.3f} to {now_over_then[~long].max():.3f}")
print(both.loc[(both.d == 64) & (both.n_q == 1024) & (both.batch == 4) & ~both.causal,
               key + ["flash_triton/sdpa_cudnn_now", "flash_triton/sdpa_cudnn_then"]].round(3).to_string(), "\n")

for run, steps in {"9cd442a": recorded("flash_model_steps"), "41a87cc": at_41a87cc("flash_model_steps")}.items():
    table, facts = ft.in_model(steps)
    print(f"the model's steps at {run}\n", table.drop(columns="status").round(3).to_string())
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in facts.items()}, "\n")

busy, own = recorded("in_model_kernel_time")
print("where the difference goes at 9cd442a (walls interleaved, kernels profiled in a process of their own)\n",
      busy.round(2).to_string(), "\n", own.round(3).to_string(), "\n")
print("the same at 41a87cc (each attention timed, then profiled, one after the other)\n",
      at_41a87cc("in_model_kernel_time").round(2).to_string(), "\n")
for run, apart in {"9cd442a": recorded("in_model_process"), "41a87cc": at_41a87cc("in_model_process")}.items():
    print(f"here and apart at {run}:", ft.apart_facts(apart)["words"])

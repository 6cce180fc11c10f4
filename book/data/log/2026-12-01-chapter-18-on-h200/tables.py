"""Every number of the log entry "Chapter 18 at e247340 on one H200": the chapter's raw data as the run wrote it,
beside its last run on an H100 80GB (12345eb, 2026-11-28), whose files are kept here as h100-12345eb-*.csv. The
H200 run's files are read from the commit that published them (d936bd1): the chapter's later runs replace them.
Run from anywhere inside the repository."""
from pathlib import Path

import pandas as pd

from systems.pipeline import published_table

here = Path(__file__).parent
published = "d936bd1"


def runs(name):
    """The H200 run's and the H100 run's rows of one of the chapter's files, with the GPU in a column."""
    return pd.concat([published_table(published, "18_leaderboard_one_gpu", name).assign(gpu="H200, e247340"),
                      pd.read_csv(here / f"h100-12345eb-{name}.csv").assign(gpu="H100, 12345eb")])


steps = runs("model_step")
steps = steps.assign(ours=steps.recipe.str.startswith("flash_hopper"))
ran = steps[steps.status == "ok"]
print("the model's step (ours: the recipe that starts with flash_hopper)\n",
      steps[["gpu", "layers", "recompute", "kept_blocks", "status", "ms", "mfu", "peak_gib"]].round(4).to_string(),
      "\n")
wide = ran.pivot_table(index=["gpu", "layers"], columns="ours", values="ms")
print("plain / ours, the deepest try of ours that ran\n", (wide[False] / wide[True]).round(3).to_string(), "\n")
same = ran.pivot_table(index=["layers", "ours"], columns="gpu", values="ms").dropna()
print("H200 / H100, the same recipe's step\n", (same["H200, e247340"] / same["H100, 12345eb"]).round(3).to_string(),
      "\n")

for name, columns in (("head_and_loss", ["variant", "status", "ms", "extra_gib"]),
                      ("adamw", ["variant", "status", "ms", "tb_per_s"]),
                      ("ablation", ["recipe", "status", "ms", "mfu", "extra_gib"]),
                      ("block", ["attention", "recompute", "compiled", "ms", "mfu"])):
    print(name, "\n", runs(name)[["gpu", *columns]].round(4).to_string(), "\n")

timer = pd.read_json(here / "run5_timer.jsonl", lines=True)
print("the sweeps' timer (run 5), forward+backward ms per round\n",
      timer.pivot_table(index=["shape", "impl"], columns="round", values=["do_bench_ms", "make_timer_ms"]).round(3)
      .to_string(), "\n")
spread = timer.groupby(["shape", "impl"])[["do_bench_ms", "make_timer_ms"]].agg(lambda t: t.max() / t.min() - 1)
print("spread of the rounds (largest over smallest, less one)\n", spread.round(4).to_string(), "\n")
fastest = timer.groupby(["shape", "impl"])[["do_bench_ms", "make_timer_ms"]].min().unstack("impl")
for column in ("do_bench_ms", "make_timer_ms"):
    print(f"flash_hopper / cuDNN, fastest round of {column}\n",
          (fastest[column].flash_hopper / fastest[column].sdpa_cudnn).round(4).to_string(), "\n")

print("handout_ms on the GPU (run 6): what do_bench and the three more timed steps returned, ours then plain")
for line in (here / "run6_handout.txt").read_text().splitlines():
    if line.startswith(("do_bench", "time_steps")):
        print(" ", line)

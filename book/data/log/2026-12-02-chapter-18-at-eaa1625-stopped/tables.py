"""Every number of the log entry "Chapter 18 at eaa1625 on one H200, stopped": the model's step and the ablation's
points as the stopped run recorded them (measured/, JSON records of systems.resumable), beside the chapter's
published run at 3e91b5f, read from the commit that published it (6b97e39): the chapter's later runs replace its
files. Run from anywhere inside the repository."""
from pathlib import Path

import pandas as pd

from systems.pipeline import published_table
from systems.resumable import recorded_result

here = Path(__file__).parent


def at_3e91b5f(name):
    """One of the chapter's files as the run at 3e91b5f wrote it."""
    return published_table("6b97e39", "18_leaderboard_one_gpu", name)


def recorded(name):
    """The rows of a sweep's points as the stopped run recorded them."""
    return recorded_result(here / "measured" / f"{name}.json")


def ours_and_plain(steps):
    """ms by depth, ours (the recipe that starts with flash_hopper) and plain, and plain / ours."""
    mine = steps.recipe.str.startswith("flash_hopper").map({True: "ours", False: "plain"})
    wide = steps.assign(which=mine).pivot_table(index="layers", columns="which", values="ms")
    return wide.assign(plain_over_ours=wide["plain"] / wide["ours"])


now, published = recorded("model_step"), at_3e91b5f("model_step")
print("the model's step at eaa1625 (this run)\n", now[["layers", "recipe", "status", "ms", "mfu", "peak_gib"]]
      .round(4).to_string(), "\n")
wide_now, wide_published = ours_and_plain(now), ours_and_plain(published)
both = pd.concat({"eaa1625": wide_now, "3e91b5f": wide_published}, axis=1)
print("ms and plain / ours, this run and the published one\n", both.round(3).to_string(), "\n")
same = wide_now[["ours", "plain"]] / wide_published[["ours", "plain"]]
print("eaa1625 / 3e91b5f, the same recipe's step\n", same.round(4).to_string(), "\n")
ablation = pd.concat({"eaa1625": recorded("ablation"), "3e91b5f": at_3e91b5f("ablation")},
                     names=["run", "row"]).reset_index()
ablation["against_all_on"] = ablation.ms / ablation.groupby("run").ms.transform("first") - 1
print("the ablation at 2 blocks: this run's 4 points before it stopped, and the published run's\n",
      ablation[["run", "recipe", "status", "ms", "against_all_on"]].round(4).to_string())

"""Every number of the log entry "Chapter 17 at 7051a31 on one H200, stopped after the training shapes": the
per-call floor, the host time per call and the training shapes as the stopped run recorded them (measured/, JSON
records of systems.resumable), beside the chapter's published run at 630a541 on an H100 80GB, read from the commit
that published it (bee8744). Run from anywhere inside the repository."""
from pathlib import Path

import pandas as pd

from systems.chapters import flash_training as ft
from systems.pipeline import published_table
from systems.resumable import recorded_result

here = Path(__file__).parent
CHAPTER = "17_flash_attention_in_training"


def recorded(name):
    return recorded_result(here / "measured" / f"{name}.json")


def published(name):
    return published_table("bee8744", CHAPTER, name)


floor = recorded("flash_call_floor")
print("the per-call floor, 1x1x128x64 bf16 causal, forward+backward, µs a call (H200, this run)\n",
      floor.round(1).to_string(), "\n")
both = pd.DataFrame({"H200 7051a31": ft.floor_facts(floor), "H100 630a541": ft.floor_facts(published("flash_call_floor"))})
print("eager, over SDPA's flash back end\n", both.round(3).to_string(), "\n")
print(ft.call_facts(recorded("flash_call_overhead"))["words"], "\n")
for label, shapes in (("H200 7051a31", recorded("flash_training_shapes")),
                      ("H100 630a541", published("flash_training_shapes"))):
    summary, facts = ft.training_summary(shapes)
    print(f"training shapes, {label}: ours over each back end, geometric mean over the sequences\n",
          summary.round(3).to_string(), "\n", {k: round(float(v), 3) for k, v in facts.items()}, "\n")

"""The training-shape numbers of the log entry "Chapter 17 at 48bdd3b on one H200, complete": each implementation's
time in this run over its time in the stopped run of 2026-12-02 on another H200 host, and ours over cuDNN's in
each, by sequence length (geometric means over the shapes of a length). This run is read from the commit that
published it (3a09cfe), the stopped run from its records. Run from anywhere inside the repository."""
from pathlib import Path

import numpy as np
import pandas as pd

from systems.pipeline import published_table
from systems.resumable import recorded_result

CHAPTER = "17_flash_attention_in_training"
stopped = Path(__file__).parent.parent / "2026-12-02-chapter-17-at-7051a31-stopped" / "measured"
runs = {"2026-12-02": recorded_result(stopped / "flash_training_shapes.json"),
        "2026-12-03": published_table("3a09cfe", CHAPTER, "flash_training_shapes")}
key = ["batch", "heads", "n_q", "n_k", "d", "causal", "dtype", "impl", "mode"]


def geometric_mean(x):
    return float(np.exp(np.log(x).mean()))


both = runs["2026-12-02"].merge(runs["2026-12-03"], on=key, suffixes=("_before", "_now"))
both["now/before"] = both.ms_now / both.ms_before
print("each implementation's time, this run over 2026-12-02's, by length\n",
      both.pivot_table(index="n_q", columns="impl", values="now/before", aggfunc=geometric_mean).round(3), "\n")
for label, shapes in runs.items():
    times = shapes.pivot_table(index=["batch", "heads", "n_q", "d", "causal"], columns="impl", values="ms")
    ours_over_cudnn = (times.flash_triton / times.sdpa_cudnn).groupby(level="n_q").apply(geometric_mean)
    print(f"ours over cuDNN by length, {label}:", ours_over_cudnn.round(3).to_dict())

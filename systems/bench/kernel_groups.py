"""Where a step's time goes: every kernel a step launches, timed by ``torch.profiler``, and grouped by what it does
(:func:`systems.kernel_names.kernel_group`: the matmuls, the attention, the kernels the compiler fused, the loss,
the optimizer), as chapter 18 takes the leaderboard's step apart. On a machine without a GPU the operators' own CPU
times stand in for the kernels'."""

from __future__ import annotations

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench.points import Step
from systems.device import synchronize
from systems.kernel_names import HOST_COPIES, kernel_group


def kernels_of(step: Step, steps: int = 2, warmup: int = 3) -> pd.DataFrame:
    """The kernels of ``steps`` calls of ``step.run`` after ``warmup`` untimed ones (the compilation's), one row
    each: ``kernel`` (its name), ``group``, ``calls`` and ``ms`` a step, the most time first."""
    for _ in range(warmup):
        step.run()
    synchronize()
    on_gpu = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step.run()
        synchronize()
    rows = [{"kernel": e.key, "group": kernel_group(e.key), "calls": e.count / steps,
             "ms": (e.device_time_total if on_gpu else e.self_cpu_time_total) / 1e3 / steps}
            for e in prof.key_averages()]
    kernels = pd.DataFrame(rows, columns=["kernel", "group", "calls", "ms"])
    return kernels[kernels.ms > 0].sort_values("ms", ascending=False, ignore_index=True)


def group_times(kernels: pd.DataFrame, by: str = "recipe") -> pd.DataFrame:
    """Per ``by`` (a column of ``kernels``) and group: ms a step and the share of the step's kernel time; rows whose
    ``status`` is not "ok" (a step that did not run) count for nothing. Copies to and from host memory (an
    offloading step's) run beside the kernels on streams of their own: their share is of the kernels' time too,
    and their time is not part of it."""
    if "status" in kernels:
        kernels = kernels[kernels.status == "ok"]
    if not len(kernels):
        return pd.DataFrame(columns=[by, "group", "ms", "share"])
    ms = kernels.groupby([by, "group"]).ms.sum().reset_index()
    kernel_ms = ms.ms.where(ms.group != HOST_COPIES, 0.0).groupby(ms[by]).transform("sum")
    return ms.assign(share=ms.ms / kernel_ms)

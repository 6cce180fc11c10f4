"""Every way this project trains a model, behind one small interface: one process, the data-parallel wrappers
(ours and PyTorch's), ZeRO-1 with any of them, our FSDP and PyTorch's FSDP2.

    from systems.parallel import wrap, TrainStep
    strategy = wrap("bucketed", model, zero1=True, bucket_size_mb=25)   # inside a process group
    optimizer = strategy.optimizer(torch.optim.AdamW, lr=3e-4)
    step = TrainStep(strategy, optimizer, grad_accum=2, clip=1.0)
    loss, grad_norm = step(x, y)

:func:`wrap` builds a :class:`~systems.parallel.base.Strategy` (the interface, in ``base.py``); each strategy is
its own file: ``base.py`` (one process), ``replicated.py`` (the whole model on every rank, :mod:`systems.ddp`'s
wrappers), ``sharded.py`` (FSDP, ours or PyTorch's). :class:`~systems.parallel.step.TrainStep` is the one
training step that the trainer and the benchmarks run. Nothing that uses a strategy asks which one it is.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from systems.ddp import WRAPPERS as REPLICATED
from systems.parallel.base import Strategy
from systems.parallel.replicated import Replicated
from systems.parallel.sharded import Sharded
from systems.parallel.step import TrainStep

SHARDED = ("fsdp", "fsdp2")
NAMES = ("none", "torch", "naive", "flat", "overlap", "bucketed", *SHARDED)


def wrap(name: str, model: nn.Module, *, zero1: bool = False, compute_dtype: torch.dtype | None = None,
         **options) -> Strategy:
    """``model`` (on this rank's device) trained with strategy ``name`` (:data:`NAMES`). ``zero1`` shards the
    optimizer state (not with the sharded strategies, which shard it already); ``compute_dtype`` is what the
    sharded ones gather weights in; ``options`` go to the wrapper where it takes them (``bucket_size_mb``,
    ``sync_timing``, ``find_unused_parameters``, ``process_group``; our FSDP's ``trace``)."""
    if name not in NAMES:
        raise ValueError(f"unknown parallel strategy {name!r}; choose one of {list(NAMES)}")
    if name in SHARDED:
        if zero1:
            raise ValueError(f"zero1 shards the optimizer state, which {name} shards already")
        return Sharded(name, model, compute_dtype, **options)
    if name == "none":
        return Strategy(model, model, zero1)
    return Replicated(name, model, zero1, **options)


__all__ = ["NAMES", "REPLICATED", "SHARDED", "Strategy", "TrainStep", "wrap"]

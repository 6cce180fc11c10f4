"""Data parallelism with the whole model on every rank: one of :mod:`systems.ddp`'s wrappers (naive, flat,
overlapped, bucketed, or PyTorch's DistributedDataParallel) behind the strategy interface, with or without ZeRO-1."""

from __future__ import annotations

from typing import ContextManager

import torch.nn as nn

from systems.ddp import wrap
from systems.parallel.base import Strategy


class Replicated(Strategy):
    def __init__(self, name: str, model: nn.Module, zero1: bool = False, **options):
        super().__init__(model, wrap(name, model, **options), zero1)
        self.name = name

    def no_sync(self) -> ContextManager[None]:
        return self.module.no_sync()

    def finish_gradient_synchronization(self) -> None:
        self.module.finish_gradient_synchronization()

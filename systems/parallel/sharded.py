"""Fully sharded data parallelism: our FSDP (:mod:`systems.fsdp`) or PyTorch's FSDP2 (``fully_shard``) behind the
strategy interface. Each wrapper already gathers its state into what a single process would save and computes the
gradient norm over every rank's shards; the optimizer is built over the shards."""

from __future__ import annotations

import inspect
from typing import Any, ContextManager

import torch
import torch.nn as nn
from torch.optim import Optimizer

from systems.fsdp import FSDP
from systems.parallel.base import Strategy


class Sharded(Strategy):
    """``options`` go to our FSDP where it takes them (``trace``, ``process_group``, ``reduce_dtype``)."""

    def __init__(self, name: str, model: nn.Module, compute_dtype: torch.dtype | None = None, **options):
        if name == "fsdp":
            accepted = set(inspect.signature(FSDP.__init__).parameters)
            module = FSDP(model, compute_dtype=compute_dtype, **{k: v for k, v in options.items() if k in accepted})
        else:
            from systems.fsdp.torch_fsdp import TorchFSDP

            module = TorchFSDP(model, compute_dtype=compute_dtype)
        super().__init__(model, module)
        self.name = name

    def no_sync(self) -> ContextManager[None]:
        return self.module.no_sync()

    def finish_gradient_synchronization(self) -> None:
        self.module.finish_gradient_synchronization()

    def clip_grad_norm_(self, max_norm: float) -> float:
        return self.module.clip_grad_norm_(max_norm)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.full_state_dict()

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_full_state_dict(state)

    def full_optimizer_state_dict(self, optimizer: Optimizer) -> dict[str, Any]:
        return self.module.full_optimizer_state_dict(optimizer)

    def load_full_optimizer_state_dict(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        self.module.load_full_optimizer_state_dict(optimizer, state)

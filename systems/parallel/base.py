"""The interface every parallel strategy has, and what is the same for the replicated ones.

A strategy holds the model as the user built it (:attr:`Strategy.model`) and what a training step calls
(:attr:`Strategy.module`: a data-parallel wrapper, or the model itself). Its methods are all a trainer or a
benchmark needs, whichever strategy it is:

* ``no_sync()``: backward passes inside accumulate gradients locally (all but the last micro-batch);
* ``finish_gradient_synchronization()``: before the optimizer step, every gradient averaged over the ranks;
* ``optimizer(cls, **kwargs)``: the optimizer over what this rank updates (with ZeRO-1, its share of the state);
* ``clip_grad_norm_(max_norm)``: the global gradient norm over every rank's gradients, before clipping;
* ``full_state_dict()`` / ``load_full_state_dict()``, ``full_optimizer_state_dict(opt)`` /
  ``load_full_optimizer_state_dict(opt, state)``: what a single process would save, so that a checkpoint resumes
  under any strategy and world size (collectives where the state is sharded: every rank calls them).

Here the strategies whose model is whole on every rank (one process, the data-parallel wrappers): their state is
the model's, their gradients after synchronisation the same on every rank.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch
import torch.nn as nn
from torch.optim import Optimizer

from systems.zero import ShardedOptimizer


class Strategy:
    """A model trained one way (see the module doc); ``zero1`` shards the optimizer's state over the ranks."""

    name = "none"

    def __init__(self, model: nn.Module, module: nn.Module, zero1: bool = False):
        self.model, self.module, self.zero1 = model, module, zero1

    def no_sync(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    def finish_gradient_synchronization(self) -> None:
        """Nothing to average in one process."""

    def optimizer(self, cls: type[Optimizer], **kwargs: Any) -> Optimizer:
        params = self.model.parameters()
        return ShardedOptimizer(params, cls, **kwargs) if self.zero1 else cls(params, **kwargs)

    def clip_grad_norm_(self, max_norm: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def full_optimizer_state_dict(self, optimizer: Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()  # ZeRO-1's gathers every owner's share: keyed as a plain optimizer's

    def load_full_optimizer_state_dict(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)

    @property
    def comm_ms(self) -> list[float]:
        """Milliseconds each gradient synchronisation spent communicating, where the wrapper measures them."""
        return getattr(self.module, "comm_ms", [])

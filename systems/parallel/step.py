"""One training step, the same for the trainer and every benchmark: forward and loss, backward, gradient
synchronisation, clipping, optimizer update, phase by phase.

    step = TrainStep(strategy, optimizer, grad_accum=4, autocast=torch.bfloat16, clip=1.0)
    loss, grad_norm = step(x, y)                          # all phases
    loss = step.forward_backward(x, y); step.synchronize(); norm = step.clip(); step.update()   # the same, apart

The loss is the model's own (``strategy.module(x, y)``: :func:`systems.model.token_loss`, in fp32); the global batch
on this rank is split into ``grad_accum`` micro-batches, all but the last backward under ``no_sync()``. A
``timer`` sees every phase by name ("forward", "backward", "synchronize", "clip", "optimizer") and runs it
(``timer(name, fn) -> fn()``): the benchmarks time phases with it, a trace records their intervals.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch
from torch.optim import Optimizer

from systems.parallel.base import Strategy

Timer = Callable[[str, Callable[[], Any]], Any]


def _run(name: str, fn: Callable[[], Any]) -> Any:
    return fn()


class TrainStep:
    """A step of ``strategy``; ``optimizer`` None: no update (forward and backward only). ``autocast``: the dtype
    the forward runs in (None: the weights'). ``clip``: the gradient norm's bound (0: measured, not clipped; None:
    not even measured, which saves a device synchronisation)."""

    def __init__(self, strategy: Strategy, optimizer: Optimizer | None = None, *, grad_accum: int = 1,
                 autocast: torch.dtype | None = None, clip: float | None = None, timer: Timer = _run):
        if grad_accum < 1:
            raise ValueError(f"grad_accum must be at least 1, got {grad_accum}")
        self.strategy, self.optimizer, self.grad_accum, self.timer = strategy, optimizer, grad_accum, timer
        self.autocast_dtype, self.max_norm = autocast, clip

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The mean loss over this rank's batch (detached), its gradients accumulated: (B, T) tokens and targets."""
        if x.shape[0] % self.grad_accum:
            raise ValueError(f"a batch of {x.shape[0]} sequences does not split into {self.grad_accum} micro-batches")
        micro = x.shape[0] // self.grad_accum
        total = torch.zeros((), device=x.device)
        for i in range(self.grad_accum):
            rows = slice(i * micro, (i + 1) * micro)
            last = i == self.grad_accum - 1
            with contextlib.nullcontext() if last else self.strategy.no_sync():
                def forward(rows=rows):
                    with self._autocast(x.device):
                        return self.strategy.module(x[rows], y[rows])

                loss = self.timer("forward", forward)
                self.timer("backward", (loss / self.grad_accum).backward)
            total += loss.detach() / self.grad_accum
        return total

    def synchronize(self) -> None:
        self.timer("synchronize", self.strategy.finish_gradient_synchronization)

    def clip(self) -> float:
        """The gradient norm over every rank before clipping (NaN when the step measures none)."""
        if self.max_norm is None:
            return math.nan
        return self.timer("clip", lambda: self.strategy.clip_grad_norm_(self.max_norm or math.inf))

    def update(self) -> None:
        """The optimizer's step (where there is one), then the gradients dropped."""
        if self.optimizer is not None:
            self.timer("optimizer", self.optimizer.step)
        self.zero_grad()

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.strategy.model.zero_grad(set_to_none=True)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        loss = self.forward_backward(x, y)
        self.synchronize()
        norm = self.clip()
        self.update()
        return loss, norm

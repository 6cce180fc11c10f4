"""Naive DDP (handout §2.2.2): after the backward pass, one blocking all-reduce per parameter gradient.

The simplest correct scheme and the baseline of §2.2.3: nothing overlaps with the backward pass, and a
model with hundreds of parameter tensors pays the fixed cost of a collective hundreds of times.
"""

from __future__ import annotations

import torch

from systems.ddp.base import DataParallel


class NaiveDDP(DataParallel):
    def _synchronize(self) -> dict[int, torch.Tensor]:
        summed = {}
        for i, p in enumerate(self.params):
            if p.grad is None:  # reduced anyway: another rank may have a gradient for it
                p.grad = torch.zeros_like(p)
            self._all_reduce(p.grad)  # in place, blocking
            summed[i] = p.grad
        return summed

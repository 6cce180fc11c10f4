"""DDP with one flattened all-reduce (handout §2.3.1): fewer collectives, still no overlap.

After the backward pass every gradient is copied into one contiguous buffer
(``torch._utils._flatten_dense_tensors``), the buffer is all-reduced once, and the sums are read back as
views (``_unflatten_dense_tensors``). A flat buffer has one dtype, so parameters are grouped by dtype: one
collective per dtype, in the order the dtypes first appear (the same on every rank).
"""

from __future__ import annotations

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from systems.ddp.base import DataParallel


class FlatDDP(DataParallel):
    def __init__(self, module, **kwargs):
        super().__init__(module, **kwargs)
        groups: dict[torch.dtype, list[int]] = {}
        for i, p in enumerate(self.params):
            groups.setdefault(p.dtype, []).append(i)
        self.groups = list(groups.values())

    def _synchronize(self) -> dict[int, torch.Tensor]:
        summed = {}
        for indices in self.groups:
            grads = [self._grad_or_zeros(i) for i in indices]
            flat = _flatten_dense_tensors(grads)  # one copy: (sum of numels,)
            self._all_reduce(flat)
            summed.update(zip(indices, _unflatten_dense_tensors(flat, grads)))
        return summed

"""DDP with gradient buckets, overlapped with the backward pass (handout §2.3.3).

Parameters are assigned, in reverse ``model.parameters()`` order, to buckets of at most ``bucket_size_mb``
MiB (2**20 bytes) of one dtype each (a single larger parameter gets a bucket of its own). When the last
gradient of a bucket is ready, the bucket's gradients are copied into one flat buffer and all-reduced
asynchronously; at synchronisation the sums are copied back. This combines §2.3.1 (few collectives) and
§2.3.2 (overlap): the launch-order rules of ``overlap.py`` apply unchanged, with buckets as the units.
"""

from __future__ import annotations

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from systems.ddp.overlap import OverlapDDP

MIB = 2**20


class BucketedDDP(OverlapDDP):
    def __init__(self, module, bucket_size_mb: float = 25.0, **kwargs):
        if bucket_size_mb <= 0:
            raise ValueError(f"bucket_size_mb must be positive, got {bucket_size_mb}")
        self.bucket_size_mb = bucket_size_mb
        super().__init__(module, **kwargs)

    def _make_units(self) -> list[list[int]]:
        limit = self.bucket_size_mb * MIB
        buckets: list[list[int]] = []
        open_bucket: dict[torch.dtype, tuple[int, int]] = {}  # dtype -> (bucket index, bytes in it)
        for i in reversed(range(len(self.params))):
            p = self.params[i]
            nbytes = p.numel() * p.element_size()
            b, used = open_bucket.get(p.dtype, (None, 0))
            if b is None or used + nbytes > limit:
                b, used = len(buckets), 0
                buckets.append([])
            buckets[b].append(i)
            open_bucket[p.dtype] = (b, used + nbytes)
        return buckets

    def _launch(self, u: int) -> None:
        grads = [self._grad_or_zeros(i) for i in self.units[u]]
        flat = _flatten_dense_tensors(grads)  # (sum of numels,): one copy per bucket
        self._in_flight.append((u, (flat, grads), self._all_reduce(flat, async_op=True)))
        self._next = u + 1

    def _summed(self, u: int, reduced) -> dict[int, torch.Tensor]:
        flat, grads = reduced
        return dict(zip(self.units[u], _unflatten_dense_tensors(flat, grads)))

"""One sharded weight: this rank's rows as an fp32 master parameter, and the two collectives that move it.

A weight of R rows is cut into chunks of ⌈R/N⌉ rows; rank r owns rows [r·c, min((r+1)·c, R)), so the last
ranks own fewer rows (or none) when R does not divide by N. The collectives need equal pieces, so each
rank pads its rows to c before the all-gather and the full gradient is padded to N·c rows before the
reduce-scatter; the padding never reaches the parameter or its gradient.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# torch 2.13 renamed the single-tensor collectives and warns on the old names; older torch has only those
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class Pending:
    """An asynchronous collective and the tensor it fills; ``result()`` waits for it. With ``on_done``, the
    completion time (``time.perf_counter``) is reported for traces: when the collective ends where its work
    has a future, else when ``result()`` finds it done (gloo's reduce-scatter has none)."""

    def __init__(self, work, value: torch.Tensor, on_done: Callable[[float], None] | None = None):
        self.work, self.value, self.on_done = work, value, on_done
        if on_done is not None and work is None:
            self._report()
        elif on_done is not None:
            try:
                work.get_future().then(lambda _: self._report())
            except RuntimeError:  # "Work::getFuture not implemented"
                pass

    def _report(self) -> None:
        if self.on_done is not None:
            self.on_done(time.perf_counter())
            self.on_done = None

    def result(self) -> torch.Tensor:
        if self.work is not None:
            self.work.wait()
            self.work = None
        self._report()
        return self.value


class ShardedWeight:
    """``weight``'s rows owned by ``rank`` of ``world`` as ``self.param`` (fp32, a new leaf the optimizer sees)."""

    def __init__(self, weight: torch.Tensor, rank: int, world: int, group: dist.ProcessGroup | None):
        self.shape, self.world, self.group = tuple(weight.shape), world, group
        self.chunk = math.ceil(self.shape[0] / world)
        self.rows = (min(rank * self.chunk, self.shape[0]), min((rank + 1) * self.chunk, self.shape[0]))
        local = weight.detach()[self.rows[0]:self.rows[1]].to(torch.float32).clone()
        self.param = nn.Parameter(local, requires_grad=weight.requires_grad)

    @property
    def full_numel(self) -> int:
        return math.prod(self.shape)

    def _padded(self, t: torch.Tensor, rows: int) -> torch.Tensor:
        return F.pad(t, (0, 0) * (t.dim() - 1) + (0, rows - t.shape[0])) if t.shape[0] < rows else t

    def gather(self, dtype: torch.dtype, on_done=None, rows: torch.Tensor | None = None) -> Pending:
        """All-gather the full weight in ``dtype`` (cast before sending: half the bytes for a 16-bit dtype);
        with ``rows``, any tensor shaped like this rank's shard (an optimizer state, say) instead."""
        send = self._padded((self.param if rows is None else rows).detach().to(dtype), self.chunk).contiguous()
        if self.world == 1:
            return Pending(None, send.clone() if send.data_ptr() == self.param.data_ptr() else send, on_done)
        out = torch.empty((self.world * self.chunk, *self.shape[1:]), dtype=dtype, device=send.device)
        work = _ALL_GATHER(out, send, group=self.group, async_op=True)
        return Pending(work, out[:self.shape[0]], on_done)

    def reduce_scatter(self, grad: torch.Tensor, dtype: torch.dtype, on_done=None) -> Pending:
        """Sum the full gradient over the ranks in ``dtype``; this rank receives its rows."""
        grad = grad.to(dtype)
        if self.world == 1:
            return Pending(None, grad.clone(), on_done)
        send = self._padded(grad, self.world * self.chunk).contiguous()
        out = torch.empty((self.chunk, *self.shape[1:]), dtype=dtype, device=grad.device)
        work = _REDUCE_SCATTER(out, send, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        return Pending(work, out[:self.rows[1] - self.rows[0]], on_done)

    def full(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The full fp32 master weight, or the full tensor whose shard is ``rows`` (a blocking collective)."""
        return self.gather(torch.float32, rows=rows).result().clone()

    def local_rows(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a full-shape tensor."""
        if tuple(full.shape) != self.shape:
            raise ValueError(f"a tensor of shape {tuple(full.shape)} given for a sharded weight of shape {self.shape}")
        return full[self.rows[0]:self.rows[1]]

    def load(self, full: torch.Tensor) -> None:
        """Take this rank's rows of a full weight."""
        with torch.no_grad():
            self.param.copy_(self.local_rows(full))


def is_shardable(module: nn.Module) -> bool:
    """Linear and Embedding layers with a 2-D weight: torch's, and any class of those names (as in the CS336
    basics model, whose ``Linear`` and ``Embedding`` are its own)."""
    kind = isinstance(module, (nn.Linear, nn.Embedding)) or type(module).__name__ in ("Linear", "Embedding")
    weight = module._parameters.get("weight")
    return kind and isinstance(weight, nn.Parameter) and weight.dim() == 2

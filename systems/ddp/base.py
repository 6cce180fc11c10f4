"""The skeleton every data-parallel wrapper shares (handout §2.2.2, §2.3).

:class:`DataParallel` holds the module and does everything that is the same for all variants:

* at construction, rank 0's parameters and buffers are broadcast, so every replica starts equal;
* ``forward`` passes through to the module;
* a ``post_accumulate_grad`` hook on each trainable parameter tells the variant that a gradient is ready
  (the overlapping variants start communicating there; the others ignore it);
* ``finish_gradient_synchronization()`` leaves every gradient averaged over the ranks, then resets;
* ``no_sync()`` accumulates gradients locally over micro-batches; the next synchronisation reduces them;
* misuse is caught: a forward pass while the previous backward's gradients were never synchronised
  raises ``RuntimeError`` (that is also where a forgotten sync before ``optimizer.step()`` shows up).

What the ranks agree on, and what they may not. Collectives pair up by the order in which each rank
issues them, so that order may depend only on what every rank knows: the parameter list, fixed at
construction. Which parameters received a gradient this step is local (a branch taken on one rank's data
may be skipped on another's), so a rank reduces *every* trainable parameter, with zeros where it has no
gradient, and the last collective of a step is a small all-reduce of a 0/1 "had a gradient" vector. A
parameter no rank produced a gradient for keeps ``grad = None``, exactly as in single-process training
(an optimizer skips it; AdamW would otherwise still decay it); the others get the average.

Variants implement ``_synchronize() -> dict[index, summed gradient]``; see ``naive.py``, ``flat.py``,
``overlap.py``, ``bucketed.py``. Constructor, shared by all: ``Cls(module, *, process_group=None,
sync_timing=False)`` (bucketed adds ``bucket_size_mb``).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

from systems.device import timed


class _Done:
    """The handle of a collective that had nothing to do (world size 1)."""

    def wait(self) -> bool:
        return True


class DataParallel(nn.Module):
    """Replicates ``module`` over the ranks of ``process_group`` and averages gradients; see the module doc.

    ``sync_timing=True`` synchronises the device around the communication in
    ``finish_gradient_synchronization``, so that :attr:`comm_ms` measures communication rather than
    kernel queueing (for benchmarks; it costs the CPU its run-ahead).
    """

    def __init__(self, module: nn.Module, *, process_group: dist.ProcessGroup | None = None,
                 sync_timing: bool = False):
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group) if dist.is_initialized() else 1
        self.sync_timing = sync_timing
        # Milliseconds spent in each finish_gradient_synchronization that had work (benchmarks read it).
        self.comm_ms: list[float] = []
        # parameters() yields a tied (shared) parameter once, so each gets one hook and one reduction.
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self.device = next(module.parameters(), torch.empty(0)).device
        self.require_backward_grad_sync = True
        self._unsynced = False  # a backward outside no_sync() produced gradients not yet synchronised
        self._accumulated = False  # a backward inside no_sync() did
        self._broadcast_from_rank0()
        # The hooks live in the parameters' C++ autograd state, where the garbage collector cannot see a
        # cycle through them: a hook that held the wrapper would keep wrapper, model and gradients alive
        # forever. They reach the wrapper through a weak reference instead.
        this = weakref.ref(self)

        def on_grad(p: torch.Tensor) -> None:
            if (wrapper := this()) is not None:
                wrapper._on_grad(p)

        self._hooks = [p.register_post_accumulate_grad_hook(on_grad) for p in self.params]

    # -- collectives ---------------------------------------------------------------------------------
    def _all_reduce(self, tensor: torch.Tensor, async_op: bool = False):
        if self.world_size == 1:
            return _Done()
        work = dist.all_reduce(tensor, group=self.process_group, async_op=async_op)
        return work if async_op else _Done()

    @torch.no_grad()
    def _broadcast_from_rank0(self) -> None:
        if self.world_size == 1:
            return
        src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        # Frozen parameters too: they are part of the model every rank must agree on.
        for t in list(self.module.parameters()) + list(self.module.buffers()):
            dist.broadcast(t.data, src=src, group=self.process_group)

    # -- the training-step protocol ------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self._unsynced:
            raise RuntimeError(
                "forward pass while the gradients of the previous backward pass were never synchronised "
                "across ranks: call finish_gradient_synchronization() after backward() and before "
                "optimizer.step(), or run the backward pass inside no_sync() to accumulate gradients"
            )
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally; the next synchronisation reduces them all."""
        previous, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def _on_grad(self, p: torch.Tensor) -> None:
        if self.require_backward_grad_sync:
            self._unsynced = True
            self._grad_ready(self._index[id(p)])
        else:
            self._accumulated = True

    def _grad_ready(self, i: int) -> None:
        """Parameter ``i``'s gradient is final for this backward pass; overlapping variants launch here."""

    def finish_gradient_synchronization(self) -> None:
        """Average every gradient over the ranks; a second call (nothing new since) does nothing."""
        if not (self._unsynced or self._accumulated):
            return
        if self.sync_timing and self.device.type == "cuda":
            # Wait for the backward kernels (compute stream only: in-flight collectives keep running), so
            # the clock starts when the gradients are computed and measures only what communication adds.
            torch.cuda.current_stream(self.device).synchronize()
        with timed(self.device, sync_start=False, sync_end=self.sync_timing) as elapsed:
            local_used = self._local_usage()
            summed = self._synchronize()
            self._assign(summed, local_used)
        self.comm_ms.append(elapsed.ms)
        self._unsynced = self._accumulated = False

    def _synchronize(self) -> dict[int, torch.Tensor]:
        """Issue (and wait for) the reductions of every parameter; return index -> gradient summed over ranks."""
        raise NotImplementedError

    # -- shared pieces -------------------------------------------------------------------------------
    def _local_usage(self) -> torch.Tensor:
        # Read before _synchronize, which may fill missing gradients with zeros.
        return torch.tensor([p.grad is not None for p in self.params], dtype=torch.int32,
                            device=self.device)

    def _grad_or_zeros(self, i: int) -> torch.Tensor:
        p = self.params[i]
        return p.grad if p.grad is not None else torch.zeros_like(p)

    @torch.no_grad()
    def _assign(self, summed: dict[int, torch.Tensor], local_used: torch.Tensor) -> None:
        # The last collective of the step, issued in the same place on every rank: who had a gradient.
        self._all_reduce(local_used)
        users = local_used.tolist()
        for i, total in summed.items():
            p = self.params[i]
            if users[i] == 0:
                p.grad = None  # unused on every rank: as in single-process training
            elif p.grad is None:
                p.grad = total / self.world_size
            elif self.world_size > 1:
                torch.div(total, self.world_size, out=p.grad)  # in place when total is p.grad itself

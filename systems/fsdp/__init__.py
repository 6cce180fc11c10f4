"""Fully sharded data parallel training, written here (2026 handout §7).

    from systems.fsdp import FSDP
    model = FSDP(model, compute_dtype=torch.bfloat16)      # every rank, same model
    opt = torch.optim.AdamW(model.parameters())             # sees fp32 shards and the replicated norms
    loss_fn(model(x), y).backward()
    model.finish_gradient_synchronization()                  # before opt.step()
    opt.step()

What it does, in the order a step meets it:

* Construction: rank 0's parameters and buffers are broadcast; the weight of every Linear and Embedding layer
  (:func:`~systems.fsdp.shard.is_shardable`) is replaced, in its module, by this rank's rows of it as an fp32
  parameter (a tied weight is sharded once); other parameters (norms, biases) stay whole on every rank.
* Forward: each sharded layer gets its full weight, all-gathered in the compute dtype just before it runs; the
  gathers of the first two layers start at once, and that of layer i + 2 when layer i has finished, so at
  most two layers' full weights exist at a time. The gathered weight is dropped after the layer: autograd
  keeps a note (a ``saved_tensors_hooks`` pack hook) instead of the tensor.
* Backward: when autograd needs a layer's weight again, it is gathered again, and the next layer's (in
  backward order) gather is started; each layer's full weight gradient is reduce-scattered (in fp32 by
  default) as soon as it exists, while the backward goes on; replicated parameters' gradients are
  all-reduced as they become ready.
* ``finish_gradient_synchronization()`` waits for the reductions and leaves every gradient averaged over
  the ranks: sharded ones as fp32 shards, shaped like their parameters.

The order of forward layers is learnt in the first forward (the modules' registration order is the guess
until then); every rank runs the same model, so every rank issues the same collectives in the same order.
:attr:`peak_layers` is the largest number of layers whose full weights the schedule held at once (two), and
:attr:`peak_gathered_bytes` the largest number of bytes of gathered weights alive at once, measured from the
storages themselves (which a communication thread may still hold for a moment after a collective ends). The tests are ``tests/test_fsdp.py``, the chapter ``notebooks/15_fsdp.py``.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef

from systems.fsdp import state as _state
from systems.fsdp.shard import Pending, ShardedWeight, is_shardable


class _GatheredWeight(torch.autograd.Function):
    """Identity from the shard to the gathered weight for autograd: its backward receives the full weight's
    gradient and hands it to the wrapper, which reduce-scatters it (the shard's gradient is set when the
    reduction finishes, in ``finish_gradient_synchronization``)."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, full: torch.Tensor, unit: int, owner: "FSDP") -> torch.Tensor:
        ctx.unit, ctx.owner = unit, weakref.ref(owner)
        return full.detach()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if (owner := ctx.owner()) is not None:
            owner._weight_grad_ready(ctx.unit, grad)
        return None, None, None, None


class FSDP(nn.Module):
    """Shards ``module``'s Linear and Embedding weights over the ranks of ``process_group``; see the module doc.

    ``compute_dtype`` (None: the weights' own fp32) is what weights are gathered and computed in;
    ``reduce_dtype`` what gradients are summed in. ``trace=True`` records every gather, reduce-scatter and
    layer's forward with its start and end (``time.perf_counter``) in :attr:`events`.
    """

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None, *,
                 process_group: dist.ProcessGroup | None = None, reduce_dtype: torch.dtype = torch.float32,
                 trace: bool = False):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"FSDP wraps an nn.Module, got {type(module).__name__}")
        for name, dtype in (("compute_dtype", compute_dtype), ("reduce_dtype", reduce_dtype)):
            if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
                raise ValueError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
        if any(p.device.type == "meta" for p in module.parameters()):
            raise ValueError("parameters on the meta device have no values to shard; materialise them first")
        self.module, self.group = module, process_group
        self.compute_dtype, self.reduce_dtype = compute_dtype or torch.float32, reduce_dtype
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(process_group) if self.distributed else 0
        self.world_size = dist.get_world_size(process_group) if self.distributed else 1
        self._broadcast_from_rank0()
        self.units: list[tuple[str, nn.Module, ShardedWeight]] = []
        by_weight: dict[int, ShardedWeight] = {}
        for name, m in module.named_modules():
            if is_shardable(m):
                w = m._parameters["weight"]
                shard = by_weight.setdefault(id(w), ShardedWeight(w, self.rank, self.world_size, process_group))
                m._parameters["weight"] = shard.param
                self.units.append((name, m, shard))
        sharded = {id(s.param) for _, _, s in self.units}
        self.replicated = [p for p in module.parameters() if p.requires_grad and id(p) not in sharded]
        this = weakref.ref(self)
        # the hooks stay out of torch.compile's tracing (a compiled block runs them between its graphs): they
        # communicate and keep Python bookkeeping, and traced they would be compiled again for every layer index
        # until Dynamo's recompile limit, then run eagerly anyway
        for i, (_, m, _) in enumerate(self.units):
            m.register_forward_pre_hook(torch.compiler.disable(lambda m, args, i=i: this()._before_layer(i)))
            m.register_forward_hook(torch.compiler.disable(lambda m, args, out, i=i: this()._after_layer(i)),
                                    always_call=True)
        for p in self.replicated:
            p.register_post_accumulate_grad_hook(lambda p: this()._replicated_grad_ready(p))
        self.trace, self.events = trace, []
        self.peak_gathered_bytes = self.peak_layers = 0
        self._order: list[int] = list(range(len(self.units)))  # forward order: registration order until seen
        self._seen: list[int] = []
        self._gathers: dict[int, Pending] = {}  # unit -> gather in flight or done, not yet used
        self._in_use: dict[int, torch.Tensor] = {}  # unit -> gathered weight of the running layer / backward
        self._needs_weight: set[int] = set()  # units whose weight autograd saved for the backward
        self._alive: list[tuple[StorageWeakRef, int]] = []  # every gathered storage, for the accounting
        self._reductions: list[tuple[Any, Pending]] = []  # (shard param or replicated param, reduction)

    # ---- the step --------------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self._reductions:
            raise RuntimeError("forward pass while the previous backward's gradients were never synchronised: call "
                               "finish_gradient_synchronization() after backward() and before optimizer.step()")
        self._drop_gathers()  # a backward's unused prefetch holds weights from before the optimizer step
        self._seen, self._in_use = [], {}
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return self.module(*args, **kwargs)
        finally:
            if len(self._seen) == len(self.units):  # a full pass: its order is the order from now on
                self._order = self._seen
            self._drop_gathers()  # prefetched for a layer that did not run

    def finish_gradient_synchronization(self) -> None:
        """Wait for every reduction; leave each gradient averaged over the ranks (a second call does nothing)."""
        shard_of = self._shards()
        for p, pending in self._reductions:
            g = pending.result()
            if id(p) in shard_of:  # summed shard: divide and accumulate into the shard's fp32 gradient
                g = g.to(torch.float32) / self.world_size
                p.grad = g if p.grad is None else p.grad + g
            else:
                p.grad.div_(self.world_size)
        self._reductions.clear()
        self._in_use.clear()
        self._drop_gathers()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """For micro-batches: gradients are sharded, so there is no full gradient to accumulate locally; each
        micro-batch's backward is reduced on leaving the block, and the shards' gradients add up."""
        yield
        self.finish_gradient_synchronization()

    def clip_grad_norm_(self, max_norm: float) -> float:
        """Clip to the global gradient norm (over all ranks' shards and the replicated parameters); return it."""
        return _state.clip_grad_norm_(list(self.module.parameters()), self._shards(), max_norm, self.group)

    def _shards(self) -> dict[int, ShardedWeight]:
        return {id(s.param): s for _, _, s in self.units}

    # ---- forward hooks -----------------------------------------------------------------------------------

    def _before_layer(self, i: int) -> None:
        self._seen.append(i)
        if i not in self._gathers:
            self._start_gather(i)
        for ahead in self._next_in_order(i, 1):  # the first layer also starts the second's gather
            if not self._seen[:-1] and ahead not in self._gathers:
                self._start_gather(ahead)
        full = self._take_gather(i)
        _, m, shard = self.units[i]
        if torch.is_grad_enabled() and shard.param.requires_grad:
            full = _GatheredWeight.apply(shard.param, full, i, self)
        self._in_use[i] = full
        del m._parameters["weight"]
        m.weight = full  # a plain attribute while the layer runs; the parameter returns after it
        self._event("compute", i, time.perf_counter(), None)

    def _after_layer(self, i: int) -> None:
        _, m, shard = self.units[i]
        if "weight" not in m._parameters:
            del m.weight
            m._parameters["weight"] = shard.param
        self._in_use.pop(i, None)
        self._close_event("compute", i)
        for ahead in self._next_in_order(i, 2):  # layer i is done: the gather two layers on may start
            if ahead not in self._gathers and ahead not in self._seen:
                self._start_gather(ahead)

    def _next_in_order(self, i: int, steps: int) -> list[int]:
        pos = self._order.index(i) if i in self._order else len(self._order)
        return self._order[pos + steps:pos + steps + 1]

    # ---- the backward: saved weights are notes, gathered again when needed -----------------------------

    def _pack(self, t: torch.Tensor):
        if t.device.type != "meta":
            ptr = t.untyped_storage().data_ptr()
            for i, full in self._in_use.items():
                if full.untyped_storage().data_ptr() == ptr:
                    self._needs_weight.add(i)
                    return ("fsdp weight", i, t.size(), t.stride(), t.storage_offset())
        return t

    def _unpack(self, packed):
        if not (isinstance(packed, tuple) and packed and packed[0] == "fsdp weight"):
            return packed
        _, i, size, stride, offset = packed
        if i not in self._in_use:
            if i not in self._gathers:
                self._start_gather(i)
            self._in_use[i] = self._take_gather(i)
            backward_order = [u for u in reversed(self._order) if u in self._needs_weight]
            later = backward_order[backward_order.index(i) + 1:] if i in backward_order else []
            if later and later[0] not in self._gathers and later[0] not in self._in_use:
                self._start_gather(later[0])  # the next layer of the backward, while this one computes
        return self._in_use[i].as_strided(size, stride, offset)

    def _weight_grad_ready(self, i: int, grad: torch.Tensor) -> None:
        self._in_use.pop(i, None)  # this layer's backward is done with the weight
        shard = self.units[i][2]
        start = time.perf_counter()
        self._reductions.append((shard.param, shard.reduce_scatter(
            grad, self.reduce_dtype, self._tracer("reduce-scatter", i, start))))

    def _replicated_grad_ready(self, p: torch.Tensor) -> None:
        work = dist.all_reduce(p.grad, group=self.group, async_op=True) if self.world_size > 1 else None
        self._reductions.append((p, Pending(work, p.grad)))

    # ---- gathers and their accounting --------------------------------------------------------------------

    def _start_gather(self, i: int) -> None:
        shard, start = self.units[i][2], time.perf_counter()
        pending = shard.gather(self.compute_dtype, self._tracer("all-gather", i, start))
        storage = pending.value.untyped_storage()
        self._alive.append((StorageWeakRef(storage), storage.nbytes()))
        self._gathers[i] = pending
        self._account()

    def _take_gather(self, i: int) -> torch.Tensor:
        return self._gathers.pop(i).result()

    def _drop_gathers(self) -> None:
        for pending in self._gathers.values():  # every rank issued them: complete them before dropping
            pending.result()
        self._gathers.clear()

    def _account(self) -> None:
        self._alive = [(ref, n) for ref, n in self._alive if not ref.expired()]
        self.peak_gathered_bytes = max(self.peak_gathered_bytes, sum(n for _, n in self._alive))
        self.peak_layers = max(self.peak_layers, len(set(self._gathers) | set(self._in_use)))

    def gathered_bytes(self) -> int:
        """Bytes of gathered weights alive now."""
        self._account()
        return sum(n for _, n in self._alive)

    # ---- whole parameters and state dicts (collectives: every rank calls them) ------------------------------

    def _broadcast_from_rank0(self) -> None:
        if self.world_size == 1:
            return
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        with torch.no_grad():
            for t in list(self.module.parameters()) + list(self.module.buffers()):
                dist.broadcast(t.data, src=src, group=self.group)

    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter by its name in the wrapped module, full-shape fp32 master values; replicated ones as
        they are."""
        shard_of = self._shards()
        return {name: shard_of[id(p)].full() if id(p) in shard_of else p.detach()
                for name, p in self.module.named_parameters()}

    def _shard_by_name(self) -> dict[str, ShardedWeight]:
        """Every name a sharded weight has in the module's state dict (a tied weight has several)."""
        shard_of = self._shards()
        return {name: shard_of[id(p)] for name, p in self.module.named_parameters(remove_duplicate=False)
                if id(p) in shard_of}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The unsharded module's state dict (parameters full, fp32, and buffers), on every rank."""
        by_name, gathered = self._shard_by_name(), {}
        out = {}
        for name, value in self.module.state_dict().items():
            shard = by_name.get(name)
            if shard is None:
                out[name] = value.clone()
                continue
            if id(shard) not in gathered:  # one gather per weight, however many names it has
                gathered[id(shard)] = shard.full()
            out[name] = gathered[id(shard)]
        return out

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load an unsharded state dict: each rank keeps its rows of the sharded weights."""
        by_name, own = self._shard_by_name(), self.module.state_dict()
        missing = set(own) - set(state)
        if missing:
            raise KeyError(f"state dict lacks {sorted(missing)}")
        with torch.no_grad():
            for name, target in own.items():
                if name in by_name:
                    by_name[name].load(state[name])
                else:
                    target.copy_(state[name])

    def full_optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The state dict a plain ``optimizer`` over the unsharded module would have (built over this module's
        parameters, in their order)."""
        return _state.full_optimizer_state(optimizer, self._shards())

    def load_full_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, full: dict[str, Any]) -> None:
        _state.load_full_optimizer_state(optimizer, self._shards(), full)

    # ---- traces ------------------------------------------------------------------------------------------

    def _event(self, kind: str, i: int, start: float, end: float | None) -> None:
        if self.trace:
            self.events.append({"kind": kind, "layer": self.units[i][0], "start": start, "end": end})

    def _close_event(self, kind: str, i: int) -> None:
        if self.trace:
            open_ = [e for e in self.events if e["kind"] == kind and e["layer"] == self.units[i][0] and e["end"] is None]
            if open_:
                open_[-1]["end"] = time.perf_counter()

    def _tracer(self, kind: str, i: int, start: float):
        return (lambda end: self._event(kind, i, start, end)) if self.trace else None

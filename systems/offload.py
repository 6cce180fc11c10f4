"""Activation offloading: tensors a group of blocks saves for the backward moved to pinned host memory while the
forward goes on, and brought back one group ahead of the backward, the copies on streams of their own so that the
GPU computes meanwhile.

:class:`ActivationOffload` is a pair of autograd saved-tensor hooks entered around each group's forward
(``with offload.group(i, min_numel): ...``). The pack hook takes each saved tensor of that many elements or more,
starts its copy to host memory behind the work already queued, and hands autograd a handle; the GPU memory goes
back to the allocator once the copy is done (``record_stream``), not before. The backward reaches the groups last
to first: unpacking group i's tensors starts the copies of the nearest earlier group's back to the GPU, so that they
run while group i's backward computes; a tensor not brought back ahead is copied on demand. Autograd packs a
compiled region's saved tensors when the region has run, and an eager checkpoint keeps what it saves out of
autograd's reach, so :func:`run_groups_keeping_ffn` compiles each checkpointed group by itself and runs the hooks
around it, outside the compiled graphs: what ``recompute="offload"`` does in
:class:`systems.model.TransformerLM`, and, without the hooks, ``recompute="keep_attention_and_ffn"``. Blocks that
are units of PyTorch's FSDP2 (``fully_shard`` on each) are groups of one, each called as a module so that FSDP2's
gathers and reductions run in its hooks, between the graphs, and its forward replaced for the call by the compiled,
checkpointed one.
Each group keeps attention's outputs and the feed-forward's two products W1 x and W3 x
(:func:`systems.recompute.keep_attention_and_ffn`), so its backward recomputes the projections to q, k, v and the
output only; every tensor a group saves that is at least as large as its input goes to host memory, but in the last
group, whose backward comes first.

A tensor brought back ahead is handed to the backward only after the stream that allocated it (the compute stream)
waits for its copy; one never handed over, because the backward stopped with an error, makes that stream wait when
it is freed, so that the memory's next use there comes after the copy has written it.

On a CPU the same bookkeeping copies within host memory, synchronously: what the tests check there is which
tensors move, in which order they come back, and that the gradients do not change.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from systems.recompute import checkpointed_groups, keep_attention_and_ffn, run_blocks


class _Offloaded:
    """One saved tensor away from the GPU: its host copy, the event that copy ends with, and, once brought back,
    the device tensor, the event its copy ends with and the stream that allocated it."""

    __slots__ = ("host", "device", "group", "offloaded", "on_device", "loaded", "allocated_on")

    def __init__(self, host: torch.Tensor, device: torch.device, group: int, offloaded: torch.cuda.Event | None):
        self.host, self.device, self.group, self.offloaded = host, device, group, offloaded
        self.on_device: torch.Tensor | None = None
        self.loaded: torch.cuda.Event | None = None
        self.allocated_on: torch.cuda.Stream | None = None

    def __del__(self) -> None:
        # brought back and never handed over (the backward stopped): the allocator gives this memory to the next
        # allocation on the stream that allocated it as soon as it is freed, so that stream waits for the copy
        if self.on_device is not None and self.loaded is not None:
            self.allocated_on.wait_event(self.loaded)


class _Kept:
    """A saved tensor left where it is, with the group that saved it."""

    __slots__ = ("tensor", "group")

    def __init__(self, tensor: torch.Tensor, group: int):
        self.tensor, self.group = tensor, group


class ActivationOffload:
    """Saved-tensor hooks that keep a group's saved tensors of at least ``min_numel`` elements (parameters aside)
    in host memory between its forward and its backward. ``moved_bytes[g]``: what group g of the latest forward
    moved."""

    def __init__(self) -> None:
        self._groups: dict[int, list[_Offloaded]] = {}  # the groups' moved tensors not yet brought back
        self._reached: set[int] = set()  # the groups whose backward has begun
        self._group: int | None = None
        self._min_numel: float = float("inf")
        self._streams: dict[torch.device, tuple[torch.cuda.Stream, torch.cuda.Stream]] = {}
        self.moved_bytes: dict[int, int] = {}

    @contextlib.contextmanager
    def group(self, index: int, min_numel: float) -> Iterator[None]:
        """The forward of group ``index`` (counted from 0 in the order the forward runs them), its saved tensors of
        at least ``min_numel`` elements moved to the host; group 0 begins a new forward, forgetting what an earlier
        one left unclaimed. A group that moves nothing (``min_numel=inf``: the last, whose backward comes first)
        still brings the group before it back while its backward runs."""
        if index == 0:
            self._groups.clear()
            self._reached = set()
            self.moved_bytes = {}
        self._group, self._min_numel = index, min_numel
        self.moved_bytes.setdefault(index, 0)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._group = None

    def _pack(self, t: torch.Tensor) -> _Kept | _Offloaded:
        if t.numel() < self._min_numel or isinstance(t, nn.Parameter) or not t.is_contiguous():
            return _Kept(t, self._group)
        host = torch.empty(t.size(), dtype=t.dtype, pin_memory=t.is_cuda)
        offloaded = None
        if t.is_cuda:
            d2h, _ = self._streams_of(t.device)
            d2h.wait_stream(torch.cuda.current_stream(t.device))
            with torch.cuda.stream(d2h):
                host.copy_(t, non_blocking=True)
                offloaded = d2h.record_event()
            t.record_stream(d2h)  # its memory is not handed out again before the copy has read it
        else:
            host.copy_(t)
        entry = _Offloaded(host, t.device, self._group, offloaded)
        self._groups.setdefault(self._group, []).append(entry)
        self.moved_bytes[self._group] += t.numel() * t.element_size()
        return entry

    def _unpack(self, entry: _Kept | _Offloaded) -> torch.Tensor:
        if entry.group not in self._reached:  # the group the backward reaches next, brought back while this
            self._reached.add(entry.group)    # one's backward runs
            earlier = [g for g in self._groups if g < entry.group]
            for ahead in self._groups.pop(max(earlier)) if earlier else ():
                self._load(ahead)
        if isinstance(entry, _Kept):
            return entry.tensor
        self._groups.pop(entry.group, None)
        if entry.on_device is None:
            self._load(entry)
        if entry.loaded is not None:
            torch.cuda.current_stream(entry.device).wait_event(entry.loaded)
        # autograd holds it from here and frees it after the node's backward; a second unpack copies again
        on_device, entry.on_device, entry.loaded = entry.on_device, None, None
        return on_device

    def _load(self, entry: _Offloaded) -> None:
        if entry.on_device is not None:
            return
        host = entry.host
        # allocated on the compute stream, which uses and frees it; the copy waits for the work queued before it,
        # which may still be using this memory, and for the copy out
        on_device = torch.empty(host.size(), dtype=host.dtype, device=entry.device)
        if entry.device.type == "cuda":
            _, h2d = self._streams_of(entry.device)
            entry.allocated_on = torch.cuda.current_stream(entry.device)
            h2d.wait_stream(entry.allocated_on)
            h2d.wait_event(entry.offloaded)
            with torch.cuda.stream(h2d):
                on_device.copy_(host, non_blocking=True)
                entry.loaded = h2d.record_event()
        else:
            on_device.copy_(host)
        entry.on_device = on_device

    def _streams_of(self, device: torch.device) -> tuple[torch.cuda.Stream, torch.cuda.Stream]:
        if device not in self._streams:
            self._streams[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        return self._streams[device]


@torch.compiler.disable  # the hooks run between the compiled groups, never inside a graph
def run_groups_keeping_ffn(blocks: nn.ModuleList, x: torch.Tensor, group_blocks: int,
                           offload: ActivationOffload | None) -> torch.Tensor:
    """The blocks in checkpointed groups of ``group_blocks``, each compiled by itself, keeping attention's outputs
    and the feed-forward's products: on the GPU where ``offload`` is None, else what each group but the last saves
    that is as large as its input in host memory (``offload``'s hooks). FSDP2's blocks run one a group, through
    their hooks (:func:`check_compiled_groups`)."""
    ffn = blocks[0].ffn.w1.weight  # (d_ff, d_model): the products kept are those multiplying by its transpose
    ffn_shape = (ffn.shape[1], ffn.shape[0])  # (FSDP2's sharded weight gives the whole weight's shape)
    sharded = check_compiled_groups(blocks, group_blocks)
    groups = checkpointed_groups(len(blocks), group_blocks)
    for group, start in enumerate(range(0, len(blocks), group_blocks)):
        moved = x.numel() if group < groups - 1 else float("inf")
        with offload.group(group, moved) if offload is not None else contextlib.nullcontext():
            if sharded:
                x = _through_hooks(blocks[start], _compiled(ffn_shape, _block_forward), x)
            else:
                x = _compiled(ffn_shape, _group_forward)(blocks[start:start + group_blocks], x)
    return x


def check_compiled_groups(blocks: nn.ModuleList, group_blocks: int) -> bool:
    """Whether the blocks are FSDP2's units, each then a group of its own; a ValueError naming the problem where a
    group could not be compiled whole: blocks that are FSDP2's units taken several a group, or a hook that
    torch.compile does not trace (the weight gathers of our FSDP, FSDP2's inside a block) inside a group, which would
    break its graph and run it eagerly, keeping what it saves out of the offloading hooks' reach."""
    units = [isinstance(block, FSDPModule) for block in blocks]
    sharded = any(units)
    if sharded and (not all(units) or group_blocks != 1):
        raise ValueError(f"blocks sharded by FSDP2 run one a group, between its gathers: checkpoint each block by "
                         f"itself (checkpoint_blocks=1, got {group_blocks}), every block a unit of fully_shard "
                         f"({sum(units)} of {len(units)} are)")
    for i, block in enumerate(blocks):
        for name, module in block.named_modules(prefix=f"block {i}"):
            untraced = [hook for hook in (*module._forward_pre_hooks.values(), *module._forward_hooks.values())
                        if getattr(hook, "_torchdynamo_disable", False)]
            if untraced and not (sharded and module is block):
                raise ValueError(f"{name} has forward hooks that torch.compile does not trace (a sharding "
                                 f"wrapper's weight gathers, such as systems.fsdp's): inside a compiled group they "
                                 f"would run it eagerly, where nothing it keeps reaches the offloading hooks; shard "
                                 f"with FSDP2, each block a unit, or recompute another way")
    return sharded


def _through_hooks(block: nn.Module, forward, x: torch.Tensor) -> torch.Tensor:
    """``block(x)`` with ``forward(block, x)`` in place of its own forward for the call: its hooks (FSDP2's gathers
    before, its reductions set up after) run around it, eagerly."""
    block.forward = functools.partial(forward, block)
    try:
        return block(x)
    finally:
        del block.forward


@functools.cache
def _compiled(ffn_shape: tuple[int, int], run):
    """``run`` (a group's forward or a block's) checkpointed keeping what the policy keeps for a feed-forward of
    ``ffn_shape``, compiled once for the pair, not at every forward."""
    return torch.compile(functools.partial(_checkpointed, ffn_shape, run))


def _checkpointed(ffn_shape: tuple[int, int], run, *args) -> torch.Tensor:
    policy = functools.partial(keep_attention_and_ffn, ffn_shape)
    return checkpoint(run, *args, use_reentrant=False,
                      context_fn=functools.partial(create_selective_checkpoint_contexts, policy))


def _group_forward(blocks: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    return run_blocks(blocks, x, ())


def _block_forward(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return type(block).forward(block, x)  # the class's forward: the instance's is the compiled call of this

"""Launching the kernels: the entry points :func:`forward` and :func:`backward` of the autograd function, each
launch's tiles (fixed, or tuned once per shape key: :mod:`.tuning`), the replay of remembered launches per layout
(:mod:`.replay`), and the backward's choice of one pass or two (timed once per shape key, :data:`PASSES`).

A call does per launch only what the call needs: a layout seen before replays its compiled kernels; the first call
of a layout launches through Triton's JIT with the tiles and the ``EVEN_*`` flags computed here, past its autotuning
and heuristics wrappers. ``traced``: the same functions are the bodies of the custom ops ``torch.compile`` sees
(:mod:`.ops`), where nothing runs and the compiler emits the launches.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch
import triton
import triton.testing
from torch.utils._python_dispatch import _disable_current_modes

from systems.attention.flash_triton import kernels, keys, replay, tuning
from systems.triton_interpreter import INTERPRET, patch_interpreter
from systems.attention.flash_triton.layouts import (concrete, gradients, layout_key, outputs, real_like,
                                                   tma_ready)
from systems.attention.flash_triton.tiles import FlashConfig, Tiles, default_tiles

PASSES: dict[tuple, bool] = {}  # the backward's shape key -> whether one pass was the faster there

def _launch(kind: str, tiles: Tiles | None, autotune: bool, rows: int, batch_heads: int, args, meta,
            traced: bool = False) -> replay.Launch | None:
    """Launch one kernel over (tiles of ``rows``, batch*heads) with fixed, remembered or (first time) tuned tiles;
    the launch to replay, except after tuning (the next call of the shape key launches the chosen tiles).
    ``traced``: inside a custom op's body, which the compiler traces with stand-in tensors on which nothing runs:
    a shape key seen for the first time is tuned on real tensors of the same layout (:func:`real_like`), or, with
    symbolic sizes, takes the defaults; the launch is left to the compiler's code."""
    if tiles is None and autotune and not INTERPRET:
        key = keys.tune_key(kind, args[0].dtype, meta)
        tiles = tuning.CHOSEN.get(key)
        if tiles is None and traced and concrete(args):
            with _disable_current_modes():  # real tensors and launches, outside the compiler's tracing
                tuning.tune(kind, key, rows, batch_heads, tuple(real_like(a) for a in args), meta)
            tiles = tuning.CHOSEN[key]
        elif tiles is None and traced:
            tiles = default_tiles(kind, meta["BLOCK_D"] + meta["TAIL_D"], args[0].element_size())
        elif tiles is None:  # tune (or read the tuning from disk) and launch; remember the choice
            tuning.tune(kind, key, rows, batch_heads, args, meta)
            return None
    elif tiles is None:
        tiles = default_tiles(kind, meta["BLOCK_D"] + meta["TAIL_D"], args[0].element_size())
    if INTERPRET:
        patch_interpreter()  # the CPU interpreter needs two fixes (:mod:`systems.triton_interpreter`)
    flag, length, tile = tuning.EVEN[kind]
    block = {"BLOCK_Q": tiles.block_q, "BLOCK_K": tiles.block_k}
    grid = tuning.grid(triton.cdiv(rows, block[tuning.PROGRAM_TILE[kind]]), batch_heads)
    kwargs = meta | block | {flag: keys.even(meta[length], block[tile])}
    kernel = _launcher(kind, traced)[grid](*args, **kwargs, num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    return None if traced else replay.as_launch(kind, kernel, grid, args, kwargs)


def _launcher(kind: str, traced: bool):
    """The kernel as Triton's JIT launches it, or, in a custom op's traced body, wrapped so that the compiler sees
    the launch and emits it in its own code (``torch.library.wrap_triton``; called outside tracing, it launches)."""
    return torch.library.wrap_triton(tuning.JIT[kind]) if traced else tuning.JIT[kind]


def launch_forward(q, k, v, o, L, is_causal: bool, cfg: FlashConfig, traced: bool = False) -> replay.Launch | None:
    """The forward kernel alone through Triton's JIT, writing into O and L (also timed on its own, for the per-call
    cost); the launch to replay."""
    B, H, n_q, d = q.shape
    args = (q, k, v, o, L, *q.stride(), *k.stride(), *v.stride(), *o.stride())
    meta = keys.meta(q, k, is_causal, cfg)
    meta |= dict(qk_scale=1.0 / math.sqrt(meta["HEAD_DIM"]) * kernels.LOG2E.value, TMA=_use_tma(bool(cfg.tma), k, v),
                 HEAD_GROUP=keys.heads_per_group(cfg, k, B * H))
    return _launch("fwd", cfg.fwd, cfg.autotune, n_q, B * H, args, meta, traced)


def forward(q, k, v, is_causal: bool, cfg: FlashConfig, traced: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, H, Nq, d), k, v (B, H, Nk, d), any strides -> O and L as :func:`outputs` lays them out.
    ``traced``: the body of the custom op (see :func:`_launch`)."""
    o, L = outputs(q)
    replayable = not traced and replay.replaying()
    key = ("fwd", is_causal, cfg, *layout_key(q, k, v)) if replayable else None
    plan = replay.PLANS.get(key)
    if plan is not None:
        plan[0](replay.current_stream(q.device), q, k, v, o, L)
        return o, L
    launched = launch_forward(q, k, v, o, L, is_causal, cfg, traced)
    if replayable and launched is not None:
        replay.remember(key, (launched,))
    return o, L


def backward(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig, traced: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) as :func:`gradients` lays them out, from the 4-d q, k, v, O, dO (any strides, the stride-0
    gradient of ``o.sum()`` included) and L (B, H, Nq) of the forward. ``traced``: the body of the custom op."""
    one_pass = one_pass_backward(cfg, q, k, v, o, do, L, is_causal, traced)
    buffers = backward_buffers(q, k, v, one_pass, cfg)
    replayable = not traced and replay.replaying()
    key = _backward_key(q, k, v, o, do, L, is_causal, cfg, one_pass) if replayable else None
    plan = replay.PLANS.get(key)
    if plan is not None:
        stream = replay.current_stream(q.device)
        named = dict(q=q, k=k, v=v, o=o, do=do, L=L, **buffers)
        for launched in plan:
            launched(stream, *(named[name] for name in KERNEL_TENSORS[launched.kind]))
    else:
        launched = _launch_backward(q, k, v, o, do, L, buffers, is_causal, cfg, one_pass, traced)
        if replayable and None not in launched:
            replay.remember(key, launched)
    return finish_backward(buffers, one_pass)


# Each kernel's tensor arguments, in order (the launches below pass them so, and so do replays).
KERNEL_TENSORS = {"fwd": ("q", "k", "v", "o", "L"), "pre": ("o", "do", "delta", "dq_acc"),
                  "dkdv": ("q", "k", "v", "do", "L", "delta", "dk", "dv", "dq_acc"),
                  "dq": ("q", "k", "v", "do", "L", "delta", "dq")}


def backward_buffers(q, k, v, one_pass: bool, cfg: FlashConfig) -> dict[str, torch.Tensor]:
    """What a backward allocates: delta = rowsum(dO ∘ O) (B, H, Nq) fp32, the fp32 dQ accumulator, dQ, dK, dV.
    The accumulator sums dQ over key tiles in the one-pass backward, rows as wide as the kernels' column blocks
    (:func:`keys.row_width`; 16-byte aligned for the copy engine; the preprocessing kernel writes its zeros). Two
    passes need none: dK stands in for the unused pointer (autotuning zeroes it between its timing runs, and the
    kernel then writes all of it)."""
    B, H, n_q, d = q.shape
    dq, dk, dv = gradients(q, k, v)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    width = keys.row_width(d, cfg.split_head_dim)
    dq_acc = torch.empty((B, H, n_q, width), dtype=torch.float32, device=q.device) if one_pass else dk
    return dict(delta=delta, dq_acc=dq_acc, dq=dq, dk=dk, dv=dv)


def finish_backward(buffers: dict[str, torch.Tensor], one_pass: bool
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq = buffers["dq"]
    return (dq.copy_(buffers["dq_acc"][..., :dq.shape[-1]]) if one_pass else dq), buffers["dk"], buffers["dv"]


def first_backward(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig
                   ) -> tuple[tuple[torch.Tensor, ...], tuple[replay.Launch | None, ...], dict, bool]:
    """A backward through Triton's JIT that also returns what the C++ host path remembers of it (:mod:`.host`):
    (dQ, dK, dV), its launches (None where tuning ran instead), its buffers and whether it took one pass."""
    one_pass = one_pass_backward(cfg, q, k, v, o, do, L, is_causal)
    buffers = backward_buffers(q, k, v, one_pass, cfg)
    launched = _launch_backward(q, k, v, o, do, L, buffers, is_causal, cfg, one_pass, traced=False)
    return finish_backward(buffers, one_pass), launched, buffers, one_pass


def _backward_key(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig, one_pass: bool) -> tuple:
    return ("bwd", is_causal, cfg, one_pass, *layout_key(q, k, v, o, do, L))


def backward_plan(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig) -> tuple[replay.Launch, ...] | None:
    """The launches (preprocessing, dK/dV, dQ unless one pass) a backward of this layout replays after its first
    call: what each compiled kernel holds (registers, spills, shared memory)."""
    one_pass = one_pass_backward(cfg, q, k, v, o, do, L, is_causal)
    return replay.PLANS.get(_backward_key(q, k, v, o, do, L, is_causal, cfg, one_pass))


def _launch_backward(q, k, v, o, do, L, buffers: dict[str, torch.Tensor], is_causal: bool, cfg: FlashConfig,
                     one_pass: bool, traced: bool) -> tuple[replay.Launch | None, ...]:
    """The backward's kernels through Triton's JIT: preprocessing, dK/dV (adding dQ up in ``one_pass``), and the dQ
    pass unless ``one_pass``; the launches to replay."""
    delta, dq_acc, dq, dk, dv = (buffers[name] for name in ("delta", "dq_acc", "dq", "dk", "dv"))
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    meta = keys.meta(q, k, is_causal, cfg)
    d = meta["HEAD_DIM"]
    scale = 1.0 / math.sqrt(d)
    block_rows = 64
    if INTERPRET:
        patch_interpreter()  # the CPU interpreter needs two fixes (:mod:`systems.triton_interpreter`)
    grid = (triton.cdiv(n_q, block_rows), B * H)
    pre_args = (o, do, delta, dq_acc, *o.stride(), *do.stride(), H, n_q, scale)
    pre_kwargs = dict(HEAD_DIM=d, BLOCK_D=keys.block_d(d), BLOCK_Q=block_rows, ZERO_DQ=one_pass,
                      DQ_WIDTH=dq_acc.shape[-1] if one_pass else 0)
    kernel = _launcher("pre", traced)[grid](*pre_args, **pre_kwargs)
    launched = [None if traced else replay.as_launch("pre", kernel, grid, pre_args, pre_kwargs)]
    meta |= dict(qk_scale=scale * kernels.LOG2E.value, scale=scale)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    tma = one_pass if cfg.tma is None else cfg.tma  # by default the single pass loads and reduces with TMA
    reduce_tma = one_pass and not INTERPRET and _use_tma(tma, dq_acc)  # the interpreter has no bulk reductions
    launched.append(_launch("dkdv", cfg.dkdv, cfg.autotune, n_k, B * H,
                            (q, k, v, do, L, delta, dk, dv, dq_acc, *strides, *dk.stride()),
                            meta | dict(UNMASKED_FIRST=cfg.unmasked_first, TMA=_use_tma(tma, q, do),
                                        ATOMIC_DQ=one_pass, REDUCE_TMA=reduce_tma,
                                        HEAD_GROUP=keys.heads_per_group(cfg, q, B * H)),
                            traced))
    if not one_pass:
        launched.append(_launch("dq", cfg.dq, cfg.autotune, n_q, B * H,
                                (q, k, v, do, L, delta, dq, *strides, *dq.stride()),
                                meta | dict(TMA=_use_tma(tma, k, v), HEAD_GROUP=keys.heads_per_group(cfg, k, B * H)),
                                traced))
    return tuple(launched)


def _use_tma(tma: bool, *streamed: torch.Tensor) -> bool:
    """Whether a kernel asked to use TMA (``tma``) can for these tensors; if so, the descriptors get their
    scratch memory."""
    use = tma and tma_ready(*streamed)
    if use and not INTERPRET:
        triton.set_allocator(replay.descriptor_scratch)
    return use


def one_pass_eligible(cfg: FlashConfig, q: torch.Tensor) -> bool:
    """Whether the backward may add dQ up in the dK/dV pass: ``cfg.atomic_dq`` if set, else where one pass fits."""
    if cfg.atomic_dq is not None:
        return cfg.atomic_dq
    # One pass fits in registers with 16-bit operands and head dims up to 64 (the log has the measurements; at 80,
    # split as 64 + 16, it fits too and was slower than two passes at every shape timed). Not in the interpreter (no
    # bulk reductions), nor in deterministic mode (its additions land in any order).
    return (not INTERPRET and q.element_size() == 2 and q.shape[-1] <= 64
            and not torch.are_deterministic_algorithms_enabled())


def one_pass_backward(cfg: FlashConfig, q, k, v, o, do, L, is_causal: bool, traced: bool = False) -> bool:
    """Whether this backward adds dQ up in the dK/dV pass. Where one pass may run (:func:`one_pass_eligible`) and
    ``cfg`` leaves it open with tiles tuned, one pass or two, whichever was faster when the shape key was first met
    (timed on that call's tensors, remembered in :data:`PASSES`); which wins depends on the grid as well as the
    lengths, so the key holds batch×heads' bucket besides the tiles' key. ``traced``: in the custom op's body, timed
    on real tensors of the traced layout (symbolic sizes take one pass)."""
    if not one_pass_eligible(cfg, q):
        return False
    if cfg.atomic_dq is not None or not cfg.autotune:
        return True
    key = keys.pass_key(q, k, is_causal, cfg)
    if key not in PASSES:
        args = (q, k, v, o, do, L)
        if traced and not concrete(args):
            return True
        with _disable_current_modes():  # real launches, seen by no tracing or counting mode around the call
            PASSES[key] = _one_pass_faster(*(tuple(map(real_like, args)) if traced else args), is_causal, cfg)
    return PASSES[key]


def _one_pass_faster(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig) -> bool:
    """The backward timed with one pass and with two on these tensors (each tunes its tiles at its first call,
    before the timed ones)."""
    ms = {one: triton.testing.do_bench(functools.partial(backward, q, k, v, o, do, L, is_causal,
                                                         replace(cfg, atomic_dq=one)), return_mode="median")
          for one in (True, False)}
    return ms[True] <= ms[False]



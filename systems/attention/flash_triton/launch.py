"""Launching the kernels: tiles chosen once per shape key, launches remembered per layout, and the custom ops
torch.compile sees.

A call does per launch only what the call needs. The tiles are decided once per shape key (autotuned on the GPU
the first time a key is seen, then remembered in :data:`CHOSEN`); the shape key is what changes the best tiles:
the head dim, causality, dtype, the switches, and the sequence lengths rounded to a power of two (capped), so a
new length in the same bucket does not tune again. The first call of a layout (shapes, strides, dtype, device,
16-byte alignment of each tensor, causality and switches) launches through Triton's JIT with the tiles and the
``EVEN_*`` flags computed here, past its autotuning and heuristics wrappers, and keeps each compiled kernel with
its grid and its non-tensor arguments (:class:`Launch`, in :data:`PLANS`). Every later call of that layout hands
its tensors straight to the compiled kernels' launcher: Triton's per-call argument binding, specialisation and
cache look-up (most of a launch's host time) happen once per layout. The layout key holds every value Triton
specialises a kernel on, so a remembered launch is the one Triton itself would have chosen.

:func:`forward` and :func:`backward` are the two entry points of the autograd function in eager mode. Each is
also a custom op (:data:`flash_fwd`, :data:`flash_bwd`; configuration encoded as a list of ints) for
``torch.compile``: on a GPU a ``torch.library.triton_op``, whose body the compiler traces with stand-in tensors, its
launches wrapped (``wrap_triton``) so that the compiler emits them in its own code with the tiles chosen here; in
Triton's interpreter an opaque custom op.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
import triton
import triton.testing
from torch.utils._python_dispatch import _disable_current_modes
from triton import knobs
from triton.runtime import driver

from systems.attention.flash_triton import kernels, keys
from systems.attention.flash_triton.interpreter import patch_index
from systems.attention.flash_triton.layouts import (concrete, gradients, layout_key, outputs, real_like,
                                                   tma_ready)
from systems.attention.flash_triton.tiles import CANDIDATES, FlashConfig, Tiles, default_tiles, fitting

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
JIT = {"fwd": kernels.flash_fwd_kernel, "dkdv": kernels.flash_bwd_dkdv_kernel, "dq": kernels.flash_bwd_dq_kernel,
       "pre": kernels.flash_bwd_preprocess_kernel}
# kernel -> (its EVEN flag, the length it tests, the tile it divides by), and the tile its programs own
EVEN = {"fwd": ("EVEN_K", "N_KEYS", "BLOCK_K"), "dkdv": ("EVEN_Q", "N_QUERIES", "BLOCK_Q"),
        "dq": ("EVEN_K", "N_KEYS", "BLOCK_K")}
PROGRAM_TILE = {"fwd": "BLOCK_Q", "dkdv": "BLOCK_K", "dq": "BLOCK_Q"}
CHOSEN: dict[tuple, Tiles] = {}  # shape key -> the tiles autotuning chose for it
PASSES: dict[tuple, bool] = {}  # the backward's shape key -> whether one pass was the faster there
PLANS: dict[tuple, tuple[Launch, ...]] = {}  # layout key -> the launches of a call, in order
# Layouts differ by exact lengths: a run with ever-new sequence lengths would keep adding entries. Past this many
# the remembered launches are dropped and remembered again as calls come (each entry is small; Triton keeps the
# compiled kernels).
MAX_PLANS = 4096


def _tuner(kind: str):
    """The kernel under triton.autotune, for the first launch of a shape key: candidates pruned by shared memory,
    keyed on what changes the best tiles. Its EVEN flag follows each candidate's tile (a heuristic)."""
    flag, length, tile = EVEN[kind]

    def prune(configs, named_args, **kwargs):
        fits = fitting(kind, [_to_tiles(c) for c in configs], kwargs["BLOCK_D"], named_args["Q"].element_size())
        return [c for c in configs if _to_tiles(c) in fits]

    configs = [triton.Config({"BLOCK_Q": t.block_q, "BLOCK_K": t.block_k}, num_warps=t.num_warps,
                             num_stages=t.num_stages) for t in CANDIDATES[kind]]
    even = triton.heuristics({flag: lambda a: a[length] % a[tile] == 0})(JIT[kind])
    # The dtype of every tensor argument joins the key automatically. cache_results keeps the choice on disk
    # (in Triton's cache directory), so only the first run on a machine pays for tuning. Timing a candidate runs
    # the kernel: the dQ it adds up must start from zero again each time.
    return triton.autotune(configs=configs, key=list(keys.TUNE_KEY), prune_configs_by={"early_config_prune": prune},
                           reset_to_zero=["DQ_ACC"] if kind == "dkdv" else None, cache_results=True)(even)


TUNERS = {kind: _tuner(kind) for kind in EVEN}


@dataclass(frozen=True)
class Launch:
    """A compiled kernel with its grid and the arguments after its tensors, all fixed by the layout key: calling it
    with a later call's tensors launches the kernel through the compiled launcher alone."""

    run: Callable
    function: Any
    packed_metadata: Any
    grid: tuple[int, int]
    tail: tuple
    scratch: bool  # the kernel builds TMA descriptors in global scratch memory, which Triton's allocator provides
    registers: int  # per thread, as compiled (ptxas)
    spills: int  # registers spilled to local memory
    shared_bytes: int  # shared memory per program

    def __call__(self, stream: int, *tensors: torch.Tensor) -> None:
        if self.scratch:
            triton.set_allocator(_descriptor_scratch)  # per thread: the backward runs on autograd's device thread
        self.run(self.grid[0], self.grid[1], 1, stream, self.function, self.packed_metadata, None, None, None,
                 *tensors, *self.tail)


def _as_launch(kind: str, kernel, grid: tuple[int, int], args: tuple, kwargs: dict) -> Launch | None:
    """The launch Triton just made, kept for replay (None in the interpreter, which compiles nothing)."""
    if INTERPRET or kernel is None:
        return None
    jit = JIT[kind]
    n_tensors = next(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
    named = dict(zip(jit.arg_names, args)) | kwargs
    return Launch(kernel.run, kernel.function, kernel.packed_metadata, grid,
                  tuple(named[name] for name in jit.arg_names[n_tensors:]), kernel.metadata.global_scratch_size > 0,
                  kernel.n_regs, kernel.n_spills, kernel.metadata.shared)


def _remember(key: tuple, launches: tuple[Launch, ...]) -> None:
    if len(PLANS) >= MAX_PLANS:
        PLANS.clear()
    PLANS[key] = launches


def _current_stream(device: torch.device) -> int:
    return driver.active.get_current_stream(device.index)


def _replaying() -> bool:
    """Remembered launches skip Triton's launch hooks (a profiler such as Proton registers them): with hooks, every
    launch goes through the JIT."""
    return not INTERPRET and not knobs.runtime.launch_enter_hook.calls


def _to_tiles(c: triton.Config) -> Tiles:
    return Tiles(c.kwargs["BLOCK_Q"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages)


def _launch(kind: str, tiles: Tiles | None, autotune: bool, rows: int, batch_heads: int, args, meta,
            traced: bool = False) -> Launch | None:
    """Launch one kernel over (tiles of ``rows``, batch*heads) with fixed, remembered or (first time) tuned tiles;
    the launch to replay, except after tuning (the next call of the shape key launches the chosen tiles).
    ``traced``: inside a custom op's body, which the compiler traces with stand-in tensors on which nothing runs:
    a shape key seen for the first time is tuned on real tensors of the same layout (:func:`real_like`), or, with
    symbolic sizes, takes the defaults; the launch is left to the compiler's code."""
    if tiles is None and autotune and not INTERPRET:
        key = keys.tune_key(kind, args[0].dtype, meta)
        tiles = CHOSEN.get(key)
        if tiles is None and traced and concrete(args):
            with _disable_current_modes():  # real tensors and launches, outside the compiler's tracing
                _tune(kind, key, rows, batch_heads, tuple(real_like(a) for a in args), meta)
            tiles = CHOSEN[key]
        elif tiles is None and traced:
            tiles = default_tiles(kind, meta["BLOCK_D"], args[0].element_size())
        elif tiles is None:  # tune (or read the tuning from disk) and launch; remember the choice
            _tune(kind, key, rows, batch_heads, args, meta)
            return None
    elif tiles is None:
        tiles = default_tiles(kind, meta["BLOCK_D"], args[0].element_size())
    if INTERPRET:
        patch_index()  # the CPU interpreter's loops need one fix (:mod:`.interpreter`)
    flag, length, tile = EVEN[kind]
    block = {"BLOCK_Q": tiles.block_q, "BLOCK_K": tiles.block_k}
    grid = _grid(triton.cdiv(rows, block[PROGRAM_TILE[kind]]), batch_heads)
    kwargs = meta | block | {flag: keys.even(meta[length], block[tile])}
    kernel = _launcher(kind, traced)[grid](*args, **kwargs, num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    return None if traced else _as_launch(kind, kernel, grid, args, kwargs)


def _tune(kind: str, key: tuple, rows: int, batch_heads: int, args, meta) -> None:
    """Time the candidate tiles on ``args`` (or read the tuning from disk) and remember the choice for ``key``."""
    tuner = TUNERS[kind]
    tuner[lambda m: _grid(triton.cdiv(rows, m[PROGRAM_TILE[kind]]), batch_heads)](*args, **meta)
    CHOSEN[key] = _to_tiles(tuner.best_config)


def _grid(tiles: int, batch_heads: int) -> tuple[int, int]:
    """One program per tile and (batch, head), in one dimension: the kernels number them in head groups
    (``kernels._tile_and_head``)."""
    return tiles * batch_heads, 1


def _launcher(kind: str, traced: bool):
    """The kernel as Triton's JIT launches it, or, in a custom op's traced body, wrapped so that the compiler sees
    the launch and emits it in its own code (``torch.library.wrap_triton``; called outside tracing, it launches)."""
    return torch.library.wrap_triton(JIT[kind]) if traced else JIT[kind]


def launch_forward(q, k, v, o, L, is_causal: bool, cfg: FlashConfig, traced: bool = False) -> Launch | None:
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
    replay = not traced and _replaying()
    key = ("fwd", is_causal, cfg, *layout_key(q, k, v)) if replay else None
    plan = PLANS.get(key)
    if plan is not None:
        plan[0](_current_stream(q.device), q, k, v, o, L)
        return o, L
    launched = launch_forward(q, k, v, o, L, is_causal, cfg, traced)
    if replay and launched is not None:
        _remember(key, (launched,))
    return o, L


def backward(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig, traced: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) as :func:`gradients` lays them out, from the 4-d q, k, v, O, dO (any strides, the stride-0
    gradient of ``o.sum()`` included) and L (B, H, Nq) of the forward. ``traced``: the body of the custom op."""
    B, H, n_q, d = q.shape
    one_pass = one_pass_backward(cfg, q, k, v, o, do, L, is_causal, traced)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    dq, dk, dv = gradients(q, k, v)
    # dQ summed over key tiles in fp32, rows padded to BLOCK_D (16-byte aligned for the copy engine); the
    # preprocessing kernel writes its zeros. Two passes need no accumulator: dK stands in for the unused pointer
    # (autotuning zeroes it between its timing runs, and the kernel then writes all of it).
    dq_acc = torch.empty((B, H, n_q, keys.block_d(d)), dtype=torch.float32, device=q.device) if one_pass else dk
    replay = not traced and _replaying()
    key = _backward_key(q, k, v, o, do, L, is_causal, cfg, one_pass) if replay else None
    plan = PLANS.get(key)
    if plan is not None:
        stream = _current_stream(q.device)
        plan[0](stream, o, do, delta, dq_acc)
        plan[1](stream, q, k, v, do, L, delta, dk, dv, dq_acc)
        if not one_pass:
            plan[2](stream, q, k, v, do, L, delta, dq)
    else:
        launched = _launch_backward(q, k, v, o, do, L, delta, dk, dv, dq_acc, dq, is_causal, cfg, one_pass, traced)
        if replay and None not in launched:
            _remember(key, launched)
    return (dq.copy_(dq_acc[..., :d]) if one_pass else dq), dk, dv


def _backward_key(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig, one_pass: bool) -> tuple:
    return ("bwd", is_causal, cfg, one_pass, *layout_key(q, k, v, o, do, L))


def backward_plan(q, k, v, o, do, L, is_causal: bool, cfg: FlashConfig) -> tuple[Launch, ...] | None:
    """The launches (preprocessing, dK/dV, dQ unless one pass) a backward of this layout replays after its first
    call: what each compiled kernel holds (registers, spills, shared memory)."""
    one_pass = one_pass_backward(cfg, q, k, v, o, do, L, is_causal)
    return PLANS.get(_backward_key(q, k, v, o, do, L, is_causal, cfg, one_pass))


def _launch_backward(q, k, v, o, do, L, delta, dk, dv, dq_acc, dq, is_causal: bool, cfg: FlashConfig,
                     one_pass: bool, traced: bool) -> tuple[Launch | None, ...]:
    """The backward's kernels through Triton's JIT: preprocessing, dK/dV (adding dQ up in ``one_pass``), and the dQ
    pass unless ``one_pass``; the launches to replay."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    meta = keys.meta(q, k, is_causal, cfg)
    d = meta["HEAD_DIM"]
    scale = 1.0 / math.sqrt(d)
    block_rows = 64
    if INTERPRET:
        patch_index()  # the CPU interpreter's loops need one fix (:mod:`.interpreter`)
    grid = (triton.cdiv(n_q, block_rows), B * H)
    pre_args = (o, do, delta, dq_acc, *o.stride(), *do.stride(), H, n_q, scale)
    pre_kwargs = dict(HEAD_DIM=d, BLOCK_D=meta["BLOCK_D"], BLOCK_Q=block_rows, ZERO_DQ=one_pass)
    kernel = _launcher("pre", traced)[grid](*pre_args, **pre_kwargs)
    launched = [None if traced else _as_launch("pre", kernel, grid, pre_args, pre_kwargs)]
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
        triton.set_allocator(_descriptor_scratch)
    return use


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global memory in which the kernels build their tensor descriptors (Triton asks for it at launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def one_pass_eligible(cfg: FlashConfig, q: torch.Tensor) -> bool:
    """Whether the backward may add dQ up in the dK/dV pass: ``cfg.atomic_dq`` if set, else where one pass fits."""
    if cfg.atomic_dq is not None:
        return cfg.atomic_dq
    # One pass fits in registers with 16-bit operands and head dims up to 64 (the log has the measurements). Not in
    # the interpreter (no bulk reductions), nor in deterministic mode (its additions land in any order).
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


def _op(fn: Callable, fake: Callable):
    """``fn`` registered as the custom op ``systems::<its name>``. On a GPU a ``torch.library.triton_op``: the
    compiler traces its body (``traced=True``) and launches the kernels from its own generated code, so a compiled
    model runs no Python of ours per call and CUDA graphs capture the launches. Triton's interpreter has no compiled
    kernels for the compiler to launch: there the op is opaque, with ``fake`` giving its outputs' shapes."""
    name = f"systems::{fn.__name__}"
    if INTERPRET:
        op = torch.library.custom_op(name, mutates_args=())(fn)
        op.register_fake(fake)
        return op
    return torch.library.triton_op(name, mutates_args=())(fn)


def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, config: list[int]
              ) -> tuple[torch.Tensor, torch.Tensor]:
    return forward(q, k, v, is_causal, FlashConfig.decode(config), traced=not INTERPRET)


def flash_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, L: torch.Tensor,
              is_causal: bool, config: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward(q, k, v, o, do, L, is_causal, FlashConfig.decode(config), traced=not INTERPRET)


flash_fwd = _op(flash_fwd, lambda q, k, v, is_causal, config: outputs(q))
flash_bwd = _op(flash_bwd, lambda q, k, v, o, do, L, is_causal, config: gradients(q, k, v))


def autotune_report() -> dict[str, dict]:
    """Per kernel: the tiles autotuning chose for each key so far, and the seconds its last tuning took."""
    return {kind: {"chosen": {str(key): str(_to_tiles(c)) for key, c in tuner.cache.items()},
                   "tuning_s": getattr(tuner, "bench_time", None)}
            for kind, tuner in TUNERS.items()}

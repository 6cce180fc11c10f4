"""FlashAttention written for Hopper (sm_90a) in Gluon, Triton's lower-level language: the forward and the backward,
the first steps of issue 29, kept for their ablation.

Status: correct (the float64 oracle on the H100: any lengths, Nq ≠ Nk, both layouts, head dims 64 and 128, bf16 and
fp16), and not yet faster than the portable Triton kernels or cuDNN at the shapes chapter 07 measures
(``book/log.md`` has the runs). Nothing registers or chooses them: the Hopper forward registered as ``flash_hopper``
is the one written in CUDA C++ (:mod:`systems.attention.flash_cpp.hopper`), where warp specialisation keeps
``wgmma`` asynchronous. What is here is the machinery the next steps
build on (copy-engine descriptors per (batch, head), shared-memory rings and their barriers, asynchronous WGMMA with
P and dS from registers, S and dP issued together with the exponentials under dP, a producer partition and two
consumer warpgroups) and the switches whose effect the log records:

    from systems.attention.flash_hopper import VARIANTS, backward_hopper, forward_hopper
    o, L = forward_hopper(q, k, v, is_causal=True, variant=VARIANTS["warp-specialised"])   # (B, H, N, d) bf16
    dq, dk, dv = backward_hopper(q, k, v, o, do, L, is_causal=True)

``python -m systems.bench.hopper`` times them beside SDPA's back ends and the Triton kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from systems.attention._checks import as_4d, check_attention_inputs, check_is_causal
from systems.attention.flash_hopper import backward_kernels, kernels
from systems.attention.flash_triton import backward_kernels as triton_backward
from systems.attention.flash_triton.layouts import gradients, outputs

HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Variant:
    """How the forward runs: warp-specialised or not; with the previous tile's PV overlapping this tile's softmax
    (only without warp specialisation); the key tile; the depth of the shared-memory ring; the registers a consumer
    warpgroup asks for (warp-specialised only)."""

    warp_specialised: bool = False
    overlap: bool = False
    block_n: int = 128
    stages: int = 2
    consumer_registers: int = 240


VARIANTS = {
    "plain": Variant(stages=3),
    "plain, 64-key tiles": Variant(block_n=64),
    "overlapped": Variant(overlap=True, stages=3),
    "overlapped, 64-key tiles": Variant(overlap=True, block_n=64, stages=3),
    "warp-specialised": Variant(warp_specialised=True, stages=2),
    "warp-specialised, 3 stages": Variant(warp_specialised=True, stages=3),
    "warp-specialised, 64-key tiles": Variant(warp_specialised=True, block_n=64, stages=3),
}


def unsupported(q: torch.Tensor) -> str | None:
    """Why these inputs cannot run here (the Triton kernel then serves them), or None."""
    if q.device.type != "cuda" or torch.cuda.get_device_capability(q.device) != (9, 0):
        return "needs a Hopper GPU (sm_90)"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"takes bf16 or fp16, not {q.dtype}"
    if q.shape[-1] not in HEAD_DIMS:
        return f"takes head dims {HEAD_DIMS}, not {q.shape[-1]}"
    return None


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory in which the kernels build their copy-engine descriptors."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _checked(q, k, v, is_causal, *more: tuple[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The 4-d views of q, k, v (and of ``more``), after the checks every kernel here needs."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    q4, k4, v4 = as_4d(q), as_4d(k), as_4d(v)
    why = unsupported(q4)
    if why:
        raise ValueError(f"the Hopper kernels {why}")
    named = (("q", q4), ("k", k4), ("v", v4), *((name, as_4d(t)) for name, t in more))
    for name, t in named:  # the copy engine's rules for a descriptor
        if t.stride(-1) != 1 or any(s * t.element_size() % 16 for s in t.stride()[:-1]) or t.data_ptr() % 16:
            raise ValueError(f"{name} needs a contiguous head dim and 16-byte aligned strides for the copy engine")
    return tuple(t for _, t in named)


def forward_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                   variant: Variant = VARIANTS["plain"]) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> O like q's shape (laid out as (B, Nq, H, d) memory) and L
    (B, [H,] Nq) fp32, natural log; no autograd."""
    q4, k4, v4 = _checked(q, k, v, is_causal)
    B, H, n_q, d = q4.shape
    o, L = outputs(q4)
    triton.set_allocator(_scratch)
    args = (q4, k4, v4, o, L, *q4.stride()[:3], *k4.stride()[:3], *v4.stride()[:3], *o.stride()[:3], H, n_q,
            k4.shape[2], 1.4426950408889634 / math.sqrt(d))
    grid = (triton.cdiv(n_q, 2 * kernels.ROWS.value) * B * H,)
    common = dict(HEAD_DIM=d, BLOCK_N=variant.block_n, STAGES=variant.stages, CAUSAL=is_causal)
    if variant.warp_specialised:
        kernels.fwd_ws_kernel[grid](*args, **common, CONSUMER_REGS=variant.consumer_registers, num_warps=4)
    else:
        kernels.fwd_kernel[grid](*args, **common, OVERLAP=variant.overlap, num_warps=8)
    return o.view(q.shape), L.view(q.shape[:-1])


@dataclass(frozen=True)
class BackwardTiles:
    """The backward's tiles: the query tile the dK/dV kernel walks, the key tile the dQ kernel walks (each program
    owns 128 rows of the other), and the depth of their rings."""

    block_m: int
    block_n: int
    stages: int = 3


# by head dim: the fastest on the H100 of the tiles that ptxas compiles without spilling (the log has the runs)
BACKWARD_TILES = {64: BackwardTiles(block_m=64, block_n=128, stages=2), 128: BackwardTiles(block_m=32, block_n=64)}


def backward_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
                    L: torch.Tensor, is_causal: bool = False, tiles: BackwardTiles | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) from the forward's q, k, v, O, its L (B, [H,] Nq) and dO; dQ laid out as q, dK and dV as v."""
    q4, k4, v4, o4, do4 = _checked(q, k, v, is_causal, ("o", o), ("dO", do))
    B, H, n_q, d = q4.shape
    n_k = k4.shape[2]
    tiles = tiles or BACKWARD_TILES[d]
    dq, dk, dv = gradients(q4, k4, v4)  # in the layouts of q and v, which the checks found fit for the copy engine
    scale = 1.0 / math.sqrt(d)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    pre_rows = 64
    triton_backward.flash_bwd_preprocess_kernel[(triton.cdiv(n_q, pre_rows), B * H)](
        o4, do4, delta, delta, *o4.stride(), *do4.stride(), H, n_q, scale, HEAD_DIM=d, BLOCK_D=d, BLOCK_Q=pre_rows,
        ZERO_DQ=False, DQ_WIDTH=0)
    triton.set_allocator(_scratch)
    L4 = L.reshape(B, H, n_q)
    inputs = (q4, k4, v4, do4, L4, delta)
    strides = (*q4.stride()[:3], *k4.stride()[:3], *v4.stride()[:3], *do4.stride()[:3])
    common = dict(HEAD_DIM=d, STAGES=tiles.stages, CAUSAL=is_causal, num_warps=backward_kernels.NUM_WARPS.value)
    rows = backward_kernels.BLOCK_ROWS.value
    backward_kernels.bwd_dkdv_kernel[(triton.cdiv(n_k, rows) * B * H,)](
        *inputs, dk, dv, *strides, *dk.stride()[:3], H, n_q, n_k, scale, BLOCK_M=tiles.block_m, **common)
    backward_kernels.bwd_dq_kernel[(triton.cdiv(n_q, rows) * B * H,)](
        *inputs, dq, *strides, *dq.stride()[:3], H, n_q, n_k, scale, BLOCK_N=tiles.block_n, **common)
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)

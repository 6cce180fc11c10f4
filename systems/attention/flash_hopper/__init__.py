"""FlashAttention's forward written for Hopper (sm_90a) in Gluon: the first step of issue 29, kept for its ablation.

Status: correct (the float64 oracle, any lengths, both layouts, head dims 64 and 128, bf16 and fp16), and not yet
faster than the portable Triton kernel or cuDNN's forward at the shapes chapter 07 measures (``book/log.md``, entry
of 2026-11-24, has the run). It is not registered with :mod:`systems.attention` and nothing chooses it; the
backward stays the Triton kernel's. What is here is the machinery the next steps build on (copy-engine descriptors
per (batch, head), the shared-memory ring and its barriers, asynchronous WGMMA with P from registers, a producer
partition and two consumer warpgroups) and the switches whose effect the log records:

    from systems.attention.flash_hopper import VARIANTS, forward_hopper
    o, L = forward_hopper(q, k, v, is_causal=True, variant=VARIANTS["warp-specialised"])   # (B, H, N, d) bf16

``python -m systems.bench.hopper_forward`` times every variant beside SDPA's back ends and the Triton kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from systems.attention._checks import as_4d, check_attention_inputs, check_is_causal
from systems.attention.flash_hopper import kernels
from systems.attention.flash_triton.layouts import outputs

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


def forward_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                   variant: Variant = VARIANTS["plain"]) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> O like q's shape (laid out as (B, Nq, H, d) memory) and L
    (B, [H,] Nq) fp32, natural log; no autograd."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    q4, k4, v4 = as_4d(q), as_4d(k), as_4d(v)
    why = unsupported(q4)
    if why:
        raise ValueError(f"the Hopper forward {why}")
    for name, t in (("q", q4), ("k", k4), ("v", v4)):  # the copy engine's rules for a descriptor
        if t.stride(-1) != 1 or any(s * t.element_size() % 16 for s in t.stride()[:-1]) or t.data_ptr() % 16:
            raise ValueError(f"{name} needs a contiguous head dim and 16-byte aligned strides for the copy engine")
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

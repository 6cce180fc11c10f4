"""How the kernels' tensors are laid out: what a call allocates (the output in the layout a model reads it in, the
gradients in the layouts of the inputs), what a remembered launch depends on (:func:`layout_key`), whether the copy
engine can load a tensor's tiles (:func:`tma_ready`), and real tensors in the layout of ones the compiler traces
(:func:`real_like`), on which a shape key first met while compiling is tuned."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake


def outputs(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty O (B, H, Nq, d) laid out as (B, Nq, H, d), as SDPA's flash back end does: the step that joins the heads
    after attention (``o.transpose(1, 2).reshape(B, Nq, H * d)``) is then a view, not a copy; L (B, H, Nq) fp32."""
    B, H, n_q, d = q.shape
    return q.new_empty((B, n_q, H, d)).transpose(1, 2), q.new_empty((B, H, n_q), dtype=torch.float32)


def gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Empty dQ laid out as q is, dK and dV as v is (where that is dense), so that a gradient flows back through
    the caller's views (a V split from a (B, N, H, d) projection) without a copy. dK and dV share one layout because
    the dK/dV kernel writes both through one set of strides (four more arguments spill its registers)."""
    return torch.empty_like(q), torch.empty_like(v), torch.empty_like(v)


def layout_key(*tensors: torch.Tensor) -> tuple:
    """What a remembered launch depends on besides the switches: each tensor's shape, strides and 16-byte alignment
    (Triton specialises pointers on it and integers on their values, all of which follow from these), the dtype
    and the device."""
    t0 = tensors[0]
    return (t0.dtype, t0.device, *((t.shape, t.stride(), t.data_ptr() % 16 == 0) for t in tensors))


def tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether the copy engine can load tiles of these (B, H, N, d) tensors: a contiguous head dim and 16-byte
    aligned base and strides (else the kernels load through pointers)."""
    return all(t.stride(-1) == 1 and aligned(t) and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1])
               for t in tensors)


def aligned(t: torch.Tensor) -> bool:
    """Whether ``t`` starts on a 16-byte boundary. A tensor the compiler traces has no address yet: PyTorch's
    allocations start on such boundaries (the compiler copies inputs that do not), so its offset decides."""
    if is_fake(t):
        return t.storage_offset() * t.element_size() % 16 == 0
    return t.data_ptr() % 16 == 0


def concrete(args) -> bool:
    """Whether every tensor argument has plain integer sizes and strides (not the compiler's symbolic ones)."""
    return all(isinstance(x, int) for a in args if isinstance(a, torch.Tensor) for x in (*a.shape, *a.stride()))


def real_like(a):
    """A real tensor with ``a``'s shape, strides, storage offset (so its 16-byte alignment), dtype and device, random
    values; anything else as it is."""
    if not isinstance(a, torch.Tensor):
        return a
    span = a.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(a.shape, a.stride())) if a.numel() else 0
    return torch.randn(span, dtype=a.dtype, device=a.device).as_strided(a.shape, a.stride(), a.storage_offset())

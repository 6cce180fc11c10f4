"""Input validation and layout shared by the FlashAttention implementations.

Both FlashAttention-2 implementations (``flash_pytorch.py``, the package ``flash_triton/``) accept queries, keys and
values shaped (batch, seq, head_dim) or (batch, heads, seq, head_dim), any sequence lengths (Nq and Nk
may differ) and fp32/fp16/bf16. Bad input is refused here, once, with a ValueError that names the
problem, instead of failing deep inside a kernel with an unreadable message.
"""

from __future__ import annotations

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 128


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError unless q (..., Nq, d), k and v (..., Nk, d) can go to a FlashAttention kernel."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() not in (3, 4):
            raise ValueError(
                f"{name} must be (batch, seq, head_dim) or (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
    if not q.dim() == k.dim() == v.dim():
        raise ValueError(f"q, k, v must have the same number of dimensions, got {q.dim()}, {k.dim()}, {v.dim()}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(
            f"q, k, v must agree in batch (and head) dimensions, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if not MIN_HEAD_DIM <= q.shape[-1] <= MAX_HEAD_DIM:
        raise ValueError(f"head dimension must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {q.shape[-1]}")
    if q.shape[-2] < 1 or k.shape[-2] < 1:
        raise ValueError(f"sequence lengths must be at least 1, got Nq={q.shape[-2]}, Nk={k.shape[-2]}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {q.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on the same device, got {q.device}, {k.device}, {v.device}")


def as_4d(t: torch.Tensor) -> torch.Tensor:
    """(B, N, d) -> (B, 1, N, d) as a view; (B, H, N, d) unchanged. Kernels see one layout, copies never."""
    return t.unsqueeze(1) if t.dim() == 3 else t


def check_is_causal(is_causal) -> None:
    """``is_causal`` must be a bool: a string such as "False" is truthy and would silently mean causal."""
    if not isinstance(is_causal, bool):
        raise ValueError(f"is_causal must be a bool, got {type(is_causal).__name__} {is_causal!r}")


def refuse_double_backward(name: str) -> None:
    """Called first in a FlashAttention backward: grad mode is on there only under ``create_graph=True``, which
    would differentiate a backward that treats the saved log-sum-exp L as a constant, and so be wrong."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{name} does not support double backward (create_graph=True): its backward treats the "
                           "saved log-sum-exp as a constant; use naive attention for higher-order gradients")

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


def _shape(name: str, t) -> torch.Size:
    """t's shape, once t is a tensor of 3 or 4 dimensions."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    shape = t.shape
    if len(shape) not in (3, 4):
        raise ValueError(
            f"{name} must be (batch, seq, head_dim) or (batch, heads, seq, head_dim), got shape {tuple(shape)}")
    return shape


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError unless q (..., Nq, d), k and v (..., Nk, d) can go to a FlashAttention kernel. Every call of
    ours runs it, so each shape is read once: a read goes through PyTorch's dispatch."""
    qs, ks, vs = _shape("q", q), _shape("k", k), _shape("v", v)
    if not len(qs) == len(ks) == len(vs):
        raise ValueError(f"q, k, v must have the same number of dimensions, got {len(qs)}, {len(ks)}, {len(vs)}")
    if not qs[:-2] == ks[:-2] == vs[:-2]:
        raise ValueError(
            f"q, k, v must agree in batch (and head) dimensions, got {tuple(qs)}, {tuple(ks)}, {tuple(vs)}")
    if ks != vs:
        raise ValueError(f"k and v must have the same shape, got {tuple(ks)} and {tuple(vs)}")
    d = qs[-1]
    if d != ks[-1]:
        raise ValueError(f"q and k must have the same head dimension, got {d} and {ks[-1]}")
    if not MIN_HEAD_DIM <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dimension must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}")
    if qs[-2] < 1 or ks[-2] < 1:
        raise ValueError(f"sequence lengths must be at least 1, got Nq={qs[-2]}, Nk={ks[-2]}")
    dtype = q.dtype
    if not dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must have the same dtype, got {dtype}, {k.dtype}, {v.dtype}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype}")
    device = q.device
    if not device == k.device == v.device:
        raise ValueError(f"q, k, v must be on the same device, got {device}, {k.device}, {v.device}")


def as_4d(t: torch.Tensor) -> torch.Tensor:
    """(B, N, d) -> (B, 1, N, d) as a view; (B, H, N, d) unchanged. Kernels see one layout, copies never."""
    return t.unsqueeze(1) if t.dim() == 3 else t


def shaped_as(o: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A kernel's (B, H, Nq, d) output as q is shaped: a view for a 3-D q, o itself for a 4-D one (a view of the
    same shape would cost a dispatch per call)."""
    return o if q.dim() == 4 else o.view(q.shape)


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

"""PyTorch's own attention kernels behind the registry's interface ``(q, k, v, is_causal) -> o``: the anchors
every benchmark of ours is measured against in the same run.

A back end that cannot run an input (the SDPA fused kernels take no fp32, cuDNN wants a GPU) raises
PyTorch's own error (or, from a stand-in of ours, :class:`Unavailable`); :func:`refused` tells such an error
from a bug.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """``scaled_dot_product_attention``; PyTorch picks the back end."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def sdpa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def sdpa_cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


SDPA_BACKENDS = {SDPBackend.FLASH_ATTENTION: "FlashAttention-2", SDPBackend.CUDNN_ATTENTION: "cuDNN",
                 SDPBackend.EFFICIENT_ATTENTION: "memory-efficient", SDPBackend.MATH: "math"}


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> str:
    """The back end :func:`sdpa` runs for these inputs, as PyTorch's dispatcher decides it (device, dtype, shapes,
    strides and the back ends enabled), in words: "cuDNN", "FlashAttention-2", "memory-efficient" or "math" (a
    device's own back end by PyTorch's name for it). PyTorch's error where no back end can run them."""
    choice = SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, is_causal))
    return SDPA_BACKENDS.get(choice, choice.name)


def _causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx  # top-left aligned, as ours


@lru_cache(maxsize=32)
def _causal_blocks(n_q: int, n_k: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, n_q, n_k, device=device)


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """FlexAttention, compiled (its only fast form), with the causal block mask built once per shape."""
    mask = _causal_blocks(q.shape[-2], k.shape[-2], str(q.device)) if is_causal else None
    return _compiled_flex()(q, k, v, block_mask=mask)


class Unavailable(RuntimeError):
    """Raised by a stand-in of ours for a PyTorch kernel path that this device lacks (SDPA's flash kernels called
    directly on a CPU); :func:`refused` counts it as PyTorch's own refusals."""


def refused(exc: BaseException) -> bool:
    """A back end saying it cannot run this input (dtype, head dim, device), as opposed to a bug."""
    return isinstance(exc, Unavailable) or any(words in str(exc) for words in ("No available kernel",
                                                                              "No viable backend"))

"""Attention implementations chosen by name.

Every entry takes ``(q, k, v, is_causal)`` with tensors shaped (batch, heads, seq, head_dim) and returns
the output in the same layout. The model asks for one by name (``ModelConfig.attention``), so a new
kernel is one line here. Entries are imported lazily: the Triton one needs Triton, the others do not.

    naive          the textbook formula, materialises the score matrix (reference.py)
    sdpa           torch.nn.functional.scaled_dot_product_attention (PyTorch picks the back end)
    flash_pytorch  FlashAttention-2 tiled in plain PyTorch (flash_pytorch.py)
    flash_triton   FlashAttention-2 forward and backward in Triton (flash_triton.py)
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch
import torch.nn.functional as F

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


# name -> "module:attribute" (imported on first use) or the function itself
_REGISTRY: dict[str, str | AttentionFn] = {
    "naive": "systems.attention.reference:naive_attention",
    "sdpa": _sdpa,
    "flash_pytorch": "systems.attention.flash_pytorch:flash_attention_pytorch",
    "flash_triton": "systems.attention.flash_triton:flash_attention_triton",
}


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_attention(name: str) -> AttentionFn:
    if name not in _REGISTRY:
        raise ValueError(f"unknown attention implementation {name!r}; choose one of {available()}")
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry

"""Attention implementations chosen by name: ours and the peers we compare them with, under one set of names.

Every entry takes ``(q, k, v, is_causal)`` with tensors shaped (batch, heads, seq, head_dim) and returns
the output in the same layout. The model asks for one by name (``ModelConfig.attention``) and every
benchmark reports under the same names, so a new kernel is one line here. Entries are imported lazily:
the Triton one needs Triton, the others do not.

Ours (:data:`OURS`):

    naive          the textbook formula, materialises the score matrix (reference.py)
    flash_pytorch  FlashAttention-2 tiled in plain PyTorch (flash_pytorch.py)
    flash_triton   FlashAttention-2 forward and backward in Triton (flash_triton.py)

PyTorch's, the anchors (:data:`PEERS`, peers.py):

    sdpa           torch.nn.functional.scaled_dot_product_attention, PyTorch picks the back end
    sdpa_flash     the same, restricted to its FlashAttention-2 back end
    sdpa_cudnn     the same, restricted to cuDNN's fused attention
    flex           FlexAttention (torch.nn.attention.flex_attention) with a causal block mask, compiled
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]

OURS = ("naive", "flash_pytorch", "flash_triton")
PEERS = ("sdpa", "sdpa_flash", "sdpa_cudnn", "flex")

# name -> "module:attribute", imported on first use
_REGISTRY: dict[str, str] = {
    "naive": "systems.attention.reference:naive_attention",
    "flash_pytorch": "systems.attention.flash_pytorch:flash_attention_pytorch",
    "flash_triton": "systems.attention.flash_triton:flash_attention_triton",
    "sdpa": "systems.attention.peers:sdpa",
    "sdpa_flash": "systems.attention.peers:sdpa_flash",
    "sdpa_cudnn": "systems.attention.peers:sdpa_cudnn",
    "flex": "systems.attention.peers:flex",
}


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_attention(name: str) -> AttentionFn:
    if name not in _REGISTRY:
        raise ValueError(f"unknown attention implementation {name!r}; choose one of {available()}")
    module, attr = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)

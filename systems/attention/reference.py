"""Naive scaled dot-product attention: the textbook formula and the oracle every kernel is tested against.

softmax(Q Kᵀ / √d + mask) V, materialising the full (Nq × Nk) score matrix. Causal masking follows the
CS336 convention: query i sees key j iff j ≤ i, counted from the start of both sequences (top-left
aligned, also when Nq ≠ Nk). The NVTX ranges split it into the sub-steps that §1.1.4(e) compares.
"""

from __future__ import annotations

import math

import torch

from systems.nvtx import annotate


def causal_mask(n_queries: int, n_keys: int, device: torch.device | str) -> torch.Tensor:
    """Boolean (Nq, Nk) mask, True where query i may attend key j (j ≤ i)."""
    q = torch.arange(n_queries, device=device)[:, None]
    k = torch.arange(n_keys, device=device)[None, :]
    return k <= q


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    """q (..., Nq, d), k and v (..., Nk, d) -> (..., Nq, d)."""
    with annotate("attention_scores"):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Nq, Nk)
        if is_causal:
            scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    with annotate("attention_softmax"):
        probs = torch.softmax(scores, dim=-1)
    with annotate("attention_output"):
        return probs @ v


def attention_logsumexp(q: torch.Tensor, k: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """L = log Σ_j exp(S_ij) (eq. 12), the statistic FlashAttention saves for its backward pass."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.logsumexp(scores, dim=-1)

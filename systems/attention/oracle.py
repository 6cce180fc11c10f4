"""The float64 oracle for the FlashAttention kernels: O, L and the gradients from the naive formula.

Used by the tests and by the FlashAttention chapter's correctness check. It runs one batch entry at a
time (each (N, d)), so that an N x N float64 score matrix of one head is the most it ever holds.
"""

from __future__ import annotations

import torch

from systems.attention.reference import attention_logsumexp, naive_attention


def reference_forward_backward(q, k, v, do, is_causal: bool) -> list[torch.Tensor]:
    """[O, L, dQ, dK, dV] in float64 for q (..., Nq, d), k, v (..., Nk, d) and the output gradient do."""
    outs = [[] for _ in range(5)]
    for qi, ki, vi, doi in zip(*(t.detach().flatten(0, -3) for t in (q, k, v, do))):  # each (N, d)
        qi, ki, vi = (t.double().requires_grad_() for t in (qi, ki, vi))
        o = naive_attention(qi, ki, vi, is_causal)
        dq, dk, dv = torch.autograd.grad(o, (qi, ki, vi), doi.double())
        lse = attention_logsumexp(qi.detach(), ki.detach(), is_causal)
        for acc, t in zip(outs, (o.detach(), lse, dq, dk, dv)):
            acc.append(t)
    shapes = (q.shape, q.shape[:-1], q.shape, k.shape, v.shape)
    return [torch.stack(acc).reshape(shape) for acc, shape in zip(outs, shapes)]


def max_relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest element-wise error over the largest reference entry (floored at 1e-2: some gradients are 0)."""
    return ((actual.double() - expected).abs().max() / expected.abs().max().clamp_min(1e-2)).item()

"""The float64 oracle for the FlashAttention kernels, and the one tolerance policy the tests and the chapters share.

:func:`reference_forward_backward` computes O, L and the gradients from the naive formula in float64, one
batch entry at a time (each (N, d)), so that one head's N x N float64 score matrix is the most it holds.
:func:`tolerance` is the largest error allowed, relative to the largest entry of the reference, per dtype:
half types round P and the outputs (bf16 to 8 bits of mantissa, fp16 to 11); fp32 inputs whose products run
on TF32 tensor cores (Triton's default on a GPU, as cuBLAS with TF32 enabled) are held to fp16's bound.
:func:`compare` checks an implementation against the oracle and reports every output's error.
"""

from __future__ import annotations

from itertools import product
from typing import Callable

import pandas as pd
import torch

from systems.attention.reference import attention_logsumexp, naive_attention

TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
TF32_TOLERANCE = 1e-2
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def tolerance(dtype: torch.dtype, tf32: bool = False) -> float:
    """Largest error relative to the largest reference entry accepted for ``dtype`` inputs."""
    return TF32_TOLERANCE if (tf32 and dtype == torch.float32) else TOLERANCE[dtype]


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


def compare(attend: Callable, forward: Callable, shapes, dtypes=("bf16",), *, is_causal: bool = True,
            tf32: bool = False, seed: int = 0) -> pd.DataFrame:
    """An implementation against the oracle at (batch, N, d) shapes: each output's error over its largest
    reference entry, and whether all are within :func:`tolerance`.

    ``attend(q, k, v, is_causal) -> O`` supplies the output and, through autograd, the gradients;
    ``forward(q, k, v, is_causal) -> (O, L)`` the log-sum-exp the backward pass uses.
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for (batch, n, d), dtype in product(shapes, dtypes):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(batch, n, d, device=device, dtype=DTYPES[dtype], requires_grad=True) for _ in "qkv")
        o = attend(q, k, v, is_causal)
        _, L = forward(q, k, v, is_causal)
        do = torch.randn_like(o)
        o.backward(do)
        expected = reference_forward_backward(q, k, v, do, is_causal)
        errors = {name: max_relative_error(t, e) for name, t, e in
                  zip(("O", "L", "dQ", "dK", "dV"), (o, L, q.grad, k.grad, v.grad), expected)}
        rows.append({"batch": batch, "n": n, "d": d, "dtype": dtype, **errors,
                     "within_tolerance": max(errors.values()) <= tolerance(DTYPES[dtype], tf32)})
    return pd.DataFrame(rows)

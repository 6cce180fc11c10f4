"""FlashAttention-2 in plain PyTorch: the tiled algorithm, readable, before any kernel is written.

Handout §1.3.2 (a) and (d); Dao, "FlashAttention-2" (2023), Algorithm 1 and equations 13-19.

The forward pass walks over query tiles and, for each, over key tiles, keeping a running row maximum m,
a running sum of exponentials l and an unnormalised output O in fp32 (the "online softmax"), so the
(Nq x Nk) score matrix is never held in full. It returns O and saves the log-sum-exp L = m + log l,
which is all the backward pass needs to recompute the probabilities P = exp(S - L).

The backward pass (§1.3.2 (d)) is a plain PyTorch function of (Q, K, V, O, dO, L), compiled with
``torch.compile`` on GPUs. It is not tiled: it materialises S and P, so it is the readable statement of
equations 13-19 and the oracle for the Triton backward, not a memory-saving kernel.

    from systems.attention.flash_pytorch import flash_attention_pytorch
    o = flash_attention_pytorch(q, k, v, is_causal=True)   # q (B, [H,] Nq, d), k, v (B, [H,] Nk, d)
"""

from __future__ import annotations

import math

import torch

from systems.attention._checks import check_attention_inputs, check_is_causal, refuse_double_backward
from systems.attention.reference import causal_mask

TILE = 64  # B_q = B_k; the handout asks for tiles of at least 16 x 16


def flash_forward_tiled(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, tile_q: int = TILE, tile_k: int = TILE
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1 over any leading dims: q (..., Nq, d), k, v (..., Nk, d) -> O (..., Nq, d), L (..., Nq) fp32."""
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    o_tiles, l_tiles = [], []
    for q0 in range(0, n_q, tile_q):
        q_i = q[..., q0 : q0 + tile_q, :].float()  # (..., Bq, d)
        rows = q_i.shape[-2]
        m = q_i.new_full(q_i.shape[:-1], float("-inf"))  # (..., Bq) running row max
        l = q_i.new_zeros(q_i.shape[:-1])  # (..., Bq) running sum of exp(S - m)
        acc = torch.zeros_like(q_i)  # (..., Bq, d) unnormalised output
        # Causal: key tiles starting after the tile's last query are masked for every row; skip them.
        k_end = min(n_k, q0 + rows) if is_causal else n_k
        for k0 in range(0, k_end, tile_k):
            k_j = k[..., k0 : k0 + tile_k, :].float()  # (..., Bk, d)
            v_j = v[..., k0 : k0 + tile_k, :].float()
            s = q_i @ k_j.transpose(-2, -1) * scale  # (..., Bq, Bk)
            if is_causal:
                q_idx = torch.arange(q0, q0 + rows, device=q.device)
                k_idx = torch.arange(k0, k0 + k_j.shape[-2], device=q.device)
                visible = k_idx[None, :] <= q_idx[:, None]  # (Bq, Bk), top-left aligned
                s = s.masked_fill(~visible, float("-inf"))
            # Key 0 is visible to every row (top-left causal alignment) and comes first, so m is finite
            # after the first tile and exp(m - m_new) never sees -inf - (-inf).
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v_j
            m = m_new
        o_tiles.append((acc / l[..., None]).to(q.dtype))
        l_tiles.append(m + torch.log(l))
    return torch.cat(o_tiles, dim=-2), torch.cat(l_tiles, dim=-1)


def flash_backward_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    L: torch.Tensor,
    is_causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Equations 13-19 with recomputation: (dQ, dK, dV) from Q, K, V, O, dO and L, computed in fp32."""
    q, k, v, o, do = (t.float() for t in (q, k, v, o, do))
    s = q @ k.transpose(-2, -1) * scale  # (..., Nq, Nk)
    if is_causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    p = torch.exp(s - L[..., None])  # eq. 14: no softmax, L already holds each row's normaliser
    dv = p.transpose(-2, -1) @ do  # eq. 15
    dp = do @ v.transpose(-2, -1)  # eq. 16
    D = (do * o).sum(dim=-1, keepdim=True)  # D_i = rowsum(dO ∘ O) = rowsum(P ∘ dP)
    ds = p * (dp - D)  # eq. 17
    dq = ds @ k * scale  # eq. 18
    dk = ds.transpose(-2, -1) @ q * scale  # eq. 19
    return dq, dk, dv


# Compiled where it pays: on CUDA, Inductor fuses the element-wise chain (mask, exp, subtract, multiply)
# into few kernels. On the CPU the backward runs eagerly: the CPU path exists for tests on tiny tensors,
# where Inductor's C++ compilation (seconds per new shape) would dominate the run time and would make
# the tests depend on a working host compiler. The choice is by device, not by catching errors, so a
# real compile failure on a GPU is reported instead of silently hidden.
flash_backward_compiled = torch.compile(flash_backward_reference)


def _backward(*args, is_causal: bool, scale: float):
    fn = flash_backward_compiled if args[0].is_cuda else flash_backward_reference
    return fn(*args, is_causal, scale)


class FlashAttentionPytorch(torch.autograd.Function):
    """FlashAttention-2 with a tiled PyTorch forward and a recomputing backward (eqs. 13-19)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        check_attention_inputs(q, k, v)
        check_is_causal(is_causal)
        o, L = flash_forward_tiled(q, k, v, is_causal)
        ctx.is_causal = is_causal
        # L has the shape q.shape[:-1] and is the only saved tensor with that shape (the CS336 tests find it so)
        ctx.save_for_backward(L, q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        refuse_double_backward("FlashAttentionPytorch")
        L, q, k, v, o = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        dq, dk, dv = _backward(q, k, v, o, do, L, is_causal=ctx.is_causal, scale=scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None


def flash_attention_pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> (B, [H,] Nq, d); causal masking is top-left aligned."""
    return FlashAttentionPytorch.apply(q, k, v, is_causal)

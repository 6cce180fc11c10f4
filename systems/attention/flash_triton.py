"""FlashAttention-2 forward and backward in Triton.

Handout §1.3.2 (b, c), §1.3.3 and §1.3.4; Dao, "FlashAttention-2" (2023), Algorithms 1 and 2 with the
backward split in two passes so that no atomics are needed.

The file reads bottom-up:

1. ``@triton.jit`` kernels. The forward (Algorithm 1) runs one program per (query tile, batch*head)
   and keeps the running max m, sum l and output O in fp32 registers while it walks over the key
   tiles. The backward first computes D = rowsum(dO ∘ O), then one pass over key tiles accumulates
   dK and dV (each program owns one key tile, so it writes them without atomics). dQ is summed over
   key tiles too: either in that same pass, each program adding its share into an fp32 buffer (one
   pass, five matrix products per tile pair), or in a second pass over query tiles that recomputes P
   and dP (seven products, no atomics, deterministic). P is recomputed from the saved log-sum-exp L.
   Causal masking (top-left aligned: key j is visible to query i iff j <= i, also when Nq != Nk)
   skips tiles that are masked for every row and compares indices only on tiles that straddle the
   diagonal or the end of the sequence; elsewhere the loop runs without masks.
2. The two functions that launch them, each also a ``torch.library.custom_op`` with a fake
   implementation, so that ``torch.compile`` (the leaderboard compiles ``FlashAttentionTriton.apply``)
   treats the kernels as opaque calls with known output shapes instead of tracing through the
   launcher; eager calls skip the op's dispatch.
3. ``FlashAttentionTriton``, the ``torch.autograd.Function``, and ``flash_attention_triton``.

Any sequence lengths (tiles are masked at the ends), head dims 16..128 (the head-dim block is the next
power of two, padded with zeros), fp32/fp16/bf16, (B, N, d) or (B, H, N, d) with any strides. On a
GPU, fp32 inputs use TF32 tensor-core products (Triton's default), as cuBLAS does with TF32 enabled.

Tile sizes are autotuned on the GPU over a small, pruned set of configurations, keyed by the head
dim, causality, dtype and the sequence lengths rounded to a power of two (capped), so a new length
in the same bucket does not tune again. Untuned (``FlashConfig(autotune=False)``, and always under
``TRITON_INTERPRET=1`` in the CPU tests) each kernel takes the first candidate that fits in shared
memory and in registers; a test compiles those defaults for sm_90 and checks with ptxas that, in the
16-bit dtypes, they spill no registers and keep the wgmma products asynchronous. A :class:`FlashConfig`
passed to :func:`flash_attention_triton` fixes the tiles and switches the optimisations off or on, for
the measurements of what each one buys.

The backward is one pass where chapter 07 measured it faster on an H100 and it fits in registers: 16-bit
inputs with head dims up to 64, on a GPU, with dQ's additions done by the copy engine's bulk reductions.
Those additions land in any order, so dQ's last bits can differ from run to run (as in FlashAttention-2
and cuDNN); under ``torch.use_deterministic_algorithms(True)`` the backward takes the two passes.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, fields

import torch
import triton
import triton.language as tl

from systems.attention._checks import as_4d, check_attention_inputs

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# exp(x) = exp2(x * log2(e)); exp2 is the cheaper instruction. A constexpr: kernels may read no other globals.
LOG2E = tl.constexpr(1.4426950408889634)


def _patch_interpreter_index() -> None:
    """Let the CPU interpreter run loops whose bounds are computed in the kernel.

    Triton 3.6's interpreter holds scalars as 1-element arrays and converts them with ``int(array)``
    when they bound a ``range``; numpy 2.4 refuses that conversion for arrays with ndim > 0, so every
    loop with a run-time bound fails. ``.item()`` converts either. Only applied under TRITON_INTERPRET=1.
    """
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "patched_index", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patched.patched_index = True
    interpreter._patch_lang_tensor = patched


if INTERPRET:
    _patch_interpreter_index()


# ----------------------------------------------------------------------------------------------------
# 1. Kernels
# ----------------------------------------------------------------------------------------------------
# Tiles are addressed with pointer arithmetic and masks. Compiled for sm_90 (Triton 3.6) with unit
# head-dim strides, the tile loads in the loops become pipelined cp.async copies and the products wgmma.


@triton.jit
def _tile(base, rows, cols, stride_row, stride_col):
    """Pointers to the (len(rows), len(cols)) tile of a row-major-ish matrix at ``base``."""
    return base + rows[:, None] * stride_row + cols[None, :] * stride_col


@triton.jit
def _load(ptrs, rows, cols, n_rows, HEAD_DIM: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """A tile load masked only on the dimensions that can run past the tensor (zero padded)."""
    if CHECK_ROWS:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < HEAD_DIM), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    else:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=cols[None, :] < HEAD_DIM, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _store(ptrs, x, rows, cols, n_rows, HEAD_DIM: tl.constexpr):
    tl.store(ptrs, x.to(ptrs.dtype.element_ty), mask=(rows[:, None] < n_rows) & (cols[None, :] < HEAD_DIM))


@triton.jit
def _rows(base, n_rows, stride_row, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
          TMA: tl.constexpr):
    """What a loop streams (BLOCK_ROWS, BLOCK_D) tiles from: a tensor descriptor over the (n_rows, HEAD_DIM)
    matrix at ``base`` with TMA (the host checked its layout), else the base pointer itself."""
    if TMA:
        src = tl.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride_row, 1], [BLOCK_ROWS, BLOCK_D])
    else:
        src = base
    return src


@triton.jit
def _stream(src, row0, rows, cols, stride_row, stride_col, n_rows, HEAD_DIM: tl.constexpr, CHECK_ROWS: tl.constexpr,
            CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """The tile of ``rows`` (starting at row0) from :func:`_rows`'s source. Through a descriptor the copy
    engine loads it and zero-fills past the rows and the head dim; no addresses or masks are computed."""
    if TMA:
        x = src.load([row0, 0])
    else:
        x = _load(_tile(src, rows, cols, stride_row, stride_col), rows, cols, n_rows, HEAD_DIM, CHECK_ROWS, CHECK_COLS)
    return x


@triton.jit
def _key_ranges(q0, N_KEYS, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                SKIP_MASKED: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr):
    """For the query tile starting at q0: key tiles [0, mid) need no mask, [mid, hi) need index comparisons.

    Used by the forward and the dQ pass, which both hold one query tile and walk over key tiles.
    """
    if CAUSAL and SKIP_MASKED:
        hi = tl.minimum(N_KEYS, q0 + BLOCK_Q)  # later key tiles are masked for every row of this tile
    else:
        hi = N_KEYS
    if SPLIT_DIAGONAL:
        # Unmasked: tiles wholly inside the sequence and, if causal, left of the tile's first query.
        if CAUSAL:
            mid = (tl.minimum(q0 + 1, N_KEYS) // BLOCK_K) * BLOCK_K
        else:
            mid = (N_KEYS // BLOCK_K) * BLOCK_K
    else:
        mid = 0
    return mid, hi


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, K, V, stride_kn, stride_kd, stride_vn, stride_vd, offs_q, offs_d, start, end,
               N_KEYS, qk_scale, BLOCK_K: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """Online softmax over key tiles [start, end): the body of Algorithm 1, scores in log2 units."""
    for k0 in range(start, end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k = _stream(K, k0, offs_k, offs_d, stride_kn, stride_kd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                    TMA)  # (BLOCK_K, BLOCK_D)
        v = _stream(V, k0, offs_k, offs_d, stride_vn, stride_vd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS, TMA)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_Q, BLOCK_K), not yet scaled
        if MASKED:
            keep = offs_k[None, :] < N_KEYS
            if CAUSAL:
                keep = keep & (offs_k[None, :] <= offs_q[:, None])
            # -inf is safe: key 0 is visible to every row and its tile comes first, so m_i is finite
            s = tl.where(keep, s, float("-inf"))
        # The scale is positive, so it commutes with the max: scaled there (a vector) and inside exp2's
        # argument (one FFMA per score), not score by score first.
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc=acc * alpha[:, None])  # P̃ in V's dtype, fp32 accumulator
        m_i = m_new
    return acc, l_i, m_i


@triton.heuristics({"EVEN_K": lambda a: a["N_KEYS"] % a["BLOCK_K"] == 0})
@triton.jit
def flash_fwd_kernel(
    Q, K, V, O, L,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    H, N_QUERIES, N_KEYS, qk_scale,
    Q_BUCKET, K_BUCKET,  # autotuning keys only (sequence lengths rounded up)
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr,
    SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
):
    """O (B, H, Nq, d) and L (B, H, Nq) fp32 (natural log) for one query tile of one (batch, head)."""
    if CAUSAL:
        # Causal tiles near the end of the sequence do the most work: start them first so the
        # short ones fill the gaps at the end of the grid.
        query_tile = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        query_tile = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)  # int64: offsets can pass 2**31 elements
    q0 = query_tile * BLOCK_Q
    CHECK_COLS: tl.constexpr = BLOCK_D != HEAD_DIM
    offs_q = q0 + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    K_bh = _rows(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, HEAD_DIM, BLOCK_K, BLOCK_D, TMA)
    V_bh = _rows(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, HEAD_DIM, BLOCK_K, BLOCK_D, TMA)

    q = _load(_tile(Q + b * stride_qb + h * stride_qh, offs_q, offs_d, stride_qn, stride_qd), offs_q, offs_d,
              N_QUERIES, HEAD_DIM, True, CHECK_COLS)  # (BLOCK_Q, BLOCK_D)
    m_i = tl.full((BLOCK_Q,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)

    mid, hi = _key_ranges(q0, N_KEYS, BLOCK_Q, BLOCK_K, CAUSAL, SKIP_MASKED, SPLIT_DIAGONAL)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, K_bh, V_bh, stride_kn, stride_kd, stride_vn, stride_vd, offs_q,
                               offs_d, 0, mid, N_KEYS, qk_scale, BLOCK_K, HEAD_DIM, CAUSAL, False, False, CHECK_COLS,
                               TMA)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, K_bh, V_bh, stride_kn, stride_kd, stride_vn, stride_vd, offs_q,
                               offs_d, mid, hi, N_KEYS, qk_scale, BLOCK_K, HEAD_DIM, CAUSAL, True, not EVEN_K,
                               CHECK_COLS, TMA)

    _store(_tile(O + b * stride_ob + h * stride_oh, offs_q, offs_d, stride_on, stride_od), acc / l_i[:, None],
           offs_q, offs_d, N_QUERIES, HEAD_DIM)
    # L is contiguous (B, H, Nq); m_i is in log2 units, L in natural log as the tests compare it
    tl.store(L + bh.to(tl.int64) * N_QUERIES + offs_q, (m_i + tl.math.log2(l_i)) / LOG2E,
             mask=offs_q < N_QUERIES)


@triton.jit
def flash_bwd_preprocess_kernel(O, DO, DELTA, stride_ob, stride_oh, stride_on, stride_od,
                                H, N_QUERIES, scale,
                                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_Q: tl.constexpr):
    """D/√d = rowsum(dO ∘ O) * scale in fp32, (B, H, Nq); O and dO share strides (both made by this module).

    Scaled, so that the backward kernels compute dS/√d = P ∘ (dP/√d − D/√d) with one fused multiply-add
    per score, and dQ and dK come out of their products already scaled."""
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    offs_q = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    base = b * stride_ob + h * stride_oh
    o = _load(_tile(O + base, offs_q, offs_d, stride_on, stride_od), offs_q, offs_d, N_QUERIES, HEAD_DIM, True, True)
    do = _load(_tile(DO + base, offs_q, offs_d, stride_on, stride_od), offs_q, offs_d, N_QUERIES, HEAD_DIM, True,
               True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1) * scale
    tl.store(DELTA + bh.to(tl.int64) * N_QUERIES + offs_q, delta, mask=offs_q < N_QUERIES)


@triton.jit
def _dkdv_inner(dk, dv, k, v, Q, DO, DQ, stride_qn, stride_qd, stride_don, stride_dod, L_bh, DELTA_bh, offs_k,
                offs_d, start, end, N_QUERIES, qk_scale, scale, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
                HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr,
                TMA: tl.constexpr, ATOMIC_DQ: tl.constexpr, REDUCE_TMA: tl.constexpr):
    """dK, dV of one key tile over query tiles [start, end), in the transposed frame (keys as rows).

    With ``ATOMIC_DQ`` this key tile's share of dQ is added to the fp32 accumulator DQ (rows BLOCK_D wide)
    as well, through the copy engine's bulk reduction with ``REDUCE_TMA``, else with atomic adds."""
    for q0 in range(start, end, BLOCK_Q):
        offs_q = q0 + tl.arange(0, BLOCK_Q)
        q = _stream(Q, q0, offs_q, offs_d, stride_qn, stride_qd, N_QUERIES, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                    TMA)  # (BLOCK_Q, BLOCK_D)
        do = _stream(DO, q0, offs_q, offs_d, stride_don, stride_dod, N_QUERIES, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                     TMA)
        in_seq = offs_q < N_QUERIES
        # Rows past the end get L = +inf, so their P is exactly 0 and they add nothing below.
        lse = tl.load(L_bh + offs_q, mask=in_seq, other=float("inf")) * LOG2E
        delta = tl.load(DELTA_bh + offs_q, mask=in_seq, other=0.0)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale  # Sᵀ (BLOCK_K, BLOCK_Q), log2 units
        # dPᵀ = V dOᵀ (eq. 16) before the exponentials, so that the tensor cores compute it while they run;
        # issued after dV's product it would also wait for that one (wgmma waits are in issue order).
        dp_t = tl.dot(v, tl.trans(do))
        if MASKED:
            s_t = tl.where(offs_k[:, None] <= offs_q[None, :], s_t, float("-inf"))
        p_t = tl.math.exp2(s_t - lse[None, :])  # Pᵀ = exp(S - L)ᵀ, eq. 14
        dv = tl.dot(p_t.to(do.dtype), do, acc=dv)  # dV += Pᵀ dO, eq. 15
        ds_t = (p_t * (dp_t * scale - delta[None, :])).to(q.dtype)  # dSᵀ/√d, eq. 17 (delta holds D/√d)
        dk = tl.dot(ds_t, q, acc=dk)  # dK += dSᵀ Q, eq. 19
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t), k)  # this key tile's part of dQ = dS K, eq. 18
            if REDUCE_TMA:
                DQ.atomic_add([q0, 0], dq)
            else:
                tl.atomic_add(DQ + offs_q[:, None] * BLOCK_D + offs_d[None, :], dq, mask=in_seq[:, None],
                              sem="relaxed")
    return dk, dv


@triton.heuristics({"EVEN_Q": lambda a: a["N_QUERIES"] % a["BLOCK_Q"] == 0})
@triton.jit
def flash_bwd_dkdv_kernel(
    Q, K, V, DO, L, DELTA, DK, DV, DQ_ACC,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,  # dK and dV share this contiguous layout
    H, N_QUERIES, N_KEYS, qk_scale, scale,
    Q_BUCKET, K_BUCKET,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr,
    SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_Q: tl.constexpr,
    UNMASKED_FIRST: tl.constexpr, TMA: tl.constexpr, ATOMIC_DQ: tl.constexpr, REDUCE_TMA: tl.constexpr,
):
    """Backward pass 1: each program owns one key tile and sums its dK, dV over all query tiles (and, with
    ATOMIC_DQ, adds its share of dQ into DQ_ACC, fp32 (B, H, Nq, BLOCK_D), so that pass 2 is not needed)."""
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    k0 = tl.program_id(0) * BLOCK_K
    CHECK_COLS: tl.constexpr = BLOCK_D != HEAD_DIM
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, BLOCK_D)

    k = _load(_tile(K + b * stride_kb + h * stride_kh, offs_k, offs_d, stride_kn, stride_kd), offs_k, offs_d, N_KEYS,
              HEAD_DIM, True, CHECK_COLS)  # (BLOCK_K, BLOCK_D)
    v = _load(_tile(V + b * stride_vb + h * stride_vh, offs_k, offs_d, stride_vn, stride_vd), offs_k, offs_d, N_KEYS,
              HEAD_DIM, True, CHECK_COLS)
    dk = tl.zeros((BLOCK_K, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_K, BLOCK_D), dtype=tl.float32)
    Q_bh = _rows(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, HEAD_DIM, BLOCK_Q, BLOCK_D, TMA)
    DO_bh = _rows(DO + b * stride_dob + h * stride_doh, N_QUERIES, stride_don, HEAD_DIM, BLOCK_Q, BLOCK_D, TMA)
    L_bh = L + bh.to(tl.int64) * N_QUERIES
    DELTA_bh = DELTA + bh.to(tl.int64) * N_QUERIES
    DQ_bh = DQ_ACC + bh.to(tl.int64) * N_QUERIES * BLOCK_D
    if REDUCE_TMA:
        DQ_bh = tl.make_tensor_descriptor(DQ_bh, [N_QUERIES, BLOCK_D], [BLOCK_D, 1], [BLOCK_Q, BLOCK_D])

    # Query tiles [lo, mid) straddle the diagonal (masked), [mid, Nq) see the whole key tile.
    if CAUSAL:
        if SKIP_MASKED:
            lo = (k0 // BLOCK_Q) * BLOCK_Q  # earlier query tiles see none of these keys
        else:
            lo = 0
        if SPLIT_DIAGONAL:
            mid = tl.minimum(tl.cdiv(k0 + BLOCK_K - 1, BLOCK_Q) * BLOCK_Q, N_QUERIES)
        else:
            mid = N_QUERIES
    else:
        lo = 0
        mid = 0
    # Rows past Nq are neutralised through L = +inf, so the query bound needs no comparison on tiles.
    # The unmasked tiles go first: in the other order the two-pass kernel's dK and dV leave the masked loop
    # with products still in flight, and ptxas (sm_90) serialises the wgmma products of both loops (its
    # warning C7515). The one-pass kernel waits for each tile's dQ product, so either order compiles well.
    if UNMASKED_FIRST:
        dk, dv = _dkdv_inner(dk, dv, k, v, Q_bh, DO_bh, DQ_bh, stride_qn, stride_qd, stride_don, stride_dod, L_bh,
                             DELTA_bh, offs_k, offs_d, mid, N_QUERIES, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D,
                             HEAD_DIM, False, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)
    dk, dv = _dkdv_inner(dk, dv, k, v, Q_bh, DO_bh, DQ_bh, stride_qn, stride_qd, stride_don, stride_dod, L_bh,
                         DELTA_bh, offs_k, offs_d, lo, mid, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D, HEAD_DIM,
                         True, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)
    if not UNMASKED_FIRST:
        dk, dv = _dkdv_inner(dk, dv, k, v, Q_bh, DO_bh, DQ_bh, stride_qn, stride_qd, stride_don, stride_dod, L_bh,
                             DELTA_bh, offs_k, offs_d, mid, N_QUERIES, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D,
                             HEAD_DIM, False, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)

    out = b * stride_dkb + h * stride_dkh
    _store(_tile(DK + out, offs_k, offs_d, stride_dkn, stride_dkd), dk, offs_k, offs_d, N_KEYS, HEAD_DIM)
    _store(_tile(DV + out, offs_k, offs_d, stride_dkn, stride_dkd), dv, offs_k, offs_d, N_KEYS, HEAD_DIM)


@triton.jit
def _dq_inner(dq, q, do, lse, delta, K, V, stride_kn, stride_kd, stride_vn, stride_vd, offs_q, offs_d, start, end,
              N_KEYS, qk_scale, scale, BLOCK_K: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
              MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """dQ of one query tile over key tiles [start, end)."""
    for k0 in range(start, end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k = _stream(K, k0, offs_k, offs_d, stride_kn, stride_kd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                    TMA)  # (BLOCK_K, BLOCK_D)
        v = _stream(V, k0, offs_k, offs_d, stride_vn, stride_vd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS, TMA)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_Q, BLOCK_K), log2 units
        if MASKED:
            # Keys past Nk must be masked here: their P = exp(-L) could overflow and turn 0 * inf into NaN.
            keep = offs_k[None, :] < N_KEYS
            if CAUSAL:
                keep = keep & (offs_k[None, :] <= offs_q[:, None])
            s = tl.where(keep, s, float("-inf"))
        p = tl.math.exp2(s - lse[:, None])  # eq. 14
        dp = tl.dot(do, tl.trans(v))  # eq. 16
        ds = p * (dp * scale - delta[:, None])  # dS/√d, eq. 17 (delta holds D/√d)
        dq = tl.dot(ds.to(k.dtype), k, acc=dq)  # eq. 18
    return dq


@triton.heuristics({"EVEN_K": lambda a: a["N_KEYS"] % a["BLOCK_K"] == 0})
@triton.jit
def flash_bwd_dq_kernel(
    Q, K, V, DO, L, DELTA, DQ,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    H, N_QUERIES, N_KEYS, qk_scale, scale,
    Q_BUCKET, K_BUCKET,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr,
    SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    TMA: tl.constexpr,
):
    """Backward pass 2: each program owns one query tile and sums its dQ over the key tiles it sees."""
    if CAUSAL:
        query_tile = tl.num_programs(0) - 1 - tl.program_id(0)  # longest rows first, as in the forward
    else:
        query_tile = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    q0 = query_tile * BLOCK_Q
    CHECK_COLS: tl.constexpr = BLOCK_D != HEAD_DIM
    offs_q = q0 + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    in_seq = offs_q < N_QUERIES

    q = _load(_tile(Q + b * stride_qb + h * stride_qh, offs_q, offs_d, stride_qn, stride_qd), offs_q, offs_d,
              N_QUERIES, HEAD_DIM, True, CHECK_COLS)  # (BLOCK_Q, BLOCK_D)
    do = _load(_tile(DO + b * stride_dob + h * stride_doh, offs_q, offs_d, stride_don, stride_dod), offs_q, offs_d,
               N_QUERIES, HEAD_DIM, True, CHECK_COLS)
    # Rows past Nq load L = 0, D = 0: finite, and their dQ is never stored.
    lse = tl.load(L + bh.to(tl.int64) * N_QUERIES + offs_q, mask=in_seq, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh.to(tl.int64) * N_QUERIES + offs_q, mask=in_seq, other=0.0)
    dq = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    K_bh = _rows(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, HEAD_DIM, BLOCK_K, BLOCK_D, TMA)
    V_bh = _rows(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, HEAD_DIM, BLOCK_K, BLOCK_D, TMA)

    mid, hi = _key_ranges(q0, N_KEYS, BLOCK_Q, BLOCK_K, CAUSAL, SKIP_MASKED, SPLIT_DIAGONAL)
    dq = _dq_inner(dq, q, do, lse, delta, K_bh, V_bh, stride_kn, stride_kd, stride_vn, stride_vd, offs_q, offs_d,
                   0, mid, N_KEYS, qk_scale, scale, BLOCK_K, HEAD_DIM, CAUSAL, False, False, CHECK_COLS, TMA)
    dq = _dq_inner(dq, q, do, lse, delta, K_bh, V_bh, stride_kn, stride_kd, stride_vn, stride_vd, offs_q, offs_d,
                   mid, hi, N_KEYS, qk_scale, scale, BLOCK_K, HEAD_DIM, CAUSAL, True, not EVEN_K, CHECK_COLS, TMA)

    _store(_tile(DQ + b * stride_dqb + h * stride_dqh, offs_q, offs_d, stride_dqn, stride_dqd), dq, offs_q,
           offs_d, N_QUERIES, HEAD_DIM)


# ----------------------------------------------------------------------------------------------------
# 2. Tile configurations, launchers and the custom ops torch.compile sees
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tiles:
    """One launch configuration: tile sizes (powers of two, at least 16) and Triton's warps and stages."""

    block_q: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


@dataclass(frozen=True)
class FlashConfig:
    """How the three kernels launch. ``None`` tiles: autotuned on a GPU, else the first candidate that fits.

    ``skip_masked_tiles`` and ``split_diagonal`` exist to measure the causal optimisations: off, the
    kernels walk over every tile and compare indices on all of them. ``unmasked_first`` False runs the dK/dV
    pass's diagonal tiles before the others, the order that makes the compiler serialise its products.
    ``tma`` loads the tiles each kernel streams (K and V in the forward and the dQ pass, Q and dO in the
    dK/dV pass) with the Hopper copy engine through tensor descriptors, where the layout allows it
    (contiguous head dim, 16-byte aligned base and strides), instead of per-thread addresses and masks.
    ``atomic_dq`` computes dQ in the dK/dV pass, adding each key tile's share into an fp32 buffer (with
    ``tma``: bulk reductions by the copy engine, else atomic adds), instead of a second pass that
    recomputes P and dP: five matrix products per tile pair instead of seven, in exchange for the
    additions' memory traffic, and dQ's last bits then depend on the order in which the additions land.
    Left at ``None``, both are chosen per call (:func:`_one_pass`): one pass with TMA in the backward where
    it is the faster choice, two passes and no TMA elsewhere.
    """

    fwd: Tiles | None = None
    dkdv: Tiles | None = None
    dq: Tiles | None = None
    autotune: bool = True
    skip_masked_tiles: bool = True
    split_diagonal: bool = True
    unmasked_first: bool = True
    tma: bool | None = None
    atomic_dq: bool | None = None

    def encode(self) -> list[int]:
        """As a list of ints: the argument type a torch.library custom op can take."""
        ints = []
        for t in (self.fwd, self.dkdv, self.dq):
            ints += [0, 0, 0, 0] if t is None else [t.block_q, t.block_k, t.num_warps, t.num_stages]
        return ints + [_UNSET if (x := getattr(self, name)) is None else int(x) for name in _SWITCHES]

    @classmethod
    def decode(cls, ints: list[int]) -> FlashConfig:
        tiles = [None if ints[i] == 0 else Tiles(*ints[i : i + 4]) for i in (0, 4, 8)]
        return cls(*tiles, *(None if x == _UNSET else bool(x) for x in ints[12:]))


_SWITCHES = tuple(f.name for f in fields(FlashConfig))[3:]  # the booleans after the three kernels' tiles
_UNSET = -1  # a switch left to the per-call choice


# Candidates in order of preference; the untuned default is the first that fits (see _default_tiles).
# Forward and dQ hold a query tile and stream key tiles (long BLOCK_K loops), dK/dV the other way round.
# 64x64 tiles with 4 warps lead: autotuning chose them for all three kernels at the leaderboard shape on an
# H100 (another tuning run there chose other tiles for the forward and dK/dV passes).
FWD_TILES = (Tiles(64, 64, 4, 3), Tiles(128, 64, 8, 3), Tiles(128, 64, 4, 3), Tiles(128, 128, 8, 3),
             Tiles(128, 32, 4, 4), Tiles(64, 32, 4, 2))
DKDV_TILES = (Tiles(64, 64, 4, 3), Tiles(32, 64, 4, 4), Tiles(64, 128, 8, 3), Tiles(32, 128, 4, 3),
              Tiles(32, 64, 4, 2))
DQ_TILES = (Tiles(64, 64, 4, 3), Tiles(128, 64, 8, 3), Tiles(128, 32, 4, 3), Tiles(64, 32, 4, 2))
SMEM_BUDGET = 160 * 1024  # bytes; an H100 block may use 227 KB, the rest is left to the compiler's buffers
# fp32 values a thread may keep live (accumulators and one score tile) before ptxas spills registers to
# local memory; calibrated on the candidates above compiled for sm_90 (a test checks the defaults).
REGISTER_BUDGET = 144


def _smem_bytes(kind: str, t: Tiles, block_d: int, elt: int) -> int:
    """Rough shared memory of one program: resident tiles plus the streamed ones times the pipeline depth."""
    resident, streamed = {"fwd": (t.block_q, 2 * t.block_k), "dq": (2 * t.block_q, 2 * t.block_k),
                          "dkdv": (2 * t.block_k, 2 * t.block_q)}[kind]
    return (resident + streamed * t.num_stages) * block_d * elt


def _live_floats(kind: str, t: Tiles, block_d: int) -> float:
    """fp32 values per thread that stay live through the loop: the accumulators plus one score tile."""
    accumulators = {"fwd": t.block_q, "dq": t.block_q, "dkdv": 2 * t.block_k}[kind] * block_d
    return (accumulators + t.block_q * t.block_k) / (32 * t.num_warps)


def _fitting(kind: str, candidates, block_d: int, elt: int) -> list[Tiles]:
    """The candidates that fit in shared memory (autotuning times these); the smallest if none does."""
    fits = [t for t in candidates if _smem_bytes(kind, t, block_d, elt) <= SMEM_BUDGET]
    return fits or [min(candidates, key=lambda t: _smem_bytes(kind, t, block_d, elt))]


@functools.cache
def _default_tiles(kind: str, block_d: int, elt: int) -> Tiles:
    """The untuned tiles: the first candidate that fits in shared memory and in registers."""
    fits = _fitting(kind, _KERNELS[kind][2], block_d, elt)
    in_registers = [t for t in fits if _live_floats(kind, t, block_d) <= REGISTER_BUDGET]
    return in_registers[0] if in_registers else min(fits, key=lambda t: _live_floats(kind, t, block_d))


def _to_tiles(c: triton.Config) -> Tiles:
    return Tiles(c.kwargs["BLOCK_Q"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages)


def _autotuned(kernel, kind: str, candidates):
    """``kernel`` under triton.autotune: candidates pruned by shared memory, keyed on what changes the best tiles."""

    def prune(configs, named_args, **kwargs):
        elt = named_args["Q"].element_size()
        fits = _fitting(kind, [_to_tiles(c) for c in configs], kwargs["BLOCK_D"], elt)
        return [c for c in configs if _to_tiles(c) in fits]

    configs = [triton.Config({"BLOCK_Q": t.block_q, "BLOCK_K": t.block_k}, num_warps=t.num_warps,
                             num_stages=t.num_stages) for t in candidates]
    # The dtype of every tensor argument joins the key automatically. cache_results keeps the choice on
    # disk (in Triton's cache directory), so only the first run on a machine pays for tuning.
    key = ["Q_BUCKET", "K_BUCKET", "HEAD_DIM", "CAUSAL", "SKIP_MASKED", "SPLIT_DIAGONAL", "UNMASKED_FIRST", "TMA",
           "ATOMIC_DQ"]
    # Timing a candidate runs the kernel: the dQ it adds up must start from zero again each time.
    reset = ["DQ_ACC"] if kind == "dkdv" else None
    return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": prune},
                           reset_to_zero=reset, cache_results=True)(kernel)


_KERNELS = {
    "fwd": (flash_fwd_kernel, _autotuned(flash_fwd_kernel, "fwd", FWD_TILES), FWD_TILES),
    "dkdv": (flash_bwd_dkdv_kernel, _autotuned(flash_bwd_dkdv_kernel, "dkdv", DKDV_TILES), DKDV_TILES),
    "dq": (flash_bwd_dq_kernel, _autotuned(flash_bwd_dq_kernel, "dq", DQ_TILES), DQ_TILES),
}


def _bucket(n: int) -> int:
    # Past a few thousand rows the grid fills the GPU and the best tiles stop changing with length.
    return min(triton.next_power_of_2(n), 4096)


def _launch(kind: str, tiles: Tiles | None, autotune: bool, rows: int, batch_heads: int, args, meta) -> None:
    """Launch one of the three kernels over (tiles of ``rows``, batch*heads) with fixed or tuned tiles."""
    plain, tuned, _ = _KERNELS[kind]
    tile_dim = "BLOCK_K" if kind == "dkdv" else "BLOCK_Q"  # dK/dV programs own key tiles

    def grid(m):
        return (triton.cdiv(rows, m[tile_dim]), batch_heads)

    if tiles is None and autotune and not INTERPRET:
        tuned[grid](*args, **meta)
        return
    if tiles is None:
        tiles = _default_tiles(kind, meta["BLOCK_D"], args[0].element_size())
    plain[grid](*args, **meta, BLOCK_Q=tiles.block_q, BLOCK_K=tiles.block_k,
                num_warps=tiles.num_warps, num_stages=tiles.num_stages)


def _meta(q: torch.Tensor, k: torch.Tensor, is_causal: bool, cfg: FlashConfig) -> dict:
    _, H, n_q, d = q.shape
    return dict(H=H, N_QUERIES=n_q, N_KEYS=k.shape[2], Q_BUCKET=_bucket(n_q), K_BUCKET=_bucket(k.shape[2]),
                HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), CAUSAL=is_causal,
                SKIP_MASKED=cfg.skip_masked_tiles, SPLIT_DIAGONAL=cfg.split_diagonal)


def forward_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                    config: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, H, Nq, d), k, v (B, H, Nk, d), any strides -> O (B, H, Nq, d), L (B, H, Nq) fp32, contiguous."""
    B, H, n_q, d = q.shape
    o = torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
    L = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    launch_forward(q, k, v, o, L, is_causal, FlashConfig.decode(config))
    return o, L


def launch_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, L: torch.Tensor,
                   is_causal: bool, cfg: FlashConfig) -> None:
    """The forward kernel alone, writing into O and L (also timed on its own, for the per-call cost)."""
    B, H, n_q, d = q.shape
    args = (q, k, v, o, L, *q.stride(), *k.stride(), *v.stride(), *o.stride())
    meta = _meta(q, k, is_causal, cfg) | dict(qk_scale=1.0 / math.sqrt(d) * LOG2E.value,
                                              TMA=_use_tma(bool(cfg.tma), k, v))
    _launch("fwd", cfg.fwd, cfg.autotune, n_q, B * H, args, meta)


def _use_tma(tma: bool, *streamed: torch.Tensor) -> bool:
    """Whether a kernel asked to use TMA (``tma``) can for these tensors; if so, the descriptors get their
    scratch memory."""
    use = tma and _tma_ready(*streamed)
    if use and not INTERPRET:
        triton.set_allocator(_descriptor_scratch)
    return use


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether the copy engine can load tiles of these (B, H, N, d) tensors: a contiguous head dim and
    16-byte aligned base and strides (else the kernels load through pointers)."""
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]) for t in tensors)


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global memory in which the kernels build their tensor descriptors (Triton asks for it at launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _one_pass(cfg: FlashConfig, q: torch.Tensor) -> bool:
    """Whether the backward adds dQ up in the dK/dV pass (``cfg.atomic_dq``, else chosen here)."""
    if cfg.atomic_dq is not None:
        return cfg.atomic_dq
    # One pass measured faster at the leaderboard shape on an H100 (chapter 07). Past head dim 64 its
    # extra product's operands spill registers, fp32 operands take twice the registers, the interpreter
    # has no bulk reductions, and deterministic mode rules out additions that land in any order.
    return (not INTERPRET and q.element_size() == 2 and q.shape[-1] <= 64
            and not torch.are_deterministic_algorithms_enabled())


flash_fwd = torch.library.custom_op("systems::flash_fwd", forward_outputs, mutates_args=())


@flash_fwd.register_fake
def _(q, k, v, is_causal, config):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


def backward_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
                   L: torch.Tensor, is_causal: bool, config: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV), contiguous (B, H, N, d), from the 4-d q, k, v, O, dO and L (B, H, Nq) of the forward."""
    cfg = FlashConfig.decode(config)
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    # dO from o.sum().backward() is an expanded tensor with stride 0; O and dO share strides below.
    o, do, L = o.contiguous(), do.contiguous(), L.contiguous()
    meta = _meta(q, k, is_causal, cfg)
    scale = 1.0 / math.sqrt(d)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    block_rows = 64
    flash_bwd_preprocess_kernel[(triton.cdiv(n_q, block_rows), B * H)](
        o, do, delta, *o.stride(), H, n_q, scale, HEAD_DIM=d, BLOCK_D=meta["BLOCK_D"], BLOCK_Q=block_rows)

    dk = torch.empty((B, H, n_k, d), dtype=k.dtype, device=q.device)
    dv = torch.empty_like(dk)
    meta |= dict(qk_scale=scale * LOG2E.value, scale=scale)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    one_pass = _one_pass(cfg, q)
    tma = one_pass if cfg.tma is None else cfg.tma  # by default the single pass loads and reduces with TMA
    # dQ summed over key tiles in fp32, rows padded to BLOCK_D (16-byte aligned for the copy engine)
    dq_acc = torch.zeros((B, H, n_q, meta["BLOCK_D"]), dtype=torch.float32, device=q.device) if one_pass else dk
    reduce_tma = one_pass and not INTERPRET and _use_tma(tma, dq_acc)  # the interpreter has no bulk reductions
    _launch("dkdv", cfg.dkdv, cfg.autotune, n_k, B * H, (q, k, v, do, L, delta, dk, dv, dq_acc, *strides, *dk.stride()),
            meta | dict(UNMASKED_FIRST=cfg.unmasked_first, TMA=_use_tma(tma, q, do), ATOMIC_DQ=one_pass,
                        REDUCE_TMA=reduce_tma))
    if one_pass:
        return dq_acc[..., :d].to(q.dtype), dk, dv
    dq = torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
    _launch("dq", cfg.dq, cfg.autotune, n_q, B * H, (q, k, v, do, L, delta, dq, *strides, *dq.stride()),
            meta | dict(TMA=_use_tma(tma, k, v)))
    return dq, dk, dv


flash_bwd = torch.library.custom_op("systems::flash_bwd", backward_grads, mutates_args=())


@flash_bwd.register_fake
def _(q, k, v, o, do, L, is_causal, config):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def autotune_report() -> dict[str, dict]:
    """Per kernel: the tiles autotuning chose for each key so far, and the seconds its last tuning took."""
    return {kind: {"chosen": {str(key): str(_to_tiles(c)) for key, c in tuned.cache.items()},
                   "tuning_s": getattr(tuned, "bench_time", None)}
            for kind, (_, tuned, _) in _KERNELS.items()}


# ----------------------------------------------------------------------------------------------------
# 3. The autograd.Function and the public function
# ----------------------------------------------------------------------------------------------------

_DEFAULT_CONFIG = FlashConfig().encode()  # a constant list, so torch.compile traces no dataclass code


def _op(custom_op, plain):
    """The custom op while torch.compile traces (an opaque call with a known output shape); in eager mode the
    function itself, sparing the dispatcher's Python layers (a good part of a short call's host time)."""
    return custom_op if torch.compiler.is_compiling() else plain


class FlashAttentionTriton(torch.autograd.Function):
    """FlashAttention-2 with Triton kernels for the forward and both backward passes."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, config=None):
        check_attention_inputs(q, k, v)
        if q.device.type != "cuda" and not INTERPRET:
            raise ValueError(f"Triton kernels need CUDA tensors (or TRITON_INTERPRET=1), got device {q.device}")
        code = _DEFAULT_CONFIG if config is None else config.encode()
        o, L = _op(flash_fwd, forward_outputs)(as_4d(q), as_4d(k), as_4d(v), is_causal, code)
        o, L = o.view(q.shape), L.view(q.shape[:-1])  # (B, [H,] Nq, d), (B, [H,] Nq)
        ctx.is_causal, ctx.config = is_causal, code
        # L is the only saved tensor shaped q.shape[:-1] (the CS336 tests find it that way)
        ctx.save_for_backward(L, q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        L, q, k, v, o = ctx.saved_tensors
        dq, dk, dv = _op(flash_bwd, backward_grads)(as_4d(q), as_4d(k), as_4d(v), as_4d(o), as_4d(do), L,
                                                    ctx.is_causal, ctx.config)
        return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape), None, None


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, config: FlashConfig | None = None
) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> (B, [H,] Nq, d); causal masking is top-left aligned."""
    return FlashAttentionTriton.apply(q, k, v, is_causal, config)

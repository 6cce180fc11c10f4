"""The kernels: FlashAttention-2's forward (Algorithm 1) here and backward (Algorithm 2) in :mod:`.backward_kernels`,
in Triton; how they address, load and store tiles in :mod:`.tile_io`.

The forward runs one program per (query tile, batch*head) and keeps the running max m, sum l and output O in
fp32 registers while it walks over the key tiles. The backward first computes D = rowsum(dO ∘ O), then one pass
over key tiles accumulates dK and dV (each program owns one key tile, so it writes them without atomics). dQ is
summed over key tiles too: either in that same pass, each program adding its share into an fp32 buffer (one pass,
five matrix products per tile pair), or in a second pass over query tiles that recomputes P and dP (seven products,
no atomics, deterministic). P is recomputed from the saved log-sum-exp L. Causal masking (top-left aligned: key j
is visible to query i iff j <= i, also when Nq != Nk) skips tiles that are masked for every row and compares
indices only on tiles that straddle the diagonal or the end of the sequence; elsewhere the loop runs without masks.

A head dim that is not a power of two is padded with zeros to one (masked loads), or, where it is the sum of two
(``TAIL_D``: 80 = 64 + 16), held as two column blocks: every product over the head dim is two products accumulated
into one result, every product into it two results, so the kernels compute exactly d columns. Each tensor then has
a tail next to it (``k_t`` beside ``k``); without a tail the name stands for its main block and is never read.

Tiles are addressed with pointer arithmetic and masks, or, with ``TMA``, through tensor descriptors the Hopper
copy engine loads. Compiled for sm_90 (Triton 3.6) with unit head-dim strides, the tile loads in the loops become
pipelined cp.async copies and the products wgmma. Constexpr switches (CAPS) are decided on the host by
:mod:`systems.attention.flash_triton.launch`, the ``EVEN_*`` flags included, so a launch goes straight to the
compiled kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from systems.attention.flash_triton.tile_io import (load_pair, sources, store_pair, stream, stream_tail, tail_cols,
                                                    zeros_pair)

# exp(x) = exp2(x * log2(e)); exp2 is the cheaper instruction. A constexpr: kernels may read no other globals.
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def key_ranges(q0, N_KEYS, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
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
def _fwd_inner(acc, acc_t, l_i, m_i, q, q_t, K, K_t, V, V_t, stride_kn, stride_kd, stride_vn, stride_vd, offs_q,
               offs_d, offs_t, start, end, N_KEYS, qk_scale, BLOCK_K: tl.constexpr, HEAD_DIM: tl.constexpr,
               TAIL_D: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr,
               CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """Online softmax over key tiles [start, end): the body of Algorithm 1, scores in log2 units."""
    for k0 in range(start, end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k = stream(K, k0, offs_k, offs_d, stride_kn, stride_kd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                   TMA)  # (BLOCK_K, BLOCK_D)
        v = stream(V, k0, offs_k, offs_d, stride_vn, stride_vd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS, TMA)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_Q, BLOCK_K), not yet scaled
        if TAIL_D:
            k_t = stream_tail(K_t, k, k0, offs_k, offs_t, stride_kn, stride_kd, N_KEYS, HEAD_DIM, TAIL_D,
                              CHECK_ROWS, TMA)
            v_t = stream_tail(V_t, v, k0, offs_k, offs_t, stride_vn, stride_vd, N_KEYS, HEAD_DIM, TAIL_D,
                              CHECK_ROWS, TMA)
            s = tl.dot(q_t, tl.trans(k_t), acc=s)
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
        if TAIL_D:
            acc_t = tl.dot(p.to(v.dtype), v_t, acc=acc_t * alpha[:, None])
        m_i = m_new
    return acc, acc_t, l_i, m_i


@triton.jit
def tile_and_head(n_tiles, HEAD_GROUP, LONGEST_LAST: tl.constexpr):
    """This program's tile and (batch, head). The GPU starts programs in the order of their ids. The ids run over
    groups of HEAD_GROUP heads, one group after another; within a group, over its heads first, then tiles, longest
    causal tiles first: the end of each group is filled by short tiles, and a group's streamed rows stay in L2.
    ``LONGEST_LAST``: tiles of higher index do more work (causal query tiles), so the ids count down."""
    pid = tl.program_id(0)
    group = pid // (HEAD_GROUP * n_tiles)
    first = group * HEAD_GROUP
    heads = tl.minimum(HEAD_GROUP, tl.num_programs(0) // n_tiles - first)
    within = pid - group * HEAD_GROUP * n_tiles
    tile = within // heads
    if LONGEST_LAST:
        tile = n_tiles - 1 - tile
    return tile, first + within % heads


@triton.jit
def flash_fwd_kernel(
    Q, K, V, O, L,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    H, N_QUERIES, N_KEYS, qk_scale,
    Q_BUCKET, K_BUCKET,  # autotuning keys only (sequence lengths rounded up)
    HEAD_GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, CAUSAL: tl.constexpr,
    SKIP_MASKED: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, TMA: tl.constexpr,
):
    """O (B, H, Nq, d) and L (B, H, Nq) fp32 (natural log) for one query tile of one (batch, head)."""
    qk_scale = tl.cast(qk_scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    query_tile, bh = tile_and_head(tl.cdiv(N_QUERIES, BLOCK_Q), HEAD_GROUP, CAUSAL)  # causal: last tiles see most keys
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)  # int64: offsets can pass 2**31 elements
    q0 = query_tile * BLOCK_Q
    CHECK_COLS: tl.constexpr = BLOCK_D + TAIL_D != HEAD_DIM
    offs_q = q0 + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tail_cols(offs_d, BLOCK_D, TAIL_D)
    K_bh, K_t = sources(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, HEAD_DIM, BLOCK_K, BLOCK_D, TAIL_D, TMA)
    V_bh, V_t = sources(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, HEAD_DIM, BLOCK_K, BLOCK_D, TAIL_D, TMA)

    q, q_t = load_pair(Q + b * stride_qb + h * stride_qh, offs_q, offs_d, offs_t, stride_qn, stride_qd, N_QUERIES,
                       HEAD_DIM, TAIL_D, CHECK_COLS)  # (BLOCK_Q, BLOCK_D), (BLOCK_Q, TAIL_D)
    m_i = tl.full((BLOCK_Q,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc, acc_t = zeros_pair(BLOCK_Q, BLOCK_D, TAIL_D)

    mid, hi = key_ranges(q0, N_KEYS, BLOCK_Q, BLOCK_K, CAUSAL, SKIP_MASKED, SPLIT_DIAGONAL)
    acc, acc_t, l_i, m_i = _fwd_inner(acc, acc_t, l_i, m_i, q, q_t, K_bh, K_t, V_bh, V_t, stride_kn, stride_kd,
                                      stride_vn, stride_vd, offs_q, offs_d, offs_t, 0, mid, N_KEYS, qk_scale, BLOCK_K,
                                      HEAD_DIM, TAIL_D, CAUSAL, False, False, CHECK_COLS, TMA)
    acc, acc_t, l_i, m_i = _fwd_inner(acc, acc_t, l_i, m_i, q, q_t, K_bh, K_t, V_bh, V_t, stride_kn, stride_kd,
                                      stride_vn, stride_vd, offs_q, offs_d, offs_t, mid, hi, N_KEYS, qk_scale,
                                      BLOCK_K, HEAD_DIM, TAIL_D, CAUSAL, True, not EVEN_K, CHECK_COLS, TMA)

    store_pair(O + b * stride_ob + h * stride_oh, acc / l_i[:, None], acc_t / l_i[:, None], offs_q, offs_d, offs_t,
               stride_on, stride_od, N_QUERIES, HEAD_DIM, TAIL_D)
    # L is contiguous (B, H, Nq); m_i is in log2 units, L in natural log as the tests compare it
    tl.store(L + bh.to(tl.int64) * N_QUERIES + offs_q, (m_i + tl.math.log2(l_i)) / LOG2E,
             mask=offs_q < N_QUERIES)

"""The backward's kernels (FlashAttention-2's Algorithm 2): the preprocessing D = rowsum(dO ∘ O), the dK/dV pass
(which can add dQ up too: the one-pass backward) and the dQ pass. :mod:`.kernels` says how they work.
"""

from __future__ import annotations

import triton
import triton.language as tl

from systems.attention.flash_triton.kernels import LOG2E, key_ranges, tile_and_head
from systems.attention.flash_triton.tile_io import (load, load_pair, sources, store_pair, stream, stream_tail, tail_cols,
                                                    tail_source, tile, zeros_pair)


@triton.jit
def flash_bwd_preprocess_kernel(O, DO, DELTA, DQ_ACC, stride_ob, stride_oh, stride_on, stride_od,
                                stride_dob, stride_doh, stride_don, stride_dod, H, N_QUERIES, scale,
                                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_Q: tl.constexpr,
                                ZERO_DQ: tl.constexpr, DQ_WIDTH: tl.constexpr):
    """D/√d = rowsum(dO ∘ O) * scale in fp32, (B, H, Nq), reading dO through its own strides (the stride-0
    gradient of ``o.sum()`` included); with ``ZERO_DQ`` also the zeros the one-pass backward adds dQ onto, so
    that the accumulator (rows DQ_WIDTH ≤ BLOCK_D wide) needs no memset launch of its own. BLOCK_D: the head dim
    padded to a power of two, also where the other kernels split it.

    Scaled, so that the backward kernels compute dS/√d = P ∘ (dP/√d − D/√d) with one fused multiply-add
    per score, and dQ and dK come out of their products already scaled."""
    scale = tl.cast(scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    offs_q = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    o = load(tile(O + b * stride_ob + h * stride_oh, offs_q, offs_d, stride_on, stride_od), offs_q, offs_d,
             N_QUERIES, HEAD_DIM, True, True)
    do = load(tile(DO + b * stride_dob + h * stride_doh, offs_q, offs_d, stride_don, stride_dod), offs_q, offs_d,
              N_QUERIES, HEAD_DIM, True, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1) * scale
    in_seq = offs_q < N_QUERIES
    tl.store(DELTA + bh.to(tl.int64) * N_QUERIES + offs_q, delta, mask=in_seq)
    if ZERO_DQ:  # (B, H, Nq, DQ_WIDTH) fp32
        rows = DQ_ACC + bh.to(tl.int64) * N_QUERIES * DQ_WIDTH + offs_q[:, None] * DQ_WIDTH + offs_d[None, :]
        in_row = offs_d < DQ_WIDTH
        tl.store(rows, tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32), mask=in_seq[:, None] & in_row[None, :])


@triton.jit
def _dkdv_inner(dk, dk_t, dv, dv_t, k, k_t, v, v_t, Q, Q_t, DO, DO_t, DQ, DQ_t, stride_qn, stride_qd, stride_don,
                stride_dod, L_bh, DELTA_bh, offs_k, offs_d, offs_t, start, end, N_QUERIES, qk_scale, scale,
                BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, HEAD_DIM: tl.constexpr,
                MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr, TMA: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, REDUCE_TMA: tl.constexpr):
    """dK, dV of one key tile over query tiles [start, end), in the transposed frame (keys as rows).

    With ``ATOMIC_DQ`` this key tile's share of dQ is added to the fp32 accumulator DQ (rows BLOCK_D + TAIL_D
    wide) as well, through the copy engine's bulk reduction with ``REDUCE_TMA``, else with atomic adds."""
    for q0 in range(start, end, BLOCK_Q):
        offs_q = q0 + tl.arange(0, BLOCK_Q)
        q = stream(Q, q0, offs_q, offs_d, stride_qn, stride_qd, N_QUERIES, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                   TMA)  # (BLOCK_Q, BLOCK_D)
        do = stream(DO, q0, offs_q, offs_d, stride_don, stride_dod, N_QUERIES, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                    TMA)
        q_t = stream_tail(Q_t, q, q0, offs_q, offs_t, stride_qn, stride_qd, N_QUERIES, HEAD_DIM, TAIL_D, CHECK_ROWS,
                          TMA)
        do_t = stream_tail(DO_t, do, q0, offs_q, offs_t, stride_don, stride_dod, N_QUERIES, HEAD_DIM, TAIL_D,
                           CHECK_ROWS, TMA)
        in_seq = offs_q < N_QUERIES
        # Rows past the end get L = +inf, so their P is exactly 0 and they add nothing below.
        lse = tl.load(L_bh + offs_q, mask=in_seq, other=float("inf")) * LOG2E
        delta = tl.load(DELTA_bh + offs_q, mask=in_seq, other=0.0)
        s_t = tl.dot(k, tl.trans(q))  # Sᵀ (BLOCK_K, BLOCK_Q)
        if TAIL_D:
            s_t = tl.dot(k_t, tl.trans(q_t), acc=s_t)
        s_t = s_t * qk_scale  # log2 units
        # dPᵀ = V dOᵀ (eq. 16) before dV's product: Triton 3.6 waits for a product the loop reads right after
        # issuing it, and wgmma waits complete in issue order, so issued after dV's it would wait for that one
        # too, where in this order dV's product runs while dSᵀ is computed.
        dp_t = tl.dot(v, tl.trans(do))
        if TAIL_D:
            dp_t = tl.dot(v_t, tl.trans(do_t), acc=dp_t)
        if MASKED:
            s_t = tl.where(offs_k[:, None] <= offs_q[None, :], s_t, float("-inf"))
        p_t = tl.math.exp2(s_t - lse[None, :])  # Pᵀ = exp(S - L)ᵀ, eq. 14
        dv = tl.dot(p_t.to(do.dtype), do, acc=dv)  # dV += Pᵀ dO, eq. 15
        if TAIL_D:
            dv_t = tl.dot(p_t.to(do.dtype), do_t, acc=dv_t)
        ds_t = (p_t * (dp_t * scale - delta[None, :])).to(q.dtype)  # dSᵀ/√d, eq. 17 (delta holds D/√d)
        dk = tl.dot(ds_t, q, acc=dk)  # dK += dSᵀ Q, eq. 19
        if TAIL_D:
            dk_t = tl.dot(ds_t, q_t, acc=dk_t)
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t), k)  # this key tile's part of dQ = dS K, eq. 18
            _add_dq(DQ, dq, q0, offs_q, offs_d, in_seq, BLOCK_D + TAIL_D, REDUCE_TMA)
            if TAIL_D:
                _add_dq(DQ_t, tl.dot(tl.trans(ds_t), k_t), q0, offs_q, offs_t, in_seq, BLOCK_D + TAIL_D, REDUCE_TMA)
    return dk, dk_t, dv, dv_t


@triton.jit
def _add_dq(DQ, dq, q0, offs_q, cols, in_seq, DQ_WIDTH: tl.constexpr, REDUCE_TMA: tl.constexpr):
    """dQ's share added into the fp32 accumulator's columns ``cols`` (a descriptor over them with REDUCE_TMA)."""
    if REDUCE_TMA:
        DQ.atomic_add([q0, 0], dq)
    else:
        tl.atomic_add(DQ + offs_q[:, None] * DQ_WIDTH + cols[None, :], dq, mask=in_seq[:, None], sem="relaxed")


@triton.jit
def flash_bwd_dkdv_kernel(
    Q, K, V, DO, L, DELTA, DK, DV, DQ_ACC,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,  # dK and dV share this contiguous layout
    H, N_QUERIES, N_KEYS, qk_scale, scale,
    Q_BUCKET, K_BUCKET, HEAD_GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, CAUSAL: tl.constexpr,
    SKIP_MASKED: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_Q: tl.constexpr, UNMASKED_FIRST: tl.constexpr, TMA: tl.constexpr, ATOMIC_DQ: tl.constexpr,
    REDUCE_TMA: tl.constexpr,
):
    """Backward pass 1: each program owns one key tile and sums its dK, dV over all query tiles (and, with
    ATOMIC_DQ, adds its share of dQ into DQ_ACC, fp32 (B, H, Nq, BLOCK_D + TAIL_D), so that pass 2 is not
    needed)."""
    qk_scale = tl.cast(qk_scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    scale = tl.cast(scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    key_tile, bh = tile_and_head(tl.cdiv(N_KEYS, BLOCK_K), HEAD_GROUP, False)  # causal: first tiles seen most
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    k0 = key_tile * BLOCK_K
    CHECK_COLS: tl.constexpr = BLOCK_D + TAIL_D != HEAD_DIM
    DQ_WIDTH: tl.constexpr = BLOCK_D + TAIL_D
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tail_cols(offs_d, BLOCK_D, TAIL_D)

    k, k_t = load_pair(K + b * stride_kb + h * stride_kh, offs_k, offs_d, offs_t, stride_kn, stride_kd, N_KEYS,
                       HEAD_DIM, TAIL_D, CHECK_COLS)  # (BLOCK_K, BLOCK_D), (BLOCK_K, TAIL_D)
    v, v_t = load_pair(V + b * stride_vb + h * stride_vh, offs_k, offs_d, offs_t, stride_vn, stride_vd, N_KEYS,
                       HEAD_DIM, TAIL_D, CHECK_COLS)
    dk, dk_t = zeros_pair(BLOCK_K, BLOCK_D, TAIL_D)
    dv, dv_t = zeros_pair(BLOCK_K, BLOCK_D, TAIL_D)
    Q_bh, Q_t = sources(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, HEAD_DIM, BLOCK_Q, BLOCK_D, TAIL_D,
                        TMA)
    DO_bh, DO_t = sources(DO + b * stride_dob + h * stride_doh, N_QUERIES, stride_don, HEAD_DIM, BLOCK_Q, BLOCK_D,
                          TAIL_D, TMA)
    L_bh = L + bh.to(tl.int64) * N_QUERIES
    DELTA_bh = DELTA + bh.to(tl.int64) * N_QUERIES
    DQ_base = DQ_ACC + bh.to(tl.int64) * N_QUERIES * DQ_WIDTH
    DQ_bh = DQ_base
    if REDUCE_TMA:
        DQ_bh = tl.make_tensor_descriptor(DQ_base, [N_QUERIES, DQ_WIDTH], [DQ_WIDTH, 1], [BLOCK_Q, BLOCK_D])
    DQ_t = tail_source(DQ_base, DQ_bh, N_QUERIES, DQ_WIDTH, BLOCK_Q, BLOCK_D, TAIL_D, REDUCE_TMA)

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
        dk, dk_t, dv, dv_t = _dkdv_inner(dk, dk_t, dv, dv_t, k, k_t, v, v_t, Q_bh, Q_t, DO_bh, DO_t, DQ_bh, DQ_t,
                                         stride_qn, stride_qd, stride_don, stride_dod, L_bh, DELTA_bh, offs_k, offs_d,
                                         offs_t, mid, N_QUERIES, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D, TAIL_D,
                                         HEAD_DIM, False, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)
    dk, dk_t, dv, dv_t = _dkdv_inner(dk, dk_t, dv, dv_t, k, k_t, v, v_t, Q_bh, Q_t, DO_bh, DO_t, DQ_bh, DQ_t,
                                     stride_qn, stride_qd, stride_don, stride_dod, L_bh, DELTA_bh, offs_k, offs_d,
                                     offs_t, lo, mid, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D, TAIL_D, HEAD_DIM,
                                     True, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)
    if not UNMASKED_FIRST:
        dk, dk_t, dv, dv_t = _dkdv_inner(dk, dk_t, dv, dv_t, k, k_t, v, v_t, Q_bh, Q_t, DO_bh, DO_t, DQ_bh, DQ_t,
                                         stride_qn, stride_qd, stride_don, stride_dod, L_bh, DELTA_bh, offs_k, offs_d,
                                         offs_t, mid, N_QUERIES, N_QUERIES, qk_scale, scale, BLOCK_Q, BLOCK_D, TAIL_D,
                                         HEAD_DIM, False, not EVEN_Q, CHECK_COLS, TMA, ATOMIC_DQ, REDUCE_TMA)

    out = b * stride_dkb + h * stride_dkh
    store_pair(DK + out, dk, dk_t, offs_k, offs_d, offs_t, stride_dkn, stride_dkd, N_KEYS, HEAD_DIM, TAIL_D)
    store_pair(DV + out, dv, dv_t, offs_k, offs_d, offs_t, stride_dkn, stride_dkd, N_KEYS, HEAD_DIM, TAIL_D)


@triton.jit
def _dq_inner(dq, dq_t, q, q_t, do, do_t, lse, delta, K, K_t, V, V_t, stride_kn, stride_kd, stride_vn, stride_vd,
              offs_q, offs_d, offs_t, start, end, N_KEYS, qk_scale, scale, BLOCK_K: tl.constexpr,
              HEAD_DIM: tl.constexpr, TAIL_D: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
              CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """dQ of one query tile over key tiles [start, end)."""
    for k0 in range(start, end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k = stream(K, k0, offs_k, offs_d, stride_kn, stride_kd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS,
                   TMA)  # (BLOCK_K, BLOCK_D)
        v = stream(V, k0, offs_k, offs_d, stride_vn, stride_vd, N_KEYS, HEAD_DIM, CHECK_ROWS, CHECK_COLS, TMA)
        k_t = stream_tail(K_t, k, k0, offs_k, offs_t, stride_kn, stride_kd, N_KEYS, HEAD_DIM, TAIL_D, CHECK_ROWS,
                          TMA)
        v_t = stream_tail(V_t, v, k0, offs_k, offs_t, stride_vn, stride_vd, N_KEYS, HEAD_DIM, TAIL_D, CHECK_ROWS,
                          TMA)
        s = tl.dot(q, tl.trans(k))
        if TAIL_D:
            s = tl.dot(q_t, tl.trans(k_t), acc=s)
        s = s * qk_scale  # (BLOCK_Q, BLOCK_K), log2 units
        if MASKED:
            # Keys past Nk must be masked here: their P = exp(-L) could overflow and turn 0 * inf into NaN.
            keep = offs_k[None, :] < N_KEYS
            if CAUSAL:
                keep = keep & (offs_k[None, :] <= offs_q[:, None])
            s = tl.where(keep, s, float("-inf"))
        p = tl.math.exp2(s - lse[:, None])  # eq. 14
        dp = tl.dot(do, tl.trans(v))  # eq. 16
        if TAIL_D:
            dp = tl.dot(do_t, tl.trans(v_t), acc=dp)
        ds = p * (dp * scale - delta[:, None])  # dS/√d, eq. 17 (delta holds D/√d)
        dq = tl.dot(ds.to(k.dtype), k, acc=dq)  # eq. 18
        if TAIL_D:
            dq_t = tl.dot(ds.to(k.dtype), k_t, acc=dq_t)
    return dq, dq_t


@triton.jit
def flash_bwd_dq_kernel(
    Q, K, V, DO, L, DELTA, DQ,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    H, N_QUERIES, N_KEYS, qk_scale, scale,
    Q_BUCKET, K_BUCKET, HEAD_GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, CAUSAL: tl.constexpr,
    SKIP_MASKED: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, TMA: tl.constexpr,
):
    """Backward pass 2: each program owns one query tile and sums its dQ over the key tiles it sees."""
    qk_scale = tl.cast(qk_scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    scale = tl.cast(scale, tl.float32)  # fp64 when the compiler launches the kernel with a Python float
    query_tile, bh = tile_and_head(tl.cdiv(N_QUERIES, BLOCK_Q), HEAD_GROUP, CAUSAL)  # causal: last tiles see most keys
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    q0 = query_tile * BLOCK_Q
    CHECK_COLS: tl.constexpr = BLOCK_D + TAIL_D != HEAD_DIM
    offs_q = q0 + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    offs_t = tail_cols(offs_d, BLOCK_D, TAIL_D)
    in_seq = offs_q < N_QUERIES

    q, q_t = load_pair(Q + b * stride_qb + h * stride_qh, offs_q, offs_d, offs_t, stride_qn, stride_qd, N_QUERIES,
                       HEAD_DIM, TAIL_D, CHECK_COLS)  # (BLOCK_Q, BLOCK_D), (BLOCK_Q, TAIL_D)
    do, do_t = load_pair(DO + b * stride_dob + h * stride_doh, offs_q, offs_d, offs_t, stride_don, stride_dod,
                         N_QUERIES, HEAD_DIM, TAIL_D, CHECK_COLS)
    # Rows past Nq load L = 0, D = 0: finite, and their dQ is never stored.
    lse = tl.load(L + bh.to(tl.int64) * N_QUERIES + offs_q, mask=in_seq, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh.to(tl.int64) * N_QUERIES + offs_q, mask=in_seq, other=0.0)
    dq, dq_t = zeros_pair(BLOCK_Q, BLOCK_D, TAIL_D)
    K_bh, K_t = sources(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, HEAD_DIM, BLOCK_K, BLOCK_D, TAIL_D, TMA)
    V_bh, V_t = sources(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, HEAD_DIM, BLOCK_K, BLOCK_D, TAIL_D, TMA)

    mid, hi = key_ranges(q0, N_KEYS, BLOCK_Q, BLOCK_K, CAUSAL, SKIP_MASKED, SPLIT_DIAGONAL)
    dq, dq_t = _dq_inner(dq, dq_t, q, q_t, do, do_t, lse, delta, K_bh, K_t, V_bh, V_t, stride_kn, stride_kd, stride_vn,
                         stride_vd, offs_q, offs_d, offs_t, 0, mid, N_KEYS, qk_scale, scale, BLOCK_K, HEAD_DIM,
                         TAIL_D, CAUSAL, False, False, CHECK_COLS, TMA)
    dq, dq_t = _dq_inner(dq, dq_t, q, q_t, do, do_t, lse, delta, K_bh, K_t, V_bh, V_t, stride_kn, stride_kd, stride_vn,
                         stride_vd, offs_q, offs_d, offs_t, mid, hi, N_KEYS, qk_scale, scale, BLOCK_K, HEAD_DIM,
                         TAIL_D, CAUSAL, True, not EVEN_K, CHECK_COLS, TMA)

    store_pair(DQ + b * stride_dqb + h * stride_dqh, dq, dq_t, offs_q, offs_d, offs_t, stride_dqn, stride_dqd,
               N_QUERIES, HEAD_DIM, TAIL_D)

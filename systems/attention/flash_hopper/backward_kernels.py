"""The backward kernels written for Hopper in Gluon: dK and dV in one kernel, dQ in another (no atomics, the split the
portable Triton kernel uses too). A program owns 128 rows (two warpgroups of 64) and walks the tiles of the other
side through a ring of shared-memory stages that the copy engine fills; its warps start the loads themselves.

Not warp-specialised: ptxas (CUDA 13.0) compiles every Gluon kernel here that has a producer partition and consumer
warpgroups with its products serialised (its warning C7512), the forward's ``fwd_ws_kernel`` included, so the overlap
below would be lost there. In one warpgroup the two products that read the same tile, S and dP, are issued together
and waited for one at a time: the exponentials of P run while dP is on the tensor cores, and the products that
accumulate (dV and dK, or dQ) stay in flight into the next tile, retired by the first wait there. Triton 3.6 does not
make this overlap of the portable kernels (it waits for S and dP both before the first exponential).

* :func:`bwd_dkdv_kernel`: a program owns 128 keys of one (batch, head) and walks the query tiles that see them (Q
  and dO through the ring), in the transposed frame: Sᵀ = K Qᵀ, Pᵀ, dPᵀ = V dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ/√d − D/√d),
  dV += Pᵀ dO, dK += dSᵀ Q, with Pᵀ and dSᵀ from registers.
* :func:`bwd_dq_kernel`: a program owns 128 queries and walks the key tiles they see (K and V through the ring):
  S = Q Kᵀ, P, dP = dO Vᵀ, dS, dQ += dS K.

D/√d is the Triton preprocessing kernel's (``flash_bwd_preprocess_kernel``), so dK and dQ come out scaled. Query rows
past the end load L = +inf (their P is exactly 0); key columns past the end are masked where they would reach a row
that is kept (in dQ), and give rows that the stores clip (in dK, dV).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_init, warpgroup_mma_wait

from systems.attention.flash_hopper.kernels import ROWS, _descriptor, _key_tiles, operand_layout, output_layout, \
    score_layout

LOG2E = gl.constexpr(1.4426950408889634)
BLOCK_ROWS = gl.constexpr(2 * ROWS)  # a program's own rows: keys in dK/dV, queries in dQ
NUM_WARPS = gl.constexpr(8)


@gluon.jit
def _program(n_tiles, H):
    """This program's tile and (batch, head), tile-major so that every head's first tile runs first."""
    pid = gl.program_id(0)
    bh_count = gl.num_programs(0) // n_tiles
    bh = pid % bh_count
    return pid // bh_count, bh, (bh // H).to(gl.int64), (bh % H).to(gl.int64)


@gluon.jit
def _query_tiles(k0, N_QUERIES, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """Query tiles that see keys [k0, k0 + BLOCK_ROWS): [lo, hi), the first [lo, mid) of them masked (the diagonal)."""
    hi = gl.cdiv(N_QUERIES, BLOCK_M)
    if CAUSAL:
        lo = gl.minimum(k0 // BLOCK_M, hi)
        mid = gl.minimum(gl.cdiv(k0 + BLOCK_ROWS - 1, BLOCK_M), hi)
    else:
        lo = hi * 0
        mid = lo
    return lo, mid, hi


@gluon.jit
def _load_pair(desc_a, desc_b, a_smem, b_smem, ready, t, T, first, BLOCK: gl.constexpr, STAGES: gl.constexpr):
    """Start loading ring tile t (rows ``first + t * BLOCK`` of A and B) into its stage, if there is such a tile."""
    stage = t % STAGES
    mbarrier.expect(ready.index(stage), desc_a.block_type.nbytes + desc_b.block_type.nbytes, pred=t < T)
    tma.async_copy_global_to_shared(desc_a, [first + t * BLOCK, 0], ready.index(stage), a_smem.index(stage),
                                    pred=t < T)
    tma.async_copy_global_to_shared(desc_b, [first + t * BLOCK, 0], ready.index(stage), b_smem.index(stage),
                                    pred=t < T)


@gluon.jit
def _start(desc_a, desc_b, desc_c, desc_d, a_smem, b_smem, c_smem, d_smem, own_ready, ready, r0, T, first,
           BLOCK: gl.constexpr, STAGES: gl.constexpr):
    """The program's own rows of A and B, and the first ``STAGES - 1`` ring tiles of C and D."""
    mbarrier.expect(own_ready, desc_a.block_type.nbytes + desc_b.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_a, [r0, 0], own_ready, a_smem)
    tma.async_copy_global_to_shared(desc_b, [r0, 0], own_ready, b_smem)
    for t in gl.static_range(STAGES - 1):
        _load_pair(desc_c, desc_d, c_smem, d_smem, ready, t, T, first, BLOCK, STAGES)
    mbarrier.wait(own_ready, 0)


@gluon.jit
def _store_rows(x, smem, desc, r0):
    """The program's rows out through a free shared-memory tile and the copy engine (rows past the end clipped)."""
    smem.store(x.to(smem.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(desc, [r0, 0], smem)
    tma.store_wait(pendings=0)


@gluon.jit
def _barriers(STAGES: gl.constexpr):
    own_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(own_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    return own_ready, ready


# ---- dK and dV: keys as rows ---------------------------------------------------------------------------------


@gluon.jit
def _dkdv_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, desc_q, desc_do, L_bh, D_bh, k0, t0, j_lo, j_hi,
                T, N_QUERIES, qk_scale, scale, s_layout: gl.constexpr, a_layout: gl.constexpr, BLOCK_M: gl.constexpr,
                STAGES: gl.constexpr, MASKED: gl.constexpr):
    """Query tiles [j_lo, j_hi), ring tiles from t0 on. ``dk``, ``dv`` arrive and leave with their last products in
    flight."""
    keys = k0 + gl.arange(0, BLOCK_ROWS, layout=gl.SliceLayout(1, s_layout))
    first = (j_lo - t0) * BLOCK_M
    for j in range(j_lo, j_hi):
        t = t0 + j - j_lo
        stage = t % STAGES
        cols = j * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        in_seq = cols < N_QUERIES
        lse = gl.load(L_bh + cols, mask=in_seq, other=float("inf")) * LOG2E  # past the end: P = 0
        delta = gl.load(D_bh + cols, mask=in_seq, other=0.0)
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        zero = gl.zeros([BLOCK_ROWS, BLOCK_M], gl.float32, s_layout)
        s_t = warpgroup_mma(k_smem, q_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        dp_t = warpgroup_mma(v_smem, do_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t,))  # also retires the tile before's dV and dK
        _load_pair(desc_q, desc_do, q_smem, do_smem, ready, t + STAGES - 1, T, first, BLOCK_M, STAGES)
        if MASKED:
            s_t = gl.where(keys[:, None] <= cols[None, :], s_t, float("-inf"))
        p_t = gl.exp2(s_t * qk_scale - lse[None, :])  # Pᵀ, while dPᵀ is on the tensor cores
        dp_t = warpgroup_mma_wait(num_outstanding=0, deps=(dp_t,))
        ds_t = p_t * (dp_t * scale - delta[None, :])  # dSᵀ/√d
        dv = warpgroup_mma(gl.convert_layout(p_t.to(q_smem.dtype), a_layout), do_smem.index(stage), dv,
                           is_async=True)
        dk = warpgroup_mma(gl.convert_layout(ds_t.to(q_smem.dtype), a_layout), q_smem.index(stage), dk,
                           is_async=True)
    return dk, dv


@gluon.jit
def bwd_dkdv_kernel(Q, K, V, DO, L, DELTA, DK, DV, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_dkb, stride_dkh,
                    stride_dkn, H, N_QUERIES, N_KEYS, scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                    STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = Q.dtype.element_ty
    scale = scale.to(gl.float32)  # 1/√d; fp64 when the compiler's code passes a Python float
    qk_scale = scale * LOG2E  # scores in log2 units
    s_layout: gl.constexpr = score_layout(NUM_WARPS, BLOCK_M)
    o_layout: gl.constexpr = output_layout(NUM_WARPS, HEAD_DIM)
    a_layout: gl.constexpr = operand_layout(NUM_WARPS, HEAD_DIM)
    key_tile, bh, b, h = _program(gl.cdiv(N_KEYS, BLOCK_ROWS), H)
    k0 = key_tile * BLOCK_ROWS
    desc_k = _descriptor(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, BLOCK_ROWS, HEAD_DIM)
    desc_v = _descriptor(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, BLOCK_ROWS, HEAD_DIM)
    desc_q = _descriptor(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, BLOCK_M, HEAD_DIM)
    desc_do = _descriptor(DO + b * stride_dob + h * stride_doh, N_QUERIES, stride_don, BLOCK_M, HEAD_DIM)
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_ROWS, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_ROWS, HEAD_DIM], desc_v.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], desc_q.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], desc_do.layout)
    kv_ready, ready = _barriers(STAGES)
    j_lo, j_mid, j_hi = _query_tiles(k0, N_QUERIES, BLOCK_M, CAUSAL)
    T = j_hi - j_lo
    _start(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_smem, do_smem, kv_ready, ready, k0, T, j_lo * BLOCK_M,
           BLOCK_M, STAGES)

    L_bh = L + bh.to(gl.int64) * N_QUERIES
    D_bh = DELTA + bh.to(gl.int64) * N_QUERIES
    dk = warpgroup_mma_init(gl.zeros([BLOCK_ROWS, HEAD_DIM], gl.float32, o_layout))
    dv = warpgroup_mma_init(gl.zeros([BLOCK_ROWS, HEAD_DIM], gl.float32, o_layout))
    if CAUSAL:
        dk, dv = _dkdv_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, desc_q, desc_do, L_bh, D_bh, k0, 0, j_lo,
                             j_mid, T, N_QUERIES, qk_scale, scale, s_layout, a_layout, BLOCK_M, STAGES, True)
    dk, dv = _dkdv_tiles(dk, dv, k_smem, v_smem, q_smem, do_smem, ready, desc_q, desc_do, L_bh, D_bh, k0, j_mid - j_lo,
                         j_mid, j_hi, T, N_QUERIES, qk_scale, scale, s_layout, a_layout, BLOCK_M, STAGES, False)
    dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
    # K and V are read for the last time: their tiles take dK and dV out
    _store_rows(dk, k_smem, _descriptor(DK + b * stride_dkb + h * stride_dkh, N_KEYS, stride_dkn, BLOCK_ROWS,
                                        HEAD_DIM), k0)
    _store_rows(dv, v_smem, _descriptor(DV + b * stride_dkb + h * stride_dkh, N_KEYS, stride_dkn, BLOCK_ROWS,
                                        HEAD_DIM), k0)


# ---- dQ: queries as rows -------------------------------------------------------------------------------------


@gluon.jit
def _dq_tiles(dq, q_smem, do_smem, k_smem, v_smem, ready, desc_k, desc_v, lse, delta, q0, t_lo, t_hi, T, N_KEYS,
              qk_scale, scale, s_layout: gl.constexpr, a_layout: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles [t_lo, t_hi) (ring tiles too). ``dq`` arrives and leaves with its last product in flight."""
    rows = q0 + gl.arange(0, BLOCK_ROWS, layout=gl.SliceLayout(1, s_layout))
    for t in range(t_lo, t_hi):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        zero = gl.zeros([BLOCK_ROWS, BLOCK_N], gl.float32, s_layout)
        s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_smem, v_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # also retires the tile before's dQ
        _load_pair(desc_k, desc_v, k_smem, v_smem, ready, t + STAGES - 1, T, 0, BLOCK_N, STAGES)
        if MASKED:  # keys past the end too: their P = exp(-L) could overflow, and 0 * inf is NaN
            cols = t * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            keep = cols[None, :] < N_KEYS
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None])
            s = gl.where(keep, s, float("-inf"))
        p = gl.exp2(s * qk_scale - lse[:, None])  # while dP is on the tensor cores
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
        ds = p * (dp * scale - delta[:, None])  # dS/√d
        dq = warpgroup_mma(gl.convert_layout(ds.to(q_smem.dtype), a_layout), k_smem.index(stage), dq, is_async=True)
    return dq


@gluon.jit
def bwd_dq_kernel(Q, K, V, DO, L, DELTA, DQ, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                  stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_dqb, stride_dqh,
                  stride_dqn, H, N_QUERIES, N_KEYS, scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = Q.dtype.element_ty
    scale = scale.to(gl.float32)
    qk_scale = scale * LOG2E
    s_layout: gl.constexpr = score_layout(NUM_WARPS, BLOCK_N)
    o_layout: gl.constexpr = output_layout(NUM_WARPS, HEAD_DIM)
    a_layout: gl.constexpr = operand_layout(NUM_WARPS, HEAD_DIM)
    n_tiles = gl.cdiv(N_QUERIES, BLOCK_ROWS)
    tile, bh, b, h = _program(n_tiles, H)
    if CAUSAL:
        tile = n_tiles - 1 - tile  # the longest rows first
    q0 = tile * BLOCK_ROWS
    desc_q = _descriptor(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, BLOCK_ROWS, HEAD_DIM)
    desc_do = _descriptor(DO + b * stride_dob + h * stride_doh, N_QUERIES, stride_don, BLOCK_ROWS, HEAD_DIM)
    desc_k = _descriptor(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, BLOCK_N, HEAD_DIM)
    desc_v = _descriptor(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, BLOCK_N, HEAD_DIM)
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_ROWS, HEAD_DIM], desc_q.layout)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_ROWS, HEAD_DIM], desc_do.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    qdo_ready, ready = _barriers(STAGES)
    T, T_unmasked = _key_tiles(q0, N_KEYS, BLOCK_ROWS, BLOCK_N, CAUSAL)
    _start(desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_smem, v_smem, qdo_ready, ready, q0, T, 0, BLOCK_N,
           STAGES)

    rows = q0 + gl.arange(0, BLOCK_ROWS, layout=gl.SliceLayout(1, s_layout))
    in_seq = rows < N_QUERIES
    lse = gl.load(L + bh.to(gl.int64) * N_QUERIES + rows, mask=in_seq, other=0.0) * LOG2E  # finite, never stored
    delta = gl.load(DELTA + bh.to(gl.int64) * N_QUERIES + rows, mask=in_seq, other=0.0)
    dq = warpgroup_mma_init(gl.zeros([BLOCK_ROWS, HEAD_DIM], gl.float32, o_layout))
    dq = _dq_tiles(dq, q_smem, do_smem, k_smem, v_smem, ready, desc_k, desc_v, lse, delta, q0, 0, T_unmasked, T,
                   N_KEYS, qk_scale, scale, s_layout, a_layout, BLOCK_N, STAGES, False, CAUSAL)
    dq = _dq_tiles(dq, q_smem, do_smem, k_smem, v_smem, ready, desc_k, desc_v, lse, delta, q0, T_unmasked, T, T,
                   N_KEYS, qk_scale, scale, s_layout, a_layout, BLOCK_N, STAGES, True, CAUSAL)
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))
    # Q is read for the last time: its tile takes dQ out
    _store_rows(dq, q_smem, _descriptor(DQ + b * stride_dqb + h * stride_dqh, N_QUERIES, stride_dqn, BLOCK_ROWS,
                                        HEAD_DIM), q0)

"""The kernels: FlashAttention's forward written for Hopper in Gluon, Triton's lower-level language (explicit layouts,
shared memory, mbarriers, TMA and asynchronous WGMMA).

A program owns 128 query rows of one (batch, head), split between two warpgroups of 64 rows, and walks over key
tiles that the copy engine brings into a ring of shared-memory stages. Two programs are written, for the ablation
issue 29 asks for:

* :func:`fwd_kernel`: every warp computes; the warps themselves start the next tiles' loads. With ``OVERLAP`` the
  product P_{t-1} V_{t-1} stays on the tensor cores while softmax(t) runs on the other units (FlashAttention-3's
  overlap within a warpgroup); without, each product is waited for before the values it feeds are read.
* :func:`fwd_ws_kernel`: warp-specialised. A producer partition only loads (Q once, then K and V through the ring,
  each stage released by both consumers through an ``empty`` barrier); two consumer warpgroups of 64 rows, each a
  partition of its own with more registers (``setmaxnreg``), only compute.

Causal masking is top-left aligned (key j visible to query i iff j <= i, also when Nq != Nk); tiles entirely below the
diagonal run unmasked, the diagonal and the ragged end of the keys masked. The copy engine zero-fills rows past
the ends, and stores clip there: any lengths. L is the natural-log log-sum-exp, as the Triton kernel's.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_init, warpgroup_mma_wait

ROWS = gl.constexpr(64)  # query rows per consumer warpgroup; a program owns two of them


@gluon.jit
def _program(N_QUERIES, H, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    """This program's first query row and (batch, head): every head's last (longest causal) query tile first."""
    n_tiles = gl.cdiv(N_QUERIES, BLOCK_M)
    pid = gl.program_id(0)
    bh_count = gl.num_programs(0) // n_tiles
    tile = pid // bh_count
    if CAUSAL:
        tile = n_tiles - 1 - tile
    bh = pid % bh_count
    return tile * BLOCK_M, bh, (bh // H).to(gl.int64), (bh % H).to(gl.int64)


@gluon.jit
def _key_tiles(q0, N_KEYS, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(tiles to visit, tiles among them that need no mask): below the diagonal and before the keys' ragged end."""
    if CAUSAL:
        hi = gl.minimum(N_KEYS, q0 + BLOCK_M)
        mid = gl.minimum(q0 // BLOCK_N * BLOCK_N, N_KEYS // BLOCK_N * BLOCK_N)
    else:
        hi = N_KEYS
        mid = N_KEYS // BLOCK_N * BLOCK_N
    return gl.cdiv(hi, BLOCK_N), mid // BLOCK_N


@gluon.jit
def _descriptor(base, n_rows, stride_row, BLOCK_ROWS: gl.constexpr, HEAD_DIM: gl.constexpr):
    """A copy-engine descriptor over one (batch, head)'s (n_rows, HEAD_DIM) rows: tiles past the end load zeros."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_ROWS, HEAD_DIM], base.dtype.element_ty)
    return tma.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride_row, 1], [BLOCK_ROWS, HEAD_DIM], layout)


@gluon.jit
def _online_softmax(s, m_i, l_i, r0, k0, N_KEYS, qk_scale, s_layout: gl.constexpr, BLOCK_M: gl.constexpr,
                    BLOCK_N: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """One key tile's step of the online softmax (base 2): P̃, the rescale α of what came before, new m and l."""
    if MASKED:
        rows = r0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        cols = k0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = cols[None, :] < N_KEYS
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)


@gluon.jit
def _finish(acc, m_i, l_i, o_smem, desc_o, L, bh, r0, N_QUERIES, s_layout: gl.constexpr, o_layout: gl.constexpr,
            BLOCK_M: gl.constexpr):
    """O = acc / l out through shared memory and the copy engine (rows past the end clipped), L = (m + log2 l) ln 2."""
    acc = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    o_smem.store(acc.to(o_smem.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(desc_o, [r0, 0], o_smem)
    rows = r0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    gl.store(L + bh.to(gl.int64) * N_QUERIES + rows, (m_i + gl.log2(l_i)) * 0.6931471805599453,
             mask=rows < N_QUERIES)
    tma.store_wait(pendings=0)


@gluon.constexpr_function
def score_layout(num_warps, block_n):
    """The WGMMA accumulator layout of S (rows × keys)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 16])


@gluon.constexpr_function
def output_layout(num_warps, head_dim):
    """The WGMMA accumulator layout of O (rows × head dim)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, head_dim, 16])


@gluon.constexpr_function
def operand_layout(num_warps, head_dim):
    """P's layout as the A operand of O += P V, from registers (16-bit elements, two per 32-bit register)."""
    return gl.DotOperandLayout(operand_index=0, parent=output_layout(num_warps, head_dim), k_width=2)


# ---- every warp computes, and loads --------------------------------------------------------------------------


@gluon.jit
def _load_keys(desc_k, desc_v, k_smem, v_smem, ready, t, T, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Start loading key tile t (K and V) into its stage, if there is such a tile."""
    s = t % STAGES
    mbarrier.expect(ready.index(s), desc_k.block_type.nbytes + desc_v.block_type.nbytes, pred=t < T)
    tma.async_copy_global_to_shared(desc_k, [t * BLOCK_N, 0], ready.index(s), k_smem.index(s), pred=t < T)
    tma.async_copy_global_to_shared(desc_v, [t * BLOCK_N, 0], ready.index(s), v_smem.index(s), pred=t < T)


@gluon.jit
def _tiles(acc, m_i, l_i, p16, q_smem, k_smem, v_smem, ready, desc_k, desc_v, t_lo, t_hi, T, q0, N_KEYS, qk_scale,
           s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_M: gl.constexpr,
           BLOCK_N: gl.constexpr, STAGES: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
           OVERLAP: gl.constexpr):
    """Key tiles [t_lo, t_hi). Without ``OVERLAP``, ``acc`` is the asynchronous O += P V of the tile before (in flight
    across tiles); with it, ``acc`` is the finished sum and ``p16`` the tile before's P, whose product is issued here
    beside this tile's S."""
    for t in range(t_lo, t_hi):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
        s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        if OVERLAP:
            acc = warpgroup_mma(p16, v_smem.index((t + STAGES - 1) % STAGES), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # S done, P_{t-1} V_{t-1} may still run
        else:
            s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s, acc))
            _load_keys(desc_k, desc_v, k_smem, v_smem, ready, t + STAGES - 1, T, BLOCK_N, STAGES)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, q0, t * BLOCK_N, N_KEYS, qk_scale, s_layout, BLOCK_M,
                                             BLOCK_N, MASKED, CAUSAL)
        if OVERLAP:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            _load_keys(desc_k, desc_v, k_smem, v_smem, ready, t + STAGES - 1, T, BLOCK_N, STAGES)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p16 = gl.convert_layout(p.to(q_smem.dtype), p_layout)
        if not OVERLAP:
            acc = warpgroup_mma(p16, v_smem.index(stage), acc, is_async=True)
    return acc, m_i, l_i, p16


@gluon.jit
def fwd_kernel(Q, K, V, O, L, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
               stride_vn, stride_ob, stride_oh, stride_on, H, N_QUERIES, N_KEYS, qk_scale, HEAD_DIM: gl.constexpr,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
               num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = 2 * ROWS
    dtype: gl.constexpr = Q.dtype.element_ty
    qk_scale = qk_scale.to(gl.float32)  # fp64 when the compiler's code passes a Python float
    q0, bh, b, h = _program(N_QUERIES, H, CAUSAL, BLOCK_M)
    desc_q = _descriptor(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, BLOCK_M, HEAD_DIM)
    desc_k = _descriptor(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, BLOCK_N, HEAD_DIM)
    desc_v = _descriptor(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, BLOCK_N, HEAD_DIM)
    desc_o = _descriptor(O + b * stride_ob + h * stride_oh, N_QUERIES, stride_on, BLOCK_M, HEAD_DIM)
    s_layout: gl.constexpr = score_layout(num_warps, BLOCK_N)
    o_layout: gl.constexpr = output_layout(num_warps, HEAD_DIM)
    p_layout: gl.constexpr = operand_layout(num_warps, HEAD_DIM)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], desc_q.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    T, T_unmasked = _key_tiles(q0, N_KEYS, BLOCK_M, BLOCK_N, CAUSAL)

    mbarrier.expect(q_ready, desc_q.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_q, [q0, 0], q_ready, q_smem)
    for t in gl.static_range(STAGES - 1):
        _load_keys(desc_k, desc_v, k_smem, v_smem, ready, t, T, BLOCK_N, STAGES)
    if OVERLAP:
        # the first tile's PV multiplies a zero P by the stage the ring fills last: zeros there, not stale bits
        fill: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
        v_smem.index(STAGES - 1).store(gl.zeros([BLOCK_N, HEAD_DIM], dtype, fill))
        fence_async_shared()
        gl.thread_barrier()
    mbarrier.wait(q_ready, 0)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    if not OVERLAP:  # the loop carries the asynchronous product in flight (overlapped: the finished sum)
        acc = warpgroup_mma_init(acc)
    p16 = gl.zeros([BLOCK_M, BLOCK_N], dtype, p_layout)
    acc, m_i, l_i, p16 = _tiles(acc, m_i, l_i, p16, q_smem, k_smem, v_smem, ready, desc_k, desc_v, 0, T_unmasked, T,
                                q0, N_KEYS, qk_scale, s_layout, o_layout, p_layout, BLOCK_M, BLOCK_N, STAGES, False,
                                CAUSAL, OVERLAP)
    acc, m_i, l_i, p16 = _tiles(acc, m_i, l_i, p16, q_smem, k_smem, v_smem, ready, desc_k, desc_v, T_unmasked, T, T,
                                q0, N_KEYS, qk_scale, s_layout, o_layout, p_layout, BLOCK_M, BLOCK_N, STAGES, True,
                                CAUSAL, OVERLAP)
    if OVERLAP:
        acc = warpgroup_mma(p16, v_smem.index((T + STAGES - 1) % STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _finish(acc, m_i, l_i, q_smem, desc_o, L, bh, q0, N_QUERIES, s_layout, o_layout, BLOCK_M)


# ---- warp-specialised: a producer that only loads, two consumer warpgroups that only compute -------------------


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_ready, ready, empty, q0, T, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr):
    mbarrier.expect(q_ready, 2 * desc_q.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_q, [q0, 0], q_ready, q_smem.index(0))
    tma.async_copy_global_to_shared(desc_q, [q0 + ROWS, 0], q_ready, q_smem.index(1))
    for t in range(T):
        stage = t % STAGES
        mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)  # the first pass over the ring finds it free
        mbarrier.expect(ready.index(stage), desc_k.block_type.nbytes + desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [t * BLOCK_N, 0], ready.index(stage), k_smem.index(stage))
        tma.async_copy_global_to_shared(desc_v, [t * BLOCK_N, 0], ready.index(stage), v_smem.index(stage))


@gluon.jit
def _consumer_tiles(acc, m_i, l_i, q, k_smem, v_smem, ready, empty, t_lo, t_hi, r0, N_KEYS, qk_scale,
                    s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_N: gl.constexpr,
                    STAGES: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    for t in range(t_lo, t_hi):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        s = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s, acc))
        # tile t-1's K and V have been read: one of the two arrivals that free its stage for the producer
        mbarrier.arrive(empty.index((t + STAGES - 1) % STAGES), count=1, pred=t > 0)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, r0, t * BLOCK_N, N_KEYS, qk_scale, s_layout, ROWS,
                                             BLOCK_N, MASKED, CAUSAL)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        acc = warpgroup_mma(gl.convert_layout(p.to(q.dtype), p_layout), v_smem.index(stage), acc, is_async=True)
    return acc, m_i, l_i


@gluon.jit
def _consumer(desc_o, L, bh, q_smem, k_smem, v_smem, q_ready, ready, empty, q0, T, T_unmasked, N_QUERIES, N_KEYS,
              qk_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              WHICH: gl.constexpr):
    s_layout: gl.constexpr = score_layout(4, BLOCK_N)
    o_layout: gl.constexpr = output_layout(4, HEAD_DIM)
    p_layout: gl.constexpr = operand_layout(4, HEAD_DIM)
    r0 = q0 + WHICH * ROWS
    q = q_smem.index(WHICH)
    mbarrier.wait(q_ready, 0)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, s_layout))
    acc = warpgroup_mma_init(gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout))
    acc, m_i, l_i = _consumer_tiles(acc, m_i, l_i, q, k_smem, v_smem, ready, empty, 0, T_unmasked, r0, N_KEYS,
                                    qk_scale, s_layout, o_layout, p_layout, BLOCK_N, STAGES, False, CAUSAL)
    acc, m_i, l_i = _consumer_tiles(acc, m_i, l_i, q, k_smem, v_smem, ready, empty, T_unmasked, T, r0, N_KEYS,
                                    qk_scale, s_layout, o_layout, p_layout, BLOCK_N, STAGES, True, CAUSAL)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(empty.index((T + STAGES - 1) % STAGES), count=1)
    _finish(acc, m_i, l_i, q, desc_o, L, bh, r0, N_QUERIES, s_layout, o_layout, ROWS)  # this half of Q carries O


@gluon.jit
def fwd_ws_kernel(Q, K, V, O, L, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn, stride_vb,
                  stride_vh, stride_vn, stride_ob, stride_oh, stride_on, H, N_QUERIES, N_KEYS, qk_scale,
                  HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = Q.dtype.element_ty
    qk_scale = qk_scale.to(gl.float32)
    q0, bh, b, h = _program(N_QUERIES, H, CAUSAL, 2 * ROWS)
    desc_q = _descriptor(Q + b * stride_qb + h * stride_qh, N_QUERIES, stride_qn, ROWS, HEAD_DIM)
    desc_k = _descriptor(K + b * stride_kb + h * stride_kh, N_KEYS, stride_kn, BLOCK_N, HEAD_DIM)
    desc_v = _descriptor(V + b * stride_vb + h * stride_vh, N_KEYS, stride_vn, BLOCK_N, HEAD_DIM)
    desc_o = _descriptor(O + b * stride_ob + h * stride_oh, N_QUERIES, stride_on, ROWS, HEAD_DIM)
    q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], desc_q.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumers release a stage
    T, T_unmasked = _key_tiles(q0, N_KEYS, 2 * ROWS, BLOCK_N, CAUSAL)
    gl.warp_specialize([
        (_producer, (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_ready, ready, empty, q0, T, BLOCK_N, STAGES)),
        (_consumer, (desc_o, L, bh, q_smem, k_smem, v_smem, q_ready, ready, empty, q0, T, T_unmasked, N_QUERIES,
                     N_KEYS, qk_scale, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, 0)),
        (_consumer, (desc_o, L, bh, q_smem, k_smem, v_smem, q_ready, ready, empty, q0, T, T_unmasked, N_QUERIES,
                     N_KEYS, qk_scale, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, 1)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])

// FlashAttention-2's backward in CUDA C++ (Dao, "FlashAttention-2", 2023, Algorithm 2). Deterministic algorithms
// asked for, it takes the two passes of the Triton kernel's deterministic backward
// (systems/attention/flash_triton/backward_kernels.py): no atomics, so the gradients repeat bit for bit.
//
//   preprocess   delta = rowsum(dO * O) (delta_kernel, flash_cuda.cuh; in one pass it zeroes dQ's accumulator too)
//   dK/dV pass   a block owns BLOCK_K = 16 NUM_WARPS keys (16 per warp, dK and dV in fp32 registers) and walks
//                the query tiles that see them, Q and dO two stages deep in shared memory:
//                  S^T = K Q^T,  P^T = exp2(S^T scale log2e - L log2e),  dP^T = V dO^T,  dS^T = P^T * (dP^T - delta)
//                  dV += P^T dO,  dK += dS^T Q                (dK scaled by the softmax scale at the end)
//   dQ pass      a block owns BLOCK_Q = 16 NUM_WARPS queries and walks the key tiles they see:
//                  S = Q K^T,  P = exp2(S scale log2e - L log2e),  dP = dO V^T,  dS = P * (dP - delta),  dQ += dS K
//
// Each pass computes its rows' S and dP transposed so that the warp's own rows are the products' rows: P^T and dS^T
// (or dS) then feed the next products from registers, as P does in the forward. Seven products per pair of tiles.
//
// One pass, FlashAttention-2's way, where deterministic algorithms are not asked for: the dK/dV pass also adds each
// query tile's share of dQ (dS K over its keys) into an fp32 buffer, red.global.add, and a last kernel scales and
// rounds it. Five products per pair of tiles; the additions land in any order, so dQ's last bits vary between runs.
//   dK/dV pass   ... as above, two query tiles a step, each tile's dS^T into shared memory as dS (queries as rows),
//                  and after a barrier, for the step's queries: dQ_acc += dS K   (each warp a 32 by 32 part of it)
//   dQ scaling   dQ = dQ_acc * scale, in T

#include "flash_cuda.cuh"

namespace systems_flash_cuda {

// dQ_acc += this lane's part of a (16, 32) C tile of dQ, rows `row` and row + 8, columns col..col + 31; rows past
// n_rows are not added. sm_90 adds two floats per instruction.
__device__ __forceinline__ void add_to_global(float* acc, int head_dim, const float (&c)[4][4], int row, int col,
                                              int n_rows, int g, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + g + 8 * half;
    if (r >= n_rows) continue;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      float* to = acc + int64_t(r) * head_dim + col + n * 8 + 2 * t;
#if __CUDA_ARCH__ >= 900
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(to), "f"(c[n][2 * half]), "f"(c[n][2 * half + 1])
                   : "memory");
#else
      atomicAdd(to, c[n][2 * half]);
      atomicAdd(to + 1, c[n][2 * half + 1]);
#endif
    }
  }
}

// A warp's dS^T (its 16 keys as rows, the tile's queries as columns; fp32 C fragments) into the block's shared dS
// tile, queries as rows and BLOCK_K keys as columns, rounded to T. sm_90 transposes with stmatrix, four 8x8 matrices
// an instruction, in the same registers `as_a` packs for dK's product; earlier GPUs store one element at a time.
template <int BLOCK_K, int S_TILES, typename T>
__device__ __forceinline__ void store_ds_transposed(T* ds_tile, const float (&dst)[S_TILES][4], int warp, int lane) {
#if __CUDA_ARCH__ >= 900
  const int matrix = lane / 8, row = lane % 8;  // the stored row this lane addresses: one query
#pragma unroll
  for (int kk = 0; kk < S_TILES / 2; ++kk) {  // matrices: (queries 16 kk.., keys 0..7), (16 kk.., 8..15), (16 kk + 8.., ...)
    uint32_t a[4];
    as_a<S_TILES, T>(a, dst, kk);
    const int query = kk * 16 + (matrix / 2) * 8 + row, key = warp * 16 + (matrix % 2) * 8;
    stmatrix_x4_trans(a, shared_address(ds_tile + swizzled<BLOCK_K>(query, key)));
  }
#else
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int query = n * 8 + 2 * t + (e & 1), key = warp * 16 + g + 8 * (e >> 1);
      ds_tile[swizzled<BLOCK_K>(query, key)] = Element<T>::round(dst[n][e]);
    }
  }
#endif
}

// The walk's steps are BLOCK_Q queries, two stages deep; a warp holds S^T and dP^T for PART_Q of them at a time (its
// registers allow no more beside dK and dV), so a step takes BLOCK_Q / PART_Q parts. One pass adds the step's dQ after
// all its parts: one barrier for the dS tile and one dQ product per step, each warp a (32, 32) part of it.
template <typename T, int HEAD_DIM, int NUM_WARPS, int BLOCK_Q, int PART_Q, bool CAUSAL, bool ADD_DQ>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_bwd_dkdv_kernel(const Problem problem, const Rows Q, const Rows K, const Rows V, const Rows DO,
                          const float* L, const float* delta, const Rows DK, const Rows DV, float* dq_acc) {
  constexpr int BLOCK_K = 16 * NUM_WARPS, THREADS = 32 * NUM_WARPS;
  constexpr int S_TILES = PART_Q / 8, D_TILES = HEAD_DIM / 8;  // 8-column tiles of a part's S^T and of dK, dV
  constexpr int DQ_ROW_PARTS = BLOCK_Q / 32;                   // one pass: the step's dQ in (32, 32) parts
  static_assert(BLOCK_Q % PART_Q == 0 && PART_Q % 16 == 0, "whole parts of 16-query tiles");
  static_assert(!ADD_DQ || DQ_ROW_PARTS * (HEAD_DIM / 32) == NUM_WARPS, "one (32, 32) part of dQ per warp");
  extern __shared__ __align__(128) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);     // (BLOCK_K, HEAD_DIM)
  T* v_tile = k_tile + BLOCK_K * HEAD_DIM;      // (BLOCK_K, HEAD_DIM)
  T* q_tiles = v_tile + BLOCK_K * HEAD_DIM;     // two stages of (BLOCK_Q, HEAD_DIM)
  T* do_tiles = q_tiles + 2 * BLOCK_Q * HEAD_DIM;
  float* l_rows = reinterpret_cast<float*>(do_tiles + 2 * BLOCK_Q * HEAD_DIM);  // two stages of BLOCK_Q
  float* delta_rows = l_rows + 2 * BLOCK_Q;
  T* ds_tile = reinterpret_cast<T*>(delta_rows + 2 * BLOCK_Q);  // one pass: dS, (BLOCK_Q, BLOCK_K)

  const int h = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * BLOCK_K;  // causal: the first tiles see the most
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_queries = problem.n_queries, n_keys = problem.n_keys;
  const T* q = head_rows<T>(Q, b, h);
  const T* dout = head_rows<T>(DO, b, h);
  const int64_t bh = int64_t(b) * problem.heads + h;
  const float* l_bh = L + bh * n_queries;
  const float* delta_bh = delta + bh * n_queries;

  // the queries that see any key of this tile: all of them, or (causal) from the tile holding query k0 on
  const int q_start = CAUSAL ? (k0 / BLOCK_Q) * BLOCK_Q : 0;
  const int n_tiles = q_start < n_queries ? (n_queries - q_start + BLOCK_Q - 1) / BLOCK_Q : 0;

  auto load_query_tile = [&](int stage, int q0) {
    T* q_stage = q_tiles + stage * BLOCK_Q * HEAD_DIM;
    T* do_stage = do_tiles + stage * BLOCK_Q * HEAD_DIM;
    load_tile<BLOCK_Q, HEAD_DIM, THREADS>(q_stage, q, Q.row_stride, q0, n_queries, threadIdx.x);
    load_tile<BLOCK_Q, HEAD_DIM, THREADS>(do_stage, dout, DO.row_stride, q0, n_queries, threadIdx.x);
    load_vector<BLOCK_Q, THREADS>(l_rows + stage * BLOCK_Q, l_bh, q0, n_queries);
    load_vector<BLOCK_Q, THREADS>(delta_rows + stage * BLOCK_Q, delta_bh, q0, n_queries);
  };
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(k_tile, head_rows<T>(K, b, h), K.row_stride, k0, n_keys, threadIdx.x);
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(v_tile, head_rows<T>(V, b, h), V.row_stride, k0, n_keys, threadIdx.x);
  cp_async_commit();
  if (n_tiles > 0) load_query_tile(0, q_start);
  cp_async_commit();

  // The warp's 16 rows of K and V are the A operands of S^T and dP^T for every query tile. At head dim 64 their
  // fragments stay in registers for the walk (32 a lane); at 128 they would take 64, which dK and dV's accumulators
  // leave no room for, so they are read from shared memory for each tile.
  constexpr bool KV_IN_REGISTERS = HEAD_DIM == 64;
  uint32_t k_rows[KV_IN_REGISTERS ? HEAD_DIM / 16 : 1][4], v_rows[KV_IN_REGISTERS ? HEAD_DIM / 16 : 1][4];
  if constexpr (KV_IN_REGISTERS) {
    cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      load_a<HEAD_DIM>(k_rows[kk], k_tile, warp * 16, kk * 16, lane);
      load_a<HEAD_DIM>(v_rows[kk], v_tile, warp * 16, kk * 16, lane);
    }
  }
  const auto rows_of = [&](const T* tile, const uint32_t(&in_registers)[KV_IN_REGISTERS ? HEAD_DIM / 16 : 1][4]) {
    if constexpr (KV_IN_REGISTERS) {
      return [&in_registers](uint32_t(&a)[4], int kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = in_registers[kk][i];
      };
    } else {
      return shared_fragments<HEAD_DIM>(tile, warp * 16, lane);
    }
  };

  const float qk_scale = problem.scale * LOG2E;
  const int key = k0 + warp * 16 + g;  // this lane's keys: key and key + 8
  float dk[D_TILES][4] = {}, dv[D_TILES][4] = {};

  for (int j = 0; j < n_tiles; ++j) {
    const int q0 = q_start + j * BLOCK_Q, stage = j % 2;
    const T* q_tile = q_tiles + stage * BLOCK_Q * HEAD_DIM;
    const T* do_tile = do_tiles + stage * BLOCK_Q * HEAD_DIM;
    const float* l_tile = l_rows + stage * BLOCK_Q;
    const float* delta_tile = delta_rows + stage * BLOCK_Q;
    // as next_key_stage does for key tiles: tile j seen by the block, step j - 1 done, then tile j + 1's copies
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_tiles) {
      load_query_tile((j + 1) % 2, q0 + BLOCK_Q);
      cp_async_commit();
    }

#pragma unroll
    for (int part = 0; part < BLOCK_Q / PART_Q; ++part) {
      // the part's rows of the shared tiles: a multiple of 8 rows on, so the swizzle is unchanged
      const int p0 = q0 + part * PART_Q;
      const T* q_part = q_tile + part * PART_Q * HEAD_DIM;
      const T* do_part = do_tile + part * PART_Q * HEAD_DIM;
      float st[S_TILES][4] = {}, dpt[S_TILES][4] = {};  // S^T = K Q^T and dP^T = V dO^T, (16, PART_Q) per warp
      scores_and_dp<HEAD_DIM>(st, dpt, rows_of(k_tile, k_rows), q_part, rows_of(v_tile, v_rows), do_part, lane);

      // S^T masked to -inf past either sequence's end and above the diagonal, only in the parts that reach them (a
      // branch, not a select for every element of every tile), then P^T and dS^T into the registers of S^T and dP^T
      if (p0 + PART_Q > n_queries || k0 + BLOCK_K > n_keys || (CAUSAL && p0 < k0 + BLOCK_K - 1)) {
#pragma unroll
        for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int query = p0 + n * 8 + 2 * t + (e & 1), this_key = key + 8 * (e >> 1);
            if (query >= n_queries || this_key >= n_keys || (CAUSAL && this_key > query)) st[n][e] = -INFINITY;
          }
        }
      }
#pragma unroll
      for (int n = 0; n < S_TILES; ++n) {
        const float2 l = *reinterpret_cast<const float2*>(l_tile + part * PART_Q + n * 8 + 2 * t);
        const float2 d = *reinterpret_cast<const float2*>(delta_tile + part * PART_Q + n * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = fast_exp2(fmaf(st[n][e], qk_scale, -(e & 1 ? l.y : l.x) * LOG2E));
          st[n][e] = p;
          dpt[n][e] = p * (dpt[n][e] - (e & 1 ? d.y : d.x));
        }
      }

      if constexpr (ADD_DQ) store_ds_transposed<BLOCK_K>(ds_tile + part * PART_Q * BLOCK_K, dpt, warp, lane);

      // dV += P^T dO, dK += dS^T Q: the k of these products runs over the part's queries
      add_product<HEAD_DIM>(dv, st, do_part, lane);
      add_product<HEAD_DIM>(dk, dpt, q_part, lane);
    }

    if constexpr (ADD_DQ) {  // dQ_acc += dS K over the block's keys, once every warp's dS is in
      __syncthreads();
      const int row0 = (warp % DQ_ROW_PARTS) * 32, col0 = (warp / DQ_ROW_PARTS) * 32;
      float dq[2][4][4] = {};
#pragma unroll
      for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
        uint32_t a[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m) load_a<BLOCK_K>(a[m], ds_tile, row0 + 16 * m, kk * 16, lane);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          uint32_t b[4];
          load_b_rows_are_k<HEAD_DIM>(b, k_tile, kk * 16, col0 + n * 16, lane);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            Element<T>::mma(dq[m][2 * n], a[m], b[0], b[1]);
            Element<T>::mma(dq[m][2 * n + 1], a[m], b[2], b[3]);
          }
        }
      }
      float* dq_bh = dq_acc + bh * n_queries * HEAD_DIM;
#pragma unroll
      for (int m = 0; m < 2; ++m) add_to_global(dq_bh, HEAD_DIM, dq[m], q0 + row0 + 16 * m, col0, n_queries, g, t);
    }
  }
  cp_async_wait<0>();  // no tile walked (causal keys past the last query): K and V's copies still end here

  const float ones[2] = {1.f, 1.f}, scale[2] = {problem.scale, problem.scale};
  store_rows<D_TILES>(head_rows<T>(DK, b, h), DK.row_stride, dk, key, n_keys, t, scale);
  store_rows<D_TILES>(head_rows<T>(DV, b, h), DV.row_stride, dv, key, n_keys, t, ones);
}

template <typename T, int HEAD_DIM, int NUM_WARPS, int BLOCK_K, bool CAUSAL>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_bwd_dq_kernel(const Problem problem, const Rows Q, const Rows K, const Rows V, const Rows DO,
                        const float* L, const float* delta, const Rows DQ) {
  constexpr int BLOCK_Q = 16 * NUM_WARPS, THREADS = 32 * NUM_WARPS;
  constexpr int S_TILES = BLOCK_K / 8, D_TILES = HEAD_DIM / 8;
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);   // (BLOCK_Q, HEAD_DIM)
  T* do_tile = q_tile + BLOCK_Q * HEAD_DIM;   // (BLOCK_Q, HEAD_DIM)
  T* k_tiles = do_tile + BLOCK_Q * HEAD_DIM;  // two stages of (BLOCK_K, HEAD_DIM)
  T* v_tiles = k_tiles + 2 * BLOCK_K * HEAD_DIM;

  const int query_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: the longest first
  const int h = blockIdx.y, b = blockIdx.z, q0 = query_tile * BLOCK_Q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_queries = problem.n_queries, n_keys = problem.n_keys;
  const T* k = head_rows<T>(K, b, h);
  const T* v = head_rows<T>(V, b, h);
  const int64_t bh = int64_t(b) * problem.heads + h;
  const int row = q0 + warp * 16 + g;  // this lane's rows: row and row + 8
  float l_log2[2], row_delta[2];       // rows past the end: 0, their P finite and never stored
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool inside = row + 8 * half < n_queries;
    l_log2[half] = inside ? L[bh * n_queries + row + 8 * half] * LOG2E : 0.f;
    row_delta[half] = inside ? delta[bh * n_queries + row + 8 * half] : 0.f;
  }

  const int k_end = CAUSAL ? min(n_keys, q0 + BLOCK_Q) : n_keys;
  const int n_tiles = (k_end + BLOCK_K - 1) / BLOCK_K;
  load_tile<BLOCK_Q, HEAD_DIM, THREADS>(q_tile, head_rows<T>(Q, b, h), Q.row_stride, q0, n_queries, threadIdx.x);
  load_tile<BLOCK_Q, HEAD_DIM, THREADS>(do_tile, head_rows<T>(DO, b, h), DO.row_stride, q0, n_queries,
                                        threadIdx.x);
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(k_tiles, k, K.row_stride, 0, n_keys, threadIdx.x);
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(v_tiles, v, V.row_stride, 0, n_keys, threadIdx.x);
  cp_async_commit();

  const float qk_scale = problem.scale * LOG2E;
  float dq[D_TILES][4] = {};
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * BLOCK_K;
    const int stage = next_key_stage<BLOCK_K, HEAD_DIM, THREADS>(k_tiles, v_tiles, k, v, K.row_stride, V.row_stride, j,
                                                                 n_tiles, n_keys);
    const T *k_tile = k_tiles + stage, *v_tile = v_tiles + stage;

    float s[S_TILES][4] = {}, dp[S_TILES][4] = {};  // S = Q K^T and dP = dO V^T, (16, BLOCK_K) per warp
    scores_and_dp<HEAD_DIM>(s, dp, shared_fragments<HEAD_DIM>(q_tile, warp * 16, lane), k_tile,
                            shared_fragments<HEAD_DIM>(do_tile, warp * 16, lane), v_tile, lane);

    if (k0 + BLOCK_K > n_keys || (CAUSAL && k0 + BLOCK_K - 1 > q0)) {  // S masked as in the dK/dV pass
#pragma unroll
      for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * t + (e & 1);
          if (key >= n_keys || (CAUSAL && key > row + 8 * (e >> 1))) s[n][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1;
        const float p = fast_exp2(fmaf(s[n][e], qk_scale, -l_log2[half]));
        dp[n][e] = p * (dp[n][e] - row_delta[half]);  // dS
      }
    }

    add_product<HEAD_DIM>(dq, dp, k_tile, lane);  // dQ += dS K: the k of this product runs over the tile's keys
  }

  const float scale[2] = {problem.scale, problem.scale};
  store_rows<D_TILES>(head_rows<T>(DQ, b, h), DQ.row_stride, dq, row, n_queries, t, scale);
}

// dQ = dQ_acc * scale in T, 8 elements a thread: the one-pass backward's last step.
template <typename T>
__global__ void __launch_bounds__(256)
    flash_bwd_scale_dq_kernel(const Problem problem, const float* dq_acc, const Rows DQ) {
  const int chunks = problem.head_dim / 8;
  const int64_t index = int64_t(blockIdx.x) * 256 + threadIdx.x;  // ((b, h, i) flattened, chunk)
  if (index >= int64_t(problem.batch) * problem.heads * problem.n_queries * chunks) return;
  const int64_t row = index / chunks;
  const int col = int(index % chunks) * 8, i = row % problem.n_queries, bh = row / problem.n_queries;
  const float4* from = reinterpret_cast<const float4*>(dq_acc + row * problem.head_dim + col);
  const float4 lo = from[0], hi = from[1];
  const float s = problem.scale;
  const uint4 packed = {Element<T>::pack(lo.x * s, lo.y * s), Element<T>::pack(lo.z * s, lo.w * s),
                        Element<T>::pack(hi.x * s, hi.y * s), Element<T>::pack(hi.z * s, hi.w * s)};
  *reinterpret_cast<uint4*>(head_rows<T>(DQ, bh / problem.heads, bh % problem.heads) + i * DQ.row_stride + col) =
      packed;
}

// Tiles per head dim, as wide as the registers allow: the dK/dV pass holds dK and dV (2 x 32 floats
// a lane at head dim 64, 2 x 64 at 128) besides S^T and dP^T (PART_Q / 2 floats each); the dQ pass holds dQ besides
// S and dP. With dq_acc, one pass: the dK/dV pass adds dQ up there, and a last kernel scales it into dq.
template <typename T, int HEAD_DIM, bool CAUSAL>
cudaError_t launch_backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L, float* delta,
                            Rows dq, Rows dk, Rows dv, float* dq_acc, cudaStream_t stream) {
  constexpr int NUM_WARPS = 8, DKDV_PART_Q = HEAD_DIM == 64 ? 64 : 32, DQ_BLOCK_K = 64;
  constexpr int BLOCK_ROWS = 16 * NUM_WARPS;  // the keys of a dK/dV block, the queries of a dQ block
  cudaError_t error = launch_delta<T, HEAD_DIM>(p, o, dout, delta, dq_acc, dq_accumulator_size(p), stream);
  if (error != cudaSuccess) return error;

  // the dK/dV pass, adding dQ up too (one pass) or not
  const auto dkdv_pass = [&](auto one_pass) {
    constexpr bool ADD_DQ = decltype(one_pass)::value;
    constexpr int DKDV_BLOCK_Q = ADD_DQ ? 2 * DKDV_PART_Q : DKDV_PART_Q;  // two parts a step where dQ is added
    constexpr int SHARED = 2 * (BLOCK_ROWS + 2 * DKDV_BLOCK_Q) * HEAD_DIM * sizeof(T) + 4 * DKDV_BLOCK_Q * 4 +
                           (ADD_DQ ? DKDV_BLOCK_Q * BLOCK_ROWS * sizeof(T) : 0);  // and one pass: the tile's dS
    constexpr auto dkdv = flash_bwd_dkdv_kernel<T, HEAD_DIM, NUM_WARPS, DKDV_BLOCK_Q, DKDV_PART_Q, CAUSAL, ADD_DQ>;
    const cudaError_t allowed = allow_shared<dkdv>(SHARED);
    if (allowed != cudaSuccess) return allowed;
    const dim3 grid((p.n_keys + BLOCK_ROWS - 1) / BLOCK_ROWS, p.heads, p.batch);
    dkdv<<<grid, NUM_WARPS * 32, SHARED, stream>>>(p, q, k, v, dout, L, delta, dk, dv, dq_acc);
    return cudaGetLastError();
  };
  if (dq_acc != nullptr) {
    if ((error = dkdv_pass(std::true_type{})) != cudaSuccess) return error;
    const int64_t chunks = int64_t(p.batch) * p.heads * p.n_queries * (HEAD_DIM / 8);
    flash_bwd_scale_dq_kernel<T><<<(chunks + 255) / 256, 256, 0, stream>>>(p, dq_acc, dq);
    return cudaGetLastError();
  }
  if ((error = dkdv_pass(std::false_type{})) != cudaSuccess) return error;

  constexpr int DQ_SHARED = 2 * (BLOCK_ROWS + 2 * DQ_BLOCK_K) * HEAD_DIM * sizeof(T);
  constexpr auto dq_kernel = flash_bwd_dq_kernel<T, HEAD_DIM, NUM_WARPS, DQ_BLOCK_K, CAUSAL>;
  if ((error = allow_shared<dq_kernel>(DQ_SHARED)) != cudaSuccess) return error;
  const dim3 dq_grid((p.n_queries + BLOCK_ROWS - 1) / BLOCK_ROWS, p.heads, p.batch);
  dq_kernel<<<dq_grid, NUM_WARPS * 32, DQ_SHARED, stream>>>(p, q, k, v, dout, L, delta, dq);
  return cudaGetLastError();
}

cudaError_t backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L, float* delta,
                     Rows dq, Rows dk, Rows dv, float* dq_acc, cudaStream_t stream) {
  return launch_for_problem(p, [&](auto type, auto head_dim, auto causal) {
    return launch_backward<typename decltype(type)::type, decltype(head_dim)::value, decltype(causal)::value>(
        p, q, k, v, o, dout, L, delta, dq, dk, dv, dq_acc, stream);
  });
}

}  // namespace systems_flash_cuda

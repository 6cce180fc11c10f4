// FlashAttention-2's forward in CUDA C++ (Dao, "FlashAttention-2", 2023, Algorithm 1), with the tile names and the
// steps of the Triton kernel (systems/attention/flash_triton/kernels.py, flash_fwd_kernel) and of the PyTorch
// version (flash_pytorch.py).
//
// A block of NUM_WARPS warps owns BLOCK_Q = 16 M_TILES NUM_WARPS queries of one (batch, head); each warp owns
// 16 M_TILES of them and keeps, in registers, the running maximum m_i and sum l_i of each row and the output acc
// (fp32). Each K or V fragment a warp reads from shared memory feeds the products of all its M_TILES row tiles, so
// more rows per warp means fewer shared-memory reads per product (FlashAttention-2 gives a warp 32 rows too).
// The block walks the key tiles of BLOCK_K keys: K and V tiles are copied into shared memory two stages deep
// (cp.async), so the next tile's copy runs while the tensor cores multiply this one, one barrier a step. Per tile:
//   S = Q K^T                                 (scores; masked to -inf past the keys' end and, causal, above
//                                              the diagonal, on the tiles that reach them only)
//   m_new = max(m_i, rowmax(S) scale log2e);  P = exp2(S scale log2e - m_new)
//   l_i = exp2(m_i - m_new) l_i + rowsum(P);  acc = exp2(m_i - m_new) acc + P V
// and at the end O = acc / l_i, L = (m_i + log2 l_i) ln 2 (the natural log-sum-exp the backward reads).

#include "flash_cuda.cuh"

namespace systems_flash_cuda {

template <typename T, int HEAD_DIM, int NUM_WARPS, int M_TILES, int BLOCK_K, bool CAUSAL>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_fwd_kernel(const Problem problem, const Rows Q, const Rows K, const Rows V, const Rows O, float* L) {
  constexpr int WARP_ROWS = 16 * M_TILES, BLOCK_Q = WARP_ROWS * NUM_WARPS, THREADS = 32 * NUM_WARPS;
  constexpr int S_TILES = BLOCK_K / 8, O_TILES = HEAD_DIM / 8;  // 8-column tiles of S and of O in 16 rows
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);  // (BLOCK_Q, HEAD_DIM)
  T* k_tiles = q_tile + BLOCK_Q * HEAD_DIM;   // two stages of (BLOCK_K, HEAD_DIM)
  T* v_tiles = k_tiles + 2 * BLOCK_K * HEAD_DIM;

  // causal: the last query tiles see the most keys; launched first, they do not trail at the end
  const int query_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = query_tile * BLOCK_Q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_queries = problem.n_queries, n_keys = problem.n_keys;
  const T* q = head_rows<T>(Q, b, h);
  const T* k = head_rows<T>(K, b, h);
  const T* v = head_rows<T>(V, b, h);

  // the keys this query tile sees: all of them, or (causal) up to its last query
  const int k_end = CAUSAL ? min(n_keys, q0 + BLOCK_Q) : n_keys;
  const int n_tiles = (k_end + BLOCK_K - 1) / BLOCK_K;

  load_tile<BLOCK_Q, HEAD_DIM, THREADS>(q_tile, q, Q.row_stride, q0, n_queries, threadIdx.x);
  cp_async_commit();
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(k_tiles, k, K.row_stride, 0, n_keys, threadIdx.x);
  load_tile<BLOCK_K, HEAD_DIM, THREADS>(v_tiles, v, V.row_stride, 0, n_keys, threadIdx.x);
  cp_async_commit();

  const float qk_scale = problem.scale * LOG2E;
  const int warp_row = warp * WARP_ROWS;      // this warp's first row in the tile
  const int row = q0 + warp_row + g;          // this lane's rows: row + 16 mi and row + 16 mi + 8
  float acc[M_TILES][O_TILES][4] = {};
  float m_i[M_TILES][2], l_i[M_TILES][2];  // l_i: this lane's share of the row's sum
#pragma unroll
  for (int mi = 0; mi < M_TILES; ++mi) {
    m_i[mi][0] = m_i[mi][1] = -INFINITY;
    l_i[mi][0] = l_i[mi][1] = 0.f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * BLOCK_K;
    const int stage = next_key_stage<BLOCK_K, HEAD_DIM, THREADS>(k_tiles, v_tiles, k, v, K.row_stride, V.row_stride, j,
                                                                 n_tiles, n_keys);
    const T *k_tile = k_tiles + stage, *v_tile = v_tiles + stage;

    // S = Q K^T, (16 M_TILES, BLOCK_K) per warp, not yet scaled; Q's fragments read from shared memory per k step
    // (kept in registers across tiles, they would spill the S and acc of 32 rows)
    float s[M_TILES][S_TILES][4] = {};
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      uint32_t qa[M_TILES][4];
#pragma unroll
      for (int mi = 0; mi < M_TILES; ++mi) load_a<HEAD_DIM>(qa[mi], q_tile, warp_row + 16 * mi, kk * 16, lane);
#pragma unroll
      for (int n = 0; n < S_TILES / 2; ++n) {
        uint32_t kb[4];
        load_b_rows_are_n<HEAD_DIM>(kb, k_tile, n * 16, kk * 16, lane);
#pragma unroll
        for (int mi = 0; mi < M_TILES; ++mi) {
          Element<T>::mma(s[mi][2 * n], qa[mi], kb[0], kb[1]);
          Element<T>::mma(s[mi][2 * n + 1], qa[mi], kb[2], kb[3]);
        }
      }
    }
    if (k0 + BLOCK_K > n_keys || (CAUSAL && k0 + BLOCK_K - 1 > q0)) {  // a tile on the diagonal or at the end
#pragma unroll
      for (int mi = 0; mi < M_TILES; ++mi) {
#pragma unroll
        for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + n * 8 + 2 * t + (e & 1), query = row + 16 * mi + 8 * (e >> 1);
            if (key >= n_keys || (CAUSAL && key > query)) s[mi][n][e] = -INFINITY;
          }
        }
      }
    }

    // the online softmax, in log2 units
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int n = 0; n < S_TILES; ++n) tile_max = fmaxf(tile_max, fmaxf(s[mi][n][2 * half], s[mi][n][2 * half + 1]));
        const float m_new = fmaxf(m_i[mi][half], row_max(tile_max) * qk_scale);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row every key so far is masked for: no NaN
        const float alpha = fast_exp2(m_i[mi][half] - m_use);
        m_i[mi][half] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < S_TILES; ++n) {
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            s[mi][n][e] = fast_exp2(fmaf(s[mi][n][e], qk_scale, -m_use));  // P, in S's registers
            sum += s[mi][n][e];
          }
        }
        l_i[mi][half] = l_i[mi][half] * alpha + sum;
#pragma unroll
        for (int n = 0; n < O_TILES; ++n) {
          acc[mi][n][2 * half] *= alpha;
          acc[mi][n][2 * half + 1] *= alpha;
        }
      }
    }

    add_products<HEAD_DIM>(acc, s, v_tile, lane);  // acc += P V, P straight from the registers that held S
  }

#pragma unroll
  for (int mi = 0; mi < M_TILES; ++mi) {
    float inverse_l[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = row_sum(l_i[mi][half]);
      inverse_l[half] = 1.f / l;
      const int r = row + 16 * mi + 8 * half;
      if (t == 0 && r < n_queries) {
        L[(int64_t(b) * problem.heads + h) * n_queries + r] = (m_i[mi][half] + log2f(l)) * LN2;
      }
    }
    store_rows<O_TILES>(head_rows<T>(O, b, h), O.row_stride, acc[mi], row + 16 * mi, n_queries, t, inverse_l);
  }
}

// Tiles per head dim: BLOCK_Q = 128 queries in 4 warps of 32 rows, as FlashAttention-2 has them on sm_80; the key
// tile as wide as the registers allow (S and acc of 32 rows together: 128 + 64 floats a lane at
// head dim 64, with 128 keys as FlashAttention-2; 32 + 128 at head dim 128, where its 64 keys spill ours). On the
// H100 this ran faster than 8 warps of 16 rows at head dim 64 and, of this kernel's two layouts, at 128 too
// (book/log.md, 2026-11-25).
template <typename T, int HEAD_DIM, bool CAUSAL>
cudaError_t launch_forward(const Problem& problem, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream) {
  constexpr int NUM_WARPS = 4, M_TILES = 2, BLOCK_K = HEAD_DIM == 64 ? 128 : 32;
  constexpr int BLOCK_Q = 16 * M_TILES * NUM_WARPS;
  constexpr int SHARED = (BLOCK_Q + 4 * BLOCK_K) * HEAD_DIM * sizeof(T);
  constexpr auto kernel = flash_fwd_kernel<T, HEAD_DIM, NUM_WARPS, M_TILES, BLOCK_K, CAUSAL>;
  const cudaError_t error = allow_shared<kernel>(SHARED);
  if (error != cudaSuccess) return error;
  const dim3 grid((problem.n_queries + BLOCK_Q - 1) / BLOCK_Q, problem.heads, problem.batch);
  kernel<<<grid, NUM_WARPS * 32, SHARED, stream>>>(problem, q, k, v, o, L);
  return cudaGetLastError();
}

cudaError_t forward(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream) {
  return launch_for_problem(p, [&](auto type, auto head_dim, auto causal) {
    return launch_forward<typename decltype(type)::type, decltype(head_dim)::value, decltype(causal)::value>(
        p, q, k, v, o, L, stream);
  });
}

}  // namespace systems_flash_cuda

// FlashAttention's backward written for Hopper (sm_90a) in CUDA C++, in the forward's shape (flash_hopper_forward.cu):
// a producer warpgroup feeding rings of shared-memory stages through the copy engine, two consumer warpgroups of 64
// rows each multiplying with asynchronous wgmma, the products that need no transposed operand issued from registers.
// Two passes, as the Triton kernels take them at head dim 128 (../flash_triton/kernels.py), so nothing is added up
// atomically:
//   preprocess  D = rowsum(dO * O)
//   dK/dV       a block owns 128 keys and walks the query tiles of 64 that see them; per tile, for its 64 keys
//                 S^T = K Q^T and dP^T = V dO^T issued together (shared memory)
//                 P^T = exp2(S^T scale log2e - L log2e)          (under dP^T)
//                 dV += P^T dO                                    (P^T from registers)
//                 dS^T = P^T (dP^T - D);  dK += dS^T Q            (dS^T under dV; dS^T from registers)
//   dQ          a block owns 128 queries and walks the key tiles of 64 it sees; per tile, for its 64 queries
//                 S = Q K^T and dP = dO V^T issued together; P = exp2(S scale log2e - L log2e);
//                 dS = P (dP - D);  dQ += dS K
// and at the end dK and dQ are scaled by the softmax scale.
#include "flash_hopper.cuh"

namespace systems_flash_hopper {

constexpr int ROWS = 64;                           // a consumer's rows, and the tile the other operand walks in
constexpr int BLOCK_ROWS = 2 * ROWS;               // a block's rows: two consumers
constexpr int THREADS = 384, CONSUMER_REGISTERS = 240;
constexpr int TILE_HALF = ROWS * TILE_COLUMNS * 2;         // a (64, 64) tile: 8 KiB
constexpr int BLOCK_HALF = BLOCK_ROWS * TILE_COLUMNS * 2;  // a (128, 64) tile: 16 KiB

// A block's shared memory, either pass: its own rows of two tensors, loaded once (K and V for dK/dV, Q and dO for dQ),
// and a ring of the tiles of two tensors it walks (Q and dO, or K and V).
template <int HEAD_DIM, int STAGES>
struct BackwardShared {
  static constexpr int HALVES = HEAD_DIM / TILE_COLUMNS;
  alignas(1024) unsigned char own_a[HALVES * BLOCK_HALF];
  alignas(1024) unsigned char own_b[HALVES * BLOCK_HALF];
  alignas(1024) unsigned char walk_a[STAGES][HALVES * TILE_HALF];
  alignas(1024) unsigned char walk_b[STAGES][HALVES * TILE_HALF];
  uint64_t own_full, full[STAGES], empty[STAGES];
};

template <typename T, int HEAD_DIM>
__global__ void preprocess_kernel(const Problem problem, const Rows O, const Rows dO, float* delta) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = int64_t(problem.batch) * problem.heads * problem.n_queries;
  if (row >= rows) return;
  const int r = row % problem.n_queries, bh = row / problem.n_queries;
  const int h = bh % problem.heads, b = bh / problem.heads;
  const T* o = head_rows<T>(O, b, h) + r * O.row_stride;
  const T* d = head_rows<T>(dO, b, h) + r * dO.row_stride;
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < HEAD_DIM; c += 8) {  // 16 bytes at a time; rows start on 16 bytes
    const uint4 a = *reinterpret_cast<const uint4*>(o + c), g = *reinterpret_cast<const uint4*>(d + c);
    const uint32_t* aw = reinterpret_cast<const uint32_t*>(&a);
    const uint32_t* gw = reinterpret_cast<const uint32_t*>(&g);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 x = Element<T>::unpack(aw[w]), y = Element<T>::unpack(gw[w]);
      sum += x.x * y.x + x.y * y.y;
    }
  }
  delta[row] = sum;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Rows row and row + 8 of a consumer's accumulator (HEAD_DIM columns), times `scale`, into (n_rows, HEAD_DIM) rows.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void store_accumulator(T* out, int64_t row_stride, const float (&acc)[HEAD_DIM / 2],
                                                  int row, int n_rows, float scale) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    if (r >= n_rows) continue;
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
      const uint32_t two = Element<T>::pack(acc[4 * n + 2 * half] * scale, acc[4 * n + 2 * half + 1] * scale);
      *reinterpret_cast<uint32_t*>(out + r * row_stride + n * 8 + 2 * t) = two;
    }
  }
}

// The producer of either pass: the block's own rows of two tensors once, then the walked tiles into the ring.
template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ void produce(BackwardShared<HEAD_DIM, STAGES>& sh, const CUtensorMap& own_a,
                                        const CUtensorMap& own_b, const CUtensorMap& walk_a,
                                        const CUtensorMap& walk_b, int own0, int first_tile, int n_tiles, int h,
                                        int b) {
  constexpr int HALVES = HEAD_DIM / TILE_COLUMNS;
  barrier_expect(&sh.own_full, 2 * HALVES * BLOCK_HALF);
#pragma unroll
  for (int c = 0; c < HALVES; ++c) {
    copy_box(sh.own_a + c * BLOCK_HALF, own_a, &sh.own_full, c * TILE_COLUMNS, own0, h, b);
    copy_box(sh.own_b + c * BLOCK_HALF, own_b, &sh.own_full, c * TILE_COLUMNS, own0, h, b);
  }
  for (int i = 0; i < n_tiles; ++i) {
    const int stage = i % STAGES, row0 = (first_tile + i) * ROWS;
    if (i >= STAGES) barrier_wait(&sh.empty[stage], (i / STAGES - 1) & 1);
    barrier_expect(&sh.full[stage], 2 * HALVES * TILE_HALF);
#pragma unroll
    for (int c = 0; c < HALVES; ++c) {
      copy_box(sh.walk_a[stage] + c * TILE_HALF, walk_a, &sh.full[stage], c * TILE_COLUMNS, row0, h, b);
      copy_box(sh.walk_b[stage] + c * TILE_HALF, walk_b, &sh.full[stage], c * TILE_COLUMNS, row0, h, b);
    }
  }
}

// dK/dV for one consumer's 64 keys (own_a = K, own_b = V; walked: walk_a = Q, walk_b = dO).
template <typename T, int HEAD_DIM, int STAGES, bool CAUSAL>
__device__ __forceinline__ void consume_dkdv(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p, const float* L,
                                             const float* delta, const Rows& dK, const Rows& dV, int k0, int h,
                                             int b, int first_tile, int n_tiles) {
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int my_k0 = k0 + consumer * ROWS, key = my_k0 + warp * 16 + lane / 4;  // this lane's keys: key, key + 8
  const uint32_t k_rows = shared_address(sh.own_a) + consumer * ROWS * 128;
  const uint32_t v_rows = shared_address(sh.own_b) + consumer * ROWS * 128;
  const int64_t bh = int64_t(b) * p.heads + h;
  const float qk_scale = p.scale * LOG2E;
  float dk[HEAD_DIM / 2] = {}, dv[HEAD_DIM / 2] = {}, s[32], dp[32];
  uint32_t pt[ROWS / 16][4], dst[ROWS / 16][4];
  barrier_wait(&sh.own_full, 0);
  for (int i = 0; i < n_tiles; ++i) {
    const int stage = i % STAGES, q0 = (first_tile + i) * ROWS;
    float lse[16];  // this lane's queries: q0 + 8 n + 2 t + c
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int query = q0 + 8 * n + 2 * t + c;
        lse[2 * n + c] = query < p.n_queries ? L[bh * p.n_queries + query] * LOG2E : INFINITY;  // P = 0 past the end
      }
    }
    barrier_wait(&sh.full[stage], (i / STAGES) & 1);
    const uint32_t q = shared_address(sh.walk_a[stage]), dout = shared_address(sh.walk_b[stage]);
    issue_k_major<T, HEAD_DIM, ROWS, BLOCK_HALF, TILE_HALF>(s, k_rows, q);      // S^T = K Q^T
    issue_k_major<T, HEAD_DIM, ROWS, BLOCK_HALF, TILE_HALF>(dp, v_rows, dout);  // dP^T = V dO^T
    wgmma_wait<1>();
    fence_registers(s);
    const bool diagonal = CAUSAL && q0 < my_k0 + ROWS - 1;  // some key of this consumer's past some query
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = e & 1, query = q0 + 8 * n + 2 * t + c;
        float pv = fast_exp2(fmaf(s[4 * n + e], qk_scale, -lse[2 * n + c]));
        if (diagonal && key + 8 * (e >> 1) > query) pv = 0.f;
        s[4 * n + e] = pv;
      }
    }
    to_operand<T, ROWS>(pt, s);
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dv, pt, dout);  // dV += P^T dO
    wgmma_wait<1>();
    fence_registers(dp);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {  // D of the same queries, read where it is used: the registers are at their peak
        const int query = q0 + 8 * n + 2 * t + c;
        const float d = query < p.n_queries ? __ldg(delta + bh * p.n_queries + query) : 0.f;
        dp[4 * n + c] = s[4 * n + c] * (dp[4 * n + c] - d);  // dS^T
        dp[4 * n + 2 + c] = s[4 * n + 2 + c] * (dp[4 * n + 2 + c] - d);
      }
    }
    wgmma_wait<0>();  // dV's product done with P^T's registers before dS^T's take their place
    fence_registers(dv);
    to_operand<T, ROWS>(dst, dp);
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dk, dst, q);  // dK += dS^T Q
    wgmma_wait<0>();
    fence_registers(dk);
    fence_registers(dv);
    if (lane == 0) barrier_arrive(&sh.empty[stage]);
  }
  store_accumulator<T, HEAD_DIM>(head_rows<T>(dK, b, h), dK.row_stride, dk, key, p.n_keys, p.scale);
  store_accumulator<T, HEAD_DIM>(head_rows<T>(dV, b, h), dV.row_stride, dv, key, p.n_keys, 1.f);
}

// dQ for one consumer's 64 queries (own_a = Q, own_b = dO; walked: walk_a = K, walk_b = V).
template <typename T, int HEAD_DIM, int STAGES, bool CAUSAL>
__device__ __forceinline__ void consume_dq(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p, const float* L,
                                           const float* delta, const Rows& dQ, int q0, int h, int b, int n_tiles) {
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int my_q0 = q0 + consumer * ROWS, row = my_q0 + warp * 16 + lane / 4;  // this lane's rows: row, row + 8
  const uint32_t q_rows = shared_address(sh.own_a) + consumer * ROWS * 128;
  const uint32_t do_rows = shared_address(sh.own_b) + consumer * ROWS * 128;
  const int64_t bh = int64_t(b) * p.heads + h;
  const float qk_scale = p.scale * LOG2E;
  float lse[2], dd[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    lse[half] = r < p.n_queries ? L[bh * p.n_queries + r] * LOG2E : 0.f;
    dd[half] = r < p.n_queries ? delta[bh * p.n_queries + r] : 0.f;
  }
  float dq[HEAD_DIM / 2] = {}, s[32], dp[32];
  uint32_t ds[ROWS / 16][4];
  barrier_wait(&sh.own_full, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % STAGES, k0 = j * ROWS;
    barrier_wait(&sh.full[stage], (j / STAGES) & 1);
    const uint32_t k = shared_address(sh.walk_a[stage]), v = shared_address(sh.walk_b[stage]);
    issue_k_major<T, HEAD_DIM, ROWS, BLOCK_HALF, TILE_HALF>(s, q_rows, k);    // S = Q K^T
    issue_k_major<T, HEAD_DIM, ROWS, BLOCK_HALF, TILE_HALF>(dp, do_rows, v);  // dP = dO V^T
    wgmma_wait<1>();
    fence_registers(s);
    const bool edge = k0 + ROWS > p.n_keys || (CAUSAL && k0 + ROWS - 1 > my_q0);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * n + 2 * t + (e & 1), query = row + 8 * (e >> 1);
        float pv = fast_exp2(fmaf(s[4 * n + e], qk_scale, -lse[e >> 1]));
        if (edge && (key >= p.n_keys || (CAUSAL && key > query))) pv = 0.f;
        s[4 * n + e] = pv;
      }
    }
    wgmma_wait<0>();
    fence_registers(dp);
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = s[i] * (dp[i] - dd[(i >> 1) & 1]);  // dS
    to_operand<T, ROWS>(ds, dp);
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dq, ds, k);  // dQ += dS K
    wgmma_wait<0>();
    fence_registers(dq);
    if (lane == 0) barrier_arrive(&sh.empty[stage]);
  }
  store_accumulator<T, HEAD_DIM>(head_rows<T>(dQ, b, h), dQ.row_stride, dq, row, p.n_queries, p.scale);
}

template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ BackwardShared<HEAD_DIM, STAGES>& backward_shared(unsigned char* raw) {
  // dynamic shared memory is 16-byte aligned; the swizzle needs 1024 (the launch asks for the slack)
  return *reinterpret_cast<BackwardShared<HEAD_DIM, STAGES>*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                                              ~uintptr_t(1023));
}

template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ void init_barriers(BackwardShared<HEAD_DIM, STAGES>& sh) {
  if (threadIdx.x == 0) {
    barrier_init(&sh.own_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&sh.full[s], 1);
      barrier_init(&sh.empty[s], 8);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// maps: K, V (boxes of 128 rows), Q, dO (boxes of 64)
template <typename T, int HEAD_DIM, int STAGES, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
    hopper_bwd_dkdv_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                           const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                           const Problem problem, const float* L, const float* delta, const Rows dK, const Rows dV) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  auto& sh = backward_shared<HEAD_DIM, STAGES>(raw);
  const int h = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * BLOCK_ROWS;
  // the query tiles that see these keys: all, or (causal, top-left) those from the tile holding query k0 on
  const int first_tile = CAUSAL ? k0 / ROWS : 0;
  const int n_tiles = max(0, (problem.n_queries + ROWS - 1) / ROWS - first_tile);
  init_barriers(sh);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) produce<HEAD_DIM, STAGES>(sh, k_map, v_map, q_map, do_map, k0, first_tile, n_tiles, h, b);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));
    consume_dkdv<T, HEAD_DIM, STAGES, CAUSAL>(sh, problem, L, delta, dK, dV, k0, h, b, first_tile, n_tiles);
  }
#endif
}

// maps: Q, dO (boxes of 128 rows), K, V (boxes of 64)
template <typename T, int HEAD_DIM, int STAGES, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
    hopper_bwd_dq_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                         const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                         const Problem problem, const float* L, const float* delta, const Rows dQ) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  auto& sh = backward_shared<HEAD_DIM, STAGES>(raw);
  // causal: the last query tiles see the most keys; launched first, they do not trail at the end
  const int query_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = query_tile * BLOCK_ROWS;
  const int k_end = CAUSAL ? min(problem.n_keys, q0 + BLOCK_ROWS) : problem.n_keys;
  const int n_tiles = (k_end + ROWS - 1) / ROWS;
  init_barriers(sh);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) produce<HEAD_DIM, STAGES>(sh, q_map, do_map, k_map, v_map, q0, 0, n_tiles, h, b);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));
    consume_dq<T, HEAD_DIM, STAGES, CAUSAL>(sh, problem, L, delta, dQ, q0, h, b, n_tiles);
  }
#endif
}

namespace {

constexpr int STAGES = 2;

template <typename T, int HEAD_DIM, bool CAUSAL>
cudaError_t launch_backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L,
                            float* delta, Rows dq, Rows dk, Rows dv, cudaStream_t stream) {
  const int64_t rows = int64_t(p.batch) * p.heads * p.n_queries;
  preprocess_kernel<T, HEAD_DIM><<<(rows + 127) / 128, 128, 0, stream>>>(p, o, dout, delta);
  CUtensorMap k128, v128, q64, do64, q128, do128, k64, v64;
  for (cudaError_t error : {tensor_map(&k128, p, k, p.n_keys, BLOCK_ROWS), tensor_map(&v128, p, v, p.n_keys, BLOCK_ROWS),
                            tensor_map(&q64, p, q, p.n_queries, ROWS), tensor_map(&do64, p, dout, p.n_queries, ROWS),
                            tensor_map(&q128, p, q, p.n_queries, BLOCK_ROWS),
                            tensor_map(&do128, p, dout, p.n_queries, BLOCK_ROWS),
                            tensor_map(&k64, p, k, p.n_keys, ROWS), tensor_map(&v64, p, v, p.n_keys, ROWS)}) {
    if (error != cudaSuccess) return error;
  }
  constexpr int SHARED = sizeof(BackwardShared<HEAD_DIM, STAGES>) + 1024;
  constexpr auto dkdv = hopper_bwd_dkdv_kernel<T, HEAD_DIM, STAGES, CAUSAL>;
  constexpr auto dq_kernel = hopper_bwd_dq_kernel<T, HEAD_DIM, STAGES, CAUSAL>;
  for (cudaError_t error : {systems_flash_cuda::allow_shared<dkdv>(SHARED),
                            systems_flash_cuda::allow_shared<dq_kernel>(SHARED)}) {
    if (error != cudaSuccess) return error;
  }
  dkdv<<<dim3((p.n_keys + BLOCK_ROWS - 1) / BLOCK_ROWS, p.heads, p.batch), THREADS, SHARED, stream>>>(
      k128, v128, q64, do64, p, L, delta, dk, dv);
  dq_kernel<<<dim3((p.n_queries + BLOCK_ROWS - 1) / BLOCK_ROWS, p.heads, p.batch), THREADS, SHARED, stream>>>(
      q128, do128, k64, v64, p, L, delta, dq);
  return cudaGetLastError();
}

}  // namespace

cudaError_t backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L, float* delta,
                     Rows dq, Rows dk, Rows dv, cudaStream_t stream) {
  return systems_flash_cuda::launch_for_problem(p, [&](auto type, auto head_dim, auto causal) {
    return launch_backward<typename decltype(type)::type, decltype(head_dim)::value, decltype(causal)::value>(
        p, q, k, v, o, dout, L, delta, dq, dk, dv, stream);
  });
}

}  // namespace systems_flash_hopper

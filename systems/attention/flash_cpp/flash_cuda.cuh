// What the FlashAttention-2 kernels in CUDA C++ are built from: the tensor-core product of one 16x16 by 16x8 tile
// (mma.sync, sm_80 and later, as FlashAttention-2 itself uses), the register fragments it reads and writes, tiles
// copied from global to shared memory without passing through registers (cp.async), and ldmatrix, which reads a
// fragment out of a shared tile in one instruction per warp.
//
// The fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane = 4 g + t of a warp:
//   A, 16x16, four 32-bit registers of two elements: rows g and g + 8, columns 2t, 2t + 1 and 2t + 8, 2t + 9;
//   B, 16x8, two registers: rows (k) 2t, 2t + 1 and 2t + 8, 2t + 9 of column (n) g;
//   C, 16x8 fp32, four floats: row g, columns 2t, 2t + 1, then row g + 8, the same columns.
// Two C tiles side by side (16x16) hold, element for element, what an A fragment holds: the probabilities P computed
// into S's registers feed the next product without going through memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "flash_cuda.h"

namespace systems_flash_cuda {

constexpr float LOG2E = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e)); exp2 is one instruction
constexpr float LN2 = 0.6931471805599453f;

template <typename T>
struct Element;

template <>
struct Element<__half> {
  static __device__ __forceinline__ __half round(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 two = __floats2half2_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &two, sizeof bits);
    return bits;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __half2 two;
    memcpy(&two, &bits, sizeof bits);
    return __half22float2(two);
  }
  // d += a b: one 16x16 A fragment times one 16x8 B fragment (b0, b1), fp32 accumulation
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Element<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 round(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 two = __floats2bfloat162_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &two, sizeof bits);
    return bits;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __nv_bfloat162 two;
    memcpy(&two, &bits, sizeof bits);
    return __bfloat1622float2(two);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ float fast_exp2(float x) {  // exp2(-inf) = 0, as the masked scores need
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The maximum and the sum over the four lanes (t = 0..3) that share a fragment row.
__device__ __forceinline__ float row_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- shared memory ----

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A shared tile of rows of HEAD_DIM 16-bit elements, each row 16-byte chunks whose index is XORed with the row's
// index mod 8: the eight rows that one ldmatrix reads at the same column sit in eight different bank groups, where
// without the swizzle they would all sit in one (a row is 128 or 256 bytes, a whole number of bank rounds).
template <int HEAD_DIM>
__device__ __forceinline__ int swizzled(int row, int col) {
  return row * HEAD_DIM + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Four 8x8 matrices from registers into shared memory, each transposed on the way (sm_90 and later): lanes
// 8 i..8 i + 7 give the addresses of the eight rows that matrix i (register i, laid out as ldmatrix reads it) becomes.
__device__ __forceinline__ void stmatrix_x4_trans(const uint32_t (&r)[4], uint32_t address) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The A fragment of rows row0..row0+15, columns col0..col0+15 of a shared tile (Q in S = Q K^T). Lane l gives the
// address of row l % 16, column col0 + 8 (l / 16): the four 8x8 matrices in the order of A's four registers.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int col0, int lane) {
  ldmatrix_x4(a, shared_address(tile + swizzled<HEAD_DIM>(row0 + lane % 16, col0 + (lane / 16) * 8)));
}

// B fragments of two 8-wide column tiles n0.., n0+8.. for the k step k0..k0+15, from a tile that holds B transposed,
// one row per column of B (K in S = Q K^T: B[d][key] = K[key][d]): b[0], b[1] for columns n0..n0+7, b[2], b[3] for
// n0+8..n0+15.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ void load_b_rows_are_n(uint32_t (&b)[4], const T* tile, int n0, int k0, int lane) {
  ldmatrix_x4(b, shared_address(tile + swizzled<HEAD_DIM>(n0 + lane % 8 + (lane / 16) * 8, k0 + (lane / 8) % 2 * 8)));
}

// The same from a tile that holds B as it is, one row per k (V in O += P V: B[key][d] = V[key][d]); ldmatrix
// transposes each 8x8 matrix on the way.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ void load_b_rows_are_k(uint32_t (&b)[4], const T* tile, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, shared_address(tile + swizzled<HEAD_DIM>(k0 + lane % 16, n0 + (lane / 16) * 8)));
}

// S = A_s B_s^T and dP = A_p B_p^T for a warp's 16 rows; the columns are the rows of the B tiles (TILES x 8 of them),
// k runs over the head dim. Each backward pass starts a tile with this pair: dK/dV with (K, Q) and (V, dO), dQ with
// (Q, K) and (dO, V). The A operands come as fragments, `a_s(a, kk)` and `a_p(a, kk)` filling `a` for the k step
// 16 kk..16 kk + 15: read from a shared tile (`shared_fragments`), or held in registers across the walk.
template <int HEAD_DIM, int TILES, typename T, typename FragmentS, typename FragmentP>
__device__ __forceinline__ void scores_and_dp(float (&s)[TILES][4], float (&dp)[TILES][4], FragmentS a_s,
                                              const T* b_s, FragmentP a_p, const T* b_p, int lane) {
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    uint32_t sa[4], pa[4];
    a_s(sa, kk);
    a_p(pa, kk);
#pragma unroll
    for (int n = 0; n < TILES / 2; ++n) {
      uint32_t sb[4], pb[4];
      load_b_rows_are_n<HEAD_DIM>(sb, b_s, n * 16, kk * 16, lane);
      load_b_rows_are_n<HEAD_DIM>(pb, b_p, n * 16, kk * 16, lane);
      Element<T>::mma(s[2 * n], sa, sb[0], sb[1]);
      Element<T>::mma(s[2 * n + 1], sa, sb[2], sb[3]);
      Element<T>::mma(dp[2 * n], pa, pb[0], pb[1]);
      Element<T>::mma(dp[2 * n + 1], pa, pb[2], pb[3]);
    }
  }
}

// The A fragments of a warp's 16 rows, rows row0.. of a shared tile, as `scores_and_dp` takes them.
template <int HEAD_DIM, typename T>
__device__ __forceinline__ auto shared_fragments(const T* tile, int row0, int lane) {
  return [=](uint32_t(&a)[4], int kk) { load_a<HEAD_DIM>(a, tile, row0, kk * 16, lane); };
}

// A C fragment pair (two 16x8 tiles, columns 16 kk..16 kk + 15) as the A fragment of the next product, in T.
template <int TILES, typename T>
__device__ __forceinline__ void as_a(uint32_t (&a)[4], const float (&c)[TILES][4], int kk) {
  a[0] = Element<T>::pack(c[2 * kk][0], c[2 * kk][1]);
  a[1] = Element<T>::pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = Element<T>::pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = Element<T>::pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// acc += C B for a warp's M_TILES x 16 rows: C, fp32 fragments of K_TILES x 8 columns per 16 rows, rounded to T as
// the A operand (P, dS); B a shared tile of K_TILES x 8 rows (k) by HEAD_DIM columns (V, K, dO, Q). Each B fragment
// read from shared memory feeds the products of all M_TILES row tiles.
template <int HEAD_DIM, int K_TILES, int M_TILES, typename T>
__device__ __forceinline__ void add_products(float (&acc)[M_TILES][HEAD_DIM / 8][4],
                                             const float (&c)[M_TILES][K_TILES][4], const T* b_tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < K_TILES / 2; ++kk) {
    uint32_t a[M_TILES][4];
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi) as_a<K_TILES, T>(a[mi], c[mi], kk);
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 16; ++n) {
      uint32_t b[4];
      load_b_rows_are_k<HEAD_DIM>(b, b_tile, kk * 16, n * 16, lane);
#pragma unroll
      for (int mi = 0; mi < M_TILES; ++mi) {
        Element<T>::mma(acc[mi][2 * n], a[mi], b[0], b[1]);
        Element<T>::mma(acc[mi][2 * n + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// The same for a warp's 16 rows.
template <int HEAD_DIM, int K_TILES, typename T>
__device__ __forceinline__ void add_product(float (&acc)[HEAD_DIM / 8][4], const float (&c)[K_TILES][4],
                                            const T* b_tile, int lane) {
  add_products<HEAD_DIM, K_TILES, 1>(reinterpret_cast<float(&)[1][HEAD_DIM / 8][4]>(acc),
                                     reinterpret_cast<const float(&)[1][K_TILES][4]>(c), b_tile, lane);
}

// ---- global to shared, asynchronously ----

__device__ __forceinline__ void cp_async_16(uint32_t to, const void* from, bool inside) {
  // with a source size of 0 the 16 bytes are zero-filled: rows past the end of a sequence read as zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 16 : 0));
}

__device__ __forceinline__ void cp_async_4(uint32_t to, const void* from, bool inside) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>  // wait until at most PENDING of the committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Rows row0..row0+ROWS-1 of an (n_rows, HEAD_DIM) matrix into a swizzled shared tile by THREADS threads (`thread` is
// this one's index among them), 16 bytes per copy, consecutive threads taking consecutive chunks (coalesced reads);
// rows past n_rows are zeros: their copies keep the source address past the tensor's end, which a source size of 0
// never reads (Triton's masked copies do the same; a select of a valid address per copy spills the one-pass dK/dV
// kernel at head dim 128 on sm_80). Each thread copies the same column of every ROWS_PER_PASS-th row, unrolled: the
// copies' shared addresses differ by constants, immediates of their instructions, and each source is the last one's
// plus one stride. (A loop stepping one address register made every copy wait until the copy before it had released
// that register: the largest stall of the forward and of the dK/dV pass.)
template <int ROWS, int HEAD_DIM, int THREADS, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* matrix, int64_t row_stride, int row0, int n_rows,
                                          int thread) {
  constexpr int CHUNKS = HEAD_DIM / 8, ROWS_PER_PASS = THREADS / CHUNKS;
  static_assert(THREADS % CHUNKS == 0 && ROWS % ROWS_PER_PASS == 0, "whole passes");
  const int col = (thread % CHUNKS) * 8, first = thread / CHUNKS;
  const T* from = matrix + (row0 + first) * row_stride + col;
#pragma unroll
  for (int pass = 0; pass < ROWS / ROWS_PER_PASS; ++pass) {
    const int row = first + pass * ROWS_PER_PASS;
    cp_async_16(shared_address(tile + swizzled<HEAD_DIM>(row, col)), from, row0 + row < n_rows);
    from += ROWS_PER_PASS * row_stride;
  }
}

// Two tiles of the same rows of two matrices (K and V), each by half of the block's threads: a thread steps one
// source pointer, not two, through the walk.
template <int ROWS, int HEAD_DIM, int THREADS, typename T>
__device__ __forceinline__ void load_tile_pair(T* tile_a, T* tile_b, const T* a, const T* b, int64_t a_row_stride,
                                               int64_t b_row_stride, int row0, int n_rows) {
  const bool copies_a = threadIdx.x < THREADS / 2;
  load_tile<ROWS, HEAD_DIM, THREADS / 2>(copies_a ? tile_a : tile_b, copies_a ? a : b,
                                         copies_a ? a_row_stride : b_row_stride, row0, n_rows,
                                         threadIdx.x % (THREADS / 2));
}

// Step j of a walk over n_tiles key tiles with K and V two stages deep: a wait for tile j's copies, a barrier past
// which the whole block sees them and every warp is done with step j - 1, then tile j + 1's copies started into the
// stage step j - 1 read. One barrier a step; the copies run while the block multiplies tile j. Returns tile j's stage.
template <int BLOCK_K, int HEAD_DIM, int THREADS, typename T>
__device__ __forceinline__ int next_key_stage(T* k_tiles, T* v_tiles, const T* k, const T* v, int64_t k_row_stride,
                                              int64_t v_row_stride, int j, int n_tiles, int n_keys) {
  cp_async_wait<0>();
  __syncthreads();
  if (j + 1 < n_tiles) {
    const int next = ((j + 1) % 2) * BLOCK_K * HEAD_DIM;
    load_tile_pair<BLOCK_K, HEAD_DIM, THREADS>(k_tiles + next, v_tiles + next, k, v, k_row_stride, v_row_stride,
                                               (j + 1) * BLOCK_K, n_keys);
    cp_async_commit();
  }
  return (j % 2) * BLOCK_K * HEAD_DIM;
}

// Entries row0..row0+ROWS-1 of a vector of n fp32 values (L or delta) into shared memory, one per thread of the first
// ROWS; past n, zeros.
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_vector(float* to, const float* vector, int row0, int n) {
  static_assert(ROWS <= THREADS, "one entry a thread");
  const int i = threadIdx.x;
  if (i < ROWS) {
    const bool inside = row0 + i < n;
    cp_async_4(shared_address(to + i), inside ? vector + row0 + i : vector, inside);
  }
}

// The first row of (batch b, head h) of a tensor.
template <typename T>
__device__ __forceinline__ T* head_rows(const Rows& rows, int b, int h) {
  return static_cast<T*>(rows.data) + b * rows.batch_stride + h * rows.head_stride;
}

// The backward's first kernel, for either backward: delta = rowsum(dO * O), in fp32, (B, H, Nq) flattened. A row's
// HEAD_DIM / 8 lanes each read 16 bytes of O and of dO, so a warp's loads cover whole rows of 128 or 256 bytes (with
// a thread to a row, each load of a warp touches 32 rows, a row's stride apart); those past the problem's head dim
// (the Hopper kernels' head dims 72 and 80, with HEAD_DIM 128) read nothing.
constexpr int DELTA_THREADS = 256;

template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(DELTA_THREADS)
    delta_kernel(const Problem problem, const Rows O, const Rows DO, float* delta, float4* zeros, int64_t zero_quads) {
  constexpr int LANES = HEAD_DIM / 8;  // a power of two within a warp: the shuffles below stay in the row's lanes
  const int64_t rows = int64_t(problem.batch) * problem.heads * problem.n_queries;
  const int64_t index = (int64_t(blockIdx.x) * DELTA_THREADS + threadIdx.x) / LANES;
  const int chunk = threadIdx.x % LANES;
  float sum = 0.f;
  if (index < rows && 8 * chunk < problem.head_dim) {  // (no early return: every lane takes part in the shuffles)
    const int i = index % problem.n_queries, bh = index / problem.n_queries;
    const int h = bh % problem.heads, b = bh / problem.heads;
    const uint4 a = *reinterpret_cast<const uint4*>(head_rows<T>(O, b, h) + i * O.row_stride + 8 * chunk);
    const uint4 g = *reinterpret_cast<const uint4*>(head_rows<T>(DO, b, h) + i * DO.row_stride + 8 * chunk);
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, gw[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 x = Element<T>::unpack(aw[w]), y = Element<T>::unpack(gw[w]);
      sum += x.x * y.x + x.y * y.y;
    }
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (chunk == 0 && index < rows) delta[index] = sum;
  // The one pass's dQ accumulator, zeroed here rather than by a fill of its own: a launch fewer, and its stores go out
  // while this kernel waits on its loads of O and dO
  const int64_t threads = int64_t(gridDim.x) * DELTA_THREADS;
  for (int64_t i = int64_t(blockIdx.x) * DELTA_THREADS + threadIdx.x; i < zero_quads; i += threads) {
    zeros[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// delta = rowsum(dO * O), and `zero_floats` floats from `zeros` (16-byte aligned, a multiple of 4) set to 0: the one
// pass's dQ accumulator, none where `zeros` is null (two passes).
template <typename T, int HEAD_DIM>
cudaError_t launch_delta(const Problem& p, Rows o, Rows dout, float* delta, float* zeros, int64_t zero_floats,
                         cudaStream_t stream) {
  const int64_t threads = int64_t(p.batch) * p.heads * p.n_queries * (HEAD_DIM / 8);
  delta_kernel<T, HEAD_DIM><<<(threads + DELTA_THREADS - 1) / DELTA_THREADS, DELTA_THREADS, 0, stream>>>(
      p, o, dout, delta, reinterpret_cast<float4*>(zeros), zeros == nullptr ? 0 : zero_floats / 4);
  return cudaGetLastError();
}

// Rows g and g + 8 of a warp's 16-row C fragments (TILES tiles of 8 columns), times `scale`, stored as T into an
// (n_rows, HEAD_DIM) matrix from row `row`: O, dQ, dK, dV.
template <int TILES, typename T>
__device__ __forceinline__ void store_rows(T* matrix, int64_t row_stride, const float (&c)[TILES][4], int row,
                                           int n_rows, int t, const float (&scale)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    if (r >= n_rows) continue;
#pragma unroll
    for (int n = 0; n < TILES; ++n) {
      const uint32_t two = Element<T>::pack(c[n][2 * half] * scale[half], c[n][2 * half + 1] * scale[half]);
      *reinterpret_cast<uint32_t*>(matrix + r * row_stride + n * 8 + 2 * t) = two;
    }
  }
}

// Lets KERNEL use `bytes` of dynamic shared memory (past 48 KiB a kernel must ask), once per device: it is a driver
// call, and not one to repeat while a CUDA graph captures the launches.
template <auto KERNEL>
cudaError_t allow_shared(int bytes) {
  constexpr int MAX_DEVICES = 64;
  static std::atomic<bool> allowed[MAX_DEVICES] = {};
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess || (device < MAX_DEVICES && allowed[device])) return error;
  error = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error == cudaSuccess && device < MAX_DEVICES) allowed[device] = true;
  return error;
}

template <typename T>
struct Of {
  using type = T;
};

// The instantiation a problem reaches: `launch(Of<T>{}, head dim, causal)` for its dtype (bf16 or fp16), its head dim
// (64 or 128) and causality as std::integral_constants; another head dim is cudaErrorInvalidValue.
template <typename Launch>
cudaError_t launch_for_problem(const Problem& p, Launch launch) {
  if (!supported_head_dim(p.head_dim)) return cudaErrorInvalidValue;
  const auto with_causal = [&](auto type, auto head_dim) {
    return p.causal ? launch(type, head_dim, std::true_type{}) : launch(type, head_dim, std::false_type{});
  };
  const auto with_head_dim = [&](auto type) {
    return p.head_dim == 64 ? with_causal(type, std::integral_constant<int, 64>{})
                            : with_causal(type, std::integral_constant<int, 128>{});
  };
  return p.dtype == DType::BFloat16 ? with_head_dim(Of<__nv_bfloat16>{}) : with_head_dim(Of<__half>{});
}


}  // namespace systems_flash_cuda

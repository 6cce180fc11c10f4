// FlashAttention's forward written for Hopper (sm_90a) in CUDA C++: the overlap that the portable Triton kernel
// cannot express (issue 29, FlashAttention-3's design: Shah et al., 2024), with the tile names and the online softmax
// of the other kernels (flash_cuda_forward.cu, ../flash_triton/kernels.py).
//
// A block of a producer and CONSUMERS consumer warpgroups owns BLOCK_Q = 64 CONSUMERS queries of one (batch, head)
// and walks the key tiles of BLOCK_K = 128 keys that they see:
//   producer   warpgroup 0: one thread starts the copy engine (TMA, cp.async.bulk.tensor) on Q once and on each K and V
//              tile, into a ring of STAGES shared-memory stages; it gives its registers away (setmaxnreg.dec)
//   consumers  warpgroups 1.., 64 queries each (2 of them, or 3 at head dim 64), take those registers
//              (setmaxnreg.inc) and multiply on the tensor cores with asynchronous wgmma: S = Q K^T from shared
//              memory, O += P V with P from registers
// A stage is handed over through mbarriers: `k_full` / `v_full` complete when the copy engine has written the tile,
// `empty` when every consumer warp has finished reading it.
//
// The overlap inside a consumer (FlashAttention-3's intra-warpgroup pipelining): while the exponentials of tile j run
// on the multi-function units, the tensor cores still multiply P(j-1) V(j-1):
//   issue S(j) = Q K(j)^T;  O *= alpha(j-1);  issue O += P(j-1) V(j-1)
//   wait for S(j);  softmax of S(j) -> P(j), alpha(j)        (under P(j-1) V(j-1))
//   wait for P(j-1) V(j-1);  release stage j-1
// With PINGPONG the consumers take turns at the tensor cores (named barriers), so one's softmax runs under another's
// products as well.
//
// Shared tiles are rows of 64 elements (128 bytes) in the copy engine's 128-byte swizzle, the layout wgmma reads;
// head dim 128 is two such column halves. The scores S are in log2 units: P = exp2(S scale log2e - m).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "flash_cuda.cuh"
#include "flash_hopper.h"

namespace systems_flash_hopper {

using systems_flash_cuda::Element;
using systems_flash_cuda::fast_exp2;
using systems_flash_cuda::head_rows;
using systems_flash_cuda::LN2;
using systems_flash_cuda::LOG2E;
using systems_flash_cuda::Problem;
using systems_flash_cuda::Rows;
using systems_flash_cuda::row_max;
using systems_flash_cuda::row_sum;
using systems_flash_cuda::shared_address;

constexpr int BLOCK_K = 128, CONSUMER_ROWS = 64;
constexpr int TILE_COLUMNS = 64;                        // one 128-byte swizzle row of 16-bit elements
constexpr int HALF_BYTES = BLOCK_K * TILE_COLUMNS * 2;  // a (128, 64) tile of K or V: 16 KiB
constexpr int PRODUCER_REGISTERS = 24;

// A block of CONSUMERS consumer warpgroups (2, or 3 at head dim 64 as FlashAttention-3 has it there) and the producer.
template <int CONSUMERS>
struct Block {
  static constexpr int BLOCK_Q = CONSUMERS * CONSUMER_ROWS, THREADS = 128 * (CONSUMERS + 1);
  static constexpr int Q_HALF_BYTES = BLOCK_Q * TILE_COLUMNS * 2;
  // what is left of the 65536 registers once the producer has 24 a thread, in the steps of 8 setmaxnreg takes:
  // 128 x 24 + 256 x 240 = 64512, 128 x 24 + 384 x 160 = 64512
  static constexpr int CONSUMER_REGISTERS = CONSUMERS == 2 ? 240 : 160;
};

template <typename T>
constexpr bool IS_BF16 = std::is_same_v<T, __nv_bfloat16>;

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS>
struct Shared {  // the block's shared memory, 1024-byte aligned (the swizzle's period)
  static constexpr int HALVES = HEAD_DIM / TILE_COLUMNS, TILE_BYTES = HALVES * HALF_BYTES;
  alignas(1024) unsigned char q[HALVES * Block<CONSUMERS>::Q_HALF_BYTES];
  alignas(1024) unsigned char k[STAGES][TILE_BYTES];
  alignas(1024) unsigned char v[STAGES][TILE_BYTES];
  uint64_t q_full, k_full[STAGES], v_full[STAGES], empty[STAGES];
};

// the device code below exists for sm_90a alone (wgmma, setmaxnreg); other passes compile an empty kernel
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d (64 x 128, fp32) = or += A B from shared memory, A and B K-major (S = Q K^T): `accumulate` 0 starts from zero
template <typename T>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
  }
}

// d (64 x 64, fp32) += A B, A from registers (P), B from shared memory N-major (V, transposed by the instruction)
template <typename T>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
}

// d (64 x 128, fp32) += A B, A from registers (P), B from shared memory N-major (V, transposed by the instruction)
template <typename T>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
}

// ---- the tensor cores' side: descriptors, fences, groups ----

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and stride byte
// offsets (16-byte units), 128-byte swizzle. K-major tiles (Q, K): 8-row groups 1024 bytes apart, the leading offset
// unused. V as B of P V is N-major (head dim contiguous): 8-key groups 1024 bytes apart, column halves `lead` apart.
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t lead, uint32_t stride) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | static_cast<uint64_t>(lead >> 4) << 16 |
         static_cast<uint64_t>(stride >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads of accumulators that a wgmma still writes across the wait that ends it.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// ---- the copy engine's side: mbarriers and bulk tensor copies ----

__device__ __forceinline__ void barrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count));
}
__device__ __forceinline__ void barrier_expect(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// Waits for the phase of parity `phase` to complete.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, int phase) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(shared_address(bar)),
      "r"(phase)
      : "memory");
}
// One (rows, 64) box of a (d, N, H, B) tensor map at (column, row, head, batch) into shared memory.
__device__ __forceinline__ void copy_box(void* to, const CUtensorMap& map, uint64_t* bar, int column, int row, int h,
                                         int b) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(shared_address(to)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(column), "r"(row), "r"(h), "r"(b), "r"(shared_address(bar))
      : "memory");
}

// Named barrier 1 + c: consumer c's turn at the tensor cores (PINGPONG), given by the consumer before it in turn.
__device__ __forceinline__ void wait_turn(int consumer) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + consumer) : "memory");
}
template <int CONSUMERS>
__device__ __forceinline__ void give_turn(int consumer) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (consumer + 1) % CONSUMERS) : "memory");
}


// S = Q K^T for one consumer's 64 queries: HEAD_DIM / 16 products of k 16, each 32 bytes further along a row (and
// past the first 64 columns, in the tiles' second column half).
template <typename T, int HEAD_DIM, int Q_HALF_BYTES>
__device__ __forceinline__ void issue_scores(float (&s)[64], uint32_t q, uint32_t k) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    const uint32_t along = (kk % 4) * 32;
    wgmma_ss_n128<T>(s, descriptor(q + (kk / 4) * Q_HALF_BYTES + along, 16, 1024),
                     descriptor(k + (kk / 4) * HALF_BYTES + along, 16, 1024), kk);
  }
  wgmma_commit();
}

// O += P V: BLOCK_K / 16 products of k 16 (16 keys, 2048 bytes of each column half).
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void issue_values(float (&o)[HEAD_DIM / 2], const uint32_t (&p)[BLOCK_K / 16][4],
                                             uint32_t v) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
    const uint64_t b = descriptor(v + kk * 16 * 128, HALF_BYTES, 1024);
    if constexpr (HEAD_DIM == 64) {
      wgmma_rs_n64<T>(o, p[kk], b);
    } else {
      wgmma_rs_n128<T>(o, p[kk], b);
    }
  }
  wgmma_commit();
}

// S's accumulators, for lane 4 g + t of warp w of the warpgroup: s[4 n + e] is row 16 w + g + 8 (e / 2), key
// 8 n + 2 t + e % 2 (the layout of mma.sync's C tiles, side by side). As bf16 pairs they are the A fragment of P V.
template <typename T>
__device__ __forceinline__ void to_operand(uint32_t (&p)[BLOCK_K / 16][4], const float (&s)[64]) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = Element<T>::pack(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// The online softmax of one tile of S, in place (S becomes P): masked past the keys' end and, causal, above the
// diagonal when the tile reaches them; m_i and this lane's share of l_i updated; alpha = exp2(m_old - m_new).
template <bool CAUSAL>
__device__ __forceinline__ void softmax(float (&s)[64], float (&m_i)[2], float (&l_i)[2], float (&alpha)[2], int k0,
                                        int row, int n_keys, bool masked, float qk_scale) {
  const int t = threadIdx.x % 4;
  if (masked) {
#pragma unroll
    for (int n = 0; n < 16; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * n + 2 * t + (e & 1), query = row + 8 * (e >> 1);
        if (key >= n_keys || (CAUSAL && key > query)) s[4 * n + e] = -INFINITY;
      }
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < 16; ++n) tile_max = fmaxf(tile_max, fmaxf(s[4 * n + 2 * half], s[4 * n + 2 * half + 1]));
    const float m_new = fmaxf(m_i[half], row_max(tile_max) * qk_scale);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row every key so far is masked for: no NaN
    alpha[half] = fast_exp2(m_i[half] - m_use);
    m_i[half] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        s[4 * n + e] = fast_exp2(fmaf(s[4 * n + e], qk_scale, -m_use));
        sum += s[4 * n + e];
      }
    }
    l_i[half] = l_i[half] * alpha[half] + sum;
  }
}

template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] *= alpha[(i >> 1) & 1];
}

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG>
__device__ __forceinline__ void consume(Shared<T, HEAD_DIM, STAGES, CONSUMERS>& sh, const Problem& problem, const Rows& O,
                                        float* L, int q0, int h, int b, int n_tiles) {
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int first_row = q0 + consumer * CONSUMER_ROWS, row = first_row + warp * 16 + lane / 4;
  const int n_keys = problem.n_keys;
  const float qk_scale = problem.scale * LOG2E;
  const uint32_t q = shared_address(sh.q) + consumer * CONSUMER_ROWS * 128;
  // a tile needs the mask if it runs past the keys' end or (causal) past this consumer's first query
  auto masked = [&](int j) {
    return (j + 1) * BLOCK_K > n_keys || (CAUSAL && (j + 1) * BLOCK_K - 1 > first_row);
  };

  float o[HEAD_DIM / 2] = {}, s[64];
  float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f}, alpha[2];
  uint32_t p[BLOCK_K / 16][4];
  constexpr int Q_HALF_BYTES = Block<CONSUMERS>::Q_HALF_BYTES;
  if (PINGPONG && consumer == CONSUMERS - 1) give_turn<CONSUMERS>(consumer);  // the first consumer goes first
  barrier_wait(&sh.q_full, 0);

  barrier_wait(&sh.k_full[0], 0);
  if (PINGPONG) wait_turn(consumer);
  issue_scores<T, HEAD_DIM, Q_HALF_BYTES>(s, q, shared_address(sh.k[0]));
  if (PINGPONG) give_turn<CONSUMERS>(consumer);
  wgmma_wait<0>();
  fence_registers(s);
  softmax<CAUSAL>(s, m_i, l_i, alpha, 0, row, n_keys, masked(0), qk_scale);
  to_operand<T>(p, s);

  for (int j = 1; j < n_tiles; ++j) {
    const int stage = j % STAGES, previous = (j - 1) % STAGES;
    barrier_wait(&sh.k_full[stage], (j / STAGES) & 1);
    barrier_wait(&sh.v_full[previous], ((j - 1) / STAGES) & 1);
    if (PINGPONG) wait_turn(consumer);
    issue_scores<T, HEAD_DIM, Q_HALF_BYTES>(s, q, shared_address(sh.k[stage]));
    rescale(o, alpha);
    issue_values<T, HEAD_DIM>(o, p, shared_address(sh.v[previous]));
    if (PINGPONG) give_turn<CONSUMERS>(consumer);
    wgmma_wait<1>();  // S(j) is in; P(j-1) V(j-1) still runs under the softmax
    fence_registers(s);
    softmax<CAUSAL>(s, m_i, l_i, alpha, j * BLOCK_K, row, n_keys, masked(j), qk_scale);
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) barrier_arrive(&sh.empty[previous]);
    to_operand<T>(p, s);
  }

  const int last = (n_tiles - 1) % STAGES;
  barrier_wait(&sh.v_full[last], ((n_tiles - 1) / STAGES) & 1);
  rescale(o, alpha);
  if (PINGPONG) wait_turn(consumer);
  issue_values<T, HEAD_DIM>(o, p, shared_address(sh.v[last]));
  // every consumer takes n_tiles + 1 turns: the last to take its final turn gives none after it
  if (PINGPONG && consumer != CONSUMERS - 1) give_turn<CONSUMERS>(consumer);
  wgmma_wait<0>();
  fence_registers(o);

  // O = acc / l_i, L = (m_i + log2 l_i) ln 2
  float inverse_l[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = row_sum(l_i[half]);
    inverse_l[half] = 1.f / l;
    const int r = row + 8 * half;
    if (lane % 4 == 0 && r < problem.n_queries) {
      L[(int64_t(b) * problem.heads + h) * problem.n_queries + r] = (m_i[half] + log2f(l)) * LN2;
    }
  }
  T* out = head_rows<T>(O, b, h);
  const int t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    if (r >= problem.n_queries) continue;
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
      const uint32_t two = Element<T>::pack(o[4 * n + 2 * half] * inverse_l[half],
                                            o[4 * n + 2 * half + 1] * inverse_l[half]);
      *reinterpret_cast<uint32_t*>(out + r * O.row_stride + n * 8 + 2 * t) = two;
    }
  }
}

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS>
__device__ __forceinline__ void produce(Shared<T, HEAD_DIM, STAGES, CONSUMERS>& sh, const CUtensorMap& q_map,
                                        const CUtensorMap& k_map, const CUtensorMap& v_map, int q0, int h, int b,
                                        int n_tiles) {
  constexpr int HALVES = HEAD_DIM / TILE_COLUMNS, BYTES = HALVES * HALF_BYTES;
  constexpr int Q_HALF_BYTES = Block<CONSUMERS>::Q_HALF_BYTES;
  barrier_expect(&sh.q_full, HALVES * Q_HALF_BYTES);
#pragma unroll
  for (int c = 0; c < HALVES; ++c) copy_box(sh.q + c * Q_HALF_BYTES, q_map, &sh.q_full, c * TILE_COLUMNS, q0, h, b);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % STAGES;
    if (j >= STAGES) barrier_wait(&sh.empty[stage], (j / STAGES - 1) & 1);
    barrier_expect(&sh.k_full[stage], BYTES);
#pragma unroll
    for (int c = 0; c < HALVES; ++c) {
      copy_box(sh.k[stage] + c * HALF_BYTES, k_map, &sh.k_full[stage], c * TILE_COLUMNS, j * BLOCK_K, h, b);
    }
    barrier_expect(&sh.v_full[stage], BYTES);
#pragma unroll
    for (int c = 0; c < HALVES; ++c) {
      copy_box(sh.v[stage] + c * HALF_BYTES, v_map, &sh.v_full[stage], c * TILE_COLUMNS, j * BLOCK_K, h, b);
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG>
__global__ void __launch_bounds__(Block<CONSUMERS>::THREADS, 1)
    hopper_fwd_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                      const __grid_constant__ CUtensorMap v_map, const Problem problem, const Rows O, float* L) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  // dynamic shared memory is 16-byte aligned; the swizzle needs 1024 (the launch asks for the slack)
  auto& sh = *reinterpret_cast<Shared<T, HEAD_DIM, STAGES, CONSUMERS>*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                                                        ~uintptr_t(1023));
  constexpr int BLOCK_Q = Block<CONSUMERS>::BLOCK_Q;
  // causal: the last query tiles see the most keys; launched first, they do not trail at the end
  const int query_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = query_tile * BLOCK_Q;
  const int k_end = CAUSAL ? min(problem.n_keys, q0 + BLOCK_Q) : problem.n_keys;
  const int n_tiles = (k_end + BLOCK_K - 1) / BLOCK_K;
  if (threadIdx.x == 0) {
    barrier_init(&sh.q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&sh.k_full[s], 1);
      barrier_init(&sh.v_full[s], 1);
      barrier_init(&sh.empty[s], 4 * CONSUMERS);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) produce<T, HEAD_DIM, STAGES, CONSUMERS>(sh, q_map, k_map, v_map, q0, h, b, n_tiles);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Block<CONSUMERS>::CONSUMER_REGISTERS));
    consume<T, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, PINGPONG>(sh, problem, O, L, q0, h, b, n_tiles);
  }
#endif
}

namespace {

// cuTensorMapEncodeTiled, from the driver through the runtime (no link against libcuda)
using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                            const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                            CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Encode encoder() {
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    const cudaError_t error =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    return error == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<Encode>(fn) : nullptr;
  }();
  return encode;
}

// The copy engine's map of one (B, H, n_rows, d) tensor as (d, n_rows, H, B), read in boxes of (64, box_rows) with
// the 128-byte swizzle; rows past n_rows read as zeros. A dimension of size 1 never moves a pointer, so its stride
// (which may be anything) is replaced by one the copy engine accepts.
cudaError_t tensor_map(CUtensorMap* map, const Problem& p, const Rows& rows, int n_rows, int box_rows) {
  const Encode encode = encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t element = 2;
  cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(n_rows), cuuint64_t(p.heads), cuuint64_t(p.batch)};
  cuuint64_t strides[3] = {rows.row_stride * element, rows.head_stride * element, rows.batch_stride * element};
  cuuint64_t natural = dims[0] * element;
  for (int i = 0; i < 3; ++i) {
    if (dims[i + 1] == 1) strides[i] = natural;
    natural = strides[i] * dims[i + 1];
  }
  const cuuint32_t box[4] = {TILE_COLUMNS, cuuint32_t(box_rows), 1, 1}, unit[4] = {1, 1, 1, 1};
  const CUresult result =
      encode(map, p.dtype == systems_flash_cuda::DType::BFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             4, rows.data, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG>
cudaError_t launch(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream) {
  using B = Block<CONSUMERS>;
  CUtensorMap maps[3];
  for (cudaError_t error : {tensor_map(&maps[0], p, q, p.n_queries, B::BLOCK_Q),
                            tensor_map(&maps[1], p, k, p.n_keys, BLOCK_K), tensor_map(&maps[2], p, v, p.n_keys, BLOCK_K)}) {
    if (error != cudaSuccess) return error;
  }
  constexpr int SHARED = sizeof(Shared<T, HEAD_DIM, STAGES, CONSUMERS>) + 1024;
  constexpr auto kernel = hopper_fwd_kernel<T, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, PINGPONG>;
  const cudaError_t error = systems_flash_cuda::allow_shared<kernel>(SHARED);
  if (error != cudaSuccess) return error;
  const dim3 grid((p.n_queries + B::BLOCK_Q - 1) / B::BLOCK_Q, p.heads, p.batch);
  kernel<<<grid, B::THREADS, SHARED, stream>>>(maps[0], maps[1], maps[2], p, o, L);
  return cudaGetLastError();
}

// The instantiations a launch can reach: ring depth 2 or 3, ping-pong or not, causal or not; three consumer
// warpgroups at head dim 64 only (at 128 their 160 registers cannot hold S and O).
template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS>
cudaError_t launch_for(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream,
                       bool pingpong) {
  if (p.causal) {
    return pingpong ? launch<T, HEAD_DIM, STAGES, CONSUMERS, true, true>(p, q, k, v, o, L, stream)
                    : launch<T, HEAD_DIM, STAGES, CONSUMERS, true, false>(p, q, k, v, o, L, stream);
  }
  return pingpong ? launch<T, HEAD_DIM, STAGES, CONSUMERS, false, true>(p, q, k, v, o, L, stream)
                  : launch<T, HEAD_DIM, STAGES, CONSUMERS, false, false>(p, q, k, v, o, L, stream);
}

template <typename T, int HEAD_DIM, int CONSUMERS>
cudaError_t launch_with(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream,
                        const Variant& variant) {
  return variant.stages == 2 ? launch_for<T, HEAD_DIM, 2, CONSUMERS>(p, q, k, v, o, L, stream, variant.pingpong)
                             : launch_for<T, HEAD_DIM, 3, CONSUMERS>(p, q, k, v, o, L, stream, variant.pingpong);
}

template <typename T>
cudaError_t launch_of(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream,
                      const Variant& variant) {
  if (p.head_dim == 128) return launch_with<T, 128, 2>(p, q, k, v, o, L, stream, variant);
  return variant.consumers == 2 ? launch_with<T, 64, 2>(p, q, k, v, o, L, stream, variant)
                                : launch_with<T, 64, 3>(p, q, k, v, o, L, stream, variant);
}

}  // namespace

cudaError_t forward(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream,
                    const Variant& variant) {
  if (!systems_flash_cuda::supported_head_dim(p.head_dim) || !valid(variant, p.head_dim)) return cudaErrorInvalidValue;
  return p.dtype == systems_flash_cuda::DType::BFloat16 ? launch_of<__nv_bfloat16>(p, q, k, v, o, L, stream, variant)
                                                        : launch_of<__half>(p, q, k, v, o, L, stream, variant);
}

}  // namespace systems_flash_hopper

// What the kernels written for Hopper (sm_90a) are built from: asynchronous wgmma products with their shared-memory
// descriptors, the copy engine's bulk tensor copies completing on mbarriers, named barriers for taking turns, and
// the host's tensor maps. Shared by the forward (flash_hopper_forward.cu) and the backward
// (flash_hopper_backward.cu). Shared tiles are rows of 64 elements (128 bytes) in the copy engine's 128-byte swizzle,
// the layout wgmma reads; head dim 128 is two such column halves, and head dims 72 and 80 run in them too (CUT_DEPTH,
// flash_hopper.h).
#pragma once

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

constexpr int TILE_COLUMNS = 64;  // one 128-byte swizzle row of 16-bit elements
constexpr int PRODUCER_REGISTERS = 24;

// The work items a block has been named and its warps have not yet all read: the one they work on and the next. A
// block's shared memory holds `turns[ITEM_SLOTS]` (each with its `item` number first; from the item count on, none is
// left), `item_full` (the producer thread's arrival) and `item_empty` (lane 0 of each warp that reads the turn).
constexpr int ITEM_SLOTS = 2;

template <typename T>
constexpr bool IS_BF16 = std::is_same_v<T, __nv_bfloat16>;

// A kernel's shared-memory layout S at the first 1024-byte boundary of its dynamic shared memory (16-byte aligned;
// the swizzle needs 1024, and each launch asks for the slack). The offset is added to the __shared__ array itself,
// not through an integer, so the compiler still knows every access through S is to shared memory and emits
// LDS/STS: through an integer cast it emits generic loads and stores, slower, on the long scoreboard.
template <typename S>
__device__ __forceinline__ S& shared_layout(unsigned char* raw) {
  return *reinterpret_cast<S*>(raw + ((1024 - shared_address(raw) % 1024) % 1024));
}

// A persistent grid's item -> (batch x head, rank within the head, rank 0 the longest), of `heads` (batch, head)
// pairs with `ranks` items each: heads one after another and a head's ranks in order, so that a head's items run side
// by side and share its rows in L2; but the last heads, as many as hold two turns of the grid's `blocks`, go rank by
// rank across them, so that the last items taken are the shortest, not a long one starting as the other blocks run
// out of work. With blocks = 0, the plain order.
struct HeadRank {
  int bh, rank;
};
__host__ __device__ __forceinline__ HeadRank head_rank(int item, int ranks, int heads, int blocks) {
  if (blocks == 0) return {item / ranks, item % ranks};
  const int tail = min(heads, (2 * blocks + ranks - 1) / ranks), first = (heads - tail) * ranks;
  if (item < first) return {item / ranks, item % ranks};
  return {heads - tail + (item - first) % tail, (item - first) / tail};
}

// the device code below exists for sm_90a alone (wgmma, setmaxnreg); other passes compile empty kernels
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d (64 x 64, fp32) = or += A B from shared memory, A and B K-major (the backward's S^T = K Q^T, dP^T = V dO^T,
// S = Q K^T, dP = dO V^T over 64-wide tiles), or with TRANSPOSED both MN-major, read transposed by the instruction
// (the one-pass backward's dQ = dS K from tiles whose rows are keys: dS^T and K)
template <typename T, int TRANSPOSED = 0>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
  }
}

// d (64 x 128, fp32) = or += A B from shared memory, A and B K-major (S = Q K^T), or with TRANSPOSED both MN-major
// (the one-pass backward's dQ = dS K at head dim 128): `accumulate` 0 starts from zero
template <typename T, int TRANSPOSED = 0>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
  }
}

// d (64 x 64, fp32) = or += A B, A from registers (P), B from shared memory N-major (V, transposed by the
// instruction), or with TRANSPOSED 0 K-major (issue_held_k_major's products): `accumulate` 0 starts from zero
template <typename T, int TRANSPOSED = 1>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate = 1) {
  if constexpr (IS_BF16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANSPOSED));
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

// ---- the copy engine's additions: shared memory added into global fp32 (the one-pass backward's dQ) ----

// Orders this thread's writes to shared memory before what the copy engine and wgmma then read of it.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// to[i] += from[i] for `bytes` bytes of fp32 (16-byte aligned, a multiple of 16), done by the copy engine in the
// background; a bulk group of its own, which bulk_wait_read counts.
__device__ __forceinline__ void bulk_add(float* to, const float* from, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(to),
               "r"(shared_address(from)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until this thread's bulk groups are done, their writes to global memory too.
__device__ __forceinline__ void bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// ---- a persistent block's work, named by its producer thread to the other warps ----

// A value of shared memory read afresh where it is used, not kept in a register across the loops between.
template <typename V>
__device__ __forceinline__ V fresh(const V& x) {
  return *static_cast<const volatile V*>(&x);
}

// What lane 0 of a whole warp holds, which the compiler then knows every lane holds: what is computed from it stays
// in the uniform registers, where wgmma's descriptors and the barriers' addresses are wanted (computed per lane and
// moved there each tile, they slowed the consumers' loop: book/log.md, 2026-11-28).
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffff, x, 0); }

// The producer thread names the block's j-th item in a slot the warps are done with (a release: the turn is seen by
// whoever waits for the phase).
template <typename Shared, typename Turn>
__device__ __forceinline__ void name_turn(Shared& sh, int j, const Turn& turn) {
  const int slot = j % ITEM_SLOTS;
  if (j >= ITEM_SLOTS) barrier_wait(&sh.item_empty[slot], (j / ITEM_SLOTS - 1) & 1);
  sh.turns[slot] = turn;
  barrier_arrive(&sh.item_full[slot]);
}

// The block's j-th item as the producer named it, or nullptr when none is left (of `count`).
template <typename Shared>
__device__ __forceinline__ const auto* named_turn(Shared& sh, int j, int count) {
  barrier_wait(&sh.item_full[j % ITEM_SLOTS], (j / ITEM_SLOTS) & 1);
  const auto& turn = sh.turns[j % ITEM_SLOTS];
  return fresh(turn.item) < count ? &turn : nullptr;
}

// Lane 0 of a warp done reading its j-th turn: the producer may name another in its slot.
template <typename Shared>
__device__ __forceinline__ void release_turn(Shared& sh, int j) {
  if (threadIdx.x % 32 == 0) barrier_arrive(&sh.item_empty[j % ITEM_SLOTS]);
}

// Named barrier 1 + c: consumer c's turn at the tensor cores (PINGPONG), given by the consumer before it in turn.
__device__ __forceinline__ void wait_turn(int consumer) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + consumer) : "memory");
}
template <int CONSUMERS>
__device__ __forceinline__ void give_turn(int consumer) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (consumer + 1) % CONSUMERS) : "memory");
}
// Named barrier 3 among both consumers' 256 threads: each one's stores to shared memory made before a wgmma of
// either reads them.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }
// Named barrier 4 + r % 2 between both consumers' 256 threads, for tile r: one waits for the other's stores to shared
// memory before its wgmma reads them, the other arrives and goes on. A barrier per parity of r, where the consumers
// swap roles every tile: one that arrives at one tile's waits at the next, so it cannot arrive again at a barrier the
// other has not yet passed.
__device__ __forceinline__ void wait_for_other(int r) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(4 + r % 2) : "memory");
}
__device__ __forceinline__ void give_to_other(int r) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(4 + r % 2) : "memory");
}


// ---- the three kinds of product the kernels issue ----

// d (64 x N) = X Y^T from shared memory, both K-major over HEAD_DIM: HEAD_DIM / 16 products of k 16, each 32 bytes
// further along a 128-byte row, past the first 64 columns in the tiles' second column half (X's halves X_HALF bytes
// apart, Y's Y_HALF). The forward's S = Q K^T (N 128); the backward's S^T, dP^T, S and dP (N 64).
template <typename T, int HEAD_DIM, int N, int X_HALF, int Y_HALF>
__device__ __forceinline__ void issue_k_major(float (&d)[N / 2], uint32_t x, uint32_t y) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    const uint32_t along = (kk % 4) * 32;
    const uint64_t a = descriptor(x + (kk / 4) * X_HALF + along, 16, 1024);
    const uint64_t b = descriptor(y + (kk / 4) * Y_HALF + along, 16, 1024);
    if constexpr (N == 64) {
      wgmma_ss_n64<T>(d, a, b, kk);
    } else {
      wgmma_ss_n128<T>(d, a, b, kk);
    }
  }
  wgmma_commit();
}

// The byte of a (64, 64) operand's 64 rows in shared memory (128-byte swizzle: 16-byte chunk c of row r at
// c ^ (r % 8)) that holds register a[kk][i] of to_operand's layout: row 16 warp + lane / 4 + 8 (i % 2), columns
// 16 kk + 8 (i / 2) + 2 (lane % 4) and one more.
__device__ __forceinline__ uint32_t operand_byte(int kk, int i, int warp, int lane) {
  const int row = warp * 16 + lane / 4 + 8 * (i % 2), chunk = 2 * kk + i / 2;
  return row * 128 + ((chunk ^ (row % 8)) << 4) + 4 * (lane % 4);
}

// A's fragments of four k16 products from registers, read from a consumer's 64 rows of a tile in shared memory
__device__ __forceinline__ void load_operand(uint32_t (&a)[4][4], uint32_t rows, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      asm volatile("ld.shared.b32 %0, [%1];\n"
                   : "=r"(a[kk][i])
                   : "r"(rows + operand_byte(kk, i, warp, lane))
                   : "memory");
    }
  }
}

// The same fragments from registers into a tile in shared memory: the one-pass backward's dS^T, for wgmma to read
__device__ __forceinline__ void store_operand(const uint32_t (&a)[4][4], uint32_t rows, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(rows + operand_byte(kk, i, warp, lane)), "r"(a[kk][i]) : "memory");
    }
  }
}

// d (64 x 64) = X Y^T at head dim 64 with X held in registers (load_operand's layout), Y a tile in shared memory,
// K-major: the backward's S^T, dP^T, S and dP where a consumer keeps its own rows over every tile it walks.
template <typename T>
__device__ __forceinline__ void issue_held_k_major(float (&d)[32], const uint32_t (&x)[4][4], uint32_t y) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs_n64<T, 0>(d, x[kk], descriptor(y + kk * 32, 16, 1024), kk);
  wgmma_commit();
}

// acc (64 x HEAD_DIM) += A Z: A (64 x K) from registers, Z a K-row tile in shared memory, N-major (16 rows, 2048
// bytes, a product; its column halves LEAD bytes apart). The forward's O += P V; the backward's dV, dK and dQ.
template <typename T, int HEAD_DIM, int K, int LEAD>
__device__ __forceinline__ void issue_from_registers(float (&acc)[HEAD_DIM / 2], const uint32_t (&a)[K / 16][4],
                                                     uint32_t z) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint64_t b = descriptor(z + kk * 16 * 128, LEAD, 1024);
    if constexpr (HEAD_DIM == 64) {
      wgmma_rs_n64<T>(acc, a[kk], b);
    } else {
      wgmma_rs_n128<T>(acc, a[kk], b);
    }
  }
  wgmma_commit();
}

// S's accumulators, for lane 4 g + t of warp w of the warpgroup: s[4 n + e] is row 16 w + g + 8 (e / 2), key
// 8 n + 2 t + e % 2 (the layout of mma.sync's C tiles, side by side). As bf16 pairs they are the A fragment of P V.
template <typename T, int KEYS>
__device__ __forceinline__ void to_operand(uint32_t (&p)[KEYS / 16][4], const float (&s)[KEYS / 2]) {
#pragma unroll
  for (int kk = 0; kk < KEYS / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = Element<T>::pack(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// One round of a quad's 4 x 4 transpose of words: lanes t and t ^ X trade two each, the lane with `upper` (bit X of
// t) giving and taking w[A0] and w[A1], the other w[B0] and w[B1].
template <int X, int A0, int A1, int B0, int B1>
__device__ __forceinline__ void trade(uint32_t (&w)[4], bool upper) {
  const uint32_t first = __shfl_xor_sync(0xffffffff, upper ? w[A0] : w[B0], X);
  const uint32_t second = __shfl_xor_sync(0xffffffff, upper ? w[A1] : w[B1], X);
  if (upper) {
    w[A0] = first, w[A1] = second;
  } else {
    w[B0] = first, w[B1] = second;
  }
}

// Rows row and row + 8 of a consumer's accumulator (to_operand's layout over HEAD_DIM columns: lane 4 g + t holds
// columns 8 n + 2 t and one more), row + 8 h times scale[h], into (n_rows, HEAD_DIM) rows of `out`, or with CUT into
// (n_rows, n_columns) rows (head dims 72 and 80 in tiles of 128), 16 bytes a lane a store: each quad of lanes trades
// its words (a 4 x 4 transpose in two rounds of shuffles) so that lane t holds whole 16-byte chunks 4 m + t. Stored
// as held, 4 bytes a lane, a warp's store is 8 rows of 16 bytes, and the forward's epilogue took almost as long as a
// key tile of its loop (book/log.md, 2026-11-30).
template <typename T, int HEAD_DIM, bool CUT = false>
__device__ __forceinline__ void store_rows(T* out, int64_t row_stride, const float (&acc)[HEAD_DIM / 2], int row,
                                           int n_rows, int n_columns, const float (&scale)[2]) {
  const int t = threadIdx.x % 4;
  const bool high = t & 2, odd = t & 1;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
#pragma unroll
    for (int m = 0; m < HEAD_DIM / 32; ++m) {
      uint32_t w[4];  // w[c]: this lane's 4 bytes of chunk 4 m + c
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int n = 4 * m + c;
        w[c] = Element<T>::pack(acc[4 * n + 2 * half] * scale[half], acc[4 * n + 2 * half + 1] * scale[half]);
      }
      trade<2, 0, 1, 2, 3>(w, high);  // the low pair now holds chunks 4 m and 4 m + 1 of both, the high pair the rest
      trade<1, 0, 2, 1, 3>(w, odd);   // w[s]: lane s's 4 bytes of chunk 4 m + t
      if (r < n_rows && (!CUT || 8 * (4 * m + t) < n_columns)) {
        *reinterpret_cast<uint4*>(out + r * row_stride + 8 * (4 * m + t)) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The current device's multiprocessors: a persistent grid's blocks, one on each.
inline int multiprocessors() {
  int device = 0, count = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
  return count;
}

// cuTensorMapEncodeTiled, from the driver through the runtime (no link against libcuda)
using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                            const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                            CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline Encode encoder() {
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
// the 128-byte swizzle; rows past n_rows, and columns past d (head dims 72 and 80 in tiles of 128), read as zeros. A
// dimension of size 1 never moves a pointer, so its stride (which may be anything) is replaced by one the copy engine
// accepts.
inline cudaError_t tensor_map(CUtensorMap* map, const Problem& p, const Rows& rows, int n_rows, int box_rows) {
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

}  // namespace systems_flash_hopper

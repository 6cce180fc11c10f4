// A probe of ptxas (CUDA 13.0), compiled and never run: does it keep wgmma asynchronous in a warp-specialised
// attention loop written in CUDA C++, where every warp-specialised Gluon kernel of ours got warning C7512 (see the
// experiment log, 2026-11-25)? Two kernels share one consumer loop: `plain` (two consumer warpgroups, 256 threads)
// and `specialised` (a producer warpgroup that gives its registers away with setmaxnreg.dec, then two consumers that
// take them with setmaxnreg.inc: 384 threads, 168 registers a thread at entry). The shared-memory descriptors hold a
// start address only: enough for the compiler, not for a GPU.
//
//   nvcc -std=c++17 -O3 -cubin -gencode=arch=compute_90a,code=sm_90a -Xptxas -v [-DHEAD_DIM=128] [-DPV_OVER_NEXT_S] probe.cu
//
// HEAD_DIM (64 or 128) sizes S's k steps and O. The consumer's order is FlashAttention-3's within a warpgroup: S(j)
// issued, O rescaled, PV(j-1) issued, S(j) waited for and its softmax computed while PV(j-1) runs. PV_OVER_NEXT_S
// instead leaves PV(j) in flight only over the issue of S(j+1), waiting for both before the softmax.
#include <cuda_bf16.h>

#include <cstdint>

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
constexpr int D = HEAD_DIM, KEYS = 128;  // a key tile of 128; each consumer warpgroup owns 64 queries

__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

__device__ __forceinline__ uint64_t desc(const void* p) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(__cvta_generic_to_shared(p))) >> 4) | (1ull << 62);
}
__device__ __forceinline__ uint32_t pack(float a, float b) {
  const __nv_bfloat162 two = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&two);
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void stage_ready(int j) { asm volatile("bar.sync %0, 384;\n" ::"r"(1 + (j & 1))); }

__device__ __forceinline__ void softmax(float (&s)[64], float& m, float& l, float& alpha) {
  float mx = m;
#pragma unroll
  for (int i = 0; i < 64; ++i) mx = fmaxf(mx, s[i]);
  alpha = exp2f(m - mx);
  m = mx;
  l *= alpha;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    s[i] = exp2f(s[i] - mx);
    l += s[i];
  }
}
__device__ __forceinline__ void to_p(uint32_t (&p)[8][4], const float (&s)[64]) {  // P in bf16, as the A operand
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}
__device__ __forceinline__ void issue_s(float (&s)[64], const __nv_bfloat16* q, const __nv_bfloat16* k) {
  fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wgmma_ss_n128(s, desc(q + kk * 16), desc(k + kk * 16), kk);
  commit();
}
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&p)[8][4], const __nv_bfloat16* v) {
  fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
#if HEAD_DIM == 64
    wgmma_rs_n64(o, p[kk], desc(v + kk * 16 * D));
#else
    wgmma_rs_n128(o, p[kk], desc(v + kk * 16 * D));
#endif
  }
  commit();
}
__device__ __forceinline__ void rescale(float (&o)[D / 2], float alpha) {
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] *= alpha;
}

__device__ __forceinline__ void consume(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                       float* out, int n_tiles, int wg) {
  float o[D / 2] = {}, s[64], m = -INFINITY, l = 0.f, alpha = 1.f;
  uint32_t p[8][4];
  q += wg * 64 * D;
#ifdef PV_OVER_NEXT_S
  for (int j = 0; j < n_tiles; ++j) {
    stage_ready(j);
    issue_s(s, q, k + (j & 1) * KEYS * D);
    wait<1>();
    wait<0>();
    softmax(s, m, l, alpha);
    rescale(o, alpha);
    to_p(p, s);
    issue_pv(o, p, v + (j & 1) * KEYS * D);  // left in flight over the next S's issue
  }
#else
  stage_ready(0);
  issue_s(s, q, k);
  wait<0>();
  softmax(s, m, l, alpha);
  to_p(p, s);
  for (int j = 1; j < n_tiles; ++j) {
    stage_ready(j);
    issue_s(s, q, k + (j & 1) * KEYS * D);
    rescale(o, alpha);
    issue_pv(o, p, v + ((j - 1) & 1) * KEYS * D);
    wait<1>();  // S(j) done, PV(j-1) still running under the softmax
    softmax(s, m, l, alpha);
    wait<0>();
    to_p(p, s);
  }
  rescale(o, alpha);
  issue_pv(o, p, v + ((n_tiles - 1) & 1) * KEYS * D);
#endif
  wait<0>();
#pragma unroll
  for (int i = 0; i < D / 2; ++i) out[(blockIdx.x * 256 + threadIdx.x) * (D / 2) + i] = o[i] / l;
}

extern "C" __global__ void __launch_bounds__(384, 1) specialised(const __nv_bfloat16* g, float* out, int n_tiles) {
  __shared__ __align__(1024) __nv_bfloat16 q[128 * D], k[2 * KEYS * D], v[2 * KEYS * D];
  if (threadIdx.x / 128 == 0) {  // the producer: its registers given away, it copies the stages
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    for (int j = 0; j < n_tiles; ++j) {
      for (int i = threadIdx.x; i < KEYS * D; i += 128) {
        k[(j & 1) * KEYS * D + i] = g[j * KEYS * D + i];
        v[(j & 1) * KEYS * D + i] = g[i];
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.arrive %0, 384;\n" ::"r"(1 + (j & 1)));
    }
  } else {  // the consumers take them
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    consume(q, k, v, out, n_tiles, threadIdx.x / 128 - 1);
  }
}

extern "C" __global__ void __launch_bounds__(256, 1) plain(const __nv_bfloat16* g, float* out, int n_tiles) {
  __shared__ __align__(1024) __nv_bfloat16 q[128 * D], k[2 * KEYS * D], v[2 * KEYS * D];
  consume(q, k, v, out, n_tiles, threadIdx.x / 128);
}

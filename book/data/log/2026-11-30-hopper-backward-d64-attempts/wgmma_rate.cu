// How fast wgmma runs by shape and operand source on one multiprocessor, alone: every block (one per multiprocessor)
// of WG warpgroups issues ITERS groups of four k16 products into the same accumulators, one group left in flight,
// from 64 KiB of shared memory in the 128-byte swizzle (the tiles the Hopper kernels read). Prints one JSON line per
// (kind, warpgroups): the products' FLOP per multiprocessor cycle over the dense bf16 peak (4096: 4 tensor cores x
// 512 multiply-adds). Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I systems/attention/flash_cpp
#include <cstdio>
#include "flash_hopper.cuh"
using namespace systems_flash_hopper;
using T = __nv_bfloat16;
constexpr int ITERS = 4096;
enum Kind { SS_N64, SS_N128, RS_N64, RS_N128, SS_N64_TRANSPOSED };
const char* NAMES[] = {"ss m64n64k16", "ss m64n128k16", "rs m64n64k16", "rs m64n128k16", "ss m64n64k16 mn-major"};

template <int KIND>
__global__ void rate(long long* cycles, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the wgmma helpers exist for sm_90a's device pass alone
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* tiles = raw + (1024 - shared_address(raw) % 1024) % 1024;
  for (int i = threadIdx.x; i < 65536 / 2; i += blockDim.x) {  // small values, not zeros
    reinterpret_cast<T*>(tiles)[i] = __float2bfloat16(((i * 2654435761u) >> 24) / 4096.f);
  }
  __syncthreads();
  const uint32_t base = shared_address(tiles), wg = threadIdx.x / 128;
  const uint32_t x = base + wg % 2 * 16384, y = base + 32768;  // A (or its rows) and B: 64 and 128 rows of 128 bytes
  constexpr int N = KIND == SS_N128 || KIND == RS_N128 ? 128 : 64;
  float d[N / 2] = {};
  uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  for (int i = 0; i < 4; ++i) a[i] = (a[i] & 0x3f3f3f3fu) | 0x30003000u;  // bf16 pairs of modest size
  long long start = clock64();
  for (int it = 0; it < ITERS; ++it) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (KIND == SS_N64) {
        wgmma_ss_n64<T>(d, descriptor(x + kk * 32, 16, 1024), descriptor(y + kk * 32, 16, 1024), 1);
      } else if constexpr (KIND == SS_N128) {
        wgmma_ss_n128<T>(d, descriptor(x + kk * 32, 16, 1024), descriptor(y + kk * 32, 16, 1024), 1);
      } else if constexpr (KIND == RS_N64) {
        wgmma_rs_n64<T>(d, a, descriptor(y + kk * 2048, 8192, 1024));
      } else if constexpr (KIND == RS_N128) {
        wgmma_rs_n128<T>(d, a, descriptor(y + kk * 2048, 8192, 1024));
      } else {
        wgmma_ss_n64<T, 1>(d, descriptor(x + kk * 2048, 8192, 1024), descriptor(y + kk * 2048, 16384, 1024), 1);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  fence_registers(d);
  __syncthreads();
  const long long elapsed = clock64() - start;
  float sum = 0.f;
  for (int i = 0; i < N / 2; ++i) sum += d[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = elapsed;
#endif
}

template <int KIND>
void measure(int sms, int warpgroups, long long* cycles, float* sink) {
  constexpr int N = KIND == SS_N128 || KIND == RS_N128 ? 128 : 64;
  const int shared = 65536 + 1024;
  cudaFuncSetAttribute(rate<KIND>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  for (int round = 0; round < 3; ++round) {  // the first warms the clocks; the last two are printed
    rate<KIND><<<sms, 128 * warpgroups, shared>>>(cycles, sink);
    cudaDeviceSynchronize();
    if (round == 0) continue;
    long long host[1024], most = 0, sum = 0;
    cudaMemcpy(host, cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
    for (int i = 0; i < sms; ++i) most = host[i] > most ? host[i] : most, sum += host[i];
    const double flop = 2.0 * 64 * N * 16 * 4 * double(ITERS) * warpgroups;
    printf("{\"kind\": \"%s\", \"warpgroups\": %d, \"round\": %d, \"mean_cycles\": %.0f, \"of_peak\": %.4f}\n",
           NAMES[KIND], warpgroups, round, double(sum) / sms, flop / (double(sum) / sms) / 4096.0);
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* cycles;
  float* sink;
  cudaMalloc(&cycles, 1024 * sizeof(long long));
  cudaMalloc(&sink, 1024 * 384 * sizeof(float));
  for (int warpgroups = 1; warpgroups <= 3; ++warpgroups) {
    measure<SS_N64>(sms, warpgroups, cycles, sink);
    measure<SS_N128>(sms, warpgroups, cycles, sink);
    measure<RS_N64>(sms, warpgroups, cycles, sink);
    measure<RS_N128>(sms, warpgroups, cycles, sink);
    measure<SS_N64_TRANSPOSED>(sms, warpgroups, cycles, sink);
  }
  const cudaError_t error = cudaGetLastError();
  printf("{\"error\": \"%s\"}\n", cudaGetErrorString(error));
  return error != cudaSuccess;
}

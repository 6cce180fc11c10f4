// A C entry point to the Hopper backward, for a probe that loads it with ctypes (no PyTorch headers to compile).
#include "flash_hopper.h"
using systems_flash_cuda::Problem;
using systems_flash_cuda::Rows;
extern "C" int hopper_bwd(int B, int H, int Nq, int Nk, int d, int causal, float scale, int bf16, void* const* ptrs,
                          const long long* strides, const float* L, float* delta, void* stream) {
  Problem p{B, H, Nq, Nk, d, causal != 0, scale,
            bf16 ? systems_flash_cuda::DType::BFloat16 : systems_flash_cuda::DType::Float16};
  Rows r[8];
  for (int i = 0; i < 8; ++i) r[i] = Rows{ptrs[i], strides[3 * i], strides[3 * i + 1], strides[3 * i + 2]};
  return static_cast<int>(systems_flash_hopper::backward(p, r[0], r[1], r[2], r[3], r[4], L, delta, r[5], r[6], r[7],
                                                         static_cast<cudaStream_t>(stream)));
}

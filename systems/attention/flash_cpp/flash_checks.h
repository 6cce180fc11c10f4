// The checks every kernel of the systems_flash ops makes of its inputs, the CPU's (flash.cpp) and the CUDA ones
// (flash_cuda_ops.cpp) alike: a call from C++ that skips the Python checks still gets an error that names the problem.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace systems_flash {

// Integers and sizes for an error message, formatted without iostreams: on the H100 image (torch 2.11+cu130, GCC
// 13.3) a refusal whose message streamed an integer crashed the process instead of raising (book/log.md, 2026-11-25).
inline std::string text(int64_t n) { return std::to_string(n); }
inline std::string text(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

inline void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "systems_flash: q, k, v must be (B, H, N, d), got ",
              text(q.sizes()), ", ", text(k.sizes()), ", ", text(v.sizes()));
  TORCH_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
              "systems_flash: q ", text(q.sizes()), ", k ", text(k.sizes()), " and v ", text(v.sizes()), " do not fit together");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(),
              "systems_flash: q, k, v must share one dtype");
  TORCH_CHECK(q.device() == k.device() && k.device() == v.device(), "systems_flash: q, k, v must be on one device");
}

}  // namespace systems_flash

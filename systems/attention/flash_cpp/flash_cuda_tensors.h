// What the CUDA kernels' operators (flash_cuda_ops.cpp, flash_hopper_ops.cpp) need of a tensor: the inputs checked,
// the layouts the kernels read and write (a tensor that is not so copied), the outputs laid out as the Meta kernels
// promise torch.compile, and the kernels' view of a tensor and of the problem.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdint>
#include <tuple>

#include "flash_checks.h"
#include "flash_cuda.h"

namespace systems_flash_cuda_tensors {

using at::Tensor;
namespace cuda = systems_flash_cuda;

// The head dims a family of kernels takes, and the words its messages name them in.
struct HeadDims {
  bool (*takes)(int);
  const char* named;
};
constexpr HeadDims CUDA_HEAD_DIMS{cuda::supported_head_dim, "64 and 128"};

inline void check_cuda_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                              const HeadDims& head_dims = CUDA_HEAD_DIMS) {
  systems_flash::check_inputs(q, k, v);
  TORCH_CHECK(q.is_cuda(), "systems_flash (CUDA): q, k, v must be CUDA tensors");
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
              "systems_flash (CUDA): the kernels compute in float16 or bfloat16, as FlashAttention-2 does; got ",
              q.scalar_type());
  TORCH_CHECK(head_dims.takes(static_cast<int>(q.size(3))), "systems_flash (CUDA): the kernels take head dims ",
              head_dims.named, "; got ", systems_flash::text(q.size(3)));
  TORCH_CHECK(q.size(2) >= 1 && k.size(2) >= 1, "systems_flash (CUDA): sequence lengths must be at least 1");
  TORCH_CHECK(q.size(0) <= 65535 && q.size(1) <= 65535, "systems_flash (CUDA): at most 65535 batches and heads");
}

// Whether the kernels can read or write `t` where it is: unit stride along the head dim and 16-byte rows, none
// repeated by a stride of 0 (an expanded tensor), which the copy engine's tensor maps (the Hopper kernels) do not
// take. Strides of dimensions of size 1 never move a pointer, so they do not count.
inline bool kernel_layout(const Tensor& t) {
  if (t.stride(3) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int dim = 0; dim < 3; ++dim) {
    if (t.size(dim) > 1 && (t.stride(dim) % 8 != 0 || t.stride(dim) == 0)) return false;
  }
  return true;
}

inline Tensor readable(const Tensor& t) { return kernel_layout(t) ? t : t.contiguous(); }

// An output shaped and laid out as at::empty_like(like), what the Meta kernels return; and where the kernel writes
// it: the output itself, or (when that layout is one the kernels cannot write) a contiguous buffer copied over.
inline std::tuple<Tensor, Tensor> output_like(const Tensor& like) {
  Tensor out = at::empty_like(like);
  return {out, kernel_layout(out) ? out : at::empty(like.sizes(), like.options())};
}

inline void settle(const Tensor& out, const Tensor& written) {
  if (!written.is_same(out)) out.copy_(written);
}

inline cuda::Rows rows(const Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

inline cuda::Problem problem(const Tensor& q, const Tensor& k, bool is_causal) {
  const int d = static_cast<int>(q.size(3));
  return {static_cast<int>(q.size(0)), static_cast<int>(q.size(1)), static_cast<int>(q.size(2)),
          static_cast<int>(k.size(2)), d, is_causal, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
          q.scalar_type() == at::kBFloat16 ? cuda::DType::BFloat16 : cuda::DType::Float16};
}

inline void check_launch(cudaError_t error) {
  TORCH_CHECK(error == cudaSuccess, "systems_flash (CUDA): kernel launch failed: ", cudaGetErrorString(error));
}

// The backward op's body for a kernel launcher with systems_flash_cuda::backward's signature: the inputs checked
// (check_device(q) after the checks of every CUDA kernel, for a launcher built for some GPUs only), made readable,
// the gradients laid out as the Meta kernel promises (dQ as q, dK as dk_like, dV as v). One pass, dQ added up in any
// order into an fp32 accumulator of accumulator_size(problem) floats (which the launcher zeroes), unless that is 0
// (no one-pass kernel for the problem) or deterministic algorithms are asked for: then two passes (the launcher gets
// nullptr). The launcher's kernels take `head_dims`.
template <typename Launch, typename AccumulatorSize, typename CheckDevice>
std::tuple<Tensor, Tensor, Tensor> run_backward(Launch launch, AccumulatorSize accumulator_size,
                                                CheckDevice check_device, const Tensor& q_in, const Tensor& k_in,
                                                const Tensor& v_in, const Tensor& o_in, const Tensor& dout_in,
                                                const Tensor& L_in, bool is_causal, const Tensor& dk_like,
                                                const HeadDims& head_dims = CUDA_HEAD_DIMS) {
  check_cuda_inputs(q_in, k_in, v_in, head_dims);
  check_device(q_in);
  TORCH_CHECK(o_in.sizes() == q_in.sizes() && dout_in.sizes() == q_in.sizes(),
              "systems_flash (CUDA): o and dout must be shaped like q ", systems_flash::text(q_in.sizes()), ", got ",
              systems_flash::text(o_in.sizes()), " and ", systems_flash::text(dout_in.sizes()));
  TORCH_CHECK(o_in.scalar_type() == q_in.scalar_type() && dout_in.scalar_type() == q_in.scalar_type(),
              "systems_flash (CUDA): o and dout must have q's dtype");
  TORCH_CHECK(L_in.dim() == 3 && L_in.size(0) == q_in.size(0) && L_in.size(1) == q_in.size(1) &&
                  L_in.size(2) == q_in.size(2),
              "systems_flash (CUDA): L must be (B, H, Nq), got ", systems_flash::text(L_in.sizes()));
  const c10::cuda::CUDAGuard device(q_in.device());
  // dO may arrive expanded from a scalar (o.sum().backward(): every stride 0); readable() copies it then
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in), o = readable(o_in),
               dout = readable(dout_in), L = L_in.to(at::kFloat).contiguous();
  Tensor delta = at::empty_like(L);
  auto [dq, dq_written] = output_like(q_in);
  auto [dk, dk_written] = output_like(dk_like);
  auto [dv, dv_written] = output_like(v_in);
  const cuda::Problem p = problem(q, k, is_causal);
  const int64_t floats = accumulator_size(p);
  Tensor dq_acc;
  if (floats > 0 && !at::globalContext().deterministicAlgorithms()) {
    dq_acc = at::empty({floats}, q.options().dtype(at::kFloat));
  }
  check_launch(launch(p, rows(q), rows(k), rows(v), rows(o), rows(dout), L.data_ptr<float>(), delta.data_ptr<float>(),
                      rows(dq_written), rows(dk_written), rows(dv_written),
                      dq_acc.defined() ? dq_acc.data_ptr<float>() : nullptr, c10::cuda::getCurrentCUDAStream()));
  settle(dq, dq_written);
  settle(dk, dk_written);
  settle(dv, dv_written);
  return {dq, dk, dv};
}

}  // namespace systems_flash_cuda_tensors

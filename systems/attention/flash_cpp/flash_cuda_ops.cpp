// The CUDA kernels of the ops systems_flash::forward and ::backward (declared in flash.cpp, whose C++ autograd node
// and Meta kernels serve these kernels too), launched on the current stream with the tensors checked and laid out as
// flash_cuda_tensors.h has it.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "flash_cuda.h"
#include "flash_cuda_tensors.h"

namespace {

using at::Tensor;
using namespace systems_flash_cuda_tensors;

std::tuple<Tensor, Tensor> forward_cuda(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool is_causal) {
  check_cuda_inputs(q_in, k_in, v_in);
  const c10::cuda::CUDAGuard device(q_in.device());
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  auto [o, o_written] = output_like(q_in);
  Tensor L = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  check_launch(cuda::forward(problem(q, k, is_causal), rows(q), rows(k), rows(v), rows(o_written),
                             L.data_ptr<float>(), c10::cuda::getCurrentCUDAStream()));
  settle(o, o_written);
  return {o, L};
}

std::tuple<Tensor, Tensor, Tensor> backward_cuda(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                                 const Tensor& o_in, const Tensor& dout_in, const Tensor& L_in,
                                                 bool is_causal) {
  check_cuda_inputs(q_in, k_in, v_in);
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
  auto [dk, dk_written] = output_like(k_in);
  auto [dv, dv_written] = output_like(v_in);
  check_launch(cuda::backward(problem(q, k, is_causal), rows(q), rows(k), rows(v), rows(o), rows(dout),
                              L.data_ptr<float>(), delta.data_ptr<float>(), rows(dq_written), rows(dk_written),
                              rows(dv_written), c10::cuda::getCurrentCUDAStream()));
  settle(dq, dq_written);
  settle(dk, dk_written);
  settle(dv, dv_written);
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(systems_flash, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}

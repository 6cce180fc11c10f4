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

// One pass (dQ added up in any order, as FlashAttention-2 does) unless deterministic algorithms are asked for.
std::tuple<Tensor, Tensor, Tensor> backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                                 const Tensor& dout, const Tensor& L, bool is_causal) {
  return run_backward(cuda::backward, cuda::dq_accumulator_size, [](const Tensor&) {}, q, k, v, o, dout, L, is_causal,
                      k);
}

}  // namespace

TORCH_LIBRARY_IMPL(systems_flash, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}

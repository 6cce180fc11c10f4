// The CUDA kernel of the op systems_flash::hopper_forward (declared with its Meta kernel in flash.cpp; the kernel in
// flash_hopper_forward.cu, built for sm_90a only) and of hopper_forward_variant, the same forward with its ring depth
// and ping-pong chosen for the ablation; of hopper_backward (flash_hopper_backward.cu); and of
// hopper_attention_forward (the Hopper forward, its variant chosen for the shape) and hopper_attention_backward (the
// Hopper backward, its gradients laid out as the Triton kernels' backward lays them out). hopper_attention ties those
// two together under the C++ autograd node of flash_autograd.h.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "flash_autograd.h"
#include "flash_cuda_tensors.h"
#include "flash_hopper.h"

namespace {

using at::Tensor;
using namespace systems_flash_cuda_tensors;

constexpr HeadDims HOPPER_HEAD_DIMS{systems_flash_hopper::takes_head_dim, "64, 72, 80 and 128"};

// The kernels are built for sm_90a alone.
void check_hopper(const Tensor& q) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.get_device());
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, q.get_device());
  TORCH_CHECK(major == 9 && minor == 0, "systems_flash (Hopper): the kernels are built for sm_90a (H100, H200); this "
              "GPU is ", systems_flash::text(major), ".", systems_flash::text(minor));
}

// The forward of checked inputs into `o` (where it lies when the kernel can write it there, else through a
// contiguous buffer) and L (fp32, (B, H, Nq) contiguous).
void run_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool is_causal,
                 const systems_flash_hopper::Variant& variant, const Tensor& o, const Tensor& L) {
  const c10::cuda::CUDAGuard device(q_in.device());
  check_hopper(q_in);
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  const Tensor o_written = kernel_layout(o) ? o : at::empty(q_in.sizes(), q_in.options());
  const auto shape = problem(q, k, is_causal);
  // the tile counter only where the grid takes tiles from one: an allocation less in a small call
  const Tensor next_item = systems_flash_hopper::forward_counts_tiles(shape, variant)
                               ? at::empty({1}, q_in.options().dtype(at::kInt))
                               : Tensor();
  check_launch(systems_flash_hopper::forward(shape, rows(q), rows(k), rows(v), rows(o_written), L.data_ptr<float>(),
                                             next_item.defined() ? next_item.data_ptr<int>() : nullptr,
                                             c10::cuda::getCurrentCUDAStream(), variant));
  settle(o, o_written);
}

std::tuple<Tensor, Tensor> hopper_forward_variant(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                                  int64_t stages, bool pingpong, int64_t consumers) {
  check_cuda_inputs(q, k, v, HOPPER_HEAD_DIMS);
  const systems_flash_hopper::Variant variant{static_cast<int>(stages), pingpong, static_cast<int>(consumers)};
  TORCH_CHECK(systems_flash_hopper::valid(variant, static_cast<int>(q.size(3))), "systems_flash (Hopper): the "
              "kernel is built for rings of 2 or 3 stages and 2 consumer warpgroups (or 3 at head dim 64; at head dims "
              "72 and 80 a ring of 3 and 2 consumers), not ",
              systems_flash::text(stages), " stages and ", systems_flash::text(consumers), " consumers at head dim ",
              systems_flash::text(q.size(3)));
  Tensor o = at::empty_like(q), L = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  run_forward(q, k, v, is_causal, variant, o, L);
  return {o, L};
}

// The forward's variant for the shape: hopper_forward and hopper_attention_forward run the same one.
systems_flash_hopper::Variant variant_for(const Tensor& q, const Tensor& k, bool is_causal) {
  return systems_flash_hopper::fastest(static_cast<int>(q.size(3)), is_causal, k.size(2));
}

std::tuple<Tensor, Tensor> hopper_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  const auto fastest = variant_for(q, k, is_causal);
  return hopper_forward_variant(q, k, v, is_causal, fastest.stages, fastest.pingpong, fastest.consumers);
}

// One pass unless deterministic algorithms are asked for; dK laid out as dk_like.
std::tuple<Tensor, Tensor, Tensor> run_hopper_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& o, const Tensor& dout, const Tensor& L,
                                                       bool is_causal, const Tensor& dk_like) {
  return run_backward(systems_flash_hopper::backward, systems_flash_hopper::dq_accumulator_size, check_hopper, q, k, v,
                      o, dout, L, is_causal, dk_like, HOPPER_HEAD_DIMS);
}

std::tuple<Tensor, Tensor, Tensor> hopper_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                                   const Tensor& dout, const Tensor& L, bool is_causal) {
  return run_hopper_backward(q, k, v, o, dout, L, is_causal, k);
}

// hopper_attention's forward: the Hopper forward, its variant chosen for the shape, the faster of it and the Triton
// kernels' forward at every shape of the log's runs at head dims 64 and 128 (2026-11-29), its outputs laid out as the
// Triton kernels' host path lays them out (heads_interleaved_outputs), which the Meta kernel promises.
std::tuple<Tensor, Tensor> hopper_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    bool is_causal) {
  check_cuda_inputs(q, k, v, HOPPER_HEAD_DIMS);
  auto [o, L] = systems_flash::heads_interleaved_outputs(q);
  run_forward(q, k, v, is_causal, variant_for(q, k, is_causal), o, L);
  return {o, L};
}

// hopper_attention's backward: the Hopper backward at every shape. It was the faster of it and the Triton kernels'
// backward at every shape of the log's runs: at head dims 72, 80 and 128 from the first, and at 64, once it had caught
// up, from 512 to 4,096 keys, causal and not, batch x heads 16 to 512 (2026-11-30, an H200: 0.75 to 0.99 of the
// Triton backward's time). Its gradients are laid out as the Triton kernels' backward lays them out (dK as v:
// gradients_laid_out_as_values), the layout the Meta kernel promises where k and v are laid out differently, as in
// the model.
std::tuple<Tensor, Tensor, Tensor> hopper_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                             const Tensor& o, const Tensor& dout, const Tensor& L,
                                                             bool is_causal) {
  return run_hopper_backward(q, k, v, o, dout, L, is_causal, v);
}

struct HopperOps {
  static constexpr const char* forward = "systems_flash::hopper_attention_forward";
  static constexpr const char* backward = "systems_flash::hopper_attention_backward";
};

}  // namespace

TORCH_LIBRARY_IMPL(systems_flash, CUDA, m) {
  m.impl("hopper_forward", &hopper_forward);
  m.impl("hopper_forward_variant", &hopper_forward_variant);
  m.impl("hopper_backward", &hopper_backward);
  m.impl("hopper_attention_forward", &hopper_attention_forward);
  m.impl("hopper_attention_backward", &hopper_attention_backward);
}

TORCH_LIBRARY_IMPL(systems_flash, CompositeExplicitAutograd, m) {
  m.impl("hopper_attention", &systems_flash::forward_only<HopperOps>);
}

TORCH_LIBRARY_IMPL(systems_flash, Autograd, m) {
  m.impl("hopper_attention", &systems_flash::with_autograd<HopperOps>);
}

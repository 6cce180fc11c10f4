// The CUDA kernel of the op systems_flash::hopper_forward (declared with its Meta kernel in flash.cpp; the kernel in
// flash_hopper_forward.cu, built for sm_90a only) and of hopper_forward_variant, the same forward with its ring depth
// and ping-pong chosen for the ablation; of hopper_backward (flash_hopper_backward.cu); and of
// hopper_attention_forward (the Hopper forward, its variant chosen for the shape) and hopper_attention_backward, which
// takes the Hopper backward where it is the faster and the Triton kernels' backward launched from C++ elsewhere
// (systems_flash::triton_backward, ../flash_triton/host.cpp). hopper_attention ties those two together under the C++
// autograd node of flash_autograd.h.

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
  const Tensor next_item = at::empty({1}, q_in.options().dtype(at::kInt));
  check_launch(systems_flash_hopper::forward(problem(q, k, is_causal), rows(q), rows(k), rows(v), rows(o_written),
                                             L.data_ptr<float>(), next_item.data_ptr<int>(),
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

// Where hopper_backward is the faster of it and the Triton kernels' backward, in the runs of book/log.md (causal, the
// model's layout; head dim 64 as of the 2026-11-28 entry on the persistent grid): at head dim 128 at every length the
// log's runs cover (1,024 to 32,768 keys), and at 72 and 80 (512 to 8,192 keys, 2026-11-30: 0.82 to 0.90 of the
// Triton kernels' time at 80, 0.38 at 72); at head dim 64 from 8,192 keys, and from 1,024 where the batch and the
// heads bring at least 1,024 of its blocks of 128 keys, eight waves' worth on 132 SMs. With fewer, how the causally
// uneven blocks fall into waves decides, and the one pass is as often the slower. Without the mask, where blocks are
// even, from 4,096.
bool hopper_backward_is_faster(const Tensor& k, bool is_causal) {
  constexpr int64_t KEY_BLOCKS = 1024;
  const int64_t keys = k.size(2);
  if (k.size(3) != 64) return true;
  if (!is_causal) return keys >= 4096;
  return keys >= 8192 ||
         (keys >= 1024 && k.size(0) * k.size(1) * keys >= KEY_BLOCKS * systems_flash_hopper::BACKWARD_BLOCK_KEYS);
}

struct TritonBackward {
  static constexpr const char* backward = "systems_flash::triton_backward";
};

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

// hopper_attention's backward, the faster of the two for the shape, its gradients laid out as the Triton kernels'
// backward lays them out either way (dK as v: gradients_laid_out_as_values), so the Meta kernel has one layout to
// promise where k and v are laid out differently, as in the model.
std::tuple<Tensor, Tensor, Tensor> hopper_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                             const Tensor& o, const Tensor& dout, const Tensor& L,
                                                             bool is_causal) {
  if (hopper_backward_is_faster(k, is_causal)) {
    return run_hopper_backward(q, k, v, o, dout, L, is_causal, v);
  }
  return systems_flash::backward_op<TritonBackward>().call(q, k, v, o, dout, L, is_causal);
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

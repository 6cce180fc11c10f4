// The C++ autograd node of an attention op pair: a forward op (q, k, v, is_causal) -> (o, L) and a backward op
// (q, k, v, o, dout, L, is_causal) -> (dq, dk, dv), tied together as attention(q, k, v, is_causal) -> o. Shared by the
// operator with its own kernels (flash.cpp: systems_flash::forward and ::backward) and the host path that launches
// the Triton kernels from C++ (../flash_triton/host.cpp: systems_flash::triton_forward and ::triton_backward), so a
// call from Python runs no Python of ours between the op and the kernels, forward or backward.
//
// Ops names the pair: a struct with `static constexpr const char* forward, backward`, each "namespace::name".
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <tuple>

namespace systems_flash {

using ForwardSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                            bool);
using BackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&, const at::Tensor&, bool);

// A forward's outputs as the ops that lay O out for the model do (the Triton kernels' host path, hopper_attention):
// O (B, H, Nq, d) in (B, Nq, H, d) memory, so the model's reshape of attention's output to (B, Nq, H d) is a view,
// and L (B, H, Nq) in fp32. Sizes are read as SymInts, so their Meta kernels take it too.
inline std::tuple<at::Tensor, at::Tensor> heads_interleaved_outputs(const at::Tensor& q) {
  const at::Tensor o = at::empty_symint({q.sym_size(0), q.sym_size(2), q.sym_size(1), q.sym_size(3)}, q.options());
  return {o.transpose(1, 2),
          at::empty_symint({q.sym_size(0), q.sym_size(1), q.sym_size(2)}, q.options().dtype(at::kFloat))};
}

// A backward's gradients as the Triton kernels' backward lays them out (layouts.gradients): dQ as q, dK and dV both
// as v (its dK/dV kernel writes both through one set of strides), so a gradient flows back through the model's view
// of V without a copy. hopper_attention_backward promises the same whichever backward it takes.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> gradients_laid_out_as_values(const at::Tensor& q,
                                                                                    const at::Tensor& v) {
  return {at::empty_like(q), at::empty_like(v), at::empty_like(v)};
}

template <typename Ops>
c10::TypedOperatorHandle<ForwardSignature> forward_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(Ops::forward, "").template typed<ForwardSignature>();
  return op;
}

template <typename Ops>
c10::TypedOperatorHandle<BackwardSignature> backward_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow(Ops::backward, "").template typed<BackwardSignature>();
  return op;
}

template <typename Ops>
class AttentionNode : public torch::autograd::Function<AttentionNode<Ops>> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool is_causal) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [o, L] = forward_op<Ops>().call(q, k, v, is_causal);
    ctx->save_for_backward({q, k, v, o, L});
    ctx->saved_data["is_causal"] = is_causal;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // grad mode is on here only under create_graph=True: the backward treats the saved L as a constant, so a
    // second derivative through it would be wrong, not merely slow
    TORCH_CHECK(!at::GradMode::is_enabled(), "systems_flash does not support double backward (create_graph=True): "
                "its backward treats the saved log-sum-exp as a constant; use naive attention for higher-order "
                "gradients");
    const auto saved = ctx->get_saved_variables();
    auto [dq, dk, dv] = backward_op<Ops>().call(saved[0], saved[1], saved[2], saved[3], grads[0], saved[4],
                                                ctx->saved_data["is_causal"].toBool());
    return {dq, dk, dv, at::Tensor()};
  }
};

// attention() below autograd: the forward's output.
template <typename Ops>
at::Tensor forward_only(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  return std::get<0>(forward_op<Ops>().call(q, k, v, is_causal));
}

// attention() with autograd: the node above.
template <typename Ops>
at::Tensor with_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  return AttentionNode<Ops>::apply(q, k, v, is_causal);
}

}  // namespace systems_flash

// FlashAttention-2 as a PyTorch operator written in C++ (Dao, "FlashAttention-2", 2023, Algorithms 1 and 2).
//
// Three ops in the namespace systems_flash, a C++ autograd node tying them together, and their shapes for the
// compiler:
//
//   forward(q, k, v, is_causal) -> (o, L)                 the tiled forward; L is the log-sum-exp of each row
//   backward(q, k, v, o, do, L, is_causal) -> (dq, dk, dv) the tiled backward, recomputing P from L
//   attention(q, k, v, is_causal) -> o                     forward with FlashAttention's backward in autograd
//
// Tensors are (B, H, N, d) (the Python side makes any other layout so). The kernels here run on the CPU, one
// (batch, head) per thread, with the tile names and the steps of the Triton kernel
// (systems/attention/flash_triton/kernels.py): BLOCK_Q queries at a time, BLOCK_K keys at a time, a running maximum
// m_i and sum l_i per query row, the output accumulated in acc and divided by l_i at the end. Causal masking is
// top-left aligned (query i sees key j iff j <= i), as the CS336 tests define it. Arithmetic is in fp32 (fp64 for
// fp64 inputs); 16-bit inputs are widened on the way in and the results narrowed on the way out.
//
// The autograd node is C++ (flash_autograd.h): a call from Python runs no Python of ours between the op and the
// kernels, forward or backward. Meta kernels give torch.compile the shapes.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "flash_autograd.h"
#include "flash_checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

constexpr int64_t BLOCK_Q = 64;
constexpr int64_t BLOCK_K = 64;

at::ScalarType accumulate_type(const Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// One (batch, head): q (nq, d), k and v (nk, d), all contiguous; o (nq, d) and L (nq).
template <typename T>
void forward_head(const T* q, const T* k, const T* v, T* o, T* L, int64_t nq, int64_t nk, int64_t d,
                  bool causal, T scale) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> s(BLOCK_Q * BLOCK_K), acc(BLOCK_Q * d), m_i(BLOCK_Q), l_i(BLOCK_Q);
  for (int64_t q0 = 0; q0 < nq; q0 += BLOCK_Q) {
    const int64_t bq = std::min(BLOCK_Q, nq - q0);
    std::fill(m_i.begin(), m_i.end(), minus_inf);
    std::fill(l_i.begin(), l_i.end(), T(0));
    std::fill(acc.begin(), acc.end(), T(0));
    // the keys this query tile sees: all of them, or (causal) up to its last query
    const int64_t k_end = causal ? std::min(nk, q0 + bq) : nk;
    for (int64_t k0 = 0; k0 < k_end; k0 += BLOCK_K) {
      const int64_t bk = std::min(BLOCK_K, nk - k0);
      // S = Q K^T * scale, the masked scores -inf
      for (int64_t i = 0; i < bq; ++i) {
        for (int64_t j = 0; j < bk; ++j) {
          T dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q[(q0 + i) * d + c] * k[(k0 + j) * d + c];
          s[i * BLOCK_K + j] = (causal && k0 + j > q0 + i) ? minus_inf : dot * scale;
        }
      }
      // the online softmax: rescale what was accumulated by exp(m_old - m_new), add this tile's exp(S - m_new) V
      for (int64_t i = 0; i < bq; ++i) {
        T m_new = m_i[i];
        for (int64_t j = 0; j < bk; ++j) m_new = std::max(m_new, s[i * BLOCK_K + j]);
        if (m_new == minus_inf) continue;  // every key of this tile is masked for this row
        const T alpha = std::exp(m_i[i] - m_new);
        T row_sum = 0;
        for (int64_t c = 0; c < d; ++c) acc[i * d + c] *= alpha;
        for (int64_t j = 0; j < bk; ++j) {
          const T p = std::exp(s[i * BLOCK_K + j] - m_new);
          row_sum += p;
          for (int64_t c = 0; c < d; ++c) acc[i * d + c] += p * v[(k0 + j) * d + c];
        }
        l_i[i] = alpha * l_i[i] + row_sum;
        m_i[i] = m_new;
      }
    }
    for (int64_t i = 0; i < bq; ++i) {
      for (int64_t c = 0; c < d; ++c) o[(q0 + i) * d + c] = acc[i * d + c] / l_i[i];
      L[q0 + i] = m_i[i] + std::log(l_i[i]);
    }
  }
}

// One (batch, head) of the backward: key tiles outer (dK, dV finished per tile), query tiles inner (dQ added up).
template <typename T>
void backward_head(const T* q, const T* k, const T* v, const T* o, const T* dout, const T* L, T* dq, T* dk, T* dv,
                   int64_t nq, int64_t nk, int64_t d, bool causal, T scale) {
  std::vector<T> D(nq), p(BLOCK_Q * BLOCK_K), ds(BLOCK_Q * BLOCK_K);
  for (int64_t i = 0; i < nq; ++i) {  // D_i = rowsum(dO ∘ O): the preprocessing pass
    T sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += dout[i * d + c] * o[i * d + c];
    D[i] = sum;
  }
  std::fill(dq, dq + nq * d, T(0));
  for (int64_t k0 = 0; k0 < nk; k0 += BLOCK_K) {
    const int64_t bk = std::min(BLOCK_K, nk - k0);
    std::fill(dk + k0 * d, dk + (k0 + bk) * d, T(0));
    std::fill(dv + k0 * d, dv + (k0 + bk) * d, T(0));
    // the queries that see any key of this tile: all of them, or (causal) from the tile's first key on
    const int64_t q_start = causal ? (k0 / BLOCK_Q) * BLOCK_Q : 0;
    for (int64_t q0 = q_start; q0 < nq; q0 += BLOCK_Q) {
      const int64_t bq = std::min(BLOCK_Q, nq - q0);
      // P = exp(S - L), recomputed; dP = dO V^T; dS = P ∘ (dP - D)
      for (int64_t i = 0; i < bq; ++i) {
        for (int64_t j = 0; j < bk; ++j) {
          T prob = 0, dp = 0;
          if (!(causal && k0 + j > q0 + i)) {
            T dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += q[(q0 + i) * d + c] * k[(k0 + j) * d + c];
            prob = std::exp(dot * scale - L[q0 + i]);
            for (int64_t c = 0; c < d; ++c) dp += dout[(q0 + i) * d + c] * v[(k0 + j) * d + c];
          }
          p[i * BLOCK_K + j] = prob;
          ds[i * BLOCK_K + j] = prob * (dp - D[q0 + i]);
        }
      }
      // dV += P^T dO; dK += dS^T Q · scale; dQ += dS K · scale
      for (int64_t j = 0; j < bk; ++j) {
        for (int64_t i = 0; i < bq; ++i) {
          const T pij = p[i * BLOCK_K + j], dsij = ds[i * BLOCK_K + j] * scale;
          for (int64_t c = 0; c < d; ++c) {
            dv[(k0 + j) * d + c] += pij * dout[(q0 + i) * d + c];
            dk[(k0 + j) * d + c] += dsij * q[(q0 + i) * d + c];
            dq[(q0 + i) * d + c] += dsij * k[(k0 + j) * d + c];
          }
        }
      }
    }
  }
}

// Each (batch, head) of the inputs on a thread of its own: ``run(h, scale)`` with the softmax scale 1/sqrt(d) in the
// accumulation type ``T``.
template <typename T, typename F>
void each_head(int64_t heads, int64_t d, const F& run) {
  const auto scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) run(h, scale);
  });
}

std::tuple<Tensor, Tensor> forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  systems_flash::check_inputs(q, k, v);
  const auto acc = accumulate_type(q);
  const Tensor qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(), va = v.to(acc).contiguous();
  const int64_t heads = q.size(0) * q.size(1), nq = q.size(2), nk = k.size(2), d = q.size(3);
  Tensor o = at::empty_like(qa), L = at::empty({q.size(0), q.size(1), nq}, qa.options());
  AT_DISPATCH_FLOATING_TYPES(acc, "systems_flash_forward", [&] {
    each_head<scalar_t>(heads, d, [&](int64_t h, scalar_t scale) {
      forward_head<scalar_t>(qa.data_ptr<scalar_t>() + h * nq * d, ka.data_ptr<scalar_t>() + h * nk * d,
                             va.data_ptr<scalar_t>() + h * nk * d, o.data_ptr<scalar_t>() + h * nq * d,
                             L.data_ptr<scalar_t>() + h * nq, nq, nk, d, is_causal, scale);
    });
  });
  return {o.to(q.scalar_type()), L};
}

std::tuple<Tensor, Tensor, Tensor> backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                                const Tensor& dout, const Tensor& L, bool is_causal) {
  systems_flash::check_inputs(q, k, v);
  const auto acc = accumulate_type(q);
  const Tensor qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(), va = v.to(acc).contiguous();
  const Tensor oa = o.to(acc).contiguous(), da = dout.to(acc).contiguous(), La = L.to(acc).contiguous();
  const int64_t heads = q.size(0) * q.size(1), nq = q.size(2), nk = k.size(2), d = q.size(3);
  Tensor dq = at::empty_like(qa), dk = at::empty_like(ka), dv = at::empty_like(va);
  AT_DISPATCH_FLOATING_TYPES(acc, "systems_flash_backward", [&] {
    each_head<scalar_t>(heads, d, [&](int64_t h, scalar_t scale) {
      backward_head<scalar_t>(qa.data_ptr<scalar_t>() + h * nq * d, ka.data_ptr<scalar_t>() + h * nk * d,
                              va.data_ptr<scalar_t>() + h * nk * d, oa.data_ptr<scalar_t>() + h * nq * d,
                              da.data_ptr<scalar_t>() + h * nq * d, La.data_ptr<scalar_t>() + h * nq,
                              dq.data_ptr<scalar_t>() + h * nq * d, dk.data_ptr<scalar_t>() + h * nk * d,
                              dv.data_ptr<scalar_t>() + h * nk * d, nq, nk, d, is_causal, scale);
    });
  });
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

// The shapes alone, for torch.compile's fake tensors (whose sizes may be symbolic: read as SymInts).
std::tuple<Tensor, Tensor> forward_meta(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "systems_flash: q, k, v must be (B, H, N, d)");
  return {at::empty_like(q),
          at::empty_symint({q.sym_size(0), q.sym_size(1), q.sym_size(2)}, q.options().dtype(accumulate_type(q)))};
}

// the Hopper forward's ablation (flash_hopper_ops.cpp): the same outputs
std::tuple<Tensor, Tensor> hopper_variant_meta(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                               int64_t stages, bool pingpong, int64_t consumers) {
  return forward_meta(q, k, v, is_causal);
}

// hopper_attention's forward (flash_hopper_ops.cpp): O in (B, N, H, d) memory, L in fp32
std::tuple<Tensor, Tensor> hopper_attention_forward_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                                         bool is_causal) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "systems_flash: q, k, v must be (B, H, N, d)");
  return systems_flash::heads_interleaved_outputs(q);
}

std::tuple<Tensor, Tensor, Tensor> backward_meta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                                 const Tensor& dout, const Tensor& L, bool is_causal) {
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v)};
}

// hopper_attention's backward (flash_hopper_ops.cpp): the Triton kernels' layout, whichever backward runs
std::tuple<Tensor, Tensor, Tensor> hopper_attention_backward_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                                                  const Tensor& o, const Tensor& dout,
                                                                  const Tensor& L, bool is_causal) {
  return systems_flash::gradients_laid_out_as_values(q, v);
}

// The ops that attention() ties together under the C++ autograd node (flash_autograd.h).
struct Ops {
  static constexpr const char* forward = "systems_flash::forward";
  static constexpr const char* backward = "systems_flash::backward";
};

}  // namespace

TORCH_LIBRARY(systems_flash, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, bool is_causal) -> (Tensor, Tensor)");
  m.def("backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor L, bool is_causal) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor");
  // the forward written for Hopper (flash_hopper_ops.cpp, built on sm_90 GPUs only) and its ablation, the backward
  // written for Hopper, and their attention
  m.def("hopper_forward(Tensor q, Tensor k, Tensor v, bool is_causal) -> (Tensor, Tensor)");
  m.def("hopper_forward_variant(Tensor q, Tensor k, Tensor v, bool is_causal, int stages, bool pingpong, "
        "int consumers) -> (Tensor, Tensor)");
  m.def("hopper_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor L, bool is_causal) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("hopper_attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor");
  // hopper_attention's forward and backward: the Hopper kernels, their outputs laid out as the Triton kernels' are
  m.def("hopper_attention_forward(Tensor q, Tensor k, Tensor v, bool is_causal) -> (Tensor, Tensor)");
  m.def("hopper_attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor L, bool is_causal) "
        "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(systems_flash, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("backward", &backward_cpu);
}

TORCH_LIBRARY_IMPL(systems_flash, Meta, m) {
  m.impl("forward", &forward_meta);
  m.impl("backward", &backward_meta);
  m.impl("hopper_forward", &forward_meta);
  m.impl("hopper_forward_variant", &hopper_variant_meta);
  m.impl("hopper_backward", &backward_meta);
  m.impl("hopper_attention_forward", &hopper_attention_forward_meta);
  m.impl("hopper_attention_backward", &hopper_attention_backward_meta);
}

TORCH_LIBRARY_IMPL(systems_flash, CompositeExplicitAutograd, m) {
  m.impl("attention", &systems_flash::forward_only<Ops>);
}

TORCH_LIBRARY_IMPL(systems_flash, Autograd, m) {
  m.impl("attention", &systems_flash::with_autograd<Ops>);
}

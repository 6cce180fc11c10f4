// The CUDA kernels' interface to the operator (flash_cuda_ops.cpp): plain pointers, strides and sizes, no PyTorch
// types, so that the kernels compile with nvcc alone (the tests compile them for sm_80 and sm_90 on machines without
// a GPU and read ptxas's registers and spills).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace systems_flash_cuda {

enum class DType { Float16, BFloat16 };

// One (B, H, N, d) tensor: its data and the strides, in elements, of the batch, head and row dimensions. The head dim
// has stride 1, every row starts on 16 bytes (the operator copies a tensor that is not so).
struct Rows {
  void* data;
  int64_t batch_stride, head_stride, row_stride;
};

struct Problem {
  int batch, heads, n_queries, n_keys, head_dim;
  bool causal;  // top-left aligned: query i sees key j iff j <= i
  float scale;  // the softmax scale, 1/sqrt(head_dim)
  DType dtype;
};

// The head dims the kernels are instantiated for.
inline bool supported_head_dim(int d) { return d == 64 || d == 128; }

// O and the log-sum-exp L (fp32, (B, H, Nq) contiguous, natural log) from Q, K, V. Returns the launch's error.
cudaError_t forward(const Problem& problem, Rows q, Rows k, Rows v, Rows o, float* L, cudaStream_t stream);

// dQ, dK, dV from the forward's inputs, O, dO and L; delta is fp32 scratch of L's shape (rowsum(dO * O)). With
// dq_acc (fp32 scratch, (B, H, Nq, d) contiguous, which the delta kernel zeroes) one pass that adds dQ up in any
// order; with nullptr two passes, the gradients the same bit for bit from run to run.
cudaError_t backward(const Problem& problem, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L, float* delta,
                     Rows dq, Rows dk, Rows dv, float* dq_acc, cudaStream_t stream);

// The floats of the one-pass backward's dQ accumulator for `problem`: (B, H, Nq, d).
inline int64_t dq_accumulator_size(const Problem& p) {
  return int64_t(p.batch) * p.heads * p.n_queries * p.head_dim;
}

}  // namespace systems_flash_cuda

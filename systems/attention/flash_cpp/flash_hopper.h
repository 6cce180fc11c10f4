// The Hopper forward's interface to the operator (flash_hopper_ops.cpp): the same plain pointers and strides as the
// mma.sync kernels' (flash_cuda.h), so it too compiles with nvcc alone.
#pragma once

#include "flash_cuda.h"

namespace systems_flash_hopper {

// How the forward runs, for the ablation: the depth of the ring of K and V stages (2 or 3), whether the consumer
// warpgroups take turns at the tensor cores, and how many there are (64 queries each: 2, or 3 at head dim 64).
struct Variant {
  int stages;
  bool pingpong;
  int consumers;
};

// The head dims the kernels take: 64 and 128, and 72 and 80 in the tiles of head dim 128, whose columns past the head
// dim the copy engine reads as zeros, with the products over the head dim cut to its first 80 columns (CUT_DEPTH).
constexpr int CUT_DEPTH = 80;
inline bool cuts_head_dim(int d) { return d == 72 || d == 80; }
inline bool takes_head_dim(int d) { return d == 64 || d == 128 || cuts_head_dim(d); }

// The columns of the kernels' tiles at head dim `d`: 64, or 128.
__host__ __device__ inline int tile_width(int d) { return d <= 64 ? 64 : 128; }

// Whether the kernel is built for `variant` at `head_dim`: at head dims 72 and 80 only with a ring of 3 stages and
// two consumers, the variants flash_hopper runs.
inline bool valid(const Variant& variant, int head_dim) {
  if (cuts_head_dim(head_dim)) return variant.stages == 3 && variant.consumers == 2;
  return (variant.stages == 2 || variant.stages == 3) &&
         (variant.consumers == 2 || (variant.consumers == 3 && head_dim == 64));
}

// The variant that ran fastest for the shape (book/log.md has the ablation and the runs): a ring of 3 and ping-pong;
// at head dim 64 three consumers, but two where causal queries see fewer than 2,048 keys (2026-11-29), where a tile
// of 192 queries was the slower, likely because each of its consumers walks the keys its last consumer sees, and at
// short causal lengths more of those products lie wholly above the diagonal.
inline Variant fastest(int head_dim, bool is_causal, int64_t keys) {
  return {3, true, head_dim == 64 && !(is_causal && keys < 2048) ? 3 : 2};
}

// Whether the forward's persistent grid has fewer blocks than `problem` has query tiles, so that its blocks take
// tiles from a counter: then forward needs an int of scratch for it.
bool forward_counts_tiles(const systems_flash_cuda::Problem& problem, const Variant& variant);

// O and the log-sum-exp L (fp32, (B, H, Nq) contiguous, natural log) from Q, K, V, whose rows the copy engine reads
// (16-byte aligned data and strides); next_item is an int of scratch where forward_counts_tiles (the persistent
// grid's counter, zeroed on the stream before the kernel), else nullptr. Returns the launch's error.
cudaError_t forward(const systems_flash_cuda::Problem& problem, systems_flash_cuda::Rows q, systems_flash_cuda::Rows k,
                    systems_flash_cuda::Rows v, systems_flash_cuda::Rows o, float* L, int* next_item,
                    cudaStream_t stream, const Variant& variant);

// dQ, dK, dV from the forward's inputs, O, dO and L; delta is fp32 scratch of L's shape (rowsum(dO * O)). The
// copy engine reads q, k, v and dout (16-byte aligned data and strides). With dq_acc (fp32 scratch of
// dq_accumulator_size floats, which the delta kernel zeroes) the backward takes one pass, adding dQ up in an order
// that changes from run to run; without (nullptr), two passes.
cudaError_t backward(const systems_flash_cuda::Problem& problem, systems_flash_cuda::Rows q, systems_flash_cuda::Rows k,
                     systems_flash_cuda::Rows v, systems_flash_cuda::Rows o, systems_flash_cuda::Rows dout,
                     const float* L, float* delta, systems_flash_cuda::Rows dq, systems_flash_cuda::Rows dk,
                     systems_flash_cuda::Rows dv, float* dq_acc, cudaStream_t stream);

// The floats of the one-pass backward's dQ accumulator for `problem` (one pass at every shape: two only under
// deterministic algorithms, which run_backward asks about).
int64_t dq_accumulator_size(const systems_flash_cuda::Problem& problem);

}  // namespace systems_flash_hopper

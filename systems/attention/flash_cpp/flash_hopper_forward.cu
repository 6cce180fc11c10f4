// FlashAttention's forward written for Hopper (sm_90a) in CUDA C++: the overlap that the portable Triton kernel
// cannot express (issue 29, FlashAttention-3's design: Shah et al., 2024), with the tile names and the online softmax
// of the other kernels (flash_cuda_forward.cu, ../flash_triton/kernels.py).
//
// A query tile is BLOCK_Q = 64 CONSUMERS queries of one (batch, head); its work is to walk the key tiles of
// BLOCK_K = 128 keys that they see. The grid is persistent: a block of a producer and CONSUMERS consumer warpgroups
// on each multiprocessor takes query tiles in turn, the next from a counter in global memory, so that one tile's
// end (the last products, O and L stored) runs under the next one's start (Q and the first K and V copied in):
//   producer   warpgroup 0: one thread names each query tile to the consumers and starts the copy engine (TMA,
//              cp.async.bulk.tensor) on its Q and on each K and V tile, into a ring of STAGES shared-memory stages
//              that goes on from tile to tile; it gives its registers away (setmaxnreg.dec)
//   consumers  warpgroups 1.., 64 queries each (2 of them, or 3 at head dim 64), take those registers
//              (setmaxnreg.inc) and multiply on the tensor cores with asynchronous wgmma: S = Q K^T from shared
//              memory, O += P V with P from registers
// A stage is handed over through mbarriers: `k_full` / `v_full` complete when the copy engine has written the tile,
// `empty` when every consumer warp has finished reading it; Q likewise (`q_full`, `q_empty`, the latter once the
// tile's last S is computed).
//
// The overlap inside a consumer, as written (FlashAttention-3's intra-warpgroup pipelining): while the exponentials of
// tile j run on the multi-function units, the tensor cores still multiply P(j-1) V(j-1):
//   issue S(j) = Q K(j)^T;  O *= alpha(j-1);  issue O += P(j-1) V(j-1)
//   wait for S(j);  softmax of S(j) -> P(j), alpha(j)        (under P(j-1) V(j-1))
//   wait for P(j-1) V(j-1);  release stage j-1
// As compiled (ptxas of CUDA 13.0), the wait for P(j-1) V(j-1) comes right after the mask, before the exponentials
// (book/log.md, 2026-11-29). With PINGPONG the consumers take turns at the tensor cores (named barriers), so one's
// softmax runs under another's products.
//
// Shared tiles are rows of 64 elements (128 bytes) in the copy engine's 128-byte swizzle, the layout wgmma reads;
// head dim 128 is two such column halves. Head dims 72 and 80 run in the tiles of 128, the columns past the head dim
// copied in as zeros, with S's products over its first DEPTH = 80 columns alone (P V still 128 wide). The scores S are
// in log2 units: P = exp2(S scale log2e - m).
#include "flash_hopper.cuh"

namespace systems_flash_hopper {

constexpr int BLOCK_K = 128, CONSUMER_ROWS = 64;
constexpr int HALF_BYTES = BLOCK_K * TILE_COLUMNS * 2;  // a (128, 64) tile of K or V: 16 KiB

// A query tile as a block takes it: its number (from query_tile_count on: none left), the key tiles the block walked
// before it (where its tiles start in the ring), its first query, head and batch, and the key tiles its queries see.
struct QueryTileTurn {
  int item, walked, q0, h, b, n_tiles, unused[2];
};

// A block of CONSUMERS consumer warpgroups (2, or 3 at head dim 64 as FlashAttention-3 has it there) and the producer.
template <int CONSUMERS>
struct Block {
  static constexpr int BLOCK_Q = CONSUMERS * CONSUMER_ROWS, THREADS = 128 * (CONSUMERS + 1);
  static constexpr int Q_HALF_BYTES = BLOCK_Q * TILE_COLUMNS * 2;
  // what is left of the 65536 registers once the producer has 24 a thread, in the steps of 8 setmaxnreg takes:
  // 128 x 24 + 256 x 240 = 64512, 128 x 24 + 384 x 160 = 64512
  static constexpr int CONSUMER_REGISTERS = CONSUMERS == 2 ? 240 : 160;
};

template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS>
struct Shared {  // the block's shared memory, 1024-byte aligned (the swizzle's period)
  static constexpr int HALVES = HEAD_DIM / TILE_COLUMNS, TILE_BYTES = HALVES * HALF_BYTES;
  alignas(1024) unsigned char q[HALVES * Block<CONSUMERS>::Q_HALF_BYTES];
  alignas(1024) unsigned char k[STAGES][TILE_BYTES];
  alignas(1024) unsigned char v[STAGES][TILE_BYTES];
  uint64_t q_full, q_empty, k_full[STAGES], v_full[STAGES], empty[STAGES];
  QueryTileTurn turns[ITEM_SLOTS];
  uint64_t item_full[ITEM_SLOTS], item_empty[ITEM_SLOTS];
};

// The query tiles, numbered tiles fastest (causal: the last, which see the most keys, first), then heads, then batch:
// a head's tiles run side by side and share its K and V in L2. Causal, the grid's last heads go tile by tile across
// them (head_rank), so that the last tiles the blocks take are the shortest.
template <int CONSUMERS>
__host__ __device__ inline int query_tiles(const Problem& p) {
  return (p.n_queries + Block<CONSUMERS>::BLOCK_Q - 1) / Block<CONSUMERS>::BLOCK_Q;
}
template <int CONSUMERS>
__host__ __device__ inline int query_tile_count(const Problem& p) {
  return query_tiles<CONSUMERS>(p) * p.heads * p.batch;
}

template <int CONSUMERS, bool CAUSAL>
__device__ inline QueryTileTurn query_tile(const Problem& p, int item, int walked) {
  constexpr int BLOCK_Q = Block<CONSUMERS>::BLOCK_Q;
  const int tiles = query_tiles<CONSUMERS>(p);
  const auto [bh, rank] = head_rank(item, tiles, p.heads * p.batch, CAUSAL ? gridDim.x : 0);
  const int q0 = (CAUSAL ? tiles - 1 - rank : rank) * BLOCK_Q;
  const int k_end = CAUSAL ? min(p.n_keys, q0 + BLOCK_Q) : p.n_keys;
  return {item, walked, q0, bh % p.heads, bh / p.heads, (k_end + BLOCK_K - 1) / BLOCK_K, 0, 0};
}

// the device code below exists for sm_90a alone (wgmma, setmaxnreg); other passes compile an empty kernel
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The online softmax of one tile of S (N / 2 keys: the tile's 128, or its first 64), in place (S becomes P): masked
// past the keys' end and, causal, above the diagonal when the tile reaches them; m_i and this lane's share of l_i
// updated; alpha = exp2(m_old - m_new).
template <bool CAUSAL, int N>
__device__ __forceinline__ void softmax(float (&s)[N], float (&m_i)[2], float (&l_i)[2], float (&alpha)[2], int k0,
                                        int row, int n_keys, bool masked, float qk_scale) {
  const int t = threadIdx.x % 4;
  if (masked) {
#pragma unroll
    for (int n = 0; n < N / 4; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * n + 2 * t + (e & 1), query = row + 8 * (e >> 1);
        if (key >= n_keys || (CAUSAL && key > query)) s[4 * n + e] = -INFINITY;
      }
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < N / 4; ++n) tile_max = fmaxf(tile_max, fmaxf(s[4 * n + 2 * half], s[4 * n + 2 * half + 1]));
    const float m_new = fmaxf(m_i[half], row_max(tile_max) * qk_scale);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row every key so far is masked for: no NaN
    alpha[half] = fast_exp2(m_i[half] - m_use);
    m_i[half] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < N / 4; ++n) {
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        s[4 * n + e] = fast_exp2(fmaf(s[4 * n + e], qk_scale, -m_use));
        sum += s[4 * n + e];
      }
    }
    l_i[half] = l_i[half] * alpha[half] + sum;
  }
}

template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// One query tile's O and L, for this consumer's 64 of its queries: the block's j-th, its key tiles numbered r as the
// ring counts them, from turn.walked on. Its head and batch are read from the turn where O and L are stored, not
// kept in registers through the loop. S's products take the head dim's first DEPTH columns (HEAD_DIM, or CUT_DEPTH
// of 128), the rest zeros. HALF_LAST (causal, two consumers, short lengths: halves_last_tile): where none
// of this consumer's queries sees a key past the first half of its last key tile (the first consumer's on the
// diagonal, or the keys end there), that tile's S and P V are products over its first 64 keys alone.
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG, bool HALF_LAST>
__device__ __forceinline__ void attend(Shared<T, HEAD_DIM, STAGES, CONSUMERS>& sh, const Problem& problem,
                                       const Rows& O, float* L, const QueryTileTurn& turn, int j) {
  const int consumer = warp_uniform(threadIdx.x / 128 - 1), lane = threadIdx.x % 32;
  const int first_row = warp_uniform(fresh(turn.q0)) + consumer * CONSUMER_ROWS;
  const int n_tiles = warp_uniform(fresh(turn.n_tiles)), walked = warp_uniform(fresh(turn.walked));
  const int row = first_row + threadIdx.x / 32 % 4 * 16 + lane / 4;
  const int n_keys = problem.n_keys;
  const float qk_scale = problem.scale * LOG2E;
  const uint32_t q = shared_address(sh.q) + consumer * CONSUMER_ROWS * 128;
  // a tile needs the mask if it runs past the keys' end or (causal) past this consumer's first query
  auto masked = [&](int i) {
    return (i + 1) * BLOCK_K > n_keys || (CAUSAL && (i + 1) * BLOCK_K - 1 > first_row);
  };
  // Q's last product is in: the producer may copy the next query tile's Q over it
  auto q_read = [&] {
    if (lane == 0) barrier_arrive(&sh.q_empty);
  };
  const bool half_last =
      HALF_LAST && warp_uniform(min(n_keys, first_row + CONSUMER_ROWS) <= (n_tiles - 1) * BLOCK_K + BLOCK_K / 2);

  // the halved tile's S and P in registers of their own: ptxas serialises the products where one array's first half
  // is written by a product (book/log.md, 2026-11-29); without HALF_LAST, half_last is false and they go unused
  float o[HEAD_DIM / 2] = {}, s[BLOCK_K / 2], s_half[BLOCK_K / 4];
  float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f}, alpha[2];
  uint32_t p[BLOCK_K / 16][4], p_half[BLOCK_K / 32][4];
  constexpr int Q_HALF_BYTES = Block<CONSUMERS>::Q_HALF_BYTES;
  barrier_wait(&sh.q_full, j & 1);

  // tile 0: S, its softmax, and P, in the registers of the keys the tile has for this consumer (128, or 64 halved)
  auto first_tile = [&](auto& its_s, auto& its_p) {
    constexpr int KEYS = 2 * sizeof(its_s) / sizeof(float);
    barrier_wait(&sh.k_full[walked % STAGES], (walked / STAGES) & 1);
    if (PINGPONG) wait_turn(consumer);
    issue_k_major<T, DEPTH, KEYS, Q_HALF_BYTES, HALF_BYTES>(its_s, q, shared_address(sh.k[walked % STAGES]));
    if (PINGPONG) give_turn<CONSUMERS>(consumer);
    wgmma_wait<0>();
    fence_registers(its_s);
    if (n_tiles == 1) q_read();
    softmax<CAUSAL>(its_s, m_i, l_i, alpha, 0, row, n_keys, masked(0), qk_scale);
    to_operand<T, KEYS>(its_p, its_s);
  };
  // tile i from 1: S(i) issued with P(i-1) V(i-1), which runs under its softmax
  auto next_tile = [&](int i, auto& its_s, auto& its_p) {
    constexpr int KEYS = 2 * sizeof(its_s) / sizeof(float);
    const int r = walked + i, stage = r % STAGES, previous = (r - 1) % STAGES;
    barrier_wait(&sh.k_full[stage], (r / STAGES) & 1);
    barrier_wait(&sh.v_full[previous], ((r - 1) / STAGES) & 1);
    if (PINGPONG) wait_turn(consumer);
    issue_k_major<T, DEPTH, KEYS, Q_HALF_BYTES, HALF_BYTES>(its_s, q, shared_address(sh.k[stage]));
    rescale(o, alpha);
    issue_from_registers<T, HEAD_DIM, BLOCK_K, HALF_BYTES>(o, p, shared_address(sh.v[previous]));
    if (PINGPONG) give_turn<CONSUMERS>(consumer);
    wgmma_wait<1>();  // S(i) is in; P(i-1) V(i-1) may still run (as compiled, under the mask alone)
    fence_registers(its_s);
    if (i == n_tiles - 1) q_read();
    softmax<CAUSAL>(its_s, m_i, l_i, alpha, i * BLOCK_K, row, n_keys, masked(i), qk_scale);
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) barrier_arrive(&sh.empty[previous]);
    to_operand<T, KEYS>(its_p, its_s);
  };
  // the last tile's P V, after which its stage is free
  auto last_product = [&](const auto& its_p) {
    constexpr int KEYS = 16 * sizeof(its_p) / sizeof(its_p[0]);
    const int last_r = walked + n_tiles - 1, last = last_r % STAGES;
    barrier_wait(&sh.v_full[last], (last_r / STAGES) & 1);
    rescale(o, alpha);
    if (PINGPONG) wait_turn(consumer);
    issue_from_registers<T, HEAD_DIM, KEYS, HALF_BYTES>(o, its_p, shared_address(sh.v[last]));
    // every consumer takes n_tiles + 1 turns a query tile
    if (PINGPONG) give_turn<CONSUMERS>(consumer);
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) barrier_arrive(&sh.empty[last]);
  };

  if (n_tiles == 1 && half_last) {
    first_tile(s_half, p_half);
  } else {
    first_tile(s, p);
  }
  for (int i = 1; i < n_tiles - half_last; ++i) next_tile(i, s, p);
  if (half_last) {
    if (n_tiles > 1) next_tile(n_tiles - 1, s_half, p_half);
    last_product(p_half);
  } else {
    last_product(p);
  }

  // O = acc / l_i, L = (m_i + log2 l_i) ln 2
  const int h = fresh(turn.h), b = fresh(turn.b);
  float inverse_l[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = row_sum(l_i[half]);
    inverse_l[half] = 1.f / l;
    const int r = row + 8 * half;
    if (lane % 4 == 0 && r < problem.n_queries) {
      L[(int64_t(b) * problem.heads + h) * problem.n_queries + r] = (m_i[half] + log2f(l)) * LN2;
    }
  }
  store_rows<T, HEAD_DIM, DEPTH != HEAD_DIM>(head_rows<T>(O, b, h), O.row_stride, o, row, problem.n_queries,
                                             problem.head_dim, inverse_l);
}

// A consumer warpgroup: the query tiles the producer names, in turn.
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG, bool HALF_LAST>
__device__ __forceinline__ void consume(Shared<T, HEAD_DIM, STAGES, CONSUMERS>& sh, const Problem& problem,
                                        const Rows& O, float* L) {
  const int consumer = threadIdx.x / 128 - 1;
  if (PINGPONG && consumer == CONSUMERS - 1) give_turn<CONSUMERS>(consumer);  // the first consumer goes first
  for (int j = 0; const QueryTileTurn* turn = named_turn(sh, j, query_tile_count<CONSUMERS>(problem)); ++j) {
    attend<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, CAUSAL, PINGPONG, HALF_LAST>(sh, problem, O, L, *turn, j);
    release_turn(sh, j);
  }
  // The last consumer gave the first a turn after the block's last query tile; the first takes it, so that every
  // arrival on the named barriers is waited for before the block ends.
  if (PINGPONG && consumer == 0) wait_turn(consumer);
}

// The producer thread: each query tile named to the consumers, the first the block's own and then the counter's
// next (none without a counter: a grid of a block per tile), taken once the last one's copies are all asked for;
// its Q once the consumers have read the last Q, and its K and V tiles into the ring as stages come free.
template <typename T, int HEAD_DIM, int STAGES, int CONSUMERS, bool CAUSAL>
__device__ __forceinline__ void produce(Shared<T, HEAD_DIM, STAGES, CONSUMERS>& sh, const Problem& p,
                                        const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
                                        int* next_item) {
  constexpr int HALVES = HEAD_DIM / TILE_COLUMNS, BYTES = HALVES * HALF_BYTES;
  constexpr int Q_HALF_BYTES = Block<CONSUMERS>::Q_HALF_BYTES;
  int item = blockIdx.x, walked = 0;
  for (int j = 0;; ++j) {
    const QueryTileTurn turn = query_tile<CONSUMERS, CAUSAL>(p, item, walked);
    name_turn(sh, j, turn);
    if (item >= query_tile_count<CONSUMERS>(p)) return;
    if (j > 0) barrier_wait(&sh.q_empty, (j - 1) & 1);
    barrier_expect(&sh.q_full, HALVES * Q_HALF_BYTES);
#pragma unroll
    for (int c = 0; c < HALVES; ++c) {
      copy_box(sh.q + c * Q_HALF_BYTES, q_map, &sh.q_full, c * TILE_COLUMNS, turn.q0, turn.h, turn.b);
    }
#pragma unroll 1  // a thread of 24 registers: the loop as written
    for (int i = 0; i < turn.n_tiles; ++i) {
      const int r = walked + i, stage = r % STAGES;
      if (r >= STAGES) barrier_wait(&sh.empty[stage], (r / STAGES - 1) & 1);
      barrier_expect(&sh.k_full[stage], BYTES);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) {
        copy_box(sh.k[stage] + c * HALF_BYTES, k_map, &sh.k_full[stage], c * TILE_COLUMNS, i * BLOCK_K, turn.h,
                 turn.b);
      }
      barrier_expect(&sh.v_full[stage], BYTES);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) {
        copy_box(sh.v[stage] + c * HALF_BYTES, v_map, &sh.v_full[stage], c * TILE_COLUMNS, i * BLOCK_K, turn.h,
                 turn.b);
      }
    }
    walked += turn.n_tiles;
    item = gridDim.x + (next_item == nullptr ? 0 : atomicAdd(next_item, 1));
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG, bool HALF_LAST>
__global__ void __launch_bounds__(Block<CONSUMERS>::THREADS, 1)
    hopper_fwd_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                      const __grid_constant__ CUtensorMap v_map, const Problem problem, const Rows O, float* L,
                      int* next_item) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  auto& sh = shared_layout<Shared<T, HEAD_DIM, STAGES, CONSUMERS>>(raw);
  constexpr int CONSUMER_WARPS = 4 * CONSUMERS;  // lane 0 of each arrives
  if (threadIdx.x == 0) {
    barrier_init(&sh.q_full, 1);
    barrier_init(&sh.q_empty, CONSUMER_WARPS);
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&sh.k_full[s], 1);
      barrier_init(&sh.v_full[s], 1);
      barrier_init(&sh.empty[s], CONSUMER_WARPS);
    }
    for (int s = 0; s < ITEM_SLOTS; ++s) {
      barrier_init(&sh.item_full[s], 1);
      barrier_init(&sh.item_empty[s], CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) produce<T, HEAD_DIM, STAGES, CONSUMERS, CAUSAL>(sh, problem, q_map, k_map, v_map, next_item);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Block<CONSUMERS>::CONSUMER_REGISTERS));
    consume<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, CAUSAL, PINGPONG, HALF_LAST>(sh, problem, O, L);
  }
#endif
}

namespace {

template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS, bool CAUSAL, bool PINGPONG, bool HALF_LAST>
cudaError_t launch(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item, cudaStream_t stream) {
  using B = Block<CONSUMERS>;
  CUtensorMap maps[3];
  for (cudaError_t error : {tensor_map(&maps[0], p, q, p.n_queries, B::BLOCK_Q),
                            tensor_map(&maps[1], p, k, p.n_keys, BLOCK_K), tensor_map(&maps[2], p, v, p.n_keys, BLOCK_K)}) {
    if (error != cudaSuccess) return error;
  }
  constexpr int SHARED = sizeof(Shared<T, HEAD_DIM, STAGES, CONSUMERS>) + 1024;
  constexpr auto kernel = hopper_fwd_kernel<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, CAUSAL, PINGPONG, HALF_LAST>;
  const cudaError_t error = systems_flash_cuda::allow_shared<kernel>(SHARED);
  if (error != cudaSuccess) return error;
  const int tiles = query_tile_count<CONSUMERS>(p), blocks = std::min(tiles, multiprocessors());
  // a grid of a block per query tile takes none from the counter: no zeroing to issue, a launch less in a small call
  int* const counter = blocks < tiles ? next_item : nullptr;
  if (blocks < tiles) {
    if (counter == nullptr) return cudaErrorInvalidValue;
    if (const cudaError_t error = cudaMemsetAsync(counter, 0, sizeof(int), stream); error != cudaSuccess) return error;
  }
  kernel<<<blocks, B::THREADS, SHARED, stream>>>(maps[0], maps[1], maps[2], p, o, L, counter);
  return cudaGetLastError();
}

// The variant's ping-pong, a run-time switch, as the kernel's template argument.
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS, bool CAUSAL, bool HALF_LAST = false>
cudaError_t launch_taking_turns(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item,
                                cudaStream_t stream, bool pingpong) {
  constexpr auto with_turns = launch<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, CAUSAL, true, HALF_LAST>;
  constexpr auto without = launch<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, CAUSAL, false, HALF_LAST>;
  return (pingpong ? with_turns : without)(p, q, k, v, o, L, next_item, stream);
}

// Causal with two consumers, whether a consumer's last key tile is halved where its queries see only its first
// half (HALF_LAST), in every variant, so that the ablation's switches compare kernels that halve alike. Each query
// tile saves a quarter of a key tile's products at most, and the halving makes the tile loop longer: a gain where
// query tiles walk few key tiles (book/log.md, 2026-11-30).
constexpr int HALF_LAST_KEYS = 8192;
inline bool halves_last_tile(const Problem& p) { return p.n_keys < HALF_LAST_KEYS; }

// The instantiations a launch can reach: ring depth 2 or 3, ping-pong or not, causal or not; three consumer
// warpgroups at head dim 64 only (at 128 their 160 registers cannot hold S and O); with two, causal, the last key
// tile halved at short lengths (three have not the registers for the halved tile's own).
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, int CONSUMERS>
cudaError_t launch_for(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item,
                       cudaStream_t stream, bool pingpong) {
  if (!p.causal) {
    return launch_taking_turns<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, false>(p, q, k, v, o, L, next_item, stream,
                                                                            pingpong);
  }
  if constexpr (CONSUMERS == 2) {
    if (halves_last_tile(p)) {
      return launch_taking_turns<T, HEAD_DIM, DEPTH, STAGES, 2, true, true>(p, q, k, v, o, L, next_item, stream,
                                                                           pingpong);
    }
  }
  return launch_taking_turns<T, HEAD_DIM, DEPTH, STAGES, CONSUMERS, true>(p, q, k, v, o, L, next_item, stream,
                                                                         pingpong);
}

template <typename T, int HEAD_DIM, int CONSUMERS>
cudaError_t launch_with(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item,
                        cudaStream_t stream, const Variant& variant) {
  return variant.stages == 2
             ? launch_for<T, HEAD_DIM, HEAD_DIM, 2, CONSUMERS>(p, q, k, v, o, L, next_item, stream, variant.pingpong)
             : launch_for<T, HEAD_DIM, HEAD_DIM, 3, CONSUMERS>(p, q, k, v, o, L, next_item, stream, variant.pingpong);
}

template <typename T>
cudaError_t launch_of(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item,
                      cudaStream_t stream, const Variant& variant) {
  if (p.head_dim == 128) return launch_with<T, 128, 2>(p, q, k, v, o, L, next_item, stream, variant);
  if (cuts_head_dim(p.head_dim)) {  // in the tiles of 128, S's products cut
    return launch_for<T, 128, CUT_DEPTH, 3, 2>(p, q, k, v, o, L, next_item, stream, variant.pingpong);
  }
  return variant.consumers == 2 ? launch_with<T, 64, 2>(p, q, k, v, o, L, next_item, stream, variant)
                                : launch_with<T, 64, 3>(p, q, k, v, o, L, next_item, stream, variant);
}

}  // namespace

bool forward_counts_tiles(const Problem& p, const Variant& variant) {
  // the consumers launch_of runs: three at head dim 64 where the variant asks for them, else two
  const int tiles = p.head_dim == 64 && variant.consumers == 3 ? query_tile_count<3>(p) : query_tile_count<2>(p);
  return multiprocessors() < tiles;
}

cudaError_t forward(const Problem& p, Rows q, Rows k, Rows v, Rows o, float* L, int* next_item, cudaStream_t stream,
                    const Variant& variant) {
  if (!takes_head_dim(p.head_dim) || !valid(variant, p.head_dim)) return cudaErrorInvalidValue;
  return p.dtype == systems_flash_cuda::DType::BFloat16
             ? launch_of<__nv_bfloat16>(p, q, k, v, o, L, next_item, stream, variant)
             : launch_of<__half>(p, q, k, v, o, L, next_item, stream, variant);
}

}  // namespace systems_flash_hopper

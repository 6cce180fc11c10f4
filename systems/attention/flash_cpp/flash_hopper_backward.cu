// FlashAttention's backward written for Hopper (sm_90a) in CUDA C++, in the forward's shape (flash_hopper_forward.cu):
// a producer warpgroup feeding rings of shared-memory stages through the copy engine, two consumer warpgroups of 64
// rows each multiplying with asynchronous wgmma, the products that need no transposed operand issued from registers.
// One pass, as FlashAttention-2 and cuDNN take it, dQ added up in fp32 as the dK/dV pass goes; under
// torch.use_deterministic_algorithms (nothing then added up in an order that changes from run to run) two passes, as
// the Triton kernels take them at head dim 128 (../flash_triton/backward_kernels.py):
//   preprocess  D = rowsum(dO * O) (delta_kernel, flash_cuda.cuh)
//   dK/dV       a block owns 128 keys and walks the query tiles of 64 that see them; per tile, for its 64 keys
//                 S^T = K Q^T and dP^T = V dO^T issued together (shared memory; two passes at head dim 64:
//                   K and V held in registers)
//                 P^T = exp2(S^T scale log2e - L log2e)          (under dP^T)
//                 dV += P^T dO                                    (P^T from registers)
//                 dS^T = P^T (dP^T - D);  dK += dS^T Q            (dS^T under dV; dS^T from registers)
//               one pass: also dS^T into shared memory, and a share of the tile's dQ, dS K over the block's
//               128 keys (both operands read transposed from shared memory), which the copy engine adds to an fp32
//               accumulator while the next tile's products run; a last kernel scales it into dQ. The share: at head
//               dim 64 all of dQ, the consumers taking the tiles in turn (the other's dS^T waited for at a barrier
//               it only arrives at); at 128 half of dQ's columns each (a barrier both wait at: half the
//               accumulators and half the additions)
//   dQ          (two passes) a block owns 128 queries and walks the key tiles of 64 it sees; per tile, for its 64
//               queries S = Q K^T and dP = dO V^T issued together (at head dim 64, Q and dO held in registers);
//               P = exp2(S scale log2e - L log2e);
//               dS = P (dP - D);  dQ += dS K
// and at the end dK and dQ are scaled by the softmax scale. Head dims 72 and 80 run in the tiles of head dim 128, the
// columns past the head dim copied in as zeros, with the products over the head dim (S^T, dP^T, S, dP) cut to its
// first DEPTH = 80 columns.
// Each consumer keeps the tensor cores fed across its tiles: the next tile's first two products are issued as soon as
// the last product of this one is, and run while it finishes (FlashAttention-3's intra-warpgroup overlap), except in
// the dK/dV pass at head dim 128, whose dK and dV take half a consumer's registers, and which runs a tile's products
// in turn (one pass: the tile's dQ share stored and handed over while dK's product runs). In the dK/dV pass a second
// producer warp copies each query tile's L and D into the stage beside Q and dO, so no consumer waits on a global
// load inside its loop.
#include "flash_hopper.cuh"

namespace systems_flash_hopper {

constexpr int ROWS = 64;                           // a consumer's rows, and the tile the other operand walks in
constexpr int BLOCK_ROWS = 2 * ROWS;               // a block's rows: two consumers
constexpr int THREADS = 384, CONSUMER_REGISTERS = 240;
constexpr int TILE_HALF = ROWS * TILE_COLUMNS * 2;         // a (64, 64) tile: 8 KiB
constexpr int BLOCK_HALF = BLOCK_ROWS * TILE_COLUMNS * 2;  // a (128, 64) tile: 16 KiB

// A key block of the dK/dV pass as a block takes it: its number (from key_block_count on: none left), the query tiles
// the block walked before it (where its tiles start in the ring), its first key, head and batch, and the query tiles
// that see its keys.
struct KeyBlockTurn {
  int item, walked, k0, h, b, first_tile, n_tiles, unused;
};

// A block's shared memory, either pass: its own rows of two tensors, loaded once (K and V for dK/dV, Q and dO for dQ),
// and a ring of the tiles of two tensors it walks (Q and dO, or K and V).
template <int HEAD_DIM, int STAGES>
struct BackwardShared {
  static constexpr int HALVES = HEAD_DIM / TILE_COLUMNS;
  alignas(1024) unsigned char own_a[HALVES * BLOCK_HALF];
  alignas(1024) unsigned char own_b[HALVES * BLOCK_HALF];
  alignas(1024) unsigned char walk_a[STAGES][HALVES * TILE_HALF];
  alignas(1024) unsigned char walk_b[STAGES][HALVES * TILE_HALF];
  float lse[STAGES][ROWS], delta[STAGES][ROWS];  // the dK/dV pass: L and D of each walked query tile
  uint64_t own_full, full[STAGES], empty[STAGES];
  // the dK/dV pass, persistent: the key blocks the block takes in turn, and the consumers done with own_a and own_b
  KeyBlockTurn turns[ITEM_SLOTS];
  uint64_t item_full[ITEM_SLOTS], item_empty[ITEM_SLOTS], own_empty;
};

// The producer warp of the dK/dV pass that copies L and D: a full stage waits for each of its lanes too.
constexpr int ROW_COPIERS = 32;

template <int HEAD_DIM, int STAGES>
constexpr int BACKWARD_SHARED_ROUNDED = (sizeof(BackwardShared<HEAD_DIM, STAGES>) + 1023) / 1024 * 1024;

// The one-pass dK/dV kernel's shared memory past BackwardShared: per consumer two dS^T tiles (64 keys by 64 queries
// in the 128-byte swizzle, the A operand of dQ = dS K; a warp writes one while the other's product of the last tile
// may still read the other), and per consumer two buffers of each warp's share of a query tile's dQ (16 rows by 64
// columns of fp32: one being added to the accumulator by the copy engine while the other is written). A tile's dQ
// is added into L2 once per block: at head dim 64 the whole of it by one consumer, over both consumers' dS^T, the
// consumers taking the tiles in turn (dq_taker); at head dim 128 each consumer its 64 of dQ's columns, and the
// buffers fill the 227 KiB a block may have.
struct DqShared {
  static constexpr int SHARE_FLOATS = 16 * 64, BUFFERS = 2;
  alignas(1024) unsigned char ds[2][2][TILE_HALF];
  alignas(16) float dq[2][BUFFERS][4][SHARE_FLOATS];
};

// At head dim 64, the consumer that multiplies query tile r's dQ (r as the ring counts tiles): it waits for the
// other's dS^T of the tile at wait_for_other, the other gives it (give_to_other) and goes on.
__device__ __forceinline__ int dq_taker(int r) { return r % 2; }

// The fp32 accumulator of the one-pass backward: per (batch, head) and query tile of 64, the 64 x HEAD_DIM sums in
// the order the wgmma accumulators hold them (warp w, column group n, lane: four floats, rows r and r + 8 of columns
// 8 n + 2 (lane % 4) and one more), so that each warp's share is 16 rows' worth of consecutive floats, stored 16
// bytes a lane without bank conflicts and added by one bulk copy.
template <int HEAD_DIM>
constexpr int DQ_TILE_FLOATS = ROWS * HEAD_DIM;

// The query tiles of 64 a (batch, head) has: the tiles of the accumulator, and those the dK/dV pass walks.
__host__ __device__ inline int query_tiles(const Problem& p) { return (p.n_queries + ROWS - 1) / ROWS; }

// The fp32 sums of the accumulator's tiles, rows of `columns` (the head dim; at head dims 72 and 80 the tiles' 128);
// the one pass's count of key blocks taken (an int) follows them.
__host__ __device__ inline int64_t dq_tiles_size(const Problem& p, int columns) {
  return int64_t(p.batch) * p.heads * query_tiles(p) * ROWS * columns;
}

// The key blocks of the dK/dV pass, numbered keys fastest (causal: the first, which the most queries see, first),
// then heads, then batch: the order in which the hardware launches a grid of them. In the one pass the grid is
// persistent, a block per multiprocessor, and each block takes the next number from a counter in global memory as it
// starts its last key block: a key block's start (its K and V, its first query tiles in flight) and end (dK and dV
// stored, the last dQ share added) then run under the products of its neighbours, where a block per key block (the
// two passes) waits for them alone. Causal, the persistent grid's last heads go block by block across them
// (head_rank), so that the last key blocks taken are the shortest.
__host__ __device__ inline int key_blocks(const Problem& p) { return (p.n_keys + BLOCK_ROWS - 1) / BLOCK_ROWS; }
__host__ __device__ inline int key_block_count(const Problem& p) { return key_blocks(p) * p.heads * p.batch; }

template <bool CAUSAL, bool PERSISTENT>
__device__ inline KeyBlockTurn key_block(const Problem& p, int item, int walked) {
  const auto [bh, rank] = head_rank(item, key_blocks(p), p.heads * p.batch, CAUSAL && PERSISTENT ? gridDim.x : 0);
  const int k0 = rank * BLOCK_ROWS;
  // the query tiles that see these keys: all, or (causal, top-left) those from the tile holding query k0 on
  const int first_tile = CAUSAL ? k0 / ROWS : 0;
  return {item, walked, k0, bh % p.heads, bh / p.heads, first_tile, max(0, query_tiles(p) - first_tile), 0};
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The producer of the dQ pass, and of each key block of the dK/dV pass: the block's own rows of two tensors, then
// the walked tiles into the ring, whose count goes on from `walked`, the tiles the block walked before.
template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ void produce(BackwardShared<HEAD_DIM, STAGES>& sh, const CUtensorMap& own_a,
                                        const CUtensorMap& own_b, const CUtensorMap& walk_a,
                                        const CUtensorMap& walk_b, int own0, int first_tile, int n_tiles, int h,
                                        int b, int walked) {
  constexpr int HALVES = HEAD_DIM / TILE_COLUMNS;
  barrier_expect(&sh.own_full, 2 * HALVES * BLOCK_HALF);
#pragma unroll
  for (int c = 0; c < HALVES; ++c) {
    copy_box(sh.own_a + c * BLOCK_HALF, own_a, &sh.own_full, c * TILE_COLUMNS, own0, h, b);
    copy_box(sh.own_b + c * BLOCK_HALF, own_b, &sh.own_full, c * TILE_COLUMNS, own0, h, b);
  }
#pragma unroll 1  // a thread of 24 registers: the loop as written
  for (int i = 0; i < n_tiles; ++i) {
    const int r = walked + i, stage = r % STAGES, row0 = (first_tile + i) * ROWS;
    if (r >= STAGES) barrier_wait(&sh.empty[stage], (r / STAGES - 1) & 1);
    barrier_expect(&sh.full[stage], 2 * HALVES * TILE_HALF);
#pragma unroll
    for (int c = 0; c < HALVES; ++c) {
      copy_box(sh.walk_a[stage] + c * TILE_HALF, walk_a, &sh.full[stage], c * TILE_COLUMNS, row0, h, b);
      copy_box(sh.walk_b[stage] + c * TILE_HALF, walk_b, &sh.full[stage], c * TILE_COLUMNS, row0, h, b);
    }
  }
}

// Key block kb's query tiles as the ring counts them, first to end - 1, tile r holding the queries from
// (shift + r) 64: read from shared memory and made warp-uniform, for the loops that walk them.
struct RingTiles {
  int first, end, shift;
};
__device__ __forceinline__ RingTiles ring_tiles(const KeyBlockTurn& kb) {
  const int first = warp_uniform(fresh(kb.walked));
  return {first, first + warp_uniform(fresh(kb.n_tiles)), warp_uniform(fresh(kb.first_tile)) - first};
}

// The block's j-th key block, in shared memory, or nullptr when none is left: persistent, the one the producer named;
// else the block's own, the only one, which its thread 0 wrote before the block's first barrier.
template <bool PERSISTENT, int HEAD_DIM, int STAGES>
__device__ __forceinline__ const KeyBlockTurn* take_key_block(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p,
                                                              int j) {
  if constexpr (!PERSISTENT) return j == 0 ? &sh.turns[0] : nullptr;
  return named_turn(sh, j, key_block_count(p));
}

// Lane 0 of a warp done with its j-th key block, persistent: the producer may name another in its place.
template <bool PERSISTENT, int HEAD_DIM, int STAGES>
__device__ __forceinline__ void finish_key_block(BackwardShared<HEAD_DIM, STAGES>& sh, int j) {
  if constexpr (PERSISTENT) release_turn(sh, j);
}

// The dK/dV pass's producer thread: each key block's K and V once the consumers are done with the last one's, then
// its query tiles' Q and dO. Persistent, it also names the block's key blocks to the other warps (item_full), each
// in a slot they are done with (item_empty): the block's own first, then the counter's next, taken once the last
// key block's copies are all asked for. Taken earlier, a key block would wait on a block still busy with a long
// one while another block runs out of work; the consumers still have the ring's tiles in hand meanwhile.
template <int HEAD_DIM, int STAGES, bool CAUSAL, bool PERSISTENT>
__device__ __forceinline__ void produce_key_blocks(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p,
                                                   const CUtensorMap& k_map, const CUtensorMap& v_map,
                                                   const CUtensorMap& q_map, const CUtensorMap& do_map,
                                                   int* next_item) {
  int item = blockIdx.x, walked = 0;
  for (int j = 0;; ++j) {
    if constexpr (PERSISTENT) name_turn(sh, j, key_block<CAUSAL, PERSISTENT>(p, item, walked));
    const KeyBlockTurn* kb = take_key_block<PERSISTENT>(sh, p, j);
    if (kb == nullptr) return;
    if (j > 0) barrier_wait(&sh.own_empty, (j - 1) & 1);
    produce<HEAD_DIM, STAGES>(sh, k_map, v_map, q_map, do_map, fresh(kb->k0), fresh(kb->first_tile),
                              fresh(kb->n_tiles), fresh(kb->h), fresh(kb->b), walked);
    if constexpr (!PERSISTENT) return;
    walked += fresh(kb->n_tiles);
    item = gridDim.x + atomicAdd(next_item, 1);
  }
}

// The dK/dV pass's second producer warp: each walked query tile's L and D into its stage, through cp.async, each
// lane arriving on the stage's full barrier when its copies land. Past the last query it writes zeros: those rows
// of Q and dO read as zeros too, so their P (exp2(0) = 1) multiplies zeros and their dS is 0.
template <int HEAD_DIM, int STAGES, bool PERSISTENT>
__device__ __forceinline__ void produce_query_rows(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p,
                                                   const float* L, const float* delta) {
  const int lane = threadIdx.x % 32;
  for (int j = 0; const KeyBlockTurn* kb = take_key_block<PERSISTENT>(sh, p, j); ++j) {
    const int64_t bh = int64_t(fresh(kb->b)) * p.heads + fresh(kb->h);
    const RingTiles tiles = ring_tiles(*kb);
#pragma unroll 1  // a warp of 24 registers a lane: the loop as written
    for (int r = tiles.first; r < tiles.end; ++r) {
      const int stage = r % STAGES, q0 = (tiles.shift + r) * ROWS;
      if (r >= STAGES) barrier_wait(&sh.empty[stage], (r / STAGES - 1) & 1);
#pragma unroll
      for (int row = lane; row < ROWS; row += 32) {
        const bool inside = q0 + row < p.n_queries;
        const int64_t at = bh * p.n_queries + (inside ? q0 + row : 0);
        systems_flash_cuda::cp_async_4(shared_address(&sh.lse[stage][row]), L + at, inside);
        systems_flash_cuda::cp_async_4(shared_address(&sh.delta[stage][row]), delta + at, inside);
      }
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&sh.full[stage]))
                   : "memory");
    }
    __syncwarp();
    finish_key_block<PERSISTENT>(sh, j);
  }
}

// S^T, dP^T, S or dP: a consumer's own 64 rows (K, V, Q or dO) times a walked tile's 64 (K-major) over the head
// dim's first DEPTH columns, the own rows from the registers that hold them (HELD, head dim 64) or from shared
// memory at `rows`
template <typename T, int DEPTH, bool HELD>
__device__ __forceinline__ void issue_own_rows(float (&d)[32], const uint32_t (&held)[4][4], uint32_t rows,
                                               uint32_t walked) {
  if constexpr (HELD) {
    issue_held_k_major<T>(d, held, walked);
  } else {
    issue_k_major<T, DEPTH, ROWS, BLOCK_HALF, TILE_HALF>(d, rows, walked);
  }
}

// The first of a consumer thread's two keys (rows of its wgmma accumulators: this one and the one 8 below), for the
// consumer's keys from consumer_k0, the warp in the consumer, and the lane.
__device__ __forceinline__ int lane_key(int consumer_k0, int warp, int lane) {
  return consumer_k0 + warp * 16 + lane / 4;
}

// dK/dV for one consumer's 64 keys of key block kb (own_a = K, own_b = V; walked: walk_a = Q, walk_b = dO), its
// tiles numbered r as the ring counts them, from kb.walked on; ONE_PASS: and this
// consumer's share of each query tile's dQ, over the block's 128 keys from both consumers' dS^T, added into dq_acc
// through dsh. The share: at head dim 64 all of dQ for every other tile (dq_taker); at head dim 128 dQ's columns
// 64 c to 64 c + 63 (32 accumulators, not 64, and half the additions). S^T and dP^T over the head dim's first
// DEPTH columns (HEAD_DIM, or CUT_DEPTH of 128).
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, bool CAUSAL, bool ONE_PASS, bool PERSISTENT>
__device__ __forceinline__ void consume_key_block(BackwardShared<HEAD_DIM, STAGES>& sh, DqShared& dsh,
                                                  const Problem& p, const Rows& dK, const Rows& dV, float* dq_acc,
                                                  const KeyBlockTurn& kb) {
  const int consumer = warp_uniform(threadIdx.x / 128 - 1), warp = warp_uniform(threadIdx.x / 32 % 4);
  const int lane = threadIdx.x % 32, t = lane % 4;
  const RingTiles tiles = ring_tiles(kb);
  const int my_k0 = warp_uniform(fresh(kb.k0) + consumer * ROWS);
  // this lane's keys (from my_k0: 16 warp + lane / 4 and 8 more) less its first query's column in a tile (2 t)
  const int keys_less_columns = lane_key(0, warp, lane) - 2 * t;
  // the first of tile r's dQ sums in the accumulator: dq_tile0 + r
  const int64_t dq_tile0 =
      (int64_t(warp_uniform(fresh(kb.b))) * p.heads + warp_uniform(fresh(kb.h))) * query_tiles(p) + tiles.shift;
  const uint32_t k_rows = shared_address(sh.own_a) + consumer * ROWS * 128;
  const uint32_t v_rows = shared_address(sh.own_b) + consumer * ROWS * 128;
  const float qk_scale = p.scale * LOG2E;
  float dk[HEAD_DIM / 2] = {}, dv[HEAD_DIM / 2] = {}, s[32], dp[32];
  uint32_t pt[ROWS / 16][4], dst[ROWS / 16][4];

  // At head dim 64 in two passes this consumer's K and V, the A operands of S^T and dP^T in every tile, are held in
  // registers (16 each), so that those products read only Q and dO from shared memory. The one pass, with dQ's 32
  // accumulators besides, has the registers for K alone (and only with dS^T made from P^T's operand registers), and
  // so held it was no faster (book/log.md, 2026-11-30)
  constexpr bool HELD = HEAD_DIM == 64 && !ONE_PASS;
  uint32_t k_held[4][4], v_held[4][4];
  if constexpr (HELD) {
    load_operand(k_held, k_rows, warp, lane);
    load_operand(v_held, v_rows, warp, lane);
  }
  // tile i's S^T and dP^T, issued together or (one pass) with the last tile's dQ share between them
  auto issue_s = [&](int r) {
    const int stage = r % STAGES;
    barrier_wait(&sh.full[stage], (r / STAGES) & 1);
    issue_own_rows<T, DEPTH, HELD>(s, k_held, k_rows, shared_address(sh.walk_a[stage]));  // K Q^T
  };
  auto issue_dp = [&](int r) {
    issue_own_rows<T, DEPTH, HELD>(dp, v_held, v_rows, shared_address(sh.walk_b[r % STAGES]));  // V dO^T
  };
  auto issue_scores = [&](int r) {
    issue_s(r);
    issue_dp(r);
  };
  // L, then D, of this lane's queries in a tile (8 n + 2 t + c), from shared memory: without the mask read before
  // the wait for the product that needs them, where their latency runs under it; with the mask after, which was the
  // faster there (book/log.md, 2026-11-29), and after in the one pass at head dim 64, where the consumers take turns
  // at dQ (book/log.md, 2026-11-30)
  constexpr bool ROWS_EARLY = !CAUSAL && !(ONE_PASS && HEAD_DIM == 64);
  float2 row_pairs[8];
  auto read_rows = [&](const float* rows) {
#pragma unroll
    for (int n = 0; n < 8; ++n) row_pairs[n] = *reinterpret_cast<const float2*>(rows + 8 * n + 2 * t);  // 2 t even
  };
  auto lse_early = [&](int r) {
    if constexpr (ROWS_EARLY) read_rows(sh.lse[r % STAGES]);
  };
  auto delta_early = [&](int r) {
    if constexpr (ROWS_EARLY) read_rows(sh.delta[r % STAGES]);
  };
  // Causal, the mask reaches the query tiles before `unmasked`, where `past` (below) is less than ROWS - 1: the first
  // one or two of the walk. The loops over tiles take those apart (masked: std::true_type or std::false_type), so that
  // the others carry no compare and select per element.
  const int unmasked = CAUSAL ? (my_k0 + 2 * ROWS - 2) / ROWS - tiles.shift : tiles.first;
  // once S^T is in: P^T, and dV += P^T dO issued
  auto probabilities = [&](int r, auto masked) {
    // the tile's first query less the consumer's first key: a key past a query where the difference of their
    // offsets from those, keys_less_columns + 8 (e >> 1) - (8 n + c), exceeds it
    const int stage = r % STAGES, past = (tiles.shift + r) * ROWS - my_k0;
    constexpr bool MASKED = decltype(masked)::value;
    fence_registers(s);
    if constexpr (!ROWS_EARLY) read_rows(sh.lse[stage]);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 l = row_pairs[n];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = e & 1;
        float pv = fast_exp2(fmaf(s[4 * n + e], qk_scale, -(c ? l.y : l.x) * LOG2E));
        if (MASKED && keys_less_columns > past + 8 * n + c - 8 * (e >> 1)) pv = 0.f;
        s[4 * n + e] = pv;
      }
    }
    to_operand<T, ROWS>(pt, s);
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dv, pt, shared_address(sh.walk_b[stage]));  // dV += P^T dO
  };
  // once dP^T is in: dS^T = P^T (dP^T - D), in dp's registers
  auto score_gradients = [&](int r) {
    fence_registers(dp);
    if constexpr (!ROWS_EARLY) read_rows(sh.delta[r % STAGES]);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 pair = row_pairs[n];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float d = c ? pair.y : pair.x;
        dp[4 * n + c] = s[4 * n + c] * (dp[4 * n + c] - d);
        dp[4 * n + 2 + c] = s[4 * n + 2 + c] * (dp[4 * n + 2 + c] - d);
      }
    }
  };
  auto issue_dk = [&](int r) {  // dK += dS^T Q, from the registers the previous tile left in dst
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dk, dst, shared_address(sh.walk_a[r % STAGES]));
  };

  // One pass: dq holds this consumer's share of a query tile's dQ from issue_dq until add_dq hands it to the copy
  // engine (at head dim 64, of the tiles it takes). dst[kk][r] is dS^T at key row 16 warp + lane / 4 + 8 (r % 2),
  // queries 8 (2 kk + r / 2) + 2 t and one more: stored in the copy engine's swizzle (16-byte chunk n of row r at
  // n ^ (r % 8)), for wgmma to read.
  float dq[32];  // 64 queries by 64 columns of dQ
  auto issue_dq = [&](int r) {  // once dst holds tile r's dS^T
    store_operand(dst, shared_address(dsh.ds[consumer][r % 2]), warp, lane);
    fence_shared_for_async();
    if constexpr (HEAD_DIM == 64) {
      // the tile's dQ over the block's 128 keys is one consumer's, in turn: the other gives its dS^T and goes on
      if (consumer != dq_taker(r)) {
        give_to_other(r);
        wgmma_fence();   // as the taker does: without it ptxas adds its own before the next product
        wgmma_commit();  // an empty group: the waits count the same in both consumers
        return;
      }
      wait_for_other(r);
    } else {
      consumers_sync();  // the other consumer's dS^T is read too
    }
    wgmma_fence();
    // 16 keys a step over the block's 128: consumer 0's dS^T rows, then consumer 1's, against K's rows (at head dim
    // 128 in this consumer's column half)
    const uint32_t k_columns = shared_address(sh.own_a) + (HEAD_DIM == 128) * consumer * BLOCK_HALF;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint64_t a = descriptor(shared_address(dsh.ds[kk / 4][r % 2]) + kk % 4 * 2048, TILE_HALF, 1024);
      wgmma_ss_n64<T, 1>(dq, a, descriptor(k_columns + kk * 2048, BLOCK_HALF, 1024), kk);
    }
    wgmma_commit();
  };
  constexpr int WARP_FLOATS = DQ_TILE_FLOATS<HEAD_DIM> / 4;  // a warp's 16 rows of a tile's dQ
  auto hand_to_copy_engine = [&](int r, const float* buffer) {  // lane 0, once the warp's stores are fenced
    const int64_t tile = dq_tile0 + r;
    // at head dim 128 consumer 1's columns follow consumer 0's in the warp's rows
    const int64_t at =
        tile * DQ_TILE_FLOATS<HEAD_DIM> + warp * WARP_FLOATS + (HEAD_DIM == 128) * consumer * DqShared::SHARE_FLOATS;
    bulk_add(dq_acc + at, buffer, DqShared::SHARE_FLOATS * 4);
  };
  auto write_share = [&](float* buffer) {  // this warp's share of the tile's dQ, in the accumulator's order
    fence_registers(dq);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      *reinterpret_cast<float4*>(buffer + 4 * (n * 32 + lane)) =
          make_float4(dq[4 * n], dq[4 * n + 1], dq[4 * n + 2], dq[4 * n + 3]);
    }
  };
  auto add_dq = [&](int r) {  // once tile r's dQ share is in (its taker's, at head dim 64): to the copy engine
    if (HEAD_DIM == 64 && consumer != dq_taker(r)) return;
    const int use = HEAD_DIM == 64 ? r / 2 : r;  // this consumer's additions, counted on across key blocks
    float* buffer = dsh.dq[consumer][use % DqShared::BUFFERS][warp];
    // once the copy engine has read this buffer for its last addition
    if (use >= DqShared::BUFFERS && lane == 0) bulk_wait_read<DqShared::BUFFERS - 1>();
    __syncwarp();
    write_share(buffer);
    fence_shared_for_async();
    __syncwarp();
    if (lane == 0) hand_to_copy_engine(r, buffer);
  };

  // lane 0 of each warp, once the warp's last product that reads K or V is done: the producer may load the next
  // key block's
  auto release_own = [&] {
    if (PERSISTENT && lane == 0) barrier_arrive(&sh.own_empty);
  };
  if constexpr (HEAD_DIM == 64) {
    if (tiles.end > tiles.first) {
      issue_scores(tiles.first);
      lse_early(tiles.first);
      wgmma_wait<1>();  // S^T
      probabilities(tiles.first, std::bool_constant<CAUSAL>{});
      delta_early(tiles.first);
      wgmma_wait<1>();  // dP^T
      score_gradients(tiles.first);
      wgmma_wait<0>();  // dV: P^T's registers free
      fence_registers(dv);
      to_operand<T, ROWS>(dst, dp);
      auto step = [&](int r, auto masked) {
        // the tensor cores take this tile's S^T and dP^T and the last tile's dK in a row, while the exponentials of
        // this tile wait for S^T alone; one pass issues the last tile's dQ share after S^T (its dS^T stores and
        // barrier run under S^T; after dP^T it was the slower, book/log.md, 2026-11-30) and hands it to the copy
        // engine after the exponentials, not before them (4 % off the kernel's time at the leaderboard's shape).
        // Every product is issued and waited for within the iteration: one left running across the loop's back edge
        // makes ptxas serialise them.
        if constexpr (ONE_PASS) {
          issue_s(r);
          issue_dq(r - 1);
          issue_dp(r);
          issue_dk(r - 1);
          lse_early(r);
          wgmma_wait<3>();  // S^T
          probabilities(r, masked);
          delta_early(r);
          wgmma_wait<3>();  // the last tile's dQ share
          add_dq(r - 1);
          wgmma_wait<2>();  // dP^T
        } else {
          issue_scores(r);
          issue_dk(r - 1);
          lse_early(r);
          wgmma_wait<2>();  // S^T
          probabilities(r, masked);
          delta_early(r);
          wgmma_wait<2>();  // dP^T
        }
        score_gradients(r);
        wgmma_wait<0>();  // the last tile's dK and this tile's dV
        fence_registers(dk);
        fence_registers(dv);
        if (lane == 0) barrier_arrive(&sh.empty[(r - 1) % STAGES]);  // the last tile's Q and dO read
        to_operand<T, ROWS>(dst, dp);
      };
      int r = tiles.first + 1;
      if constexpr (CAUSAL) {
        for (; r < min(unmasked, tiles.end); ++r) step(r, std::true_type{});
      }
      for (; r < tiles.end; ++r) step(r, std::false_type{});
      if constexpr (ONE_PASS) issue_dq(tiles.end - 1);
      issue_dk(tiles.end - 1);
      wgmma_wait<0>();
      if (lane == 0) barrier_arrive(&sh.empty[(tiles.end - 1) % STAGES]);  // the ring runs on into the next key block
      release_own();
      fence_registers(dk);
      if constexpr (ONE_PASS) add_dq(tiles.end - 1);
    } else {
      release_own();
    }
  } else {  // head dim 128: dK and dV take 128 registers, too many to hold dS^T's across the next tile's products
    // Causal, consumer 1's first query tile ends before its first key (the tile holding the block's first key): its
    // P^T and dS^T are zeros, so it issues none of its products, S^T, dP^T, dV and dK, and no exponentials; in one
    // pass it still adds its half of the tile's dQ columns, over consumer 0's dS^T and its own as zeros. It waits
    // for the tile's stage to be full first, so that its arrival on `empty` is for this use of the stage. (At head
    // dim 64 the same skip, before the tile loop, made ptxas recompute the wgmma descriptors inside it: book/log.md,
    // 2026-11-29.)
    int r = tiles.first;
    if (CAUSAL && (tiles.shift + r + 1) * ROWS <= my_k0 && r < tiles.end) {
      barrier_wait(&sh.full[r % STAGES], (r / STAGES) & 1);
#pragma unroll
      for (int kk = 0; kk < ROWS / 16; ++kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[kk][i] = 0u;
      }
      if constexpr (ONE_PASS) {
        issue_dq(r);
        wgmma_wait<0>();
        add_dq(r);
      }
      if (lane == 0) barrier_arrive(&sh.empty[r % STAGES]);
      if (r == tiles.end - 1) release_own();
      ++r;
    }
    auto step = [&](int r, auto masked) {
      issue_scores(r);
      lse_early(r);
      wgmma_wait<1>();  // S^T
      probabilities(r, masked);
      delta_early(r);
      wgmma_wait<1>();  // dP^T
      score_gradients(r);
      wgmma_wait<0>();  // dV: P^T's registers free
      fence_registers(dv);
      to_operand<T, ROWS>(dst, dp);
      if constexpr (ONE_PASS) issue_dq(r);
      issue_dk(r);
      if constexpr (ONE_PASS) {
        wgmma_wait<1>();  // the tile's dQ share, stored and handed to the copy engine under dK's product
        add_dq(r);
      }
      wgmma_wait<0>();
      fence_registers(dk);
      if (lane == 0) barrier_arrive(&sh.empty[r % STAGES]);
      if (r == tiles.end - 1) release_own();
    };
    if constexpr (CAUSAL) {
      for (; r < min(unmasked, tiles.end); ++r) step(r, std::true_type{});
    }
    for (; r < tiles.end; ++r) step(r, std::false_type{});
    if (tiles.end == tiles.first) release_own();
  }
  // the lane's keys again, from %tid read afresh: without the mask nothing in the loop needs them, and kept live
  // across it they cost the one-pass loop a register it has not got
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  const int out_key = lane_key(fresh(kb.k0) + (tid / 128 - 1) * ROWS, tid / 32 % 4, tid % 32);
  const int h = fresh(kb.h), b = fresh(kb.b);
  constexpr bool CUT = DEPTH != HEAD_DIM;
  store_rows<T, HEAD_DIM, CUT>(head_rows<T>(dK, b, h), dK.row_stride, dk, out_key, p.n_keys, p.head_dim,
                               {p.scale, p.scale});
  store_rows<T, HEAD_DIM, CUT>(head_rows<T>(dV, b, h), dV.row_stride, dv, out_key, p.n_keys, p.head_dim, {1.f, 1.f});
}

// The consumers of the dK/dV pass: each key block the producer names, its dK and dV stored before the next.
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, bool CAUSAL, bool ONE_PASS, bool PERSISTENT>
__device__ __forceinline__ void consume_key_blocks(BackwardShared<HEAD_DIM, STAGES>& sh, DqShared& dsh,
                                                   const Problem& p, const Rows& dK, const Rows& dV, float* dq_acc) {
  for (int j = 0; const KeyBlockTurn* kb = take_key_block<PERSISTENT>(sh, p, j); ++j) {
    barrier_wait(&sh.own_full, j & 1);
    consume_key_block<T, HEAD_DIM, DEPTH, STAGES, CAUSAL, ONE_PASS, PERSISTENT>(sh, dsh, p, dK, dV, dq_acc, *kb);
    __syncwarp();
    finish_key_block<PERSISTENT>(sh, j);
  }
  // the block's shared memory read by the copy engine, and the sums in place for the last kernel
  if (ONE_PASS && threadIdx.x % 32 == 0) bulk_wait_done();
}

// dQ for one consumer's 64 queries (own_a = Q, own_b = dO; walked: walk_a = K, walk_b = V), S and dP over the head
// dim's first DEPTH columns.
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, bool CAUSAL>
__device__ __forceinline__ void consume_dq(BackwardShared<HEAD_DIM, STAGES>& sh, const Problem& p, const float* L,
                                           const float* delta, const Rows& dQ, int q0, int h, int b, int n_tiles) {
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int my_q0 = q0 + consumer * ROWS, row = my_q0 + warp * 16 + lane / 4;  // this lane's rows: row, row + 8
  const uint32_t q_rows = shared_address(sh.own_a) + consumer * ROWS * 128;
  const uint32_t do_rows = shared_address(sh.own_b) + consumer * ROWS * 128;
  const int64_t bh = int64_t(b) * p.heads + h;
  const float qk_scale = p.scale * LOG2E;
  float lse[2], dd[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    lse[half] = r < p.n_queries ? L[bh * p.n_queries + r] * LOG2E : 0.f;
    dd[half] = r < p.n_queries ? delta[bh * p.n_queries + r] : 0.f;
  }
  float dq[HEAD_DIM / 2] = {}, s[32], dp[32];
  uint32_t ds[ROWS / 16][4];
  // at head dim 64 this consumer's Q and dO, S's and dP's A operands in every tile, held in registers as the dK/dV
  // pass holds K and V
  constexpr bool HELD = HEAD_DIM == 64;
  uint32_t q_held[4][4], do_held[4][4];
  auto issue_scores = [&](int j) {  // tile j's S = Q K^T and dP = dO V^T, issued together
    const int stage = j % STAGES;
    barrier_wait(&sh.full[stage], (j / STAGES) & 1);
    issue_own_rows<T, DEPTH, HELD>(s, q_held, q_rows, shared_address(sh.walk_a[stage]));
    issue_own_rows<T, DEPTH, HELD>(dp, do_held, do_rows, shared_address(sh.walk_b[stage]));
  };
  // the key tiles from `first_edge` on run past the keys' end or (causal) past this consumer's first query: the last
  // one or two; the loop over tiles takes them apart (edge: std::true_type or std::false_type), as the dK/dV pass does
  const int first_edge = min(p.n_keys, CAUSAL ? my_q0 + 1 : p.n_keys) / ROWS;
  auto probabilities = [&](int j, auto edge) {  // once S is in: P, in s's registers
    const int k0 = j * ROWS;
    fence_registers(s);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * n + 2 * t + (e & 1), query = row + 8 * (e >> 1);
        float pv = fast_exp2(fmaf(s[4 * n + e], qk_scale, -lse[e >> 1]));
        if (decltype(edge)::value && (key >= p.n_keys || (CAUSAL && key > query))) pv = 0.f;
        s[4 * n + e] = pv;
      }
    }
  };
  auto score_gradients = [&] {  // once dP is in: dS = P (dP - D), in dp's registers
    fence_registers(dp);
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = s[i] * (dp[i] - dd[(i >> 1) & 1]);
  };
  auto issue_dq = [&](int j) {  // dQ += dS K, from the registers the previous tile left in ds
    issue_from_registers<T, HEAD_DIM, ROWS, TILE_HALF>(dq, ds, shared_address(sh.walk_a[j % STAGES]));
  };

  barrier_wait(&sh.own_full, 0);
  if constexpr (HELD) {
    load_operand(q_held, q_rows, warp, lane);
    load_operand(do_held, do_rows, warp, lane);
  }
  if (n_tiles > 0) {
    issue_scores(0);
    wgmma_wait<1>();  // S
    probabilities(0, std::true_type{});
    wgmma_wait<0>();  // dP
    score_gradients();
    to_operand<T, ROWS>(ds, dp);
    auto step = [&](int j, auto edge) {
      // this tile's S and dP and the last tile's dQ in a row; the exponentials wait for S alone
      issue_scores(j);
      issue_dq(j - 1);
      wgmma_wait<2>();  // S
      probabilities(j, edge);
      wgmma_wait<1>();  // dP
      score_gradients();
      wgmma_wait<0>();  // the last tile's dQ: ds's registers free
      fence_registers(dq);
      if (lane == 0) barrier_arrive(&sh.empty[(j - 1) % STAGES]);  // the last tile's K and V read
      to_operand<T, ROWS>(ds, dp);
    };
    int j = 1;
    for (; j < min(first_edge, n_tiles); ++j) step(j, std::false_type{});
    for (; j < n_tiles; ++j) step(j, std::true_type{});
    issue_dq(n_tiles - 1);
    wgmma_wait<0>();
    fence_registers(dq);
  }
  store_rows<T, HEAD_DIM, DEPTH != HEAD_DIM>(head_rows<T>(dQ, b, h), dQ.row_stride, dq, row, p.n_queries,
                                             p.head_dim, {p.scale, p.scale});
}

// DqShared, after BackwardShared in the one-pass kernel's shared memory
template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ DqShared& dq_shared(BackwardShared<HEAD_DIM, STAGES>& sh) {
  unsigned char* past = reinterpret_cast<unsigned char*>(&sh) + BACKWARD_SHARED_ROUNDED<HEAD_DIM, STAGES>;
  return *reinterpret_cast<DqShared*>(past);
}

// `full_arrivals`: the producer's thread that starts the copies, and in the dK/dV pass the lanes that copy L and D
template <int HEAD_DIM, int STAGES>
__device__ __forceinline__ void init_barriers(BackwardShared<HEAD_DIM, STAGES>& sh, int full_arrivals) {
  if (threadIdx.x == 0) {
    barrier_init(&sh.own_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&sh.full[s], full_arrivals);
      barrier_init(&sh.empty[s], 8);  // lane 0 of each consumer warp
    }
    for (int s = 0; s < ITEM_SLOTS; ++s) {  // the dK/dV pass's
      barrier_init(&sh.item_full[s], 1);
      barrier_init(&sh.item_empty[s], 8 + 1);  // lane 0 of each consumer warp and of the copier of L and D
    }
    barrier_init(&sh.own_empty, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// maps: K, V (boxes of 128 rows), Q, dO (boxes of 64). ONE_PASS: dQ added up into dq_acc too, and a persistent grid
// whose blocks count their key blocks off the int past the accumulator's tiles (zeroed with them).
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, bool CAUSAL, bool ONE_PASS>
__global__ void __launch_bounds__(THREADS, 1)
    hopper_bwd_dkdv_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                           const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                           const Problem problem, const float* L, const float* delta, const Rows dK, const Rows dV,
                           float* dq_acc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  auto& sh = shared_layout<BackwardShared<HEAD_DIM, STAGES>>(raw);
  constexpr bool PERSISTENT = ONE_PASS;
  if (!PERSISTENT && threadIdx.x == 0) sh.turns[0] = key_block<CAUSAL, PERSISTENT>(problem, blockIdx.x, 0);
  init_barriers(sh, 1 + ROW_COPIERS);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) {
      produce_key_blocks<HEAD_DIM, STAGES, CAUSAL, PERSISTENT>(
          sh, problem, k_map, v_map, q_map, do_map,
          reinterpret_cast<int*>(dq_acc + dq_tiles_size(problem, DEPTH == HEAD_DIM ? problem.head_dim : HEAD_DIM)));
    }
    if (threadIdx.x / 32 == 1) produce_query_rows<HEAD_DIM, STAGES, PERSISTENT>(sh, problem, L, delta);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));
    consume_key_blocks<T, HEAD_DIM, DEPTH, STAGES, CAUSAL, ONE_PASS, PERSISTENT>(sh, dq_shared(sh), problem, dK, dV,
                                                                                dq_acc);
  }
#endif
}

// maps: Q, dO (boxes of 128 rows), K, V (boxes of 64)
template <typename T, int HEAD_DIM, int DEPTH, int STAGES, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
    hopper_bwd_dq_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                         const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                         const Problem problem, const float* L, const float* delta, const Rows dQ) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw[];
  auto& sh = shared_layout<BackwardShared<HEAD_DIM, STAGES>>(raw);
  // causal: the last query tiles see the most keys; launched first, they do not trail at the end
  const int query_tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = query_tile * BLOCK_ROWS;
  const int k_end = CAUSAL ? min(problem.n_keys, q0 + BLOCK_ROWS) : problem.n_keys;
  const int n_tiles = (k_end + ROWS - 1) / ROWS;
  init_barriers(sh, 1);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
    if (threadIdx.x == 0) produce<HEAD_DIM, STAGES>(sh, q_map, do_map, k_map, v_map, q0, 0, n_tiles, h, b, 0);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));
    consume_dq<T, HEAD_DIM, DEPTH, STAGES, CAUSAL>(sh, problem, L, delta, dQ, q0, h, b, n_tiles);
  }
#endif
}

// dQ = scale * the one-pass accumulator (DQ_TILE_FLOATS' order), a block per (query tile, head, batch): the tile
// rounded to T into shared memory, then written out 16 bytes a thread along its rows, those of the head dim's
// columns (all of HEAD_DIM's but at head dims 72 and 80). Each row is padded by 16 bytes so that the eight rows a
// warp's 4-byte stores reach fall in distinct banks.
constexpr int DQ_FROM_THREADS = 256;

template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(DQ_FROM_THREADS)
    dq_from_accumulator_kernel(const Problem problem, const float* dq_acc, const Rows dQ) {
  constexpr int TILE_FLOATS = DQ_TILE_FLOATS<HEAD_DIM>, ROW_CHUNKS = HEAD_DIM / 8;
  __shared__ alignas(16) T tile_rows[ROWS][HEAD_DIM + 8];
  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const float4* sums = reinterpret_cast<const float4*>(
      dq_acc + ((int64_t(b) * problem.heads + h) * gridDim.x + tile) * TILE_FLOATS);
  for (int i = threadIdx.x; i < TILE_FLOATS / 4; i += DQ_FROM_THREADS) {  // (warp, n, lane) of the products
    const int lane = i % 32, n = i / 32 % ROW_CHUNKS, warp = i / (32 * ROW_CHUNKS);
    const int row = warp * 16 + lane / 4, col = 8 * n + 2 * (lane % 4);
    const float4 sum = sums[i];
    *reinterpret_cast<uint32_t*>(&tile_rows[row][col]) =
        Element<T>::pack(sum.x * problem.scale, sum.y * problem.scale);
    *reinterpret_cast<uint32_t*>(&tile_rows[row + 8][col]) =
        Element<T>::pack(sum.z * problem.scale, sum.w * problem.scale);
  }
  __syncthreads();
  T* out = head_rows<T>(dQ, b, h);
  for (int i = threadIdx.x; i < ROWS * ROW_CHUNKS; i += DQ_FROM_THREADS) {
    const int r = i / ROW_CHUNKS, chunk = i % ROW_CHUNKS, row = tile * ROWS + r;
    if (row < problem.n_queries && 8 * chunk < problem.head_dim) {
      *reinterpret_cast<uint4*>(out + row * dQ.row_stride + 8 * chunk) =
          *reinterpret_cast<const uint4*>(&tile_rows[r][8 * chunk]);
    }
  }
}

namespace {

// Ring depths: a consumer that leaves a tile's last product running into the next tile hands its stage back one
// tile later, so the producer needs a third stage to stay a tile ahead (the dQ pass, and dK/dV at head dim 64); at
// head dim 128 two fill the block's shared memory. At head dim 64 without the mask a fourth is the faster with L and D
// read early, with the mask the slower (book/log.md, 2026-11-29).
template <int HEAD_DIM, bool CAUSAL>
constexpr int DKDV_STAGES = HEAD_DIM == 128 ? 2 : CAUSAL ? 3 : 4;
constexpr int DQ_STAGES = 3;

template <typename T, int HEAD_DIM, int DEPTH, bool CAUSAL>
cudaError_t launch_backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L,
                            float* delta, Rows dq, Rows dk, Rows dv, float* dq_acc, cudaStream_t stream) {
  if (const cudaError_t error = systems_flash_cuda::launch_delta<T, HEAD_DIM>(
          p, o, dout, delta, dq_acc, systems_flash_hopper::dq_accumulator_size(p), stream);
      error != cudaSuccess) {
    return error;
  }
  // the dK/dV pass's maps; the dQ pass's four only where it runs (each encoding is host time of every call)
  CUtensorMap k128, v128, q64, do64;
  for (cudaError_t error : {tensor_map(&k128, p, k, p.n_keys, BLOCK_ROWS), tensor_map(&v128, p, v, p.n_keys, BLOCK_ROWS),
                            tensor_map(&q64, p, q, p.n_queries, ROWS), tensor_map(&do64, p, dout, p.n_queries, ROWS)}) {
    if (error != cudaSuccess) return error;
  }
  if (dq_acc != nullptr) {
    constexpr int SHARED =
        BACKWARD_SHARED_ROUNDED<HEAD_DIM, DKDV_STAGES<HEAD_DIM, CAUSAL>> + sizeof(DqShared) + 1024;
    constexpr auto one_pass = hopper_bwd_dkdv_kernel<T, HEAD_DIM, DEPTH, DKDV_STAGES<HEAD_DIM, CAUSAL>, CAUSAL, true>;
    const cudaError_t error = systems_flash_cuda::allow_shared<one_pass>(SHARED);
    if (error != cudaSuccess) return error;
    one_pass<<<std::min(key_block_count(p), multiprocessors()), THREADS, SHARED, stream>>>(k128, v128, q64, do64, p, L,
                                                                                         delta, dk, dv, dq_acc);
    dq_from_accumulator_kernel<T, HEAD_DIM><<<dim3(query_tiles(p), p.heads, p.batch), DQ_FROM_THREADS, 0, stream>>>(
        p, dq_acc, dq);
    return cudaGetLastError();
  }
  constexpr int DKDV_SHARED = sizeof(BackwardShared<HEAD_DIM, DKDV_STAGES<HEAD_DIM, CAUSAL>>) + 1024;
  constexpr int DQ_SHARED = sizeof(BackwardShared<HEAD_DIM, DQ_STAGES>) + 1024;
  constexpr auto dkdv = hopper_bwd_dkdv_kernel<T, HEAD_DIM, DEPTH, DKDV_STAGES<HEAD_DIM, CAUSAL>, CAUSAL, false>;
  constexpr auto dq_kernel = hopper_bwd_dq_kernel<T, HEAD_DIM, DEPTH, DQ_STAGES, CAUSAL>;
  CUtensorMap q128, do128, k64, v64;
  for (cudaError_t error : {systems_flash_cuda::allow_shared<dkdv>(DKDV_SHARED),
                            systems_flash_cuda::allow_shared<dq_kernel>(DQ_SHARED),
                            tensor_map(&q128, p, q, p.n_queries, BLOCK_ROWS),
                            tensor_map(&do128, p, dout, p.n_queries, BLOCK_ROWS),
                            tensor_map(&k64, p, k, p.n_keys, ROWS), tensor_map(&v64, p, v, p.n_keys, ROWS)}) {
    if (error != cudaSuccess) return error;
  }
  dkdv<<<key_block_count(p), THREADS, DKDV_SHARED, stream>>>(k128, v128, q64, do64, p, L, delta, dk, dv, nullptr);
  dq_kernel<<<dim3((p.n_queries + BLOCK_ROWS - 1) / BLOCK_ROWS, p.heads, p.batch), THREADS, DQ_SHARED, stream>>>(
      q128, do128, k64, v64, p, L, delta, dq);
  return cudaGetLastError();
}

}  // namespace

// The instantiation for the problem's dtype, mask and head dim: 64, 128, or 72 and 80 in the tiles of 128 with the
// products over the head dim cut (cuts_head_dim), as the forward's launch_of chooses.
cudaError_t backward(const Problem& p, Rows q, Rows k, Rows v, Rows o, Rows dout, const float* L, float* delta,
                     Rows dq, Rows dk, Rows dv, float* dq_acc, cudaStream_t stream) {
  if (!takes_head_dim(p.head_dim)) return cudaErrorInvalidValue;
  const auto with_causal = [&](auto type, auto causal) {
    const auto launch = [&](auto width, auto depth) {
      return launch_backward<typename decltype(type)::type, decltype(width)::value, decltype(depth)::value,
                             decltype(causal)::value>(p, q, k, v, o, dout, L, delta, dq, dk, dv, dq_acc, stream);
    };
    using Dim64 = std::integral_constant<int, 64>;
    using Dim128 = std::integral_constant<int, 128>;
    if (p.head_dim == 64) return launch(Dim64{}, Dim64{});
    return cuts_head_dim(p.head_dim) ? launch(Dim128{}, std::integral_constant<int, CUT_DEPTH>{})
                                     : launch(Dim128{}, Dim128{});
  };
  const auto with_type = [&](auto type) {
    return p.causal ? with_causal(type, std::true_type{}) : with_causal(type, std::false_type{});
  };
  using systems_flash_cuda::Of;
  return p.dtype == systems_flash_cuda::DType::BFloat16 ? with_type(Of<__nv_bfloat16>{}) : with_type(Of<__half>{});
}

// One pass at every length: with dQ's columns split between the consumers it is the faster at head dim 128 from
// 1,024 keys too (book/log.md, 2026-11-27). Past the tiles, 16 bytes: the key-block counter, and the alignment.
int64_t dq_accumulator_size(const Problem& p) { return dq_tiles_size(p, tile_width(p.head_dim)) + 4; }

}  // namespace systems_flash_hopper

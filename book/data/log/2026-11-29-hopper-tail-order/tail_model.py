"""The model the head_rank order was chosen by, before any run: 132 blocks taking items in order, each the moment it
is free (what the persistent grids' counter does), an item costing its tiles plus 0.3 of a tile; the makespan of
head_rank's order (the last heads, as many as hold two turns of the blocks, taken rank by rank) over the plain
order's. It knows nothing of L2 or clocks, which the 2026-11-27 entry on the order of blocks found to matter."""
import heapq
import math

BLOCKS = 132


def makespan(items, overhead=0.3):
    free = [0.0] * BLOCKS
    for tiles in items:
        heapq.heappush(free, heapq.heappop(free) + tiles + overhead)
    return max(free)


def tail_over_plain(ranks, heads):
    plain = [tiles for _ in range(heads) for tiles in ranks]
    tail = min(heads, math.ceil(2 * BLOCKS / len(ranks)))
    ordered = plain[: (heads - tail) * len(ranks)] + [tiles for tiles in ranks for _ in range(tail)]
    return makespan(ordered) / makespan(plain)


def forward_ranks(n, d):  # causal, longest first: key tiles of 128 a query tile (of 128 rows, 192 at d 64) sees
    rows = 192 if d == 64 else 128
    return [math.ceil(min(n, (t + 1) * rows) / 128) for t in range(math.ceil(n / rows))][::-1]


def backward_ranks(n):  # causal, longest first: query tiles of 64 a key block of 128 sees
    return [math.ceil(n / 64) - 2 * b for b in range(math.ceil(n / 128))]


for B, H, n, d in [(8, 32, 1024, 128), (4, 16, 2048, 128), (1, 16, 16384, 128), (16, 16, 1024, 64),
                   (4, 16, 2048, 64), (1, 16, 16384, 64)]:
    print(f"{B}x{H}x{n}x{d}: forward {tail_over_plain(forward_ranks(n, d), B * H):.3f}, "
          f"backward {tail_over_plain(backward_ranks(n), B * H):.3f}")

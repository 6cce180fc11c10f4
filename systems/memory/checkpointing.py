"""Activation checkpointing on paper: how much a step keeps and recomputes for a given grouping of N blocks
(2026 handout §3.2, ``gradient_checkpointing``).

A block keeps ``block`` bytes of residuals for its backward pass; its input (the residual stream between blocks)
is ``boundary`` bytes. Checkpointing groups of k consecutive blocks keeps only each group's input during the
forward pass; the backward pass then recomputes one group at a time, holding its k blocks' residuals while it
runs. Peak activation memory of one level:

    M(k) = (N/k) · boundary + k · block                minimised at k* = √(N · boundary / block)

at the cost of one extra forward pass per block. Nesting (checkpointing inside the recomputed group, and so on)
trades memory further for compute: halving at every level keeps O(log N) boundaries and recomputes each block
O(log N) times (:func:`nested_levels`), the minimum of peak memory when compute does not count.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np


def one_level_peak(n_blocks: int, k: int, block: float, boundary: float) -> float:
    """Peak activation bytes with groups of ``k`` blocks checkpointed (k = 0: no checkpointing, every block's
    residuals kept)."""
    if k == 0:
        return n_blocks * block
    return math.ceil(n_blocks / k) * boundary + k * block


def best_group(n_blocks: int, block: float, boundary: float) -> int:
    """The group size that minimises :func:`one_level_peak` among the divisors of ``n_blocks`` (groups of equal
    size), next to the continuous optimum √(N·boundary/block)."""
    divisors = [k for k in range(1, n_blocks + 1) if n_blocks % k == 0]
    return min(divisors, key=lambda k: one_level_peak(n_blocks, k, block, boundary))


def nested_levels(n_blocks: int) -> tuple[int, ...]:
    """Group sizes of nested checkpointing that halve at every level: for 32 blocks (16, 8, 4, 2, 1). With these,
    ``TransformerLM(checkpoint_blocks=levels)`` keeps about log2(N) boundaries per level's live group and
    recomputes each block once per level."""
    levels, k = [], n_blocks // 2
    while k >= 1:
        levels.append(k)
        k //= 2
    return tuple(levels)


def nested_peak(n_blocks: int, levels: tuple[int, ...], block: float, boundary: float) -> float:
    """Peak activation bytes with nested groups: at each level the live group keeps its sub-groups' inputs, and
    the innermost group's blocks recompute their residuals."""
    peak, span = 0.0, n_blocks
    for k in levels:
        peak += math.ceil(span / k) * boundary
        span = k
    return peak + span * block


def extra_forward_fraction(levels: tuple[int, ...]) -> float:
    """Recomputation as a share of one forward pass: one more forward per checkpointed level."""
    return float(len(levels))


def kept_attention_bytes(batch: int, context: int, d_model: int, num_heads: int, itemsize: int) -> int:
    """What a block recomputed with ``recompute="keep_attention"`` holds through the backward beyond what recomputing
    it whole holds: attention's output (batch, context, d_model) in the activations' dtype and its log-sum-exp, one
    fp32 value per query and head."""
    return batch * context * (d_model * itemsize + num_heads * 4)


def kept_groups_that_fit(layers: Iterable[int], peak_gib: Iterable[float], target: int, capacity_gib: float,
                         kept_gib: float, headroom: float = 0.1) -> int | None:
    """How many of ``target`` blocks can keep attention's output, from the peak memory allocated at shallower depths
    where every block kept it (``layers``, ``peak_gib``): a straight line through those, at ``target``, less
    ``kept_gib`` for each block that recomputes its attention instead, must stay under ``capacity_gib`` less a
    ``headroom`` share of it, which the allocator's fragments and the compiler's workspaces take beyond the
    allocated peak. One block fewer than ``target`` where the line says all fit (they did not); None where fewer
    than two depths ran, which draw no line."""
    points = [(n, p) for n, p in zip(layers, peak_gib) if math.isfinite(p)]
    if len({n for n, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit(*zip(*points), 1)
    over = intercept + slope * target - (1 - headroom) * capacity_gib
    if over <= 0:
        return target - 1
    return max(0, target - math.ceil(over / kept_gib))

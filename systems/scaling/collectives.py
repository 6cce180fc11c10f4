"""The time of a collective, on paper and fitted to measurements.

Ring collectives over N devices, each sending W bytes/s (2026 handout §8.1), for a tensor of S bytes:

    all-gather       (N−1)/N · S/W        reduce-scatter   (N−1)/N · S/W
    all-reduce       2(N−1)/N · S/W       (a reduce-scatter, then an all-gather)

and the alternate ring of §8.1, :func:`alternate_ring_all_reduce`, where every device forwards whole tensors.
A measured collective also pays a fixed latency per call: :func:`fit_latency_bandwidth` fits ``t = o + x/w``
to measured (bytes, seconds), and the bucket model of the 2025 handout (§2.3.3(b)) builds on it.
"""

from __future__ import annotations

import math

import numpy as np


def ring_all_gather(size_bytes: float, n: int, bandwidth: float) -> float:
    """Seconds: each device ends with all N chunks of S/N bytes; N−1 steps of S/N bytes each."""
    return (n - 1) / n * size_bytes / bandwidth


def ring_reduce_scatter(size_bytes: float, n: int, bandwidth: float) -> float:
    """Seconds: each device ends with the sum of one S/N chunk; N−1 steps of S/N bytes each."""
    return (n - 1) / n * size_bytes / bandwidth


def ring_all_reduce(size_bytes: float, n: int, bandwidth: float) -> float:
    """Seconds: a reduce-scatter followed by an all-gather."""
    return ring_reduce_scatter(size_bytes, n, bandwidth) + ring_all_gather(size_bytes, n, bandwidth)


def alternate_ring_all_reduce(size_bytes: float, n: int, bandwidth: float) -> float:
    """Seconds of §8.1's alternate algorithm: in each of N−1 steps every device passes one whole original tensor
    (S bytes) to its neighbour and adds the one it receives: (N−1) · S/W, about N/2 times the ring all-reduce."""
    return (n - 1) * size_bytes / bandwidth


def bus_bandwidth(algorithm_bandwidth: float, n: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: what each link carries, algbw · 2(N−1)/N."""
    return algorithm_bandwidth * 2 * (n - 1) / n


def fit_latency_bandwidth(size_bytes, seconds) -> tuple[float, float]:
    """Least-squares ``t = o + x / w`` through measured (bytes, seconds): the per-call overhead o (s) and the
    bandwidth w (bytes/s). The fit weighs points by absolute time, so w is set by the large messages and o is the
    intercept the small ones pin down. Noisy points (a CPU) can put the line's intercept below zero; then the
    smallest message's time bounds the overhead from above, which keeps the bucket model defined."""
    x, t = np.asarray(size_bytes, dtype=float), np.asarray(seconds, dtype=float)
    slope, intercept = np.polyfit(x, t, 1)
    return (intercept if intercept > 0 else float(t.min())), 1 / max(slope, 1e-15)


def fit_error(size_bytes, seconds, overhead: float, bandwidth: float) -> float:
    """The largest relative error of the fitted line at the measured points."""
    x, t = np.asarray(size_bytes, dtype=float), np.asarray(seconds, dtype=float)
    return float(np.max(np.abs(overhead + x / bandwidth - t) / t))


def ddp_overhead(n_buckets, grad_bytes: float, overhead: float, bandwidth: float):
    """Seconds bucketed DDP adds to a step (2025 §2.3.3(b)): every bucket's call overhead, plus the last bucket's
    transfer, which starts only when the backward pass ends: n_b·o + s/(n_b·w)."""
    n = np.asarray(n_buckets, dtype=float)
    return n * overhead + grad_bytes / (n * bandwidth)


def best_bucket(grad_bytes: float, overhead: float, bandwidth: float) -> dict[str, float]:
    """The minimum of :func:`ddp_overhead`: n_b* = √(s/(w·o)) buckets of b* = √(s·w·o) bytes, overhead 2√(s·o/w)."""
    return {"n_buckets": math.sqrt(grad_bytes / (bandwidth * overhead)),
            "bucket_bytes": math.sqrt(grad_bytes * bandwidth * overhead),
            "overhead_s": 2 * math.sqrt(grad_bytes * overhead / bandwidth)}

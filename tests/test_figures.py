"""The figures' drawing: what a timeline shades is the share of time its lanes are busy."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd

from systems import figures

matplotlib.use("Agg")
RNG = np.random.default_rng()


def random_lane(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n intervals one after another with gaps, as kernels on one CUDA stream, in shuffled order."""
    bounds = np.cumsum(RNG.uniform(0.001, 1.0, 2 * n))
    starts, ends = bounds[0::2], bounds[1::2]
    order = RNG.permutation(n)
    return starts[order], ends[order]


def test_the_busy_share_of_each_slice_is_the_time_the_intervals_cover():
    starts, ends = random_lane(int(RNG.integers(1, 300)))
    edges = np.sort(RNG.uniform(starts.min() - 1, ends.max() + 1, int(RNG.integers(2, 200))))
    want = np.array([np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None).sum() / (b - a)
                     for a, b in zip(edges[:-1], edges[1:])])
    np.testing.assert_allclose(figures._busy_share(starts, ends, edges), want, atol=1e-9)


def test_a_lane_of_kernels_thinner_than_a_slice_is_shaded_by_its_busy_share():
    n = 20 * figures.TIMELINE_SLICES  # twenty kernels a slice, each busy a quarter of its period
    starts = np.arange(n, dtype=float)
    lane = pd.DataFrame({"run": "r", "lane": "stream 7", "kind": "compute", "start_ms": starts, "end_ms": starts + 0.25})
    ax = figures.timeline(lane).axes[0]
    alphas = np.concatenate([c.get_facecolor()[:, 3] for c in ax.collections])
    assert np.allclose(alphas, 0.25, atol=0.01)

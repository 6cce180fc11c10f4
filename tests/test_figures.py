"""The figures' drawing: what a timeline shades is the share of time its lanes are busy; a line plot's legend
and labels stay clear of its panels and of each other."""

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


def doublings(panels: int = 3) -> pd.DataFrame:
    """A sweep's shape: ten sequence lengths from 128 to 64K, two implementations, a panel per mode."""
    n = [2**i for i in range(7, 17)]
    return pd.DataFrame([{"n": v, "tflops": RNG.uniform(1, 600), "impl": impl, "mode": mode}
                         for v in n for impl in ("ours", "theirs") for mode in range(panels)])


def test_a_legend_beside_the_panels_covers_none_of_them():
    fig = figures.lines(doublings(), "n", "tflops", "impl", "title", "sequence length", "TFLOP/s", col="mode",
                        logy=False)
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    assert not any(legend.overlaps(ax.get_window_extent()) for ax in fig.axes)


def test_ten_doublings_are_labelled_by_their_measured_points_without_running_together():
    fig = figures.lines(doublings(), "n", "tflops", "impl", "title", "sequence length", "TFLOP/s", col="mode",
                        logy=False)
    fig.canvas.draw()
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in labels] == ["128", "256", "512", "1K", "2K", "4K", "8K", "16K", "32K", "64K"]
        boxes = [t.get_window_extent(fig.canvas.get_renderer()) for t in labels]
        assert all(not a.overlaps(b) for a, b in zip(boxes, boxes[1:]))


def test_points_that_are_not_doublings_keep_their_own_labels():
    df = pd.DataFrame({"size": [1, 10, 100, 1000, 4096], "ms": RNG.uniform(1, 9, 5)})
    fig = figures.lines(df, "size", "ms", None, "title", "MiB", "ms")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "10", "100", "1000", "4096"]

"""The chapters' figures, drawn from their data: one function per figure, so a chapter shows the call and its
reader the picture (the code that styles axes is not what a chapter is about).

Every function takes the DataFrame the chapter computed and returns the matplotlib figure it drew; the
chapter's cell shows it. Nothing here computes a result.
"""

from __future__ import annotations

import matplotlib.colors
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns


def _done(drawn, title: str | None = None):
    """The figure of ``drawn`` (a figure, or a seaborn grid) with its title, laid out: a grid lays itself out, so
    that its legend beside the panels keeps its room (a figure's own layout would widen the panels under it)."""
    fig = drawn.figure if isinstance(drawn, sns.axisgrid.Grid) else drawn
    if title:
        fig.suptitle(title, y=1.03)
    drawn.tight_layout()
    return fig


def _legend_below(grid, ncol: int):
    """``grid``'s legend moved under its panels, and the figure to lay out as a figure: the grid would keep the room
    beside the panels where the legend was."""
    sns.move_legend(grid, "upper center", bbox_to_anchor=(0.5, 0.02), ncol=ncol, title=None, frameon=False)
    return grid.figure


def _tick_label(value: float, binary: bool) -> str:
    """A measured point's label: on an axis of powers of two, multiples of 1024 as K (32768 as 32K), so that ten
    doublings fit under a panel."""
    return f"{int(value) // 1024}K" if binary and value >= 1024 else format(value, "g")


def pass_times(df: pd.DataFrame, title: str):
    """Forward and backward ms per model size, one panel per context length (log scale)."""
    long = df.melt(id_vars=["size", "context_length"], value_vars=["forward_ms", "backward_ms"],
                   var_name="pass", value_name="ms")
    long["pass"] = long["pass"].str.removesuffix("_ms")
    grid = sns.catplot(data=long, x="size", y="ms", hue="pass", col="context_length", kind="bar", height=3.2,
                       order=list(dict.fromkeys(df["size"])))
    grid.set(yscale="log", ylabel="time per pass (ms)")
    return _done(grid, title)


def warmup_steps(cold: pd.DataFrame, title: str):
    """Every measured step's time after 0, 1, 2, 5 warm-up steps, each setting in a fresh process."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    sns.lineplot(data=cold, x="step", y="ms", hue="warmup", marker="o", palette="viridis", ax=ax)
    ax.set(yscale="log", xlabel="measured step", ylabel="forward + backward (ms)", title=title)
    return _done(fig)


def bars(df: pd.DataFrame, x: str, y: str, hue: str, col: str | None, ylabel: str, title: str, order=None,
         log: bool = True, reference: float | None = None):
    """``y`` per ``x`` (in ``order``: model sizes from small to large, say), by ``hue``, one panel per ``col``; the
    legend below the panels, where no bar can sit under it."""
    grid = sns.catplot(data=df, x=x, y=y, hue=hue, col=col, kind="bar", height=3.2,
                       order=order or list(dict.fromkeys(df[x])))
    grid.set(yscale="log" if log else "linear", ylabel=ylabel)
    if reference is not None:
        for ax in grid.axes.flat:
            ax.axhline(reference, color="grey", lw=1, ls="--")
    return _done(_legend_below(grid, 4) if grid.legend is not None else grid, title)


def lines(df: pd.DataFrame, x: str, y: str, hue: str | None, title: str, xlabel: str, ylabel: str, style=None,
          col=None, logx: bool = True, logy: bool = True, reference: float | None = None, palette="viridis",
          legend_below: bool = False, spread: str | None = None):
    """``y`` against ``x`` per ``hue`` (and ``style``), one panel per ``col``; a long legend goes below. ``spread``:
    a column of standard deviations of ``y``, drawn as grey bars of one deviation either side (one panel only)."""
    grid = sns.relplot(data=df, x=x, y=y, hue=hue, style=style, col=col, kind="line", marker="o", height=3.2,
                       aspect=1.15, palette=palette if hue is not None else None)
    grid.set(xscale="log" if logx else "linear", yscale="log" if logy else "linear", xlabel=xlabel, ylabel=ylabel)
    values = sorted(df[x].dropna().unique())
    binary = all(v >= 1 and float(v).is_integer() and int(v) & (int(v) - 1) == 0 for v in values)
    for ax in grid.axes.flat:
        if logx and len(values) <= 10:  # label the measured points, not decades whose minor labels run together
            ax.set_xticks(values, [_tick_label(v, binary) for v in values])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        if reference is not None:
            ax.axhline(reference, color="grey", lw=1, ls="--")
    if spread is not None:
        grid.ax.errorbar(df[x], df[y], yerr=df[spread], fmt="none", ecolor="grey", elinewidth=1, capsize=3)
    return _done(_legend_below(grid, 3) if legend_below else grid, title)


TIMELINE_SLICES = 1000  # about one per pixel of the figure's width


def _busy_share(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The share of each slice between consecutive ``edges`` that the intervals cover. A lane's intervals follow one
    another (a CUDA stream runs one kernel at a time), so the time covered up to t is the whole of every interval that
    ended by t and the part of the one running at t."""
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    done = np.concatenate([[0.0], np.cumsum(ends - starts)])
    ended = np.searchsorted(ends, edges, side="right")
    running = np.minimum(ended, len(starts) - 1)
    partial = np.where(ended < len(starts), np.clip(edges - starts[running], 0, ends[running] - starts[running]), 0)
    return np.clip(np.diff(done[ended] + partial) / np.diff(edges), 0, 1)


def timeline(intervals: pd.DataFrame, by: str = "run", colors: dict[str, str] | None = None,
             title: str = "one step, rank 0", lanes: list[str] | None = None,
             xlabel: str = "time since the step's first interval (ms)"):
    """Intervals (lane, kind, start_ms, end_ms) on their lanes (CUDA streams or threads; sorted, or in the order of
    ``lanes`` from the top), one panel per ``by`` value, coloured by kind (compute, communication, ...). Each lane is
    drawn in about a thousand slices of time, each shaded by the share of it the lane is busy: a step of kernels
    shorter than a pixel, with gaps between them, shows as the pale band it is, not as a solid bar."""
    colors = colors or {"compute": "tab:blue", "communication": "tab:orange", "all-gather": "tab:orange",
                        "reduce-scatter": "tab:red"}
    first, last = intervals.start_ms.min(), intervals.end_ms.max()
    edges = np.linspace(first, max(last, first + 1e-6), TIMELINE_SLICES + 1)  # a span of zero-length intervals too
    groups = list(intervals.groupby(by, sort=False))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 2.1 * len(groups)), sharex=True, squeeze=False)
    for ax, (name, g) in zip(axes[:, 0], groups):
        order = list(reversed(lanes)) if lanes else sorted(g.lane.unique())
        for y, lane in enumerate(order):
            for kind, k in g[g.lane == lane].groupby("kind"):
                share = _busy_share(k.start_ms.to_numpy(float), k.end_ms.to_numpy(float), edges).round(2)
                # neighbouring slices of one shade drawn as one bar: no seams between them where the lane is busy
                starts = np.flatnonzero(np.diff(share, prepend=-1.0))
                runs = [(i, j) for i, j in zip(starts, np.append(starts[1:], len(share))) if share[i] > 0]
                rgb = matplotlib.colors.to_rgb(colors.get(kind, "tab:gray"))
                ax.broken_barh([(edges[i], edges[j] - edges[i]) for i, j in runs], (y - 0.4, 0.8),
                               facecolors=[(*rgb, share[i]) for i, _ in runs], linewidth=0)
        ax.set(yticks=range(len(order)), yticklabels=order, title=f"{name}: {title}")
    axes[-1, 0].set_xlabel(xlabel)
    kinds = sorted(set(intervals.kind))
    axes[0, 0].legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors.get(k, "tab:gray")) for k in kinds],
                      labels=kinds, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
                      title="paler: busy for\nless of the time", title_fontsize=8)
    return _done(fig)


def memory_breakdown(predicted: pd.DataFrame, title: str):
    """Predicted memory per optimizer as stacked bars (parameters, gradients, state, activations), with the
    allocator's measurements as markers."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = pd.Series(0.0, index=predicted.index)
    for part, color in zip(["parameters", "gradients", "optimizer state", "activations"], sns.color_palette("muted")):
        ax.bar(predicted.index, predicted[part], bottom=bottom, label=part, color=color)
        bottom += predicted[part]
    ax.scatter(predicted.index, predicted["measured after step"], color="black", marker="o", zorder=3,
               label="measured: allocated after step 1")
    if predicted["measured step peak"].notna().all():  # the CPU has no allocator peaks to show
        for column, marker in [("measured fwd/bwd peak", "_"), ("measured step peak", "x")]:
            ax.scatter(predicted.index, predicted[column], color="black", marker=marker, s=200, zorder=3,
                       label=column.replace("measured", "measured:"))
    ax.set(ylabel="GiB per GPU (larger rank)", title=title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    return _done(fig)

"""CUDA memory snapshots read the way pytorch.org/memory_viz does (handout §1.1.6).

:func:`systems.device.record_memory` records a region into the snapshot pickle that
https://pytorch.org/memory_viz opens. The readers here turn that pickle into tables and a figure, so a
chapter can show the "Active Memory Timeline" from data instead of a screenshot:

    with record_memory("forward.pickle"):
        model(x)
    snap = load_snapshot("forward.pickle")
    tl = active_memory_timeline(snap)          # live bytes after every alloc/free event
    plot_timeline(tl)                          # the curve, with forward/backward/optimizer shaded
    largest_allocations(snap, n=10)            # biggest allocations and the line of code behind them

The end-to-end harness records with ``python -m systems.bench.e2e --memory-snapshot PATH``.
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import torch

MIB = 2**20
PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # .../systems, to find this project's frames
PHASES = ("forward", "backward", "optimizer", "zero_grad")


class _PlainData(pickle.Unpickler):
    """An unpickler that builds lists, dicts, strings and numbers and nothing else: a snapshot is only these, while
    a pickle in general can name any function to call while it loads."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}, and a memory snapshot holds plain data only")


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """A CUDA memory snapshot written by :func:`systems.device.record_memory` (``torch.cuda.memory._dump_snapshot``).
    A file that is not one is refused with a ValueError, and nothing in it is run: the loader builds plain data only."""
    try:
        with open(path, "rb") as f:
            snapshot = _PlainData(f).load()
    except Exception as exc:  # the loader builds plain data only: any failure is a file of another format
        raise ValueError(f"{path} is not a CUDA memory snapshot: {str(exc)[:200] or type(exc).__name__}") from None
    if not (isinstance(snapshot, dict) and "segments" in snapshot):
        raise ValueError(f"{path} is not a CUDA memory snapshot (no 'segments' in it)")
    return snapshot


def _trace(snapshot: dict[str, Any], device: int | None) -> tuple[int, list[dict[str, Any]]]:
    traces = snapshot.get("device_traces", [])
    if device is None:  # the device that did the work: the one with the most events
        device = max(range(len(traces)), key=lambda d: len(traces[d]), default=0)
    return device, traces[device] if device < len(traces) else []


def _live_blocks(snapshot: dict[str, Any], device: int) -> list[dict[str, Any]]:
    """Blocks allocated at dump time, with their addresses (a segment lists its blocks back to back)."""
    blocks = []
    for seg in snapshot.get("segments", []):
        if seg.get("device", device) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                blocks.append({"addr": addr, "size": b.get("requested_size", b["size"]), "frames": b.get("frames", [])})
            addr += b["size"]
    return blocks


def event_phase(frames: list[dict[str, Any]]) -> str:
    """Which step phase made an allocator event, read from its Python stack.

    Backward kernels run on autograd's device thread, which has no Python frames, so an empty stack (or one
    inside ``Tensor.backward``) is the backward pass; the optimizer and ``zero_grad`` name themselves;
    everything else ran in the model's forward code.
    """
    if not frames:
        return "backward"
    files = [f["filename"].replace("\\", "/") for f in frames]
    names = [f["name"] for f in frames]
    if any("/torch/optim/" in f for f in files):
        return "optimizer"
    if "zero_grad" in names:
        return "zero_grad"
    if any("/torch/autograd/" in f for f in files) or any(
        f.endswith("torch/_tensor.py") and n == "backward" for f, n in zip(files, names)
    ):
        return "backward"
    return "forward"


def active_memory_timeline(snapshot: dict[str, Any], device: int | None = None) -> pd.DataFrame:
    """Live allocated bytes after each alloc / free event: memory_viz's "Active Memory Timeline" as a table.

    As memory_viz does, blocks that were allocated before recording started count from the first event on:
    those freed during the trace (a free with no matching alloc) and those still live in the snapshot's
    segments without an alloc in the trace. Row 0 is that baseline; then one row per event.
    """
    device, trace = _trace(snapshot, device)
    live: dict[int, int] = {}  # address -> size of blocks allocated during the trace and not yet freed
    baseline = 0
    rows = []
    for e in trace:
        action = e["action"]
        if action == "alloc":
            live[e["addr"]] = e["size"]
            delta = e["size"]
        elif action in ("free_completed", "free"):  # "free" in snapshots older than torch 2.1
            if e["addr"] in live:
                delta = -live.pop(e["addr"])
            else:  # allocated before recording began: it was part of the baseline until now
                baseline += e["size"]
                delta = -e["size"]
        else:
            continue
        rows.append({"action": "alloc" if delta > 0 else "free", "delta": delta, "time_us": e.get("time_us"),
                     "phase": event_phase(e.get("frames", []))})
    baseline += sum(b["size"] for b in _live_blocks(snapshot, device) if b["addr"] not in live)
    df = pd.DataFrame([{"action": "baseline", "delta": baseline, "time_us": None, "phase": "before"}] + rows)
    df.insert(0, "event", range(len(df)))
    df["allocated_bytes"] = df["delta"].cumsum()
    df["allocated_gib"] = df["allocated_bytes"] / 2**30
    return df


def phase_spans(timeline: pd.DataFrame, min_events: int = 1) -> pd.DataFrame:
    """Consecutive runs of events of one phase: (phase, first_event, last_event), for shading a figure."""
    tl = timeline[timeline.action != "baseline"]
    run = (tl.phase != tl.phase.shift()).cumsum()
    spans = tl.groupby(run).agg(phase=("phase", "first"), first_event=("event", "min"), last_event=("event", "max"))
    spans = spans[spans.last_event - spans.first_event + 1 >= min_events]
    return spans.reset_index(drop=True)


def plot_timeline(timeline: pd.DataFrame, ax=None, title: str | None = None, min_span_fraction: float = 0.01):
    """The live-memory curve over allocator events, with the phases of the step shaded and labelled."""
    from matplotlib import pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.2))
    colors = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green", "zero_grad": "tab:gray"}
    spans = phase_spans(timeline, min_events=max(1, int(min_span_fraction * len(timeline))))
    labelled = set()
    for s in spans.itertuples():
        label = s.phase if s.phase not in labelled else None
        labelled.add(s.phase)
        ax.axvspan(s.first_event - 0.5, s.last_event + 0.5, color=colors.get(s.phase, "white"), alpha=0.15,
                   label=label, lw=0)
    ax.fill_between(timeline.event, timeline.allocated_gib, step="post", color="tab:blue", alpha=0.35)
    ax.step(timeline.event, timeline.allocated_gib, where="post", color="tab:blue", lw=1)
    ax.set(xlabel="allocator event", ylabel="allocated (GiB)", ylim=(0, None), xlim=(0, timeline.event.max()))
    if title:
        ax.set_title(title)
    if labelled:
        ax.legend(loc="lower right", fontsize=8)
    return ax


def code_location(frames: list[dict[str, Any]], package_dir: str = PACKAGE_DIR) -> str:
    """The line that asked for the memory: the innermost frame in this project, else the innermost
    frame outside torch, as ``path:line (function)`` with the path relative to the project."""
    def short(f):
        name = f["filename"].replace("\\", "/")
        root = str(Path(package_dir).parent).replace("\\", "/") + "/"
        return f"{name.removeprefix(root)}:{f['line']} ({f['name']})"

    ours = [f for f in frames if f["filename"].replace("\\", "/").startswith(package_dir.replace("\\", "/") + "/")]
    if ours:
        return short(ours[0])
    foreign = [f for f in frames if "/torch/" not in f["filename"].replace("\\", "/") and not f["filename"].startswith("<")]
    if foreign:
        return short(foreign[0])
    return "no Python frame (backward, on autograd's thread)" if not frames else short(frames[0])


def largest_allocations(snapshot: dict[str, Any], n: int = 10, device: int | None = None) -> pd.DataFrame:
    """The ``n`` largest allocation sizes made during the recording, with how often and where each was made.

    Allocations of one size from one line are one row (a layer's activation appears once per layer).
    """
    _, trace = _trace(snapshot, device)
    allocs = pd.DataFrame(
        [{"size": e["size"], "location": code_location(e.get("frames", []))} for e in trace if e["action"] == "alloc"],
        columns=["size", "location"],
    )
    table = allocs.groupby(["size", "location"]).size().rename("count").reset_index()
    table = table.sort_values(["size", "count"], ascending=False).head(n).reset_index(drop=True)
    table.insert(0, "size_mib", table.pop("size") / MIB)
    return table


def synthetic_snapshot(train: bool = True, layers: int = 4, activation: int = 4 * MIB, weights: int = 64 * MIB
                       ) -> dict[str, Any]:
    """A made-up snapshot of one step, shaped like a real one, for CPU smoke runs (no CUDA, so no real
    snapshot): weights live throughout; the forward pass makes two activations per layer, freed at once
    for inference (``train=False``). For training they are kept, and the backward pass frees them in
    reverse while allocating gradients; the optimizer allocates a temporary; ``zero_grad`` frees the
    gradients."""
    model = [{"filename": f"{PACKAGE_DIR}/model.py", "line": 110, "name": "forward"}]
    optim = [{"filename": "/site-packages/torch/optim/adamw.py", "line": 1, "name": "_multi_tensor_adamw"}]
    zero = [{"filename": "/site-packages/torch/nn/modules/module.py", "line": 1, "name": "zero_grad"}]
    trace, addr = [], iter(range(0x1000, 0x1000 + 10_000))
    ev = lambda action, a, size, frames: trace.append({"action": action, "addr": a, "size": size, "frames": frames})  # noqa: E731
    acts = [(next(addr), activation * (1 + i % 2)) for i in range(2 * layers)]
    for a, size in acts:
        ev("alloc", a, size, model)
        if not train:
            ev("free_completed", a, size, model)
    if train:
        grad_size, grads = weights // len(acts), [next(addr) for _ in acts]
        for (a, size), g in zip(reversed(acts), grads):
            ev("free_completed", a, size, [])
            ev("alloc", g, grad_size, [])
        tmp = next(addr)
        ev("alloc", tmp, weights // 4, optim)
        ev("free_completed", tmp, weights // 4, optim)
        for g in grads:
            ev("free_completed", g, grad_size, zero)
    segment = {"device": 0, "address": 0, "total_size": weights,
               "blocks": [{"size": weights, "requested_size": weights, "state": "active_allocated", "frames": []}]}
    return {"segments": [segment], "device_traces": [trace]}


def residual_stream_mib(batch: int, context: int, d_model: int, bytes_per: int = 4) -> float:
    """Size of one residual-stream activation, (batch, context, d_model) elements, in MiB (§1.1.6(d))."""
    return batch * context * d_model * bytes_per / MIB


# ---- what the snapshots and peaks say (chapter 04) --------------------------------------------------------


def step_snapshot(cfg) -> dict[str, Any] | None:
    """The snapshot of one measured step of an end-to-end configuration (after one warm-up step, so the
    optimizer state exists), None if it ran out of memory; without CUDA a synthetic one of the same shape."""
    from dataclasses import replace

    from systems.bench.e2e import benchmark

    if not torch.cuda.is_available():
        return synthetic_snapshot(train=cfg.mode == "train")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.pickle"
        row = benchmark(replace(cfg, warmup=1, steps=1, memory_snapshot=str(path)))
        return load_snapshot(path) if row["status"] == "ok" else None

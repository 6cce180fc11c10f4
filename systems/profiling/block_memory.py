"""One Transformer block's memory as Nsight Systems traces it: the residuals its forward pass leaves for the
backward pass, and the gradients the backward pass produces (2026 handout §2.1.6 ``memory_profiling`` (f)).

The target (``python -m systems.profiling.block_memory``) runs one block forward and backward on the GPU inside
the NVTX ranges :data:`FORWARD` and :data:`BACKWARD`, with PyTorch's operator ranges on
(``torch.autograd.profiler.emit_nvtx``) and a ``module:NAME`` range around every submodule's forward.
:func:`record` runs it under ``nsys profile --cuda-memory-usage=true`` with PyTorch's caching allocator
switched off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``): every tensor is then its own ``cudaMalloc`` and
``cudaFree``, so the trace holds each tensor's lifetime instead of the allocator's rare segment requests.

From the trace, :func:`lifetimes` pairs allocations with their frees and names the module and the operation
that allocated each one (the innermost module range, the outermost operator range inside it: ``aten::linear``,
not the ``aten::empty`` it calls). :func:`block_memory` then reads:

* residuals: allocated in the forward pass and freed in the backward pass, which is what autograd's saved
  tensors do (a tensor the block saves without allocating it, such as its own input, is not among them);
* gradients, two ways: the handout's (the backward pass's net change of memory plus the residuals it freed) and
  directly (allocated in the backward pass and alive after it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from systems.cli import integer
from systems.memory.saved import SavedTensors, module_names  # module_names: both measurements name modules alike
from systems.profiling import nsys

FORWARD, BACKWARD = "block:forward", "block:backward"
MODULE = "module:"
MIB = 2**20


def _sizes(block: torch.nn.Module, x: torch.Tensor) -> dict[str, int]:
    """What the expected gradient bytes need: the block's parameters (count and bytes) and its input's bytes."""
    return {"parameters": sum(p.numel() for p in block.parameters()),
            "parameter_bytes": sum(p.nbytes for p in block.parameters()), "input_bytes": x.nbytes}


def _recorded(sqlite: Path, info: dict[str, int], report: Path | None) -> dict[str, Any]:
    return {"info": info, "events": nsys.load_memory_events(sqlite), "ranges": nsys.load_trace(sqlite).ranges,
            "report": report}


def run_block(cfg, batch: int) -> dict[str, Any]:
    """Forward and backward of one block of ``cfg`` on a random fp32 (batch, context, d_model) input, inside the
    ranges the analysis reads; returns what the expected gradient bytes need (:func:`_sizes`)."""
    from systems.model import TransformerBlock

    torch.manual_seed(0)
    with torch.device("cuda"):
        block = TransformerBlock(cfg)
        x = torch.randn(batch, cfg.context_length, cfg.d_model, requires_grad=True)

    def enter(name: str):
        def hook(module, args) -> None:  # returns None: a pre-hook's result would replace the module's input
            torch.cuda.nvtx.range_push(MODULE + name)
        return hook

    def leave(module, args, output) -> None:  # and a forward hook's result its output
        torch.cuda.nvtx.range_pop()

    for module, name in module_names(block).items():
        module.register_forward_pre_hook(enter(name))
        module.register_forward_hook(leave)
    # A first pass outside the ranges: cuBLAS workspaces and the kernels' one-time allocations happen here.
    block(x).backward(torch.ones(batch, cfg.context_length, cfg.d_model, device="cuda"))
    for p in (*block.parameters(), x):
        p.grad = None
    grad = torch.randn(batch, cfg.context_length, cfg.d_model, device="cuda")
    torch.cuda.synchronize()
    with torch.autograd.profiler.emit_nvtx():
        with torch.cuda.nvtx.range(FORWARD):
            out = block(x)
            torch.cuda.synchronize()
        with torch.cuda.nvtx.range(BACKWARD):
            out.backward(grad)
            torch.cuda.synchronize()
    return _sizes(block, x)


def _argv(size: str, context: int, batch: int, attention: str, json_path: Path) -> list[str]:
    return [sys.executable, "-m", "systems.profiling.block_memory", "--size", size, "--context-length", str(context),
            "--batch", str(batch), "--attention", attention, "--json", str(json_path)]


def record(size: str, context: int, batch: int, attention: str, out_dir: str | Path, timeout: float = 600
           ) -> dict[str, Any]:
    """Run the target under nsys with memory tracing; the target's sizes (``info``), the memory ``events`` and
    the NVTX ``ranges`` of the report."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = out_dir / "block.json"
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    rep, proc = nsys.profile(_argv(size, context, batch, attention, info), out_dir / "block_memory",
                             extra_args=["--cuda-memory-usage=true"], env=env, timeout=timeout)
    if not info.exists():  # the target writes its sizes last: without them it failed
        raise RuntimeError(f"block memory target failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return _recorded(nsys.export_sqlite(rep), json.loads(info.read_text()), rep)


def synthetic_record(cfg, batch: int, out_dir: str | Path) -> dict[str, Any]:
    """Stand-in for :func:`record` where there is no GPU or no nsys (CPU smoke runs of the chapter).

    The block runs on the CPU under :class:`systems.memory.saved.SavedTensors`; each saved tensor the forward
    pass allocated becomes an allocation in its module's range freed in the backward pass, each parameter and
    the input a gradient allocated in the backward pass. The trace has the structure of a real one, so every
    step of the analysis runs; it is made from the hook measurement, so it cannot check it.
    """
    from systems.model import TransformerBlock

    torch.manual_seed(0)
    block = TransformerBlock(cfg)
    x = torch.randn(batch, cfg.context_length, cfg.d_model, requires_grad=True)
    with SavedTensors(block) as saved:
        block(x)
    # The block's input is saved, not allocated, by the forward pass: a real trace does not see it either.
    kept = [r for r in saved.records if r.first and not r.parameter and r.storage != x.untyped_storage().data_ptr()]
    ranges, memory, t, address = [], [], 0, 1 << 20

    def event(nbytes: int, free_of: int | None = None) -> int:
        nonlocal t, address
        t += 10
        if free_of is None:
            address += nbytes + 512
            memory.append({"start": t, "address": address, "bytes": nbytes, "free": False})
            return address
        memory.append({"start": t, "address": free_of, "bytes": nbytes, "free": True})
        return free_of

    forward_start = t
    allocated = []
    for r in kept:
        start = t
        t += 5
        op_start = t
        allocated.append((event(r.bytes), r.bytes))
        temporary = event(4096)
        event(4096, free_of=temporary)
        ranges.append({"name": f"aten::{r.op}, seq = {len(ranges)}", "start": op_start, "end": t + 5})
        t += 10
        ranges.append({"name": MODULE + r.module, "start": start, "end": t})
    ranges.append({"name": FORWARD, "start": forward_start, "end": t + 10})
    t += 20
    backward_start = t
    for p in (*block.parameters(), x):
        event(p.nbytes)
    for at, nbytes in reversed(allocated):
        event(nbytes, free_of=at)
    ranges.append({"name": BACKWARD, "start": backward_start, "end": t + 10})
    sqlite = nsys.write_sqlite(Path(out_dir) / "synthetic_block_memory.sqlite", [], ranges, memory=memory)
    return _recorded(sqlite, _sizes(block, x), None)


def lifetimes(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per allocation: bytes, ``alloc`` and ``free`` times (NaN: never freed in the trace), and the
    module and operation that allocated it. A free whose allocation the trace does not hold is dropped."""
    live: dict[int, int] = {}
    rows: list[dict[str, Any]] = []
    for start, address, nbytes, free in zip(events.start, events.address, events.bytes, events.free):
        if not free:
            live[address] = len(rows)
            rows.append({"address": address, "bytes": nbytes, "alloc": start, "free": np.nan})
        elif address in live:
            rows[live.pop(address)]["free"] = start
    out = pd.DataFrame(rows, columns=["address", "bytes", "alloc", "free"])
    at = out["alloc"].to_numpy()
    module = nsys.enclosing(at, ranges, lambda n: n.startswith(MODULE))
    op = nsys.enclosing(at, ranges, lambda n: n.startswith("aten::"), innermost=False)
    out["module"] = [m.removeprefix(MODULE) if m else "" for m in module]
    out["op"] = [o.split(",")[0] if o else "" for o in op]  # emit_nvtx appends ", seq = N, ..." to the op name
    return out


def _span(ranges: pd.DataFrame, name: str) -> tuple[int, int]:
    found = ranges[ranges.name == name]
    if len(found) != 1:
        raise ValueError(f"the trace should hold one {name!r} range, found {len(found)}")
    return int(found.start.iloc[0]), int(found.end.iloc[0])


def block_memory(events: pd.DataFrame, ranges: pd.DataFrame, info: dict[str, Any]) -> dict[str, Any]:
    """What the trace says about the block: the residuals (``residuals``, one row per tensor), their totals by
    operation (``by_op``, largest first, with each one's share) and by module (``by_module``), the gradients
    both ways and what they should be, and the memory curve (``curve``: ms from the forward's start, MiB in use
    above the level before it)."""
    f0, f1 = _span(ranges, FORWARD)
    b0, b1 = _span(ranges, BACKWARD)
    life = lifetimes(events, ranges)
    freed_in_backward = life.free.between(b0, b1)
    in_forward, in_backward = life.alloc.between(f0, f1), life.alloc.between(b0, b1)
    residuals = life[in_forward & freed_in_backward].reset_index(drop=True)
    total = residuals.bytes.sum()

    def grouped(key: str) -> pd.DataFrame:
        g = residuals.groupby(key).agg(tensors=("bytes", "size"), bytes=("bytes", "sum"))
        g = g.sort_values("bytes", ascending=False).reset_index()
        g["MiB"], g["share"] = g.bytes / MIB, g.bytes / total if total else np.nan
        return g

    # Changes in use from the allocations' own sizes (a free is counted with the bytes its allocation had).
    changes = pd.concat([pd.DataFrame({"t": life.alloc, "bytes": life.bytes}),
                         pd.DataFrame({"t": life.free, "bytes": -life.bytes}).dropna()]).sort_values("t", kind="stable")
    backward_change = int(changes[changes.t.between(b0, b1)].bytes.sum())
    gradients = life[in_backward & ~(life.free <= b1)]
    window = changes[changes.t.between(f0, b1)]
    curve = pd.DataFrame({"ms": (window.t - f0) / 1e6, "MiB": window.bytes.cumsum() / MIB})
    return {"residuals": residuals, "by_op": grouped("op"), "by_module": grouped("module"), "curve": curve,
            "forward_ms": (f1 - f0) / 1e6, "backward_start_ms": (b0 - f0) / 1e6, "backward_ms": (b1 - b0) / 1e6,
            "residual_bytes": int(total), "forward_allocated_bytes": int(life[in_forward].bytes.sum()),
            "backward_change_bytes": backward_change,
            "gradient_bytes_handout": backward_change + int(total),
            "gradient_bytes_direct": int(gradients.bytes.sum()), "gradient_tensors": len(gradients),
            "gradient_bytes_expected": info["parameter_bytes"] + info["input_bytes"]}


def plot_curve(found: dict[str, Any], ax=None, title: str | None = None):
    """Memory in use above the level before the forward pass, with the forward and backward ranges shaded."""
    from matplotlib import pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.2))
    curve, b0 = found["curve"], found["backward_start_ms"]
    ax.axvspan(0, found["forward_ms"], color="tab:blue", alpha=0.12, lw=0, label="forward")
    ax.axvspan(b0, b0 + found["backward_ms"], color="tab:orange", alpha=0.12, lw=0, label="backward")
    ax.step(curve.ms, curve.MiB, where="post", color="tab:blue", lw=1)
    ax.set(xlabel="time since the forward pass began (ms)", ylabel="allocated above the start (MiB)")
    if title:
        ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return ax


def main(argv: list[str] | None = None) -> int:
    from systems.model import preset

    p = argparse.ArgumentParser(prog="python -m systems.profiling.block_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="2.7B", help="model preset whose block runs")
    p.add_argument("--context-length", type=integer(1), default=2048)
    p.add_argument("--batch", type=integer(1), default=4)
    p.add_argument("--attention", default="sdpa")
    p.add_argument("--json", required=True, help="write the block's sizes here when the run finished")
    args = p.parse_args(argv)
    try:
        cfg = preset(args.size, context_length=args.context_length, attention=args.attention)
    except ValueError as exc:
        p.error(str(exc))
    if not torch.cuda.is_available():
        p.error("the block memory trace needs a CUDA GPU")
    Path(args.json).write_text(json.dumps(run_block(cfg, args.batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

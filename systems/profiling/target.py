"""The program Nsight Systems profiles, and the function that profiles it (handout §1.1.4).

The target runs the end-to-end benchmark (:mod:`systems.bench.e2e`, NVTX ranges on) for one or more
configurations in one process, each inside an NVTX range ``cfg:SIZE/CONTEXT/MODE``, so that one nsys session
covers a whole sweep and pays nsys's start-up and export costs once:

    nsys profile -t cuda,nvtx -s none --cpuctxsw=none -o rep \\
        python -m systems.profiling.target --size small --context-length 128 --mode forward train --json st.json

It writes the benchmark rows (status ``ok``, ``OOM`` or ``error: ...`` per configuration) to ``--json`` and
exits with :data:`OOM_EXIT` when every configuration ran out of memory, 1 when none ran. ``profile_configs`` / ``profile_model`` do the
whole round trip from Python: run nsys on the target, export, label every kernel with its NVTX ranges.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from systems.bench.e2e import MODES, BenchConfig, benchmark
from systems.device import OOM
from systems.profiling import nsys
from systems.provenance import stamp

OOM_EXIT = 3  # every configuration ran out of memory


@dataclass(frozen=True)
class Point:
    size: str
    context_length: int
    mode: str

    @property
    def label(self) -> str:
        return f"cfg:{self.size}/{self.context_length}/{self.mode}"

    @classmethod
    def parse(cls, text: str) -> "Point":
        size, context, mode = text.split(":")
        return cls(size, int(context), mode)


def run(points: list[Point], warmup: int, steps: int, batch_size: int = 4, dtype: str = "fp32",
        model_overrides: dict | None = None) -> list[dict[str, Any]]:
    """Benchmark every point with NVTX on, each inside its ``cfg:`` range; the benchmark rows."""
    rows = []
    for p in points:
        cfg = BenchConfig(size=p.size, context_length=p.context_length, mode=p.mode, batch_size=batch_size,
                          warmup=warmup, steps=steps, dtype=dtype, nvtx=True, model_overrides=model_overrides or {})
        scope = torch.cuda.nvtx.range(p.label) if torch.cuda.is_available() else contextlib.nullcontext()
        try:
            with scope:
                row = benchmark(cfg)
        except RuntimeError as exc:  # e.g. a cuBLAS allocation failure near the memory limit: a row, not a crash
            row = {"size": p.size, "context_length": p.context_length, "mode": p.mode,
                   "status": f"error: {str(exc).splitlines()[0][:200]}"}
        row["config"] = p.label
        rows.append(row)
        print(f"{p.label}: {row['status']}", flush=True)
    return rows


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", nargs="*", default=[], help="model presets; combined with every context and mode")
    p.add_argument("--context-length", nargs="*", type=int, default=[128])
    p.add_argument("--mode", nargs="*", choices=MODES, default=["train"])
    p.add_argument("--config", nargs="*", default=[], help="extra single points SIZE:CONTEXT:MODE")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--model-overrides", type=json.loads, default={})
    p.add_argument("--json", help="write the benchmark rows here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    points = [Point(s, c, m) for s, c, m in product(args.size, args.context_length, args.mode)]
    points += [Point.parse(c) for c in args.config]
    if not points:
        raise SystemExit("nothing to profile: give --size or --config")
    rows = run(points, args.warmup, args.steps, args.batch_size, args.dtype, args.model_overrides)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"provenance": stamp(), "results": rows}, f, indent=1, default=str)
    return OOM_EXIT if all(r["status"] == OOM for r in rows) else 0 if any(r["status"] == "ok" for r in rows) else 1


def _argv(points: list[Point], warmup: int, steps: int, status: Path, dtype: str, model_overrides: dict) -> list[str]:
    return [sys.executable, "-m", "systems.profiling.target", "--config", *(f"{p.size}:{p.context_length}:{p.mode}" for p in points),
            "--warmup", str(warmup), "--steps", str(steps), "--dtype", dtype,
            "--model-overrides", json.dumps(model_overrides), "--json", str(status)]


def profile_configs(points: list[Point], out_dir: str | Path, warmup: int = 2, steps: int = 3, dtype: str = "fp32",
                    model_overrides: dict | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Profile the target on ``points`` with nsys; returns DataFrames and the overall status.

    ``bench``: the benchmark rows (Python timings, status per point); ``kernels``: every kernel, labelled
    with config / stage / phase / block / op ranges and a category; ``ranges``: every NVTX range with CPU
    and GPU-projected times; ``status``: ``"ok"``, or ``"OOM"`` if every point ran out of memory.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    status = out_dir / "status.json"
    rep, proc = nsys.profile(_argv(points, warmup, steps, status, dtype, model_overrides or {}), out_dir / "report",
                             timeout=timeout)
    if not status.exists():  # the target writes its rows last: without them it crashed
        raise RuntimeError(f"profiling target failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    bench = pd.DataFrame(json.loads(status.read_text())["results"])
    trace = nsys.load_trace(nsys.export_sqlite(rep))
    return {"status": OOM if (bench.status == OOM).all() else "ok", "bench": bench, "report": rep,
            "kernels": nsys.label_kernels(trace.kernels, trace.ranges),
            "ranges": nsys.label_ranges(nsys.range_times(trace.kernels, trace.ranges))}


def profile_model(size: str, context_length: int, mode: str, out_dir: str | Path, **kwargs) -> dict[str, Any]:
    """:func:`profile_configs` for one model size, context length and mode."""
    return profile_configs([Point(size, context_length, mode)], out_dir, **kwargs)


def synthetic_profile(points: list[Point], out_dir: str | Path, warmup: int = 1, steps: int = 2,
                      model_overrides: dict | None = None) -> dict[str, Any]:
    """Stand-in for :func:`profile_configs` where there is no GPU or no nsys (CPU smoke runs).

    The benchmark rows are real (the target runs on the CPU, without nsys); the kernel trace is made up,
    with the structure of a real one (the same NVTX nesting, typical kernel names), so that every analysis
    step runs. Its numbers mean nothing.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    status = out_dir / "status.json"
    subprocess.run(_argv(points, warmup, steps, status, "fp32", model_overrides or {}), check=True,
                   capture_output=True, text=True)
    bench = pd.DataFrame(json.loads(status.read_text())["results"])
    attention = [("attention_scores", "ampere_sgemm_128x64_tn", 40), ("attention_scores", "elementwise_kernel<MulFunctor>", 8),
                 ("attention_softmax", "cunn_SoftMaxForward<float>", 20), ("attention_output", "ampere_sgemm_64x64_nn", 40)]
    ffn = [("feed_forward", "sm90_xmma_gemm_f32f32_tf32", 120), ("feed_forward", "vectorized_elementwise_kernel<sigmoid>", 10)]
    kernels, ranges, t = [], [], 0

    def span(name, body):
        nonlocal t
        start = t
        t += 1
        body()
        t += 1
        ranges.append({"name": name, "start": start, "end": t})

    def kernel(name, us):
        nonlocal t
        kernels.append({"name": name, "start": t + 5_000, "end": t + 5_000 + 1_000 * us, "launch": t})
        t += 1_000 * us + 10_000

    def layer():
        span("attention", lambda: [span(r, lambda k=k, us=us: kernel(k, us)) for r, k, us in attention])
        span("feed_forward", lambda: [kernel(k, us) for _, k, us in ffn])

    def step(mode):
        span("forward", lambda: [layer() for _ in range(2)])
        if mode != "forward":
            span("backward", lambda: [kernel(k, 2 * us) for _, k, us in attention + ffn for _ in range(2)])
        if mode == "train":
            span("optimizer", lambda: [kernel("multi_tensor_apply_kernel<AdamFunctor>", 30) for _ in range(2)])

    for p in points:
        span(p.label, lambda p=p: (span("warmup", lambda: step(p.mode)),
                                   span("measured", lambda: [step(p.mode) for _ in range(steps)])))
    trace = nsys.load_trace(nsys.write_sqlite(out_dir / "synthetic.sqlite", kernels, ranges))
    return {"status": "ok", "bench": bench, "report": None,
            "kernels": nsys.label_kernels(trace.kernels, trace.ranges),
            "ranges": nsys.label_ranges(nsys.range_times(trace.kernels, trace.ranges))}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

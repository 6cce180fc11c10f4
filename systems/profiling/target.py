"""The program Nsight Systems profiles, and the function that profiles it (handout §1.1.4).

The target runs the end-to-end benchmark (:mod:`systems.bench.e2e`, NVTX ranges on) for one or more
configurations in one process, each inside an NVTX range ``cfg:SIZE/CONTEXT/MODE`` (:func:`label`), so
that one nsys session covers a whole sweep and pays nsys's start-up and export costs once:

    nsys profile -t cuda,nvtx -s none --cpuctxsw=none -o rep \\
        python -m systems.profiling.target --size small --context-length 128 --mode forward train --json st.json

It writes the benchmark rows (status ``ok``, ``OOM`` or ``error: ...`` per configuration) to ``--json`` and
exits with :data:`OOM_EXIT` when every configuration ran out of memory, 1 when none ran. ``profile_configs``
does the whole round trip from Python: run nsys on the target, export, label every kernel with its NVTX
ranges.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from dataclasses import asdict, replace
from itertools import product
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from systems.bench.e2e import BenchConfig, benchmark
from systems.cli import HelpFormatter, add_arguments, build, read_config_list
from systems.device import OOM
from systems.model import add_model_arguments, models_from_args
from systems.profiling import nsys
from systems.provenance import stamp

OOM_EXIT = 3  # every configuration ran out of memory


def label(cfg: BenchConfig) -> str:
    """The NVTX range a configuration's steps run in, which the analysis reads back."""
    return f"cfg:{cfg.model.name}/{cfg.model.context_length}/{cfg.mode}"


def run(configs: list[BenchConfig]) -> list[dict[str, Any]]:
    """Benchmark every configuration with NVTX on, each inside its ``cfg:`` range; the benchmark rows."""
    rows = []
    for cfg in configs:
        cfg = replace(cfg, nvtx=True)
        scope = torch.cuda.nvtx.range(label(cfg)) if torch.cuda.is_available() else contextlib.nullcontext()
        try:
            with scope:
                row = benchmark(cfg)
        except RuntimeError as exc:  # e.g. a cuBLAS allocation failure near the memory limit: a row, not a crash
            row = {"size": cfg.model.name, "context_length": cfg.model.context_length, "mode": cfg.mode,
                   "status": f"error: {str(exc).splitlines()[0][:200]}"}
        row["config"] = label(cfg)
        rows.append(row)
        print(f"{label(cfg)}: {row['status']}", flush=True)
    return rows


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m systems.profiling.target", description=__doc__,
                                formatter_class=HelpFormatter)
    add_model_arguments(p, sweep=True)
    add_arguments(p, BenchConfig, sweep=True, exclude=("nvtx", "memory_snapshot"))
    p.add_argument("--configs", help="a JSON file holding a list of configurations to run instead of the options")
    p.add_argument("--json", help="write the benchmark rows here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.configs:
        try:
            configs = read_config_list(args.configs, BenchConfig.from_dict)
        except ValueError as exc:
            p.error(str(exc))
    else:
        configs = [build(p, BenchConfig, argparse.Namespace(**{**vars(args), "mode": mode, "dtype": dtype}), model=m)
                   for m, mode, dtype in product(models_from_args(p, args), args.mode, args.dtype)]
    rows = run(configs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"provenance": stamp(), "results": rows}, f, indent=1, default=str)
    return OOM_EXIT if all(r["status"] == OOM for r in rows) else 0 if any(r["status"] == "ok" for r in rows) else 1


def _argv(configs: list[BenchConfig], folder: Path) -> list[str]:
    """The target's command line for ``configs`` (written to a JSON file in ``folder``)."""
    (folder / "configs.json").write_text(json.dumps([asdict(c) for c in configs]))
    return [sys.executable, "-m", "systems.profiling.target", "--configs", str(folder / "configs.json"),
            "--json", str(folder / "status.json")]


def profile_configs(configs: list[BenchConfig], out_dir: str | Path, timeout: float | None = None) -> dict[str, Any]:
    """Profile the target on ``configs`` with nsys; returns DataFrames and the overall status.

    ``bench``: the benchmark rows (Python timings, status per configuration); ``kernels``: every kernel,
    labelled with config / stage / phase / block / op ranges and a category; ``ranges``: every NVTX range
    with CPU and GPU-projected times; ``status``: ``"ok"``, or ``"OOM"`` if every configuration ran out of memory.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    status = out_dir / "status.json"
    rep, proc = nsys.profile(_argv(configs, out_dir), out_dir / "report", timeout=timeout)
    if not status.exists():  # the target writes its rows last: without them it crashed
        raise RuntimeError(f"profiling target failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    bench = pd.DataFrame(json.loads(status.read_text())["results"])
    trace = nsys.load_trace(nsys.export_sqlite(rep))
    return {"status": OOM if (bench.status == OOM).all() else "ok", "bench": bench, "report": rep,
            "kernels": nsys.label_kernels(trace.kernels, trace.ranges),
            "ranges": nsys.label_ranges(nsys.range_times(trace.kernels, trace.ranges))}


def synthetic_profile(configs: list[BenchConfig], out_dir: str | Path) -> dict[str, Any]:
    """Stand-in for :func:`profile_configs` where there is no GPU or no nsys (CPU smoke runs).

    The benchmark rows are real (the target runs on the CPU, without nsys); the kernel trace is made up,
    with the structure of a real one (the same NVTX nesting, typical kernel names), so that every analysis
    step runs. Its numbers mean nothing.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    status = out_dir / "status.json"
    subprocess.run(_argv(configs, out_dir), check=True, capture_output=True, text=True)
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

    for cfg in configs:
        span(label(cfg), lambda cfg=cfg: (span("warmup", lambda: step(cfg.mode)),
                                          span("measured", lambda: [step(cfg.mode) for _ in range(cfg.steps)])))
    trace = nsys.load_trace(nsys.write_sqlite(out_dir / "synthetic.sqlite", kernels, ranges))
    return {"status": "ok", "bench": bench, "report": None,
            "kernels": nsys.label_kernels(trace.kernels, trace.ranges),
            "ranges": nsys.label_ranges(nsys.range_times(trace.kernels, trace.ranges))}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

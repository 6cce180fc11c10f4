"""End-to-end benchmarking of the Transformer LM (handout §1.1.3, §1.1.5(c), §1.1.6, §1.3.1(b)).

One measured step is a forward pass, a forward and backward pass, or a full AdamW training step on a
random batch. Each phase is timed on its own (device synchronised before and after), so one run
reports forward, backward and optimizer times. Options: bf16 autocast, ``torch.compile``, NVTX ranges
for Nsight Systems, a CUDA memory snapshot of the measured steps. Out-of-memory is a row, not a crash.

    python -m systems.bench.e2e --size small medium --context-length 128 256 --mode train --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from systems import nvtx
from systems.bench.timing import summarize
from systems.device import OOM, free_memory, record_memory, run_or_oom, timed
from systems.model import TransformerLM, parameter_count, preset
from systems.nvtx import annotate
from systems.provenance import stamp

MODES = ("forward", "forward_backward", "train")
# A model small enough for the CPU smoke profile: same code paths, seconds instead of minutes.
SMOKE_MODEL = {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "vocab_size": 512}
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class BenchConfig:
    size: str = "small"
    context_length: int = 128
    batch_size: int = 4
    mode: str = "forward_backward"
    warmup: int = 5
    steps: int = 10
    dtype: str = "fp32"  # autocast dtype; parameters stay fp32
    compile: bool = False
    compile_backend: str = "inductor"  # "aot_eager" traces the same graphs without code generation (CPU smoke)
    attention: str = "naive"
    nvtx: bool = False
    memory_snapshot: str | None = None  # path of a CUDA memory snapshot pickle of the measured steps
    device: str | None = None
    seed: int = 0
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. tiny sizes for CPU smoke runs

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward pass, or nothing for fp32."""
    if DTYPES[dtype] is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[dtype])


class _Step:
    """One forward / forward+backward / train step, with each phase timed after a device sync."""

    def __init__(self, cfg: BenchConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        model_cfg = preset(
            cfg.size, context_length=cfg.context_length, attention=cfg.attention, **cfg.model_overrides
        )
        torch.manual_seed(cfg.seed)
        with torch.device(device):
            self.model = TransformerLM(model_cfg)
        self.n_params = parameter_count(model_cfg)
        self.forward_fn = torch.compile(self.model, backend=cfg.compile_backend) if cfg.compile else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if cfg.mode == "train" else None
        # Random tokens, not zeros: data-dependent kernels (embedding gathers) should see real work.
        shape = (cfg.batch_size, cfg.context_length)
        self.x = torch.randint(0, model_cfg.vocab_size, shape, device=device)
        self.y = torch.randint(0, model_cfg.vocab_size, shape, device=device)
        self.phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}

    def _timed(self, phase: str, fn):
        # the range closes after the sync, so its CPU span is the timed interval
        with timed(self.device) as elapsed, annotate(phase):
            out = fn()
        self.phases[phase].append(elapsed.ms)
        return out

    def __call__(self) -> None:
        cfg = self.cfg
        if cfg.mode == "forward":
            with torch.no_grad(), autocast(self.device, cfg.dtype):
                self._timed("forward", lambda: self.forward_fn(self.x))
            return

        def forward():
            with autocast(self.device, cfg.dtype):
                logits = self.forward_fn(self.x)
                return F.cross_entropy(logits.flatten(0, 1), self.y.flatten())

        loss = self._timed("forward", forward)
        self._timed("backward", loss.backward)
        if self.optimizer is not None:
            self._timed("optimizer", self.optimizer.step)
        self.model.zero_grad(set_to_none=True)


def _measure(cfg: BenchConfig, device: torch.device) -> dict[str, Any]:
    step = _Step(cfg, device)
    warmup_ms = []  # kept: the first steps carry one-time costs (compilation, CUDA context, allocator)
    with annotate("warmup"):
        for _ in range(cfg.warmup):
            with timed(device) as elapsed:
                step()
            warmup_ms.append(elapsed.ms)
    for times in step.phases.values():
        times.clear()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    snapshot = record_memory(cfg.memory_snapshot) if cfg.memory_snapshot else contextlib.nullcontext()
    with snapshot, annotate("measured"):
        totals = []
        for _ in range(cfg.steps):
            with timed(device) as elapsed:
                step()
            totals.append(elapsed.ms)
    row: dict[str, Any] = {"status": "ok", "params": step.n_params, "warmup_times_ms": warmup_ms}
    total = summarize(totals, cfg.warmup)
    row.update(step_ms=total.mean_ms, step_std_ms=total.std_ms, step_times_ms=total.times_ms)
    for phase, times in step.phases.items():
        if times:
            t = summarize(times, cfg.warmup)
            row.update({f"{phase}_ms": t.mean_ms, f"{phase}_std_ms": t.std_ms, f"{phase}_times_ms": t.times_ms})
    if device.type == "cuda":
        row["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return row


def benchmark(cfg: BenchConfig) -> dict[str, Any]:
    """Run one configuration; returns its settings, timings (ms), peak memory (MiB) or status "OOM"."""
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    nvtx.enable(cfg.nvtx)
    try:
        result = run_or_oom(lambda: _measure(cfg, device))
    finally:
        nvtx.enable(False)
        free_memory()
    row = {k: v for k, v in asdict(cfg).items() if k != "model_overrides"}
    row.update({"status": OOM} if result == OOM else result)
    return row


def sweep(base: BenchConfig, progress: bool = True, **grid: list[Any]) -> pd.DataFrame:
    """Benchmark every combination of the ``grid`` values (e.g. ``size=[...], mode=[...]``) as a DataFrame."""
    for key in grid:
        if not hasattr(base, key):
            raise ValueError(f"unknown benchmark setting {key!r}")
    keys = list(grid)
    points = list(product(*(grid[k] for k in keys)))
    rows = []
    for values in tqdm(points, desc="e2e benchmark", disable=not progress):
        rows.append(benchmark(replace(base, **dict(zip(keys, values)))))
    return pd.DataFrame(rows)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", nargs="+", default=["small"], help="model preset(s) of §1.1.2")
    p.add_argument("--context-length", nargs="+", type=int, default=[128])
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--mode", nargs="+", choices=MODES, default=["forward_backward"])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--dtype", nargs="+", choices=tuple(DTYPES), default=["fp32"])
    p.add_argument("--attention", nargs="+", default=["naive"])
    p.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    p.add_argument("--nvtx", action="store_true", help="emit NVTX ranges (for nsys profile)")
    p.add_argument("--memory-snapshot", help="write a CUDA memory snapshot of the measured steps here")
    p.add_argument("--model-overrides", type=json.loads, default={},
                   help='JSON object of ModelConfig fields to override, e.g. \'{"num_layers": 2}\'')
    p.add_argument("--json", help="write the results (with provenance) to this JSON file")
    return p


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = _parser().parse_args(argv)
    base = BenchConfig(
        batch_size=args.batch_size, warmup=args.warmup, steps=args.steps, compile=args.compile,
        nvtx=args.nvtx, memory_snapshot=args.memory_snapshot, model_overrides=args.model_overrides,
    )
    df = sweep(
        base, size=args.size, context_length=args.context_length, mode=args.mode,
        dtype=args.dtype, attention=args.attention,
    )
    cols = [c for c in ("size", "context_length", "mode", "dtype", "attention", "status",
                        "forward_ms", "backward_ms", "optimizer_ms", "step_ms", "step_std_ms",
                        "peak_memory_mb") if c in df]
    print(df[cols].to_string(index=False))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"provenance": stamp(), "results": df.to_dict(orient="records")}, f, indent=1)
    return df


def cold_run(cfg: BenchConfig) -> dict[str, Any]:
    """``benchmark(cfg)`` in a fresh Python process, so the first steps pay every one-time cost
    (CUDA context, cuBLAS handles, allocator growth) as they would in a new training job."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/result.json"
        argv = [
            sys.executable, "-m", "systems.bench.e2e", "--size", cfg.size,
            "--context-length", str(cfg.context_length), "--batch-size", str(cfg.batch_size),
            "--mode", cfg.mode, "--warmup", str(cfg.warmup), "--steps", str(cfg.steps),
            "--dtype", cfg.dtype, "--attention", cfg.attention,
            "--model-overrides", json.dumps(cfg.model_overrides), "--json", out,
        ] + (["--compile"] if cfg.compile else [])
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark process failed:\n{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)["results"][0]


if __name__ == "__main__":
    main(sys.argv[1:])

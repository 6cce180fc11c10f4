"""End-to-end benchmarking of the Transformer LM (handout §1.1.3, §1.1.5(c), §1.1.6, §1.3.1(b); 2026 §2.1.3).

One measured step is a forward pass, a forward and backward pass, or a full AdamW training step on a
random batch. Each phase is timed on its own (:func:`systems.device.timed`), so one run reports forward,
backward and optimizer times, with the step's model FLOPs and MFU (:mod:`systems.flops`). Options:
bf16 autocast, ``torch.compile``, activation checkpointing, NVTX ranges for Nsight Systems, a CUDA memory
snapshot of the measured steps. Out-of-memory is a row, not a crash.

    python -m systems.bench.e2e --size small medium --context-length 128 256 --mode train --json out.json

A sweep writes its JSON after every row, so the rows finished before a failure are kept; the output path
is checked before any work starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import product
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from systems import nvtx
from systems.attention import unavailable
from systems.bench.timing import summarize
from systems.cli import HelpFormatter, add_arguments, build, dump_json, option, read_config_list
from systems.device import OOM, free_memory, record_memory, requested_device, run_or_oom, timed
from systems.files import write_text_atomically
from systems.flops import mfu, model_flops
from systems.model import ModelConfig, TransformerLM, add_model_arguments, models_from_args, parameter_count, \
    preset, resize
from systems.nvtx import annotate
from systems.parallel import Strategy, TrainStep
from systems.provenance import stamp

MODES = ("forward", "forward_backward", "train")
# a benchmark's "dtype": what the forward autocasts to (None: no autocast, fp32 throughout); parameters stay fp32
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class BenchConfig:
    model: ModelConfig = field(default_factory=lambda: preset("small"))
    batch_size: int = option("sequences per step", default=4)
    mode: str = option("what a step does", default="forward_backward", choices=MODES, sweep=True)
    warmup: int = option("untimed steps first", default=5)
    steps: int = option("timed steps", default=10)
    dtype: str = option("autocast dtype; parameters stay fp32", default="fp32", choices=AUTOCAST, sweep=True)
    compile: bool = option("wrap the model in torch.compile", default=False)
    compile_backend: str = option("torch.compile backend (aot_eager: tracing without code generation)",
                                  default="inductor")
    checkpoint_blocks: int = option("recompute activations in groups of this many blocks (0: off)", default=0)
    nvtx: bool = option("emit NVTX ranges (for nsys profile)", default=False)
    memory_snapshot: str | None = option("write a CUDA memory snapshot of the measured steps here", default=None)
    device: str | None = option("device (None: the GPU if there is one)", default=None)
    seed: int = option("seed of the weights and the batch", default=0)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.dtype not in AUTOCAST:
            raise ValueError(f"dtype must be one of {tuple(AUTOCAST)}, got {self.dtype!r}")
        if self.batch_size < 1 or self.warmup < 0 or self.steps < 1 or self.checkpoint_blocks < 0:
            raise ValueError(f"need batch_size >= 1, warmup >= 0, steps >= 1 and checkpoint_blocks >= 0, got "
                             f"{self.batch_size}, {self.warmup}, {self.steps}, {self.checkpoint_blocks}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchConfig":
        return cls(**{**d, "model": ModelConfig(**d.get("model", {}))})


def vary(base: BenchConfig, **changes: Any) -> BenchConfig:
    """``base`` with settings changed: its own fields, the model's (``context_length``, ``attention``, ...), or
    ``size`` (another preset, keeping the run's context length and attention)."""
    model = resize(base.model, changes.pop("size")) if "size" in changes else base.model
    model_fields = {f.name for f in fields(ModelConfig)}
    model = replace(model, **{k: changes.pop(k) for k in list(changes) if k in model_fields})
    unknown = set(changes) - {f.name for f in fields(BenchConfig)}
    if unknown:
        raise ValueError(f"unknown benchmark settings {sorted(unknown)}")
    return replace(base, model=model, **changes)


def bench_device(cfg: BenchConfig) -> torch.device:
    """The device a configuration runs on: its own, else the GPU if there is one."""
    return requested_device(cfg.device) if cfg.device else torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_runnable(cfg: BenchConfig) -> None:
    """Raise ValueError, naming the setting, where this machine cannot run ``cfg``: a device it lacks, an attention
    that cannot run there, a compiler back end that does not exist, a snapshot that cannot be written."""
    device = bench_device(cfg)
    why = unavailable(cfg.model.attention, device, AUTOCAST[cfg.dtype] or torch.float32, cfg.model.head_dim)
    if why:
        raise ValueError(f"attention {cfg.model.attention!r} cannot run here: it {why}")
    if cfg.compile and cfg.compile_backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise ValueError(f"compile_backend {cfg.compile_backend!r} is not one of torch.compile's: "
                         f"{torch._dynamo.list_backends(exclude_tags=())}")
    if cfg.memory_snapshot:
        _check_writable(cfg.memory_snapshot, "a memory snapshot")


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward pass, or nothing for fp32."""
    if AUTOCAST[dtype] is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST[dtype])


class Step:
    """One forward / forward+backward / train step, with each phase timed after a device sync; with ``per_phase``
    False, a step as a training loop runs it: no sync inside, the host free to run ahead of the GPU from one phase
    into the next."""

    def __init__(self, cfg: BenchConfig, device: torch.device, per_phase: bool = True):
        self.cfg, self.device, self.per_phase = cfg, device, per_phase
        torch.manual_seed(cfg.seed)
        with torch.device(device):
            self.model = TransformerLM(cfg.model, checkpoint_blocks=cfg.checkpoint_blocks)
        if cfg.compile:
            torch._dynamo.reset()  # a fresh compile per configuration: a sweep would hit Dynamo's recompile limit
        self.forward_fn = torch.compile(self.model, backend=cfg.compile_backend) if cfg.compile else self.model
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if cfg.mode == "train" else None
        # the training step every trainer runs, its phases timed here (one process: no synchronisation, no clip)
        self.train_step = TrainStep(Strategy(self.model, self.forward_fn), optimizer, autocast=AUTOCAST[cfg.dtype],
                                    timer=self._timed)
        # Random tokens, not zeros: data-dependent kernels (embedding gathers) should see real work.
        shape = (cfg.batch_size, cfg.model.context_length)
        self.x = torch.randint(0, cfg.model.vocab_size, shape, device=device)
        self.y = torch.randint(0, cfg.model.vocab_size, shape, device=device)
        self.phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
        self.peaks: dict[str, float] = {}  # the most memory allocated during each phase (CUDA), bytes

    def _timed(self, phase: str, fn):
        if not self.per_phase or phase not in self.phases:
            return fn()
        cuda = self.device.type == "cuda"
        if cuda:  # per phase: the step's peak alone cannot say whether activations or the optimizer set it
            torch.cuda.reset_peak_memory_stats(self.device)
        # the range closes after the sync, so its CPU span is the timed interval
        with timed(self.device) as elapsed, annotate(phase):
            out = fn()
        self.phases[phase].append(elapsed.ms)
        if cuda:
            self.peaks[phase] = max(self.peaks.get(phase, 0), torch.cuda.max_memory_allocated(self.device))
        return out

    def __call__(self) -> None:
        if self.cfg.mode == "forward":
            with torch.no_grad(), autocast(self.device, self.cfg.dtype):
                self._timed("forward", lambda: self.forward_fn(self.x))
            return
        self.train_step(self.x, self.y)


def timed_steps(step: Step, n: int, device: torch.device) -> list[float]:
    times = []
    for _ in range(n):
        with timed(device) as elapsed:
            step()
        times.append(elapsed.ms)
    return times


def _measure(cfg: BenchConfig, device: torch.device) -> dict[str, Any]:
    step = Step(cfg, device)
    with annotate("warmup"):
        warmup_ms = timed_steps(step, cfg.warmup, device)  # kept: one-time costs (compilation, CUDA context, allocator)
    for times in step.phases.values():
        times.clear()
    step.peaks.clear()
    snapshot = record_memory(cfg.memory_snapshot) if cfg.memory_snapshot else contextlib.nullcontext()
    with snapshot, annotate("measured"):
        totals = timed_steps(step, cfg.steps, device)
    row: dict[str, Any] = {"status": "ok", "warmup_times_ms": warmup_ms}
    total = summarize(totals, cfg.warmup)
    row.update(step_ms=total.mean_ms, step_std_ms=total.std_ms, step_times_ms=total.times_ms)
    for phase, times in step.phases.items():
        if times:
            t = summarize(times, cfg.warmup)
            row.update({f"{phase}_ms": t.mean_ms, f"{phase}_std_ms": t.std_ms, f"{phase}_times_ms": t.times_ms})
    if device.type == "cuda":
        # every allocation happens inside a phase (between them memory is only freed): the step's peak is theirs
        row.update({f"{phase}_peak_mb": peak / 2**20 for phase, peak in step.peaks.items()})
        row["peak_memory_mb"] = max(step.peaks.values(), default=0) / 2**20
        # the dtype the matrix products run in decides which peak the MFU divides by
        matmul = cfg.dtype if cfg.dtype != "fp32" else ("tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32")
        row["mfu"] = mfu(model_flops(cfg.model, cfg.batch_size, cfg.mode), total.mean_ms / 1e3,
                         torch.cuda.get_device_name(device), matmul)
    return row


def benchmark(cfg: BenchConfig) -> dict[str, Any]:
    """Run one configuration; returns its settings, timings (ms), peak memory (MiB), MFU, or status "OOM"."""
    device = bench_device(cfg)
    nvtx.enable(cfg.nvtx)
    try:
        result = run_or_oom(lambda: _measure(cfg, device))
    finally:
        nvtx.enable(False)
        free_memory()
    row = {"size": cfg.model.name, "context_length": cfg.model.context_length, "attention": cfg.model.attention,
           **{k: v for k, v in asdict(cfg).items() if k != "model"},
           "params": parameter_count(cfg.model), "model_flops": model_flops(cfg.model, cfg.batch_size, cfg.mode)}
    row.update({"status": OOM} if result == OOM else result)
    return row


def sweep(base: BenchConfig, progress: bool = True, out: str | Path | None = None, **grid: list[Any]) -> pd.DataFrame:
    """Benchmark every combination of the ``grid`` values (e.g. ``size=[...], mode=[...]``; see :func:`vary`)
    as a DataFrame; with ``out``, the rows so far are written there (JSON, with provenance) after each one."""
    points = [vary(base, **dict(zip(grid, values))) for values in product(*grid.values())]
    return run_all(points, progress=progress, out=out)


def run_all(configs: list[BenchConfig], progress: bool = True, out: str | Path | None = None) -> pd.DataFrame:
    if out is not None:
        _check_writable(out)
    rows = []
    for cfg in tqdm(configs, desc="e2e benchmark", disable=not progress):
        rows.append(benchmark(cfg))
        if out is not None:
            _write_json(out, rows)
    return pd.DataFrame(rows)


def _check_writable(path: str | Path, what: str = "results") -> None:
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ValueError(f"cannot write {what} to {path}: {'it is a folder' if path.is_dir() else 'no writable folder'}")


def _write_json(path: str | Path, rows: list[dict[str, Any]]) -> None:
    # a reader never sees half a file, and a failed write leaves the last complete one
    write_text_atomically(path, dump_json({"provenance": stamp(), "results": rows}, indent=1), "results")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m systems.bench.e2e", description=__doc__, formatter_class=HelpFormatter)
    add_model_arguments(p, sweep=True)
    add_arguments(p, BenchConfig, sweep=True)
    p.add_argument("--json", help="write the results (with provenance) to this JSON file, row by row")
    p.add_argument("--config", help="a JSON file holding a list of configurations to run instead of the options")
    return p


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = _parser()
    args = p.parse_args(argv)
    if args.json:
        try:
            _check_writable(args.json)
        except ValueError as exc:
            p.error(str(exc))
    if args.config:
        try:
            configs = read_config_list(args.config, BenchConfig.from_dict)
        except ValueError as exc:
            p.error(str(exc))
    else:
        grid = product(models_from_args(p, args), args.mode, args.dtype)
        configs = [build(p, BenchConfig, argparse.Namespace(**{**vars(args), "mode": mode, "dtype": dtype}), model=m)
                   for m, mode, dtype in grid]
    for cfg in configs:  # every point checked before the first runs: a sweep does not fail at its tenth
        try:
            check_runnable(cfg)
        except ValueError as exc:
            p.error(str(exc))
    df = run_all(configs, out=args.json)
    cols = [c for c in ("size", "context_length", "mode", "dtype", "attention", "status", "forward_ms",
                        "backward_ms", "optimizer_ms", "step_ms", "step_std_ms", "mfu", "peak_memory_mb") if c in df]
    print(df[cols].to_string(index=False))
    return df


# ---- what a sweep says (chapter 01) ----------------------------------------------------------------------


def cold_run(cfg: BenchConfig) -> dict[str, Any]:
    """``benchmark(cfg)`` in a fresh Python process, so the first steps pay every one-time cost
    (CUDA context, cuBLAS handles, allocator growth) as they would in a new training job."""
    with tempfile.TemporaryDirectory() as tmp:
        config, out = Path(tmp) / "config.json", Path(tmp) / "result.json"
        config.write_text(json.dumps([asdict(cfg)]))
        in_fresh_process("systems.bench.e2e", "--config", str(config), "--json", str(out), what="benchmark process")
        return json.loads(out.read_text())["results"][0]


def in_fresh_process(module: str, *args: str, what: str) -> None:
    """``python -m module args`` in a fresh Python process: nothing loaded, no notebook kernel around it. Raises with
    the process's error output if it fails."""
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Training-step time of the data-parallel variants (handout §2.2.3, §2.3.1, §2.3.2, §2.3.3(a)).

Each rank builds the same model (the XL preset of §1.1.2 by default), wraps it in one variant of
``systems.ddp`` (PyTorch's DDP is the anchor, timed in the same launch) and runs full AdamW steps on its
own random batch: ``warmup`` untimed steps, then ``steps`` timed ones, the device synchronised around
each. A step is forward, backward, ``finish_gradient_synchronization`` and the optimizer step.
Communication time is what the wrapper spends in ``finish_gradient_synchronization`` with
``sync_timing=True``: for naive and flat DDP that is the whole all-reduce phase after the backward pass;
for the overlapping variants only the part the backward pass did not hide. Every rank's numbers are
gathered and the slowest rank is reported. Out-of-memory is a row.

:func:`trace` records one step of a variant with ``torch.profiler`` and returns every GPU kernel as an
interval on its stream, labelled compute or communication (NCCL), for the overlap timeline of §2.3.2(b).

    python -m systems.bench.ddp --variants naive flat overlap torch --bucket-sizes 1 10 100 1000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import pandas as pd
import torch
import torch.distributed as dist

from systems.bench.timing import summarize
from systems.cli import HelpFormatter, add_arguments, build, integer, option, positive
from systems.device import OOM, free_memory, local_device, run_or_oom, synchronize, timed
from systems.dist import launch
from systems.model import ModelConfig, TransformerLM, add_model_arguments, models_from_args, parameter_count, preset
from systems.parallel import REPLICATED, SHARDED, TrainStep, wrap

COMM = re.compile(r"nccl|gloo|all_?reduce", re.IGNORECASE)


@dataclass
class DDPBenchConfig:
    model: ModelConfig = field(default_factory=lambda: preset("xl"))
    batch_size: int = option("sequences per rank (the global batch is this × world size)", default=4)
    warmup: int = option("untimed steps first", default=3)
    steps: int = option("timed steps", default=8)
    seed: int = option("seed of the weights and the batches", default=0)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.warmup < 0 or self.steps < 1:
            raise ValueError(f"need batch_size >= 1, warmup >= 0 and steps >= 1, got {self.batch_size}, {self.warmup}, "
                             f"{self.steps}")


def run_label(variant: str, options: dict) -> str:
    if variant == "bucketed":
        return f"{variant} {options['bucket_size_mb']:g} MB"
    dtype = options.get("compute_dtype")
    return f"{variant} {str(dtype).removeprefix('torch.')}" if dtype is not None else variant


class _Trainer:
    """One rank's model, wrapper, optimizer and batch; ``step()`` is one timed training step."""

    def __init__(self, cfg: DDPBenchConfig, variant: str, options: dict, device: torch.device):
        model_cfg = cfg.model
        torch.manual_seed(cfg.seed)
        with torch.device(device):
            model = TransformerLM(model_cfg)
        self.n_params = parameter_count(model_cfg)
        # (the sharded wrappers, FSDP ours or PyTorch's, have no synchronisation to time apart)
        self.strategy = wrap(variant, model, sync_timing=True, **options)
        # a 16-bit compute dtype (the sharded wrappers' gathers) runs the forward under autocast in it, as the
        # sharding benchmark's bf16 setups do
        self.train_step = TrainStep(self.strategy, self.strategy.optimizer(torch.optim.AdamW, lr=1e-4),
                                    autocast=options.get("compute_dtype"))
        g = torch.Generator(device=device).manual_seed(cfg.seed + 1 + dist.get_rank())  # each rank its own data
        shape = (cfg.batch_size, model_cfg.context_length)
        self.x = torch.randint(0, model_cfg.vocab_size, shape, device=device, generator=g)
        self.y = torch.randint(0, model_cfg.vocab_size, shape, device=device, generator=g)
        self.device = device

    def step(self) -> None:
        self.train_step(self.x, self.y)


def _measure(cfg: DDPBenchConfig, variant: str, options: dict, device: torch.device) -> dict[str, Any]:
    trainer = _Trainer(cfg, variant, options, device)
    for _ in range(cfg.warmup):
        trainer.step()
    comm_ms = trainer.strategy.comm_ms
    comm_ms.clear()
    step_ms = []
    for _ in range(cfg.steps):
        with timed(device) as elapsed:
            trainer.step()
        step_ms.append(elapsed.ms)
    out = {"params": trainer.n_params, "step_times_ms": step_ms, "comm_times_ms": list(comm_ms) or [float("nan")]}
    if device.type == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def _bench_worker(rank: int, world: int, cfg: DDPBenchConfig, runs: list[tuple[str, dict]]) -> list[dict]:
    device = local_device()
    rows = []
    for variant, options in runs:
        result = run_or_oom(lambda: _measure(cfg, variant, options, device))
        free_memory()
        every = [None] * world
        dist.all_gather_object(every, result)  # a rank that ran out of memory reports it; none is left waiting
        row = {"variant": variant, "run": run_label(variant, options), "bucket_size_mb": options.get("bucket_size_mb"),
               "world_size": world}
        if any(r == OOM for r in every):
            rows.append({**row, "status": OOM})
            continue
        step = [statistics.fmean(r["step_times_ms"]) for r in every]
        comm = [statistics.fmean(r["comm_times_ms"]) for r in every]
        rows.append({
            **row, "status": "ok", "params": every[0]["params"],
            "step_ms": max(step),
            "step_std_ms": summarize(every[step.index(max(step))]["step_times_ms"], cfg.warmup).std_ms,
            "comm_ms": max(comm), "comm_share": max(comm) / max(step),
            "rank_step_ms": step, "rank_comm_ms": comm,
            "peak_memory_mb": max(r.get("peak_memory_mb", float("nan")) for r in every),
        })
    return rows


def benchmark(cfg: DDPBenchConfig, runs: list[tuple[str, dict]], world_size: int = 2, backend: str | None = None,
              timeout_s: float = 600.0) -> pd.DataFrame:
    """Time every (variant, options) run in one launch of ``world_size`` ranks; one row per run."""
    rows = launch(_bench_worker, world_size, cfg, runs, backend=backend, timeout_s=timeout_s)[0]
    df = pd.DataFrame(rows)
    settings = {"size": cfg.model.name, "context_length": cfg.model.context_length, "attention": cfg.model.attention,
                **{k: v for k, v in asdict(cfg).items() if k != "model"}}
    return df.assign(**settings)


def standard_runs(bucket_sizes_mb=(1, 10, 100, 1000)) -> list[tuple[str, dict]]:
    """The handout's comparison: naive, flat, overlap, bucketed at each size, and PyTorch DDP."""
    return ([("naive", {}), ("flat", {}), ("overlap", {})]
            + [("bucketed", {"bucket_size_mb": b}) for b in bucket_sizes_mb] + [("torch", {})])


# -- the overlap timeline (§2.3.2(b)) ---------------------------------------------------------------------
def intervals(trace: dict) -> pd.DataFrame:
    """Every GPU kernel of a Chrome trace (``torch.profiler`` export) as (lane, kind, name, start_ms, end_ms).

    ``lane`` is the CUDA stream; ``kind`` is "communication" for NCCL kernels, else "compute". A CPU-only
    trace (gloo smoke runs) has no kernels: its lanes are threads, with backward-pass functions as compute
    and collective calls as communication. Times are relative to the first interval.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:
        rows = [(f"stream {e.get('args', {}).get('stream', e.get('tid'))}", e) for e in kernels]
    else:
        rows = [(f"thread {e.get('tid')}", e) for e in events if e.get("cat") == "cpu_op"
                and (COMM.search(e["name"]) or e["name"].startswith("autograd::engine::evaluate_function"))]
    df = pd.DataFrame([{"lane": lane, "kind": "communication" if COMM.search(e["name"]) else "compute",
                        "name": e["name"], "start_ms": e["ts"] / 1e3, "end_ms": (e["ts"] + e["dur"]) / 1e3}
                       for lane, e in rows], columns=["lane", "kind", "name", "start_ms", "end_ms"])
    if len(df):
        t0 = df.start_ms.min()
        df[["start_ms", "end_ms"]] -= t0
    return df.sort_values("start_ms", ignore_index=True)


def _union(df: pd.DataFrame, kind: str) -> list[list[float]]:
    """The intervals of ``kind`` merged where they overlap, in time order."""
    spans = sorted(df.loc[df.kind == kind, ["start_ms", "end_ms"]].itertuples(index=False, name=None))
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def overlap_ms(df: pd.DataFrame) -> float:
    """Time (ms) during which some communication interval and some compute interval both run."""
    comm, comp = _union(df, "communication"), _union(df, "compute")
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in comm for s2, e2 in comp)


def idle_ms(df: pd.DataFrame) -> float:
    """Time (ms) between the step's first and last interval during which no compute interval runs: where the
    GPU waited, for communication or for the host."""
    busy = sum(e - s for s, e in _union(df, "compute"))
    return (df.end_ms.max() - df.start_ms.min()) - busy


def step_summary(df: pd.DataFrame) -> dict[str, float]:
    """One profiled step's intervals in numbers: its span, the communication's total time, first start and count of
    intervals, its overlap with compute (:func:`overlap_ms`) and the compute's idle time (:func:`idle_ms`)."""
    comm = df[df.kind == "communication"]
    return {"span": df.end_ms.max() - df.start_ms.min(), "comm": (comm.end_ms - comm.start_ms).sum(),
            "first_comm": comm.start_ms.min(), "collectives": len(comm), "overlap": overlap_ms(df),
            "idle": idle_ms(df)}


def step_intervals(step: Callable[[], Any], device: torch.device) -> pd.DataFrame:
    """The kernel intervals (:func:`intervals`) of one call of ``step``, profiled with ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        step()
        synchronize(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return intervals(json.load(f))


def _trace_worker(rank: int, world: int, cfg: DDPBenchConfig, runs: list[tuple[str, dict]]) -> list[dict]:
    device = local_device()
    rows = []
    for variant, options in runs:
        trainer = _Trainer(cfg, variant, options, device)
        for _ in range(cfg.warmup):
            trainer.step()
        df = step_intervals(trainer.step, device)
        df.insert(0, "run", run_label(variant, options))
        df.insert(0, "rank", rank)
        rows += df.to_dict(orient="records")
        del trainer
        free_memory()
    return rows


def trace(cfg: DDPBenchConfig, runs: list[tuple[str, dict]], world_size: int = 2, backend: str | None = None,
          timeout_s: float = 600.0) -> pd.DataFrame:
    """Kernel intervals of one profiled step of each run, on every rank (columns: rank, run, lane, kind, ...)."""
    per_rank = launch(_trace_worker, world_size, cfg, runs, backend=backend, timeout_s=timeout_s)
    return pd.DataFrame([row for rows in per_rank for row in rows])


# -- what the runs say (chapter 09) --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(prog="python -m systems.bench.ddp", description=__doc__, formatter_class=HelpFormatter)
    add_model_arguments(p, size="xl")
    add_arguments(p, DDPBenchConfig)
    p.add_argument("--world-size", type=integer(1), default=2, help="processes (one GPU each under NCCL)")
    p.add_argument("--variants", nargs="+", default=["naive", "flat", "overlap", "torch"],
                   choices=[w for w in REPLICATED if w != "bucketed"] + list(SHARDED),
                   help="wrappers without options (fsdp and fsdp2 shard the model)")
    p.add_argument("--bucket-sizes", nargs="*", type=positive, default=[1, 10, 100, 1000],
                   help="bucketed DDP at each of these bucket sizes (MiB)")
    args = p.parse_args(argv)
    cfg = build(p, DDPBenchConfig, args, model=models_from_args(p, args)[0])
    runs = [(v, {}) for v in args.variants] + [("bucketed", {"bucket_size_mb": b}) for b in args.bucket_sizes]
    df = benchmark(cfg, runs, args.world_size)
    cols = [c for c in ("run", "status", "step_ms", "step_std_ms", "comm_ms", "comm_share", "peak_memory_mb") if c in df]
    print(df[cols].to_string(index=False))
    return df


if __name__ == "__main__":
    main()

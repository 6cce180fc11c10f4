"""What chapters 09 (DDP) and 16 (FSDP on two GPUs) say of the data-parallel benchmarks: step times, overlap,
bucket sizes, and ours against PyTorch's DDP."""

from __future__ import annotations

from typing import Any

import pandas as pd

from systems.bench.ddp import overlap_ms


def step_facts(steps: pd.DataFrame, n_tensors: int) -> dict[str, Any]:
    """Naive, flat and overlapped DDP side by side: step and communication ms, and what batching and overlapping
    each saved."""
    ok = steps[steps.status == "ok"].set_index("run")
    n, f, o = ok.loc["naive"], ok.loc["flat"], ok.loc["overlap"]
    best_sync = min(n.step_ms, f.step_ms)
    return {"naive_step": n.step_ms, "naive_comm": n.comm_ms, "naive_share_pct": 100 * n.comm_share,
            "naive_per_call_us": 1e3 * n.comm_ms / n_tensors, "flat_step": f.step_ms, "flat_comm": f.comm_ms,
            "batching_saves": n.comm_ms - f.comm_ms, "batching_helps": bool(f.comm_ms < n.comm_ms),
            "overlap_step": o.step_ms, "overlap_comm": o.comm_ms, "overlap_saves": best_sync - o.step_ms,
            "overlap_helps": bool(o.step_ms < best_sync), "torch_step": ok.step_ms.get("torch", float("nan"))}


def overlap_facts(rank0: pd.DataFrame) -> dict[str, Any]:
    """From one profiled step per run (rank 0's intervals): when communication starts, how much of it runs while
    compute runs."""
    out = {}
    for run, g in rank0.groupby("run"):
        comm = g[g.kind == "communication"]
        out |= {f"{run}_overlap": overlap_ms(g), f"{run}_comm": (comm.end_ms - comm.start_ms).sum(),
                f"{run}_first_comm": comm.start_ms.min()}
    return out


def bucket_facts(buckets: pd.DataFrame) -> dict[str, Any]:
    """The bucket sweep: the fastest size, the extremes, whether the optimum is interior, and the sweep's spread."""
    ok = buckets[buckets.status == "ok"]
    best, small, large = ok.loc[ok.step_ms.idxmin()], ok.iloc[0], ok.iloc[-1]
    return {"best_mb": best.bucket_size_mb, "best_ms": best.step_ms, "small_mb": small.bucket_size_mb,
            "small_ms": small.step_ms, "large_mb": large.bucket_size_mb, "large_ms": large.step_ms,
            "interior": bool(small.bucket_size_mb < best.bucket_size_mb < large.bucket_size_mb),
            "spread_pct": 100 * (ok.step_ms.max() - ok.step_ms.min()) / ok.step_ms.min()}


def against_torch(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every variant's step time over PyTorch DDP's from the same launches; our best variant's ratio."""
    ok = runs[runs.status == "ok"]
    anchor = ok.set_index("run").step_ms.get("torch", float("nan"))
    table = ok.assign(vs_torch=ok.step_ms / anchor)[["run", "step_ms", "vs_torch"]].sort_values("vs_torch")
    best = table[table.run != "torch"].sort_values("step_ms").iloc[0]
    return table, {"best_run": best.run, "best_ms": best.step_ms, "best_vs_torch": best.vs_torch,
                   "torch_status": runs.set_index("run").status.get("torch", "not run")}


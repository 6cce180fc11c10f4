"""What chapters 09 (DDP) and 16 (FSDP on two GPUs) say of the data-parallel benchmarks: step times, overlap,
bucket sizes, and ours against PyTorch's DDP."""

from __future__ import annotations

from typing import Any

import pandas as pd

from systems.bench.ddp import step_summary
from systems.bench.timing import apart


def _verdict(a: pd.Series, b: pd.Series) -> str:
    """"faster", "slower" or "same": run ``a``'s step against run ``b``'s, with their run-to-run spread in view."""
    if not apart(a.step_ms, a.step_std_ms, b.step_ms, b.step_std_ms, int(min(a.steps, b.steps))):
        return "same"
    return "faster" if a.step_ms < b.step_ms else "slower"


def _spread(*runs: pd.Series) -> str:
    return (f"a standard deviation of up to {max(r.step_std_ms for r in runs):.3g} ms over "
            f"{int(min(r.steps for r in runs))} steps")


def step_facts(steps: pd.DataFrame, n_tensors: int) -> dict[str, Any]:
    """Naive, flat and overlapped DDP side by side: step and communication ms, what batching and overlapping each
    saved, and the words for both (a difference within the steps' spread is read as none)."""
    ok = steps[steps.status == "ok"].set_index("run")
    n, f, o = ok.loc["naive"], ok.loc["flat"], ok.loc["overlap"]
    sync = n if n.step_ms <= f.step_ms else f
    batching, overlap = _verdict(f, n), _verdict(o, sync)
    hidden = sync.comm_ms - o.comm_ms
    return {"naive_step": n.step_ms, "naive_comm": n.comm_ms, "naive_share_pct": 100 * n.comm_share,
            "naive_per_call_us": 1e3 * n.comm_ms / n_tensors, "flat_step": f.step_ms, "flat_comm": f.comm_ms,
            "batching_saves": n.comm_ms - f.comm_ms, "overlap_step": o.step_ms, "overlap_comm": o.comm_ms,
            "overlap_saves": sync.step_ms - o.step_ms, "torch_step": ok.step_ms.get("torch", float("nan")),
            "overlap_vs_sync": f"{abs(sync.step_ms - o.step_ms):.3g} ms "
                               f"{'less' if o.step_ms <= sync.step_ms else 'more'}",
            "batching_words": {
                "faster": "Batching saves that much per-call overhead, even though flattening costs two extra "
                          "copies of the gradients.",
                "slower": "Batching costs more than it saves: the two extra copies of the gradients into and out of "
                          "the flat buffer take longer than the per-call overheads it removes.",
                "same": f"The two steps are the same within their run-to-run spread ({_spread(n, f)}): the separate "
                        "calls' fixed costs are a small part of an all-reduce phase that moving the gradients' bytes "
                        "dominates, and flattening adds two copies of the gradients."}[batching],
            "overlap_words": {
                "faster": "Most of the communication now runs while the backward pass computes earlier layers' "
                          "gradients, and the step is that much shorter than the better synchronous variant.",
                "slower": "Overlap costs more than it hides: the per-parameter collectives and their hooks slow the "
                          "backward pass down by more than the communication they take off the end of the step.",
                "same": f"Yet the step is no shorter, within its run-to-run spread ({_spread(sync, o)}): the "
                        f"{hidden:.3g} ms of communication the backward pass now hides come back as a slower backward "
                        "pass, in which NCCL's kernels and a hook per parameter compete with the model's kernels for "
                        "the GPU."}[overlap]}


def overlap_facts(rank0: pd.DataFrame) -> dict[str, Any]:
    """From one profiled step per run (rank 0's intervals): when communication starts, how much of it runs while
    compute runs."""
    out = {}
    for run, g in rank0.groupby("run"):
        step = step_summary(g)
        out |= {f"{run}_{k}": step[k] for k in ("overlap", "comm", "first_comm")}
    return out


def bucket_facts(buckets: pd.DataFrame) -> dict[str, Any]:
    """The bucket sweep: the fastest size, the extremes, and the words for the sweep's shape, with the steps'
    run-to-run spread in view (a sweep whose fastest and slowest sizes lie within it has no shape to read)."""
    ok = buckets[buckets.status == "ok"].sort_values("bucket_size_mb")
    best, worst = ok.iloc[ok.step_ms.to_numpy().argmin()], ok.iloc[ok.step_ms.to_numpy().argmax()]
    small, large = ok.iloc[0], ok.iloc[-1]
    found = {"best_mb": best.bucket_size_mb, "best_ms": best.step_ms, "small_mb": small.bucket_size_mb,
             "small_ms": small.step_ms, "large_mb": large.bucket_size_mb, "large_ms": large.step_ms,
             "spread_pct": 100 * (worst.step_ms - best.step_ms) / best.step_ms}
    if _verdict(best, worst) == "same":
        shape = (f"All sizes take the same time within the steps' run-to-run spread (a standard deviation of up to "
                 f"{ok.step_std_ms.max():.3g} ms over {int(ok.steps.min())} steps): the communication hides behind "
                 "the backward pass about as well at any size.")
    elif small.bucket_size_mb < best.bucket_size_mb < large.bucket_size_mb:
        near = [end for end in (small, large) if _verdict(best, end) == "same"]
        shape = (f"The measurements follow it: the best size lies between the extremes, {small.bucket_size_mb:g} MiB "
                 f"taking {small.step_ms:.3g} ms and {large.bucket_size_mb:g} MiB {large.step_ms:.3g} ms." if not near
                 else f"The fastest size lies between the extremes, but {near[0].bucket_size_mb:g} MiB "
                      f"({near[0].step_ms:.3g} ms) is as fast within the steps' run-to-run spread "
                      f"({_spread(best, near[0])}): these measurements cannot tell a U from a slope.")
    else:
        end = "largest" if best.bucket_size_mb == large.bucket_size_mb else "smallest"
        other = small if end == "largest" else large
        shape = (f"The measurements show no interior optimum: the {end} size is the fastest, and "
                 f"{other.bucket_size_mb:g} MiB takes {other.step_ms:.3g} ms. With few buckets the exposed tail is one "
                 "bucket's all-reduce on a fast link, while every extra bucket adds its copies and hooks.")
    return found | {"shape_words": shape}


def against_torch(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every variant's step time over PyTorch DDP's from the same launches; our best variant's ratio, and the words
    for it (as fast as PyTorch's where the two lie within the steps' spread)."""
    ok = runs[runs.status == "ok"]
    anchor = ok.set_index("run").step_ms.get("torch", float("nan"))
    table = ok.assign(vs_torch=ok.step_ms / anchor)[["run", "step_ms", "vs_torch"]].sort_values("vs_torch")
    best = ok[ok.run != "torch"].sort_values("step_ms").iloc[0]
    found = {"best_run": best.run, "best_ms": best.step_ms, "best_vs_torch": best.step_ms / anchor,
             "torch_status": runs.set_index("run").status.get("torch", "not run")}
    theirs = ok[ok.run == "torch"]
    if theirs.empty:
        return table, found | {"words": "PyTorch's DDP did not run here, so there is nothing to compare with."}
    theirs = theirs.iloc[0]
    words = {
        "slower": "PyTorch's reducer is ahead: it copies gradients into persistent bucket views instead of "
                  "allocating and copying a flat buffer every step, launches from C++, and lets a bucket's all-reduce "
                  "run on NCCL's stream without an extra synchronisation at the end.",
        "same": f"That is as fast as PyTorch's C++ reducer within the steps' run-to-run spread "
                f"({_spread(best, theirs)}): what matters here is launching early and issuing few collectives, which "
                "both do.",
        "faster": "That is faster than PyTorch's reducer in this setting: its default 25 MiB buckets are not tuned for "
                  "this model and link, and its generality (unused-parameter search, gradient views) costs a little."}
    return table, found | {"words": words[_verdict(best, theirs)]}

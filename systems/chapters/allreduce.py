"""What chapter 08 (all-reduce) says of its measurements: the time table and the comparisons it draws."""

from __future__ import annotations

import pandas as pd


def time_table(df: pd.DataFrame) -> pd.DataFrame:
    """Slowest rank's ms per (backend, process count) row and size column."""
    shown = df.pivot_table(index=["backend", "world_size"], columns="size_mb", values="time_ms").reset_index()
    shown.columns = [c if isinstance(c, str) else f"{c:g} MiB (ms)" for c in shown.columns]
    return shown


def findings(df: pd.DataFrame) -> dict:
    """The comparisons the chapter draws: NCCL against gloo at the largest size, how time grows with the data
    (latency against bandwidth bound) and with the process count, what was not measured and why."""
    ok = df[df.status == "ok"]
    t = ok.set_index(["backend", "world_size", "size_mb"]).time_ms
    bw = ok.set_index(["backend", "world_size", "size_mb"]).busbw_GBps
    big, small = df.size_mb.max(), df.size_mb.min()
    ran = {b: sorted(ok[ok.backend == b].world_size.unique().tolist()) for b in ("gloo", "nccl")}
    missing = df[df.status != "ok"].groupby(["backend", "world_size"]).status.first()
    out = {"big_mb": big, "size_ratio": big / small, "gloo_ranks": ", ".join(map(str, ran["gloo"])) or "none",
           "nccl_ranks": ", ".join(map(str, ran["nccl"])) or "none",
           "missing": "; ".join(f"{b} × {w}: {s}" for (b, w), s in missing.items()) or "nothing"}
    for b, worlds in ran.items():
        if worlds:
            w = min(worlds)
            out |= {f"{b}_w": w, f"{b}_big_ms": t[b, w, big], f"{b}_busbw": bw[b, w, big],
                    f"{b}_time_ratio": t[b, w, big] / t[b, w, small],
                    f"{b}_latency_bound": bool(t[b, w, big] / t[b, w, small] < 0.5 * big / small)}
    if ran["gloo"] and ran["nccl"] and min(ran["gloo"]) == min(ran["nccl"]):
        out["nccl_speedup"] = t["gloo", min(ran["nccl"]), big] / t["nccl", min(ran["nccl"]), big]
    if len(ran["gloo"]) > 1:
        w1 = max(ran["gloo"])
        out |= {"gloo_w1": w1, "gloo_w1_ms": t["gloo", w1, big], "gloo_w1_busbw": bw["gloo", w1, big]}
    return out


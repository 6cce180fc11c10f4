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
    big, small = ok.size_mb.max(), ok.size_mb.min()
    ran = {b: sorted(ok[ok.backend == b].world_size.unique().tolist()) for b in ("gloo", "nccl")}
    out = {"big_mb": big, "size_ratio": big / small, "gloo_ranks": ", ".join(map(str, ran["gloo"])) or "none",
           "nccl_ranks": ", ".join(map(str, ran["nccl"])) or "none", "missing": _missing(df)}
    for b, worlds in ran.items():
        worlds = [w for w in worlds if (b, w, big) in t.index and (b, w, small) in t.index]
        if worlds:
            w = min(worlds)
            out |= {f"{b}_w": w, f"{b}_big_ms": t[b, w, big], f"{b}_busbw": bw[b, w, big],
                    f"{b}_time_ratio": t[b, w, big] / t[b, w, small],
                    f"{b}_latency_bound": bool(t[b, w, big] / t[b, w, small] < 0.5 * big / small)}
    if out.get("gloo_w", 0) == out.get("nccl_w"):
        w = out["nccl_w"]
        out["nccl_speedup"] = t["gloo", w, big] / t["nccl", w, big]
    if len(ran["gloo"]) > 1 and ("gloo", max(ran["gloo"]), big) in t.index:
        w1 = max(ran["gloo"])
        out |= {"gloo_w1": w1, "gloo_w1_ms": t["gloo", w1, big], "gloo_w1_busbw": bw["gloo", w1, big]}
    return out


def _missing(df: pd.DataFrame) -> str:
    """What was not measured and why: a process count none of whose sizes ran as one entry, else size by size."""
    parts = []
    for (b, w), group in df[df.status != "ok"].groupby(["backend", "world_size"], sort=False):
        if len(group) == (df.backend.eq(b) & df.world_size.eq(w)).sum() and group.status.nunique() == 1:
            parts.append(f"{b} × {w}: {group.status.iloc[0]}")
        else:
            parts += [f"{b} × {w} at {mb:g} MiB: {s}" for mb, s in zip(group.size_mb, group.status)]
    return "; ".join(parts) or "nothing"

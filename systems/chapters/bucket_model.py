"""What chapter 10 (the bucket-size model) says of its measurements: the all-reduce line t = o + S/w fitted to them,
the model's DDP overhead against the measured one per bucket size, and where the two optima lie."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from systems.bench.allreduce import MIB
from systems.scaling.collectives import best_bucket, ddp_overhead, fit_error, fit_latency_bandwidth


def fitted_link(allreduce: pd.DataFrame) -> tuple[pd.DataFrame, float, float, dict[str, float]]:
    """The sizes measured, with their bytes and seconds; o (s) and w (bytes/s) of the least-squares line; the fit's
    facts (o in µs, w in GB/s, its largest error at a measured point in %)."""
    ar = allreduce[allreduce.status == "ok"].assign(bytes=lambda d: d.size_mb * MIB,
                                                    seconds=lambda d: d.time_ms / 1e3)
    o, w = fit_latency_bandwidth(ar.bytes, ar.seconds)
    return ar, o, w, {"o_us": o * 1e6, "w_GBps": w / 1e9, "fit_err_pct": 100 * fit_error(ar.bytes, ar.seconds, o, w)}


def fit_curve(ar: pd.DataFrame, o: float, w: float) -> pd.DataFrame:
    """The measured all-reduces and the fitted line, in MiB and ms, for one figure."""
    x = np.geomspace(ar.bytes.min(), ar.bytes.max(), 50)
    curve = pd.concat([ar.assign(what="measured (slowest rank)", ms=ar.time_ms)[["bytes", "ms", "what"]],
                       pd.DataFrame({"bytes": x, "ms": (o + x / w) * 1e3, "what": "o + x/w"})])
    return curve.assign(MiB=curve.bytes / MIB)


def model_vs_measured(sweep: pd.DataFrame, base_ms: float, s: float, o: float, w: float) -> pd.DataFrame:
    """Per bucket size of the bucketed DDP runs in ``sweep``: the measured overhead (step minus the one-GPU step
    ``base_ms``) and the model's, n_b·o + s/(n_b·w), for ``s`` bytes of gradients."""
    runs = sweep[(sweep.variant == "bucketed") & (sweep.status == "ok")].sort_values("bucket_size_mb")
    n_buckets = np.ceil(s / (runs.bucket_size_mb * MIB))
    model = runs.assign(n_buckets=n_buckets, measured_ms=runs.step_ms - base_ms,
                        predicted_ms=ddp_overhead(n_buckets, s, o, w) * 1e3)
    return model[["bucket_size_mb", "n_buckets", "step_ms", "measured_ms", "predicted_ms"]].reset_index(drop=True)


def overhead_curves(model: pd.DataFrame, s: float, o: float, w: float) -> pd.DataFrame:
    """The model's overhead over bucket sizes around both optima, and the measured points, for one figure."""
    best = best_bucket(s, o, w)
    b = np.geomspace(min(model.bucket_size_mb.min() * MIB, best["bucket_bytes"] / 10),
                     max(s, best["bucket_bytes"] * 10), 200)
    nb = np.maximum(s / b, 1)
    return pd.concat([pd.DataFrame({"MiB": b / MIB, "ms": ddp_overhead(nb, s, o, w) * 1e3, "what": "model"}),
                      model.assign(MiB=model.bucket_size_mb, ms=model.measured_ms, what="measured")])


def findings(model: pd.DataFrame, s: float, o: float, w: float, base_ms: float) -> dict[str, Any]:
    """The model's optimum, the measured one, how far apart they are, and which way the model errs."""
    best = best_bucket(s, o, w)
    fastest = model.iloc[model.measured_ms.to_numpy().argmin()]  # by position: sweeps joined together repeat labels
    close = abs(np.log10(fastest.bucket_size_mb * MIB / best["bucket_bytes"])) <= 1
    above = model.measured_ms > model.predicted_ms
    if above.all():
        sign = ("The measured overheads are larger than the model's at every size: the model counts only "
                "communication, while a real step also pays for copying gradients into and out of the flat buffers, "
                "the hooks' Python work, and collectives competing with backward kernels for memory bandwidth and SMs.")
    elif not above.any():
        sign = ("The measured overheads are smaller than the model's at every size: the assumption is pessimistic, an "
                "fp32 backward pass takes longer per bucket than the fast link needs to reduce it, so even the last "
                "buckets' transfers are partly hidden and the per-call overheads overlap with compute.")
    else:
        below = ", ".join(f"{b:g}" for b in model.bucket_size_mb[~above])
        sign = (f"The model and the measurement cross. Where the measurement lies below the model (at {below} MiB), "
                "what the model adds up in full, the per-call costs and the last bucket's transfer, partly runs while "
                "the backward pass computes; where it lies above, the step pays for what the model leaves out: "
                "copying gradients into and out of the flat buffers, the hooks' Python work, and collectives "
                "competing with backward kernels for memory bandwidth and SMs.")
    return {"bstar_mib": best["bucket_bytes"] / MIB, "nbstar": best["n_buckets"], "tstar_ms": best["overhead_s"] * 1e3,
            "best_mb": fastest.bucket_size_mb, "best_ms": fastest.measured_ms, "base_ms": base_ms,
            "close": "within a factor of ten of" if close else "more than a factor of ten away from",
            "sign_words": sign}

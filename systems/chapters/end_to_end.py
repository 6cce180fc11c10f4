"""What chapters 01 (end-to-end benchmarking) and 06 (torch.compile) say of their sweeps: the phase table, how the
phases scale with the model and the context, what warming up changes, and the compiler's speed-ups."""

from __future__ import annotations

from typing import Any

import pandas as pd


def phase_table(df: pd.DataFrame) -> pd.DataFrame:
    """Each phase's mean ± standard deviation (ms) per configuration, as a chapter shows them."""
    table = df[["size", "context_length", "status"]].copy()
    for phase in ("forward", "backward", "optimizer"):
        if f"{phase}_ms" in df:
            table[f"{phase} (ms)"] = [f"{m:.3g} ± {s:.2g}" if pd.notna(m) else "" for m, s in
                                      zip(df[f"{phase}_ms"], df[f"{phase}_std_ms"])]
    return table


def scaling(df: pd.DataFrame, context: int) -> dict[str, Any]:
    """How step phases scale with the model and the context, from a sweep over sizes and context lengths.

    At ``context``: the first and last size's forward time and how much longer the last one takes against how
    many more parameters it has; for the first size, how its forward time responds to the longest context
    against the shortest (flat means overhead-bound); over all points the backward/forward ratio's range, the
    largest coefficient of variation and the size it belongs to, and the number of points out of memory.
    """
    ok = df[df.status == "ok"]
    at = ok[ok.context_length == context].set_index("size")
    first, last = at.index[0], at.index[-1]
    small = ok[ok["size"] == first].set_index("context_length").forward_ms
    ratio = ok.backward_ms / ok.forward_ms
    phases = [p for p in ("forward", "backward", "optimizer") if f"{p}_ms" in ok]
    cv = pd.concat([ok[f"{p}_std_ms"] / ok[f"{p}_ms"] for p in phases], axis=1).max(axis=1)
    return {
        "context": context, "first": first, "last": last,
        "first_fwd_ms": at.forward_ms[first], "last_fwd_ms": at.forward_ms[last],
        "time_growth": at.forward_ms[last] / at.forward_ms[first], "param_growth": at.params[last] / at.params[first],
        "ctx_min": int(small.index.min()), "ctx_max": int(small.index.max()),
        "ctx_growth": small[small.index.max()] / small[small.index.min()],
        "bwd_fwd_min": ratio.min(), "bwd_fwd_max": ratio.max(),
        "max_cv_pct": 100 * cv.max(), "max_cv_size": ok.loc[cv.idxmax(), "size"],
        "max_cv_context": int(ok.loc[cv.idxmax(), "context_length"]),
        "oom": ", ".join(f"{r.size} at {r.context_length}" for r in df[df.status != "ok"].itertuples()) or "none",
        "overhead_bound": at.forward_ms[last] / at.forward_ms[first] < 0.6 * at.params[last] / at.params[first],
    }


def warmup_effect(cold: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per warm-up setting (rows of ``warmup``, ``step``, ``ms`` from fresh processes): mean, std, first and
    median step; and the numbers the chapter quotes."""
    summary = cold.groupby("warmup").ms.agg(mean="mean", std="std", first="first", median="median").reset_index()
    s = summary.set_index("warmup")
    most = s.index.max()
    facts = {"w0_first": s["first"][0], "w0_median": s["median"][0], "w0_mean": s["mean"][0], "w0_std": s["std"][0],
             "first_over_median": s["first"][0] / s["median"][0], "most": int(most), "most_mean": s["mean"][most],
             "most_std": s["std"][most]}
    facts |= {f"w{w}_mean": s["mean"][w] for w in s.index if 0 < w < most}
    return summary, facts


def compile_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A sweep over ``compile`` × size × mode side by side: vanilla and compiled step ms, the speed-up, and the
    compiled model's first warm-up step in seconds (tracing and code generation); and the speed-ups' range."""
    wide = runs.pivot_table(index=["size", "mode"], columns="compile", values="step_ms", sort=False).rename(
        columns={False: "vanilla_ms", True: "compiled_ms"})
    wide["speedup"] = wide.vanilla_ms / wide.compiled_ms
    wide["first_step_s"] = runs[runs.compile].set_index(["size", "mode"]).warmup_times_ms.map(lambda t: t[0] / 1e3)
    wide = wide.reset_index()
    by_mode = wide.groupby("mode").speedup
    sizes = list(dict.fromkeys(wide["size"]))
    first, last = (wide[wide["size"] == s].set_index("mode").speedup for s in (sizes[0], sizes[-1]))
    return wide, {"fwd_min": by_mode.min()["forward"], "fwd_max": by_mode.max()["forward"],
                  "train_min": by_mode.min()["train"], "train_max": by_mode.max()["train"], "first": sizes[0],
                  "last": sizes[-1], "first_train": first["train"], "last_train": last["train"],
                  "shrinks": bool(last["train"] < first["train"]),
                  "trend": "shrinks" if last["train"] < first["train"] else "does not shrink"}


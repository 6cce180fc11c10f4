"""What chapters 02 (Nsight Systems) and 04 (memory) say of their profiles: the forward's timings against the
profiler's, the top kernels and the training step's shares, the memory timeline, peaks and largest allocations."""

from __future__ import annotations

import subprocess
import tempfile
from typing import Any

import pandas as pd

from systems.profiling import nsys
from systems.profiling.kernels import label, of, passes
from systems.profiling.memory import MIB
from systems.profiling.nsys import classify
from systems.profiling.target import profile_configs, synthetic_profile


def profiled(configs: list, full: bool) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """One Nsight Systems session over ``configs`` (:func:`systems.profiling.target.profile_configs`), or a synthetic
    trace where this is no full run or the machine has no nsys; with the facts a chapter states of it: whether it is
    real, how far the kernel time read from the report is from nsys's own kernel table, which configurations ran out
    of memory."""
    try:
        nsys.find_nsys()
        real = full
    except nsys.NsysNotFound:
        real = False
    with tempfile.TemporaryDirectory() as tmp:
        prof = profile_configs(configs, tmp) if real else synthetic_profile(configs, tmp)
        try:  # nsys's own kernel table, to check our reading of the report against the tool's
            tool = nsys.stats(prof["report"], ["cuda_gpu_kern_sum"])["cuda_gpu_kern_sum"] if real else None
        except subprocess.CalledProcessError:
            tool = None
    bench = prof["bench"]
    # plain words: a glued text is shown as it is, so Markdown (backticks, double dashes) would reach the reader raw
    check = (f"differs from the total of nsys's own kernel table (its report cuda_gpu_kern_sum) by "
             f"{100 * abs(prof['kernels'].duration_ns.sum() / tool.total_time_ns.sum() - 1):.2g} %"
             if tool is not None else "could not be checked against nsys's own kernel table, which this run did "
             "not export")
    return prof, {"real": real, "check": check,
                  "oom": ", ".join(bench[bench.status != "ok"].config.str.removeprefix("cfg:")) or "none"}


def forward_agreement(table: pd.DataFrame, context: int) -> dict[str, Any]:
    """(a) How nsys's GPU time of a forward pass compares with the unprofiled Python timer, at ``context``."""
    at = table[table.context == context].set_index("size")
    ratio = at["nsys GPU (ms)"] / at["Python, not profiled (ms)"]
    agree = bool(0.8 < ratio.min() and ratio.max() < 1.1)
    return {"ratio_min": ratio.min(), "ratio_max": ratio.max(), "agree": agree,
            "most_apart": ratio.sub(1).abs().idxmax(),
            "verdict": "agree closely: the Python timer brackets the pass with device synchronisations, so it measures "
                       "the same GPU work plus one launch latency and one synchronisation" if agree else
                       "differ noticeably: where the GPU time is shorter than the Python time, the GPU waited between "
                       "kernels for Python to launch them, and the GPU projection counts only from the first kernel "
                       "to the last"}


def top_kernel_facts(top: pd.DataFrame, focus: str) -> dict[str, Any]:
    row = top.set_index("size").loc[focus] if focus in set(top["size"]) else top.iloc[-1]
    names = list(top["forward: top kernel"]) + list(top["fwd+bwd: top kernel"])
    all_matmul = all(classify(n) == "matmul" for n in names)
    same_top = bool((top["forward: top kernel"] == top["fwd+bwd: top kernel"]).all())
    return {"top": row["forward: top kernel"], "share_pct": 100 * row["forward share"],
            "calls": row["calls per pass"], "train_share_pct": 100 * row["fwd+bwd share"],
            "all_matmul": all_matmul, "same_top": same_top,
            "matmul_words": "Every top kernel in the table is a matrix multiply (a cuBLAS GEMM)." if all_matmul else
                            "Not every top kernel is a matrix multiply.",
            "same": "the same kernel dominates the forward and backward passes together" if same_top else
                    "the top kernel changes for some sizes: the backward pass multiplies transposed operands, for "
                    "which cuBLAS picks other GEMM kernels"}


def category_facts(categories: pd.DataFrame) -> dict[str, Any]:
    """(c) The share of a forward pass that is not matrix multiplies, and each other category's share."""
    shares = categories.set_index("category").share
    return {"nonmm_pct": 100 * (1 - shares.get("matmul", 0)),
            "parts": ", ".join(f"{c} {100 * v:.0f} %" for c, v in shares.items() if c != "matmul")}


def training_step_facts(shares: pd.DataFrame, kernels: pd.DataFrame, ranges: pd.DataFrame, focus: str,
                        context: int) -> dict[str, Any]:
    """(d) Matmul share in inference and in a training step, AdamW's share, and GPU ms per phase of a step."""
    sh = shares.set_index(["size", "mode"])
    step = of(kernels, focus, context, "train")
    per_phase = step.groupby("phase").duration_ns.sum() / 1e6 / passes(ranges, label(focus, context, "train"))
    mm_inf, mm_train = sh.loc[(focus, "forward"), "matmul"], sh.loc[(focus, "train"), "matmul"]
    return {"mm_inf_pct": 100 * mm_inf, "mm_train_pct": 100 * mm_train,
            "optimizer_pct": 100 * sh.loc[(focus, "train")].get("optimizer", 0.0), "lower_in_training": mm_train < mm_inf,
            **{f"{phase}_ms": ms for phase, ms in per_phase.items()},
            "words": "lower in training: the backward pass adds the gradients of every element-wise operation, of the "
                     "softmax and of the normalisations, and the optimizer step is element-wise work over all "
                     "parameters and their two moments" if mm_train < mm_inf else
                     "higher in training: the backward pass does two matrix multiplies for every one of the forward "
                     "pass, while its element-wise work grows less"}


def steps_by_context(bench: pd.DataFrame, sizes: list[str]) -> pd.DataFrame:
    """(d, 2026) Training-step ms per size (rows) and context length (columns); "OOM" where the step did not fit,
    "not run" where it was not profiled."""
    steps = bench[bench["mode"].eq("train") & bench["size"].isin(sizes)]
    ms = steps.pivot_table(index="size", columns="context_length", values="step_ms").reindex(sizes)
    status = steps.pivot(index="size", columns="context_length", values="status").reindex(index=sizes,
                                                                                          columns=ms.columns)
    shown = ms.round(1).astype(object).where(status == "ok", status.fillna("not run"))
    return shown.reset_index()


def attention_facts(attention: pd.DataFrame, focus: str, context: int) -> dict[str, float]:
    """(e) The softmax's time and FLOPs against the attention's matrix multiplies', for one size and context."""
    row = attention.set_index(["size", "context"]).loc[(focus, context)]
    return {"time_ratio": row["time softmax / matmul"], "flop_ratio": row["FLOPs softmax / matmul"],
            "per_flop": row["time softmax / matmul"] / row["FLOPs softmax / matmul"]}


def attention_parts(attention: pd.DataFrame, size: str) -> pd.DataFrame:
    """(e) One size's attention parts (matmuls, softmax, scale and mask) per context, long, for one figure."""
    return attention[attention["size"] == size].melt(
        id_vars=["size", "context"], value_vars=["QKᵀ + PV matmuls (ms)", "softmax (ms)", "scale + mask (ms)"],
        var_name="part", value_name="ms")


def timeline_facts(forward: pd.DataFrame, train: pd.DataFrame) -> dict[str, Any]:
    """(a) Memory before and at the peak of a forward-only step and of a training step, and the training
    step's highest point in each phase (GiB)."""
    fwd_peaks = forward.groupby("phase").allocated_bytes.max() / 2**30
    train_peaks = train.groupby("phase").allocated_bytes.max() / 2**30
    return {"fwd_base": forward.allocated_bytes.iloc[0] / 2**30, "fwd_peak": fwd_peaks.max(),
            "train_base": train.allocated_bytes.iloc[0] / 2**30, "train_peak": train_peaks.max(),
            "train_peak_phase": train_peaks.idxmax(),
            "train_phases": ", ".join(f"{p} {v:.3g} GiB" for p, v in train_peaks.items() if p != "before")}


def peak_table(peaks: pd.DataFrame) -> pd.DataFrame:
    """(b, c) Peak GiB per context length (rows) and mode × dtype (columns) from an end-to-end sweep; "OOM"
    where a point ran out of memory."""
    order = pd.MultiIndex.from_product([["forward", "train"], ["fp32", "bf16"]])
    gib = peaks.assign(peak_gib=peaks.get("peak_memory_mb", float("nan")) / 1024)
    table = gib.pivot_table(index="context_length", columns=["mode", "dtype"], values="peak_gib", dropna=False)
    status = gib.pivot(index="context_length", columns=["mode", "dtype"], values="status")
    shown = table.reindex(columns=order).round(2).astype(object).where(status.reindex(columns=order) == "ok", "OOM")
    shown.columns = [f"{m} {d} (GiB)" for m, d in shown.columns]
    return shown.reset_index()


def peak_facts(peaks: pd.DataFrame, c0: int) -> dict[str, Any]:
    """(b, c) The peaks the discussion quotes: inference and training, fp32 and bf16, at context ``c0`` and at the
    longest context where all four ran (``c1``; ``c0`` itself where none longer did), how bf16 changes them, and
    how much the training peak grows from one to the other; so no sentence quotes a point that ran out of memory."""
    def peak(ctx, mode, dtype):  # (a CPU has no device memory to report: NaN)
        row = peaks[(peaks.context_length == ctx) & (peaks["mode"] == mode) & (peaks.dtype == dtype)]
        ok = len(row) and row.status.iloc[0] == "ok" and "peak_memory_mb" in row
        return row.peak_memory_mb.iloc[0] / 1024 if ok else float("nan")

    quoted = [(m, d) for m in ("forward", "train") for d in ("fp32", "bf16")]
    complete = [c for c in sorted(peaks.context_length.unique()) if all(pd.notna(peak(c, m, d)) for m, d in quoted)]
    c1 = max([c for c in complete if c >= c0], default=c0)
    out = {f"{m}_{d}_c{i}": peak(c, m, d) for m, d in quoted for i, c in ((0, c0), (1, c1))}
    out |= {"c0": c0, "c1": int(c1), "bf16_fwd_delta": out["forward_bf16_c0"] - out["forward_fp32_c0"],
            "bf16_train_delta": out["train_bf16_c1"] - out["train_fp32_c1"],
            "train_growth_pct": 100 * (out["train_fp32_c1"] / out["train_fp32_c0"] - 1),
            "oom": ", ".join(f"{r.mode} {r.dtype} at {r.context_length}" for r in peaks[peaks.status != "ok"].itertuples())
            or "none"}
    return out


def largest_facts(top: pd.DataFrame, batch: int, context: int, d_ff: int, vocab: int) -> dict[str, Any]:
    """(e) The largest allocation of a forward pass and what it is, matched against the shapes that make it."""
    first = top.iloc[0]
    known = {batch * context * d_ff * 4 / MIB: f"a feed-forward hidden activation, ({batch}, {context}, "
                                                f"d_ff = {d_ff}) in fp32, four times the width of the residual stream",
             batch * context * vocab * 4 / MIB: f"the logits, ({batch}, {context}, vocab = {vocab}) in fp32"}
    what = next((text for mib, text in known.items() if abs(first.size_mib - mib) < 1e-6), "none of the two")
    return {"top_mib": first.size_mib, "top_count": int(first["count"]), "top_where": first.location, "top_what": what,
            "ffn_mib": batch * context * d_ff * 4 / MIB, "logits_mib": batch * context * vocab * 4 / MIB}


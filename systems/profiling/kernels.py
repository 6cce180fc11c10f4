"""What an Nsight Systems profile of the model says: the questions of handout §1.1.4 (2026 §2.1.4), each one
a function of the labelled kernels and ranges that :func:`systems.profiling.target.profile_configs` returns.

Every function reads the ``measured`` steps only (the warm-up steps sit in their own NVTX range) and gives
per-pass figures: totals divided by the number of measured passes of the configuration. Configurations are
named by their NVTX label, ``cfg:SIZE/CONTEXT/MODE``.
"""

from __future__ import annotations

import pandas as pd

from systems.model import preset
from systems.profiling.nsys import display_name, kernel_summary


def label(size: str, context: int, mode: str) -> str:
    return f"cfg:{size}/{context}/{mode}"


def passes(ranges: pd.DataFrame, config: str) -> int:
    """How many measured passes a configuration ran: its measured ``forward`` ranges (at least 1)."""
    measured = ranges[(ranges.name == "forward") & (ranges.stage == "measured") & (ranges.config == config)]
    return max(1, len(measured))


def of(kernels: pd.DataFrame, size: str, context: int, mode: str, phases=None) -> pd.DataFrame:
    """The measured kernels of one configuration, in ``phases`` if given."""
    k = kernels[(kernels.stage == "measured") & (kernels.config == label(size, context, mode))]
    return k[k.phase.isin(phases)] if phases is not None else k


def forward_times(bench: pd.DataFrame, ranges: pd.DataFrame, unprofiled: pd.DataFrame, context: int) -> pd.DataFrame:
    """(a) Each forward configuration's pass as nsys saw it (GPU projection and CPU range) and as the Python
    timer saw it, under the profiler and, at ``context``, in a separate unprofiled run."""
    fwd_ranges = ranges[(ranges.name == "forward") & (ranges.stage == "measured")]
    nsys = fwd_ranges.groupby("config")[["gpu_ms", "cpu_ms"]].mean()
    fwd = bench[(bench["mode"] == "forward") & (bench.status == "ok")].set_index("config")
    plain = unprofiled.set_index("size").forward_ms
    return pd.DataFrame({
        "size": fwd["size"], "context": fwd.context_length,
        "nsys GPU (ms)": nsys.gpu_ms.reindex(fwd.index), "nsys CPU range (ms)": nsys.cpu_ms.reindex(fwd.index),
        "Python, profiled (ms)": fwd.forward_ms,
        "Python, not profiled (ms)": [plain.get(s) if c == context else float("nan")
                                      for s, c in zip(fwd["size"], fwd.context_length)],
    }).reset_index(drop=True)


def top_kernels(kernels: pd.DataFrame, ranges: pd.DataFrame, sizes, context: int) -> pd.DataFrame:
    """(b) Per size, the kernel with the most GPU time in inference's forward pass and in a training step's
    forward and backward passes: its share and its calls per pass."""
    rows = []
    for size in sizes:
        inf = of(kernels, size, context, "forward", ["forward"])
        trn = of(kernels, size, context, "train", ["forward", "backward"])
        if not (len(inf) and len(trn)):
            continue
        a = kernel_summary(inf, per=passes(ranges, label(size, context, "forward"))).iloc[0]
        b = kernel_summary(trn, per=passes(ranges, label(size, context, "train"))).iloc[0]
        rows.append({"size": size, "forward: top kernel": display_name(a["name"], 60), "forward share": a.share,
                     "calls per pass": a["count"], "fwd+bwd: top kernel": display_name(b["name"], 60),
                     "fwd+bwd share": b.share, "calls per step": b["count"]})
    return pd.DataFrame(rows)


def forward_kernels(kernels: pd.DataFrame, ranges: pd.DataFrame, size: str, context: int, by="name") -> pd.DataFrame:
    """(b, c) The forward pass of inference for one size, per kernel (or category), per pass."""
    table = kernel_summary(of(kernels, size, context, "forward", ["forward"]), by=by,
                           per=passes(ranges, label(size, context, "forward")))
    return table.assign(name=table["name"].map(display_name)) if by == "name" else table


def category_shares(kernels: pd.DataFrame, sizes, context: int, modes=("forward", "train")) -> pd.DataFrame:
    """(d) Share of GPU time by kernel category, per size and mode."""
    rows = []
    for size in sizes:
        for mode in modes:
            k = of(kernels, size, context, mode)
            if len(k):
                rows.append({"size": size, "mode": mode,
                             **kernel_summary(k, by="category").set_index("category").share.to_dict()})
    return pd.DataFrame(rows).fillna(0.0)


def attention_ops(kernels: pd.DataFrame, ranges: pd.DataFrame, configs, batch: int) -> pd.DataFrame:
    """(e) Inside the naive attention, per forward pass of every layer: the two matmuls, the softmax, and the
    scaling and masking, in time and in FLOPs (matmuls 2·2·B·H·T²·d_h, softmax about 5·B·H·T²)."""
    rows = []
    for size, context in configs:
        df = of(kernels, size, context, "forward")
        df = df[df.op.notna()]
        if not len(df):
            continue
        n = passes(ranges, label(size, context, "forward"))
        cfg = preset(size)
        matmul = df[df.category == "matmul"]
        mm = matmul[matmul.op.isin(["attention_scores", "attention_output"])].duration_ns.sum()
        softmax = df[df.op == "attention_softmax"].duration_ns.sum()
        mask_scale = df[(df.op == "attention_scores") & (df.category != "matmul")].duration_ns.sum()
        bht2 = batch * cfg.num_heads * context ** 2 * cfg.num_layers  # every layer of one pass
        rows.append({"size": size, "context": context, "QKᵀ + PV matmuls (ms)": mm / 1e6 / n,
                     "softmax (ms)": softmax / 1e6 / n, "scale + mask (ms)": mask_scale / 1e6 / n,
                     "time softmax / matmul": softmax / mm, "FLOPs softmax / matmul": 5 * bht2 / (4 * bht2 * cfg.head_dim)})
    return pd.DataFrame(rows)

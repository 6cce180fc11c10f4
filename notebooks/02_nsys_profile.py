# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Profiling with Nsight Systems
#
# Which CUDA kernels does a forward pass, a backward pass and an AdamW step of the Transformer spend
# their GPU time in, and how does attention's softmax compare with its matrix multiplies?
# (Handout §1.1.4, `nsys_profile`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import subprocess
import tempfile

import pandas as pd
import seaborn as sns
import torch
from IPython.display import display
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.e2e import SMOKE_MODEL, BenchConfig, sweep
from systems.model import PRESETS, preset
from systems.profiling import nsys
from systems.profiling.target import Point, profile_configs, synthetic_profile

profile = provenance.resolve_profile(profile)

MODES = ("forward", "train")
if profile == "full":
    sizes, context, sweep_contexts, batch, overrides = list(PRESETS), 256, [128, 512, 1024], 4, {}
    warmup, steps, focus = 2, 3, "xl"
    # the two largest models at the longest context, to find where a training step stops fitting
    probes = [Point("xl", 1024, "train"), Point("2.7B", 1024, "train")]
else:
    sizes, context, sweep_contexts, batch, overrides = ["small"], 16, [32], 2, SMOKE_MODEL
    warmup, steps, focus, probes = 1, 2, "small", []
points = ([Point(s, context, m) for s in sizes for m in MODES]
          + [Point("small", c, m) for c in sweep_contexts for m in MODES] + probes)

# %% [markdown]
# ## How the profile is taken
#
# `systems.profiling.target` runs the end-to-end harness with NVTX ranges on: every configuration sits
# in a range `cfg:SIZE/CONTEXT/MODE`, its {glue:text}`nsys_warmup` warm-up steps in `warmup` and its
# {glue:text}`nsys_steps` profiled steps in `measured`, each step's phases in `forward`, `backward`,
# `optimizer`, each Transformer block in `attention` and `feed_forward`, and the naive attention's
# sub-steps in `attention_scores`, `attention_softmax` and `attention_output`. One `nsys profile` session
# covers all configurations:
#
# ```
# nsys profile -t cuda,nvtx -s none --cpuctxsw=none -o report \
#     python -m systems.profiling.target --config small:256:forward small:256:train ... --warmup 2 --steps 3
# ```
#
# The report is exported to SQLite and every kernel is attributed to the NVTX ranges that were open on
# the CPU when it was *launched* (launches are asynchronous: a kernel often runs after its range has
# closed on the CPU). Only the `measured` steps are analysed. A configuration that runs out of memory
# is a row with status OOM, and the session goes on.
#
# The profiled configurations: every model size at context {glue:text}`nsys_context`, the small model
# at the other context lengths, and the largest models at 1,024 tokens, all at batch 4 in fp32.

# %% tags=["nbval-ignore-output"]
report.glue("nsys_warmup", warmup)
report.glue("nsys_steps", steps)
report.glue("nsys_context", context)
try:
    nsys.find_nsys()
    real = torch.cuda.is_available()
except nsys.NsysNotFound as exc:
    real, why = False, str(exc)
with tempfile.TemporaryDirectory() as tmp:
    if real:
        prof = profile_configs(points, tmp, warmup=warmup, steps=steps, model_overrides=overrides)
        # nsys's own kernel table, to check our reading of the report against the tool's
        try:
            tool = nsys.stats(prof["report"], ["cuda_gpu_kern_sum"])["cuda_gpu_kern_sum"]
        except subprocess.CalledProcessError as exc:
            tool = None
            print(f"nsys stats failed, no cross-check: {exc.stderr[-500:]}")
    else:
        prof = synthetic_profile(points, tmp, warmup=warmup, steps=steps, model_overrides=overrides)
        tool = None
if not real:
    display(report.md(f"*No nsys profile on this machine ({'no CUDA device' if torch.cuda.is_available() is False else why}): "
                      "the kernel trace below is synthetic and its numbers mean nothing; the benchmark rows are real.*"))
bench, kernels, ranges = prof["bench"], prof["kernels"], prof["ranges"]
measured = kernels[kernels.stage == "measured"]
status = bench[["config", "size", "context_length", "mode", "status"]]
report.glue("nsys_oom", ", ".join(status[status.status != "ok"].config.str.removeprefix("cfg:")) or "none")
report.table(status)

# %% tags=["nbval-ignore-output"]
summary = nsys.kernel_summary(measured, by=["config", "phase", "op", "category", "name"])
report.save_table(summary, data_dir, "kernels")
report.save_table(bench.drop(columns=[c for c in bench if c.endswith("times_ms")]), data_dir, "bench")
if tool is not None:
    ours, theirs = kernels.duration_ns.sum(), tool.total_time_ns.sum()
    report.glue("nsys_check_pct", report.fmt(100 * abs(ours - theirs) / theirs, 2))
    display(report.md(f"Kernel time in the whole report: {ours / 1e6:.1f} ms read from SQLite, {theirs / 1e6:.1f} ms "
                      f"in `nsys stats --report cuda_gpu_kern_sum`."))

# %% [markdown]
# Configurations that ran out of memory: {glue:text}`nsys_oom`.
#
# ## (a) The forward pass, timed by nsys and by Python
#
# For each forward-only configuration: the `forward` ranges of the measured steps projected onto the GPU
# (from the start of the first kernel launched in the range to the end of the last), the Python timer of
# the same run (under the profiler), and the Python timer of a separate run without the profiler
# (5 warm-up and 10 measured steps, as in the end-to-end chapter).

# %% tags=["nbval-ignore-output"]
unprofiled = sweep(BenchConfig(context_length=context, batch_size=batch, mode="forward", warmup=5 if profile == "full" else 1,
                               steps=10 if profile == "full" else 2, model_overrides=overrides), size=sizes)
fwd_ranges = ranges[(ranges.name == "forward") & (ranges.stage == "measured")]
nsys_fwd = fwd_ranges.groupby("config")[["gpu_ms", "cpu_ms"]].mean()
fwd = bench[(bench["mode"] == "forward") & (bench.status == "ok")].set_index("config")
fwd_table = pd.DataFrame({
    "size": fwd["size"], "context": fwd.context_length,
    "nsys GPU (ms)": nsys_fwd.gpu_ms.reindex(fwd.index), "nsys CPU range (ms)": nsys_fwd.cpu_ms.reindex(fwd.index),
    "Python, profiled (ms)": fwd.forward_ms,
}).reset_index(drop=True)
plain = unprofiled.set_index("size").forward_ms
fwd_table["Python, not profiled (ms)"] = [plain.get(s) if c == context else float("nan")
                                          for s, c in zip(fwd_table["size"], fwd_table.context)]
report.save_table(fwd_table, data_dir, "forward_times")
report.table(fwd_table)

# %% tags=["nbval-ignore-output"]
at_ctx = fwd_table[fwd_table.context == context].set_index("size")
ratio = at_ctx["nsys GPU (ms)"] / at_ctx["Python, not profiled (ms)"]
report.glue("nsys_a_ratio_min", report.fmt(ratio.min(), 3))
report.glue("nsys_a_ratio_max", report.fmt(ratio.max(), 3))
report.md(
    f"At context {context} the forward pass measured by nsys takes {ratio.min():.3g} to {ratio.max():.3g} times the "
    "Python timing without the profiler. "
    + ("The two agree closely: the Python timer brackets the pass with device synchronisations, so it measures "
       "the same GPU work plus a launch latency and a synchronisation." if ratio.max() < 1.1 and ratio.min() > 0.8 else
       "They differ noticeably: where the GPU time is much shorter than the Python time, the pass is bound by "
       "launching kernels from Python (the GPU waits between kernels), which the GPU projection counts only "
       "between the first and the last kernel.")
)

# %% [markdown]
# ## (b) The kernels that dominate
#
# For each model size at context {glue:text}`nsys_context`: the kernel with the most GPU time in the
# forward pass of inference, its share of the forward pass and how often it runs per pass, and the same
# for a full training step's forward and backward passes.

# %% tags=["nbval-ignore-output"]
def per_pass(df):
    """Measured passes of a configuration: the number of measured `forward` ranges."""
    return max(1, int(fwd_ranges[fwd_ranges.config == df.config.iloc[0]].shape[0])) if len(df) else 1


def top_kernel(df):
    s = nsys.kernel_summary(df, per=per_pass(df))
    return s.iloc[0] if len(s) else None


rows = []
for s in sizes:
    inf = measured[(measured.config == Point(s, context, "forward").label) & (measured.phase == "forward")]
    trn = measured[(measured.config == Point(s, context, "train").label) & measured.phase.isin(["forward", "backward"])]
    a, b = top_kernel(inf), top_kernel(trn)
    if a is None or b is None:
        continue
    rows.append({"size": s, "forward: top kernel": nsys.display_name(a["name"], 60), "forward share": a.share,
                 "calls per pass": a["count"], "fwd+bwd: top kernel": nsys.display_name(b["name"], 60),
                 "fwd+bwd share": b.share, "calls per step": b["count"]})
top = pd.DataFrame(rows)
report.save_table(top, data_dir, "top_kernels")
report.table(top, floatfmt=".2f")

# %% [markdown]
# The top kernels of the forward pass of the {glue:text}`nsys_focus` model (inference, per pass):

# %% tags=["nbval-ignore-output"]
report.glue("nsys_focus", focus)
focus_fwd = measured[(measured.config == Point(focus, context, "forward").label) & (measured.phase == "forward")]
focus_trn = measured[(measured.config == Point(focus, context, "train").label)]
fsum = nsys.kernel_summary(focus_fwd, per=per_pass(focus_fwd))
shown = fsum.head(12).assign(name=lambda d: d["name"].map(nsys.display_name))
report.table(shown[["name", "category", "count", "total_ms", "mean_us", "share"]], floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
first = top.set_index("size").loc[focus] if focus in set(top["size"]) else top.iloc[-1]
same_top = (top["forward: top kernel"] == top["fwd+bwd: top kernel"]).all()
matmul_top = all(nsys.classify(n) == "matmul" for n in list(top["forward: top kernel"]) + list(top["fwd+bwd: top kernel"]))
report.glue("nsys_b_top", first["forward: top kernel"])
report.glue("nsys_b_share", f"{100 * first['forward share']:.0f}")
report.glue("nsys_b_calls", f"{first['calls per pass']:.0f}")
report.md(
    f"For the {focus} model the kernel with the most forward-pass time is `{first['forward: top kernel']}`, "
    f"{100 * first['forward share']:.0f} % of the pass, called {first['calls per pass']:.0f} times per forward pass. "
    + ("Every top kernel in the table is a matrix multiply (cuBLAS GEMM). " if matmul_top else "")
    + ("In the training step the same kernel dominates the forward and backward passes together"
       if same_top else "In the training step the top kernel changes for some sizes: the backward pass multiplies "
       "transposed operands, for which cuBLAS picks other GEMM kernels")
    + f", at {100 * first['fwd+bwd share']:.0f} % of the forward and backward time for the {focus} model."
)

# %% [markdown]
# ## (c) What besides matrix multiplies costs time
#
# The forward pass of the {glue:text}`nsys_focus` model by kernel category, and the non-matmul kernels
# that take at least 1 % of it:

# %% tags=["nbval-ignore-output"]
cats = nsys.kernel_summary(focus_fwd, by="category", per=per_pass(focus_fwd))
report.table(cats[["category", "count", "total_ms", "share"]], floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
non_mm = fsum[(fsum.category != "matmul") & (fsum.share >= 0.01)].assign(name=lambda d: d["name"].map(nsys.display_name))
report.table(non_mm[["name", "category", "count", "total_ms", "share"]].head(12), floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
c = cats.set_index("category").share
report.glue("nsys_c_nonmm_pct", f"{100 * (1 - c.get('matmul', 0)):.0f}")
report.md(
    f"Kernels other than matrix multiplies take {100 * (1 - c.get('matmul', 0)):.0f} % of the forward pass: "
    + ", ".join(f"{k} {100 * v:.0f} %" for k, v in c.items() if k != "matmul")
    + ". The element-wise kernels (RoPE's multiplies and adds, the causal mask's `masked_fill`, the scaling of "
    "the scores, SwiGLU's sigmoid and products, the residual additions, RMSNorm's squares and products) and "
    "the softmax each read and write whole activation tensors for a handful of FLOPs per element, so they run "
    "at memory bandwidth, not at tensor-core speed."
)

# %% [markdown]
# ## (d) A training step with AdamW
#
# Share of GPU time by kernel category, inference (forward only) against a full training step (forward,
# backward, AdamW), for every size at context {glue:text}`nsys_context`:

# %% tags=["nbval-ignore-output"]
share_rows = []
for s in sizes:
    for mode in MODES:
        df = measured[measured.config == Point(s, context, mode).label]
        if len(df):
            cs = nsys.kernel_summary(df, by="category").set_index("category").share
            share_rows.append({"size": s, "mode": mode, **cs.to_dict()})
shares = pd.DataFrame(share_rows).fillna(0.0)
report.save_table(shares, data_dir, "category_shares")
report.table(shares, floatfmt=".3f")

# %% tags=["nbval-ignore-output"]
sh = shares.set_index(["size", "mode"])
mm_inf, mm_trn = sh.loc[(focus, "forward"), "matmul"], sh.loc[(focus, "train"), "matmul"]
opt = sh.loc[(focus, "train")].get("optimizer", 0.0)
report.glue("nsys_d_mm_inf", f"{100 * mm_inf:.0f}")
report.glue("nsys_d_mm_train", f"{100 * mm_trn:.0f}")
report.glue("nsys_d_opt", f"{100 * opt:.1f}")
phase_ms = focus_trn.groupby("phase").duration_ns.sum() / 1e6 / max(1, per_pass(focus_trn))
report.md(
    f"For the {focus} model matrix multiplies take {100 * mm_inf:.0f} % of the GPU time in inference and "
    f"{100 * mm_trn:.0f} % in a training step. Per step the GPU spends "
    + ", ".join(f"{ms:.3g} ms in {p}" for p, ms in phase_ms.items())
    + f"; AdamW's fused multi-tensor kernels take {100 * opt:.1f} % of the step. "
    + ("The matmul share is lower in training: the backward pass adds the gradients of every element-wise "
       "operation, of the softmax and of the normalisations, and the optimizer step is element-wise work over "
       "all parameters and their two moments." if mm_trn < mm_inf else
       "The matmul share is higher in training: the backward pass does two matrix multiplies for every one of "
       "the forward pass, while its element-wise work grows less.")
)

# %% [markdown]
# ## (e) Softmax against matrix multiplies inside attention
#
# The NVTX sub-ranges of the naive attention, per forward pass (inference), against their FLOPs: the
# scores $QK^\top$ and the output $PV$ each cost $2 B H T^2 d_h$ FLOPs, the softmax about $5 B H T^2$
# (a maximum, a subtraction, an exponential, a sum and a division per score).

# %% tags=["nbval-ignore-output"]
att_rows = []
for p in [p for p in points if p.mode == "forward"]:
    df = measured[(measured.config == p.label) & measured.op.notna()]
    if not len(df):
        continue
    n = per_pass(df)
    cfg = preset(p.size, **overrides)
    scores_mm = df[(df.op == "attention_scores") & (df.category == "matmul")].duration_ns.sum()
    output_mm = df[(df.op == "attention_output") & (df.category == "matmul")].duration_ns.sum()
    softmax = df[df.op == "attention_softmax"].duration_ns.sum()
    mask_scale = df[(df.op == "attention_scores") & (df.category != "matmul")].duration_ns.sum()
    bht2 = batch * cfg.num_heads * p.context_length ** 2 * cfg.num_layers  # all layers of one pass
    mm_flops, sm_flops = 2 * 2 * bht2 * cfg.head_dim, 5 * bht2
    att_rows.append({
        "size": p.size, "context": p.context_length,
        "QKᵀ + PV matmuls (ms)": (scores_mm + output_mm) / 1e6 / n, "softmax (ms)": softmax / 1e6 / n,
        "scale + mask (ms)": mask_scale / 1e6 / n,
        "time softmax / matmul": softmax / (scores_mm + output_mm),
        "FLOPs softmax / matmul": sm_flops / mm_flops,
    })
att = pd.DataFrame(att_rows)
report.save_table(att, data_dir, "attention_ops")
report.table(att, floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
if len(att) > 1:
    long = att.melt(id_vars=["size", "context"], value_vars=["QKᵀ + PV matmuls (ms)", "softmax (ms)", "scale + mask (ms)"],
                    var_name="part", value_name="ms")
    small = long[long["size"] == "small"]
    ax = sns.lineplot(data=small, x="context", y="ms", hue="part", marker="o")
    ax.set(xscale="log", yscale="log", xlabel="context length", ylabel="ms per forward pass (all layers)",
           title="small model: attention's parts against context length")
    plt.show()

# %% tags=["nbval-ignore-output"]
row = att.set_index(["size", "context"]).loc[(focus, context)]
report.glue("nsys_e_time_ratio", report.fmt(row["time softmax / matmul"], 2))
report.glue("nsys_e_flop_ratio", report.fmt(row["FLOPs softmax / matmul"], 2))
report.glue("nsys_e_gap", report.fmt(row["time softmax / matmul"] / row["FLOPs softmax / matmul"], 2))
report.md(
    f"For the {focus} model at context {context} the softmax takes {row['time softmax / matmul']:.2g} times the time of "
    f"the two attention matmuls while doing only {row['FLOPs softmax / matmul']:.2g} times their FLOPs: per FLOP "
    f"it is {row['time softmax / matmul'] / row['FLOPs softmax / matmul']:.3g} times slower."
)

# %% [markdown]
# The matmuls do $4 d_h / 5$ times the softmax's FLOPs, yet the softmax takes a sizeable fraction of their time
# ({glue:text}`nsys_e_time_ratio`× the time for {glue:text}`nsys_e_flop_ratio`× the FLOPs). The matmuls run
# on tensor cores and reuse every loaded element $d_h$ times; the softmax reads and writes the whole
# $T \times T$ score matrix for a few operations per element, so it is bound by memory bandwidth, as are the
# scaling and masking that precede it. This is what FlashAttention removes: it fuses the scores, the softmax and
# the output product into one kernel that never writes the score matrix to memory.

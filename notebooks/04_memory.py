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
# # Memory profiling
#
# Where does the GPU memory of the 2.7B model go during inference and during a training step, how does
# the peak grow with the context length and shrink with mixed precision, and which allocations are the
# largest? (Handout §1.1.6, `memory_profiling`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import tempfile
from pathlib import Path

import pandas as pd
import seaborn as sns
import torch
from IPython.display import display
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.e2e import SMOKE_MODEL, BenchConfig, benchmark, sweep
from systems.model import preset
from systems.profiling import memory

profile = provenance.resolve_profile(profile)
on_gpu = torch.cuda.is_available()

if profile == "full":
    size, contexts, batch, overrides = "2.7B", [128, 256, 512], 4, {}
else:
    size, contexts, batch, overrides = "small", [16, 32], 2, SMOKE_MODEL
cfg = preset(size, **overrides)

# %% [markdown]
# ## (a) The active memory timeline of one step
#
# The harness records a CUDA memory snapshot of the measured steps
# (`python -m systems.bench.e2e --size 2.7B --mode train --memory-snapshot train.pickle`), the pickle that
# [pytorch.org/memory_viz](https://pytorch.org/memory_viz) displays. Instead of screenshots of that page,
# this chapter reads the pickles itself (`systems.profiling.memory`) and draws the same "Active Memory
# Timeline": the bytes held by live tensors after every allocation and free, counting the tensors that
# existed before recording began (weights, optimizer state) from the start. One warm-up step runs
# first, so the optimizer state already exists; then one step is recorded. The phases are read from
# each event's Python stack (backward runs on autograd's own thread, which has no Python frames).

# %% tags=["nbval-ignore-output"]
context = contexts[0]
timelines, largest = {}, {}
with tempfile.TemporaryDirectory() as tmp:
    for mode in ["forward", "train"]:
        if on_gpu:
            path = Path(tmp) / f"{mode}.pickle"
            row = benchmark(BenchConfig(size=size, context_length=context, batch_size=batch, mode=mode, warmup=1,
                                        steps=1, memory_snapshot=str(path), model_overrides=overrides))
            snap = memory.load_snapshot(path) if row["status"] == "ok" else None
            path.unlink(missing_ok=True)  # pickles are large; the derived tables below are what we keep
        else:  # no CUDA memory to record: a made-up snapshot of the same shape keeps the cells running
            snap = memory.synthetic_snapshot(train=mode == "train")
        if snap is not None:
            timelines[mode] = memory.active_memory_timeline(snap)
            largest[mode] = memory.largest_allocations(snap, n=10)
            report.save_table(timelines[mode][["event", "phase", "allocated_bytes"]], data_dir, f"timeline_{mode}")
            report.save_table(largest[mode], data_dir, f"largest_{mode}")
if not on_gpu:
    display(report.md("*No CUDA device: the timelines below come from a synthetic snapshot, not from the model.*"))

# %% tags=["nbval-ignore-output"]
fig, axes = plt.subplots(1, len(timelines), figsize=(13, 3.4), squeeze=False)
titles = {"forward": "forward pass (inference)", "train": "training step (AdamW)"}
for ax, (mode, tl) in zip(axes[0], timelines.items()):
    memory.plot_timeline(tl, ax=ax, title=f"{size}, context {context}: {titles[mode]}")
fig.tight_layout()
plt.show()

# %% tags=["nbval-ignore-output"]
def phase_peaks(tl):
    g = tl.groupby("phase").allocated_bytes
    return g.max() / 2**30, tl.allocated_bytes.iloc[0] / 2**30

fwd_peaks, fwd_base = phase_peaks(timelines["forward"])
train_peaks, train_base = phase_peaks(timelines["train"])
report.glue("mem_fwd_base_gib", report.fmt(fwd_base))
report.glue("mem_fwd_peak_gib", report.fmt(fwd_peaks.max()))
report.glue("mem_train_base_gib", report.fmt(train_base))
report.glue("mem_train_peak_gib", report.fmt(train_peaks.max()))
report.glue("mem_train_peak_phase", train_peaks.idxmax())
report.md(
    f"Forward only: {fwd_base:.3g} GiB before the step, at most {fwd_peaks.max():.3g} GiB. "
    f"Training step: {train_base:.3g} GiB before the step, at most {train_peaks.max():.3g} GiB, reached during "
    f"the {train_peaks.idxmax()} phase; per phase the highest points are "
    + ", ".join(f"{p} {v:.3g} GiB" for p, v in train_peaks.items() if p != "before") + "."
)

# %% [markdown]
# In inference the timeline is a flat floor of weights ({glue:text}`mem_fwd_base_gib` GiB) with a thin
# sawtooth on top: under `no_grad` each layer's activations are freed as soon as the next layer has
# consumed them, so the peak ({glue:text}`mem_fwd_peak_gib` GiB) is the weights plus a layer or two of
# activations and the logits. In the training step the floor ({glue:text}`mem_train_base_gib` GiB) is the
# weights plus AdamW's two moment buffers; the forward pass then climbs steadily, because every layer
# saves its activations for the backward pass; the backward pass walks back down, freeing those
# activations layer by layer while the gradients (as large as the weights) build up; the optimizer step
# adds short-lived temporaries, and `zero_grad` drops the gradients, returning to the floor. The
# highest point, {glue:text}`mem_train_peak_gib` GiB, is reached in the {glue:text}`mem_train_peak_phase`
# phase.

# %% [markdown]
# ## (b), (c) Peak memory by context length, fp32 and bf16
#
# Peak allocated memory (`torch.cuda.max_memory_allocated`) over the measured steps, after one warm-up
# step, for the {glue:text}`mem_size` model at batch 4. "train" is a full step: forward, backward, AdamW.

# %% tags=["nbval-ignore-output"]
report.glue("mem_size", size)
base = BenchConfig(size=size, batch_size=batch, warmup=1, steps=2, model_overrides=overrides)
peaks = sweep(base, context_length=contexts, mode=["forward", "train"], dtype=["fp32", "bf16"])
if "peak_memory_mb" not in peaks:  # CPU: the harness has no device memory to report
    peaks["peak_memory_mb"] = float("nan")
peaks["peak_gib"] = peaks.peak_memory_mb / 1024
report.save_table(peaks.drop(columns=[c for c in peaks if c.endswith("times_ms")]), data_dir, "peak_memory")
order = pd.MultiIndex.from_product([["forward", "train"], ["fp32", "bf16"]])
table = peaks.pivot_table(index="context_length", columns=["mode", "dtype"], values="peak_gib", dropna=False)
table = table.reindex(columns=order)
status = peaks.pivot(index="context_length", columns=["mode", "dtype"], values="status").reindex(columns=order)
shown = table.round(2).astype(object).where(status == "ok", "OOM")
shown.columns = [f"{m} {d} (GiB)" for m, d in shown.columns]
report.table(shown.reset_index())

# %% tags=["nbval-ignore-output"]
ok = peaks[peaks.status == "ok"].dropna(subset=["peak_gib"])
if len(ok):
    grid = sns.catplot(data=ok, x="context_length", y="peak_gib", hue="dtype", col="mode", kind="bar", height=3.2)
    grid.set(ylabel="peak allocated (GiB)")
    plt.show()

# %% tags=["nbval-ignore-output"]
def peak(ctx, mode, dtype):
    row = peaks[(peaks.context_length == ctx) & (peaks["mode"] == mode) & (peaks.dtype == dtype)]
    return row.peak_gib.iloc[0] if len(row) and row.status.iloc[0] == "ok" else float("nan")

c0, c1 = contexts[0], contexts[-1]
for mode in ["forward", "train"]:
    for dtype in ["fp32", "bf16"]:
        report.glue(f"mem_{mode}_{dtype}_c0", report.fmt(peak(c0, mode, dtype)))
        report.glue(f"mem_{mode}_{dtype}_c1", report.fmt(peak(c1, mode, dtype)))
d_fwd = peak(c0, "forward", "bf16") - peak(c0, "forward", "fp32")
d_train = peak(c1, "train", "bf16") - peak(c1, "train", "fp32")
train_growth = peak(c1, "train", "fp32") / peak(c0, "train", "fp32") - 1
ooms = peaks[peaks.status != "ok"]
report.glue("mem_oom_points", ", ".join(f"{r.mode} {r.dtype} at {r.context_length}" for r in ooms.itertuples()) or "none")
report.md(
    f"From context {c0} to {c1} the training peak goes from {peak(c0, 'train', 'fp32'):.3g} to "
    f"{peak(c1, 'train', 'fp32'):.3g} GiB in fp32 and the inference peak from {peak(c0, 'forward', 'fp32'):.3g} to "
    f"{peak(c1, 'forward', 'fp32'):.3g} GiB. With bf16 autocast the inference peak at context {c0} changes by "
    f"{d_fwd:+.3g} GiB and the training peak at context {c1} by {d_train:+.3g} GiB. "
    + ("It hardly changes: the training peak falls where neither the activations nor autocast's bf16 weight "
       "copies (dropped when the autocast region ends, before the optimizer step) are alive. "
       if abs(d_train) < 0.01 * peak(c1, "train", "fp32") else
       "It shrinks: the saved activations outweigh the bf16 weight copies. " if d_train < 0 else
       "It grows: the bf16 weight copies outweigh the savings on activations. ")
    + (f"The fp32 training peak moves by {train_growth:+.1%} over a {c1 // c0}× longer context: at this batch size "
       "it is set by the fixed part and what the optimizer step allocates, not by the activations."
       if abs(train_growth) < 0.05 else
       f"The fp32 training peak grows by {train_growth:.1%} over a {c1 // c0}× longer context: the activations "
       "show in it.")
)

# %% [markdown]
# The training peak has a fixed part, 16 bytes per parameter (fp32 weights, gradients and AdamW's two
# moments), and a part from the saved activations that grows with the context length: linearly for the
# projections and the feed-forward network, quadratically for the attention scores and probabilities
# of the naive attention. Whether the second part shows in the peak depends on when the peak is
# reached: the backward pass frees the activations as it goes, so a peak reached during the optimizer
# step (AdamW's temporaries on top of the fixed part) does not see them. Inference keeps only the weights
# and a layer's activations, so its peak hardly moves with context. Mixed precision does not shrink the
# fixed part at all, since autocast keeps fp32 weights, gradients and optimizer state; it stores the
# activations that matmuls produce in bf16 (half the bytes), but adds bf16 copies of the weights, cached
# for the autocast region. So bf16 saves memory where activations dominate (long contexts, training) and
# can cost memory where weights dominate (inference at short context). Points that ran out of memory:
# {glue:text}`mem_oom_points`.

# %% [markdown]
# ## (d) One residual-stream activation
#
# The residual stream between two blocks is a (batch, context, d_model) tensor. In single precision,
# for the {glue:text}`mem_size` model (d_model = {glue:text}`mem_d_model`) at batch 4:

# %% tags=["nbval-check-output"]
resid = pd.DataFrame([{"context_length": c, "elements": 4 * c * cfg.d_model,
                       "fp32 MiB": memory.residual_stream_mib(4, c, cfg.d_model)} for c in contexts])
report.glue("mem_d_model", cfg.d_model)
report.glue("mem_resid_c0_mib", report.fmt(resid["fp32 MiB"][0]))
report.glue("mem_resid_c0", contexts[0])
report.glue("mem_resid_elems", f"{4 * contexts[0] * cfg.d_model:,}")
report.table(resid, floatfmt=(".0f", ".0f", ".3g"))

# %% [markdown]
# 4 × {glue:text}`mem_resid_c0` × {glue:text}`mem_d_model` = {glue:text}`mem_resid_elems` elements of 4
# bytes each, divided by 1024² bytes per MiB: {glue:text}`mem_resid_c0_mib` MiB at context
# {glue:text}`mem_resid_c0`, doubling with each doubling of the context.

# %% [markdown]
# ## (e) The largest allocations of the forward pass
#
# memory_viz's "Detail" slider hides small allocations; here the same question is a table: the
# allocations of the recorded forward pass grouped by size and by the line of this project's code that
# made them (the innermost stack frame inside `systems/`).

# %% tags=["nbval-ignore-output"]
top = largest["forward"]
report.table(top, floatfmt=".2f")

# %% tags=["nbval-ignore-output"]
first = top.iloc[0]
report.glue("mem_top_mib", report.fmt(first.size_mib))
report.glue("mem_top_count", int(first["count"]))
report.glue("mem_top_where", first.location)
logits_mib = 4 * context * cfg.vocab_size * 4 / 2**20
ffn_mib = 4 * context * cfg.d_ff * 4 / 2**20
known = {ffn_mib: f"a feed-forward hidden activation, (4, {context}, d_ff = {cfg.d_ff}) in fp32, four times the "
                  "width of the residual stream",
         logits_mib: f"the logits, (4, {context}, vocab = {cfg.vocab_size}) in fp32"}
what = next((text for mib, text in known.items() if abs(first.size_mib - mib) < 1e-6), None)
report.md(
    f"The largest allocation is {first.size_mib:.3g} MiB, made {int(first['count'])} times at `{first.location}`"
    + (f": that is {what}, computed from the shapes. " if what else ". ")
    + f"For comparison, a feed-forward hidden activation is {ffn_mib:.3g} MiB and the logits are "
    f"{logits_mib:.3g} MiB in fp32. The widest tensors of the network are its largest allocations: the "
    "feed-forward network's hidden activations, made once per layer, and the logits over the vocabulary at the "
    "end; the table names the line of code behind each."
)

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
# Where does the GPU memory of the 2.7B model (the 2026 edition's "xl") go during inference and during a
# training step, how does the peak grow with the context length and shrink with mixed precision, and which
# allocations are the largest? (2025 handout §1.1.6 and 2026 §2.1.6 (a)–(e), `memory_profiling`; part (f)
# and activation checkpointing are in the chapter on where training memory goes.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
from matplotlib import pyplot as plt

from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, sweep, vary
from systems.chapters import profiles
from systems.model import preset
from systems.profiling import memory

profile = provenance.resolve_profile(profile)
if profile == "full":
    size, contexts, batch = "2.7B", [128, 256, 512, 2048], 4  # 2025: 128-512; 2026: 128 and 2048
else:
    size, contexts, batch = "tiny", [16, 32], 2
cfg = preset(size, context_length=contexts[0])
base = BenchConfig(cfg, batch_size=batch, warmup=1, steps=2)
report.glue_all("mem", {"size": size, "context": contexts[0], "batch": batch, "d_model": cfg.d_model})

# %% [markdown]
# ## (a) The active memory timeline of one step
#
# The harness records a CUDA memory snapshot of the measured steps
# (`python -m systems.bench.e2e --size 2.7B --mode train --memory-snapshot train.pickle`), the pickle that
# [pytorch.org/memory_viz](https://pytorch.org/memory_viz) displays. Instead of screenshots of that page, this
# chapter reads the pickles itself (`systems.profiling.memory`) and draws the same "Active Memory Timeline": the
# bytes held by live tensors after every allocation and free, counting the tensors that existed before
# recording began (weights, optimizer state) from the start. One warm-up step runs first, so the optimizer state
# already exists; then one step of the {glue:text}`mem_size` model at context {glue:text}`mem_context`, batch
# {glue:text}`mem_batch`, is recorded. The phases are read from each event's Python stack (the backward pass
# runs on autograd's own thread, which has no Python frames).

# %% tags=["nbval-ignore-output"]
snapshots = {mode: memory.step_snapshot(vary(base, mode=mode)) for mode in ("forward", "train")}
timelines = {mode: memory.active_memory_timeline(s) for mode, s in snapshots.items()}
for mode, timeline in timelines.items():
    report.save_table(timeline[["event", "phase", "allocated_bytes"]], data_dir, f"timeline_{mode}")

# %% tags=["remove-input", "nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
for ax, (mode, what) in zip(axes, [("forward", "forward pass (inference)"), ("train", "training step (AdamW)")]):
    memory.plot_timeline(timelines[mode], ax=ax, title=f"{size}, context {contexts[0]}: {what}")
fig.tight_layout()

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("mem", profiles.timeline_facts(timelines["forward"], timelines["train"]))
if profile != "full":
    report.md("*No CUDA device: the timelines above come from a synthetic snapshot, not from the model.*")

# %% [markdown]
# Forward only: {glue:text}`mem_fwd_base:.3g` GiB before the step, at most {glue:text}`mem_fwd_peak:.3g` GiB.
# Training step: {glue:text}`mem_train_base:.3g` GiB before the step, at most {glue:text}`mem_train_peak:.3g`
# GiB, reached during the {glue:text}`mem_train_peak_phase` phase; per phase the highest points are
# {glue:text}`mem_train_phases`.
#
# In inference the timeline is a flat floor of weights with a thin sawtooth on top: under `no_grad` each layer's
# activations are freed as soon as the next layer has consumed them, so the peak is the weights plus a layer or
# two of activations and the logits. In the training step the floor is the weights plus AdamW's two moment
# buffers; the forward pass then climbs steadily, because every layer saves its activations for the backward
# pass; the backward pass walks back down, freeing those activations layer by layer while the gradients (as
# large as the weights) build up; the optimizer step adds short-lived temporaries, and `zero_grad` drops the
# gradients, returning to the floor.
#
# ## (b), (c) Peak memory by context length, fp32 and bf16
#
# Peak allocated memory (`torch.cuda.max_memory_allocated`) over the measured steps, after one warm-up step, for
# the {glue:text}`mem_size` model at batch {glue:text}`mem_batch`. "train" is a full step: forward, backward,
# AdamW. The 2025 edition asks for contexts 128 to 512, the 2026 edition for 128 and 2048.

# %% tags=["nbval-ignore-output"]
peaks = sweep(base, context_length=contexts, mode=["forward", "train"], dtype=["fp32", "bf16"])
report.save_table(peaks.drop(columns=[c for c in peaks if c.endswith("times_ms")]), data_dir, "peak_memory")
report.table(profiles.peak_table(peaks))

# %% tags=["remove-cell", "nbval-ignore-output"]
found = profiles.peak_facts(peaks, contexts[0])
report.glue_all("mem", found)
report.glue("mem_bf16_words", report.pick(
    abs(found["bf16_train_delta"]) < 0.01 * found["train_fp32_c1"],
    "hardly changes: the training peak falls where neither the activations nor autocast's bf16 weight copies "
    "(dropped when the autocast region ends, before the optimizer step) are alive",
    report.pick(found["bf16_train_delta"] < 0, "shrinks: the saved activations outweigh the bf16 weight copies",
                "grows: the bf16 weight copies outweigh the savings on activations")))
report.glue("mem_growth_words", report.pick(
    abs(found["train_growth_pct"]) < 5,
    "so at this batch size it is set by the fixed part and what the optimizer step allocates, not by the activations",
    "so the saved activations show in it"))

# %% [markdown]
# From context {glue:text}`mem_c0` to {glue:text}`mem_c1` (the longest at which all four ran) the training peak goes
# from {glue:text}`mem_train_fp32_c0:.3g` to {glue:text}`mem_train_fp32_c1:.3g` GiB in fp32 and the inference peak
# from {glue:text}`mem_forward_fp32_c0:.3g` to {glue:text}`mem_forward_fp32_c1:.3g` GiB. With bf16 autocast the
# inference peak at context {glue:text}`mem_c0` changes by {glue:text}`mem_bf16_fwd_delta:+.3g` GiB and the
# training peak at context {glue:text}`mem_c1` by {glue:text}`mem_bf16_train_delta:+.3g` GiB: it
# {glue:text}`mem_bf16_words`. The fp32 training peak moves by {glue:text}`mem_train_growth_pct:+.1f` % over that
# range of contexts, {glue:text}`mem_growth_words`. Points that ran out of memory: {glue:text}`mem_oom`.
#
# The training peak has a fixed part, 16 bytes per parameter (fp32 weights, gradients and AdamW's two moments,
# about 51 GiB for this 3.4-billion-parameter model), and a part from the saved activations that grows with the
# context length: linearly for the projections and the feed-forward network, quadratically for the attention
# scores and probabilities of the naive attention. Whether the second part shows in the peak depends on when
# the peak is reached: the backward pass frees the activations as it goes, so a peak reached during the
# optimizer step (AdamW's temporaries on top of the fixed part) does not see them, until the activations grow
# large enough to set the peak themselves, and then to exceed the GPU. Inference keeps only the weights and a
# layer's activations, so its peak hardly moves with context. Mixed precision does not shrink the fixed part at
# all, since autocast keeps fp32 weights, gradients and optimizer state; it stores the activations that matrix
# multiplies produce in bf16 (half the bytes), but adds bf16 copies of the weights, cached for the autocast
# region. So bf16 saves memory where activations dominate (long contexts, training) and can cost memory where
# weights dominate (inference at short context).
#
# ## (d) One residual-stream activation
#
# The residual stream between two blocks is a (batch, context, d_model) tensor. In single precision, for the
# {glue:text}`mem_size` model (d_model = {glue:text}`mem_d_model`) at batch {glue:text}`mem_batch`:

# %% tags=["nbval-check-output"]
residual = pd.DataFrame([{"context_length": c, "elements": batch * c * cfg.d_model,
                          "fp32 MiB": memory.residual_stream_mib(batch, c, cfg.d_model)} for c in contexts])
report.table(residual, floatfmt=(".0f", ".0f", ".4g"))
report.glue_all("mem_resid", {"mib": residual["fp32 MiB"][0], "elements": f"{batch * contexts[0] * cfg.d_model:,}"})

# %% [markdown]
# {glue:text}`mem_batch` × {glue:text}`mem_context` × {glue:text}`mem_d_model` = {glue:text}`mem_resid_elements`
# elements of 4 bytes each, divided by 1024² bytes per MiB: {glue:text}`mem_resid_mib:.4g` MiB at context
# {glue:text}`mem_context`, doubling with each doubling of the context.
#
# ## (e) The largest allocations of the forward pass
#
# memory_viz's "Detail" slider hides small allocations; here the same question is a table: the allocations of
# the recorded forward pass grouped by size and by the line of this project's code that made them (the
# innermost stack frame inside `systems/`).

# %% tags=["nbval-ignore-output"]
top = memory.largest_allocations(snapshots["forward"], n=10)
report.save_table(top, data_dir, "largest_forward")
report.table(top, floatfmt=".2f")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("mem", profiles.largest_facts(top, batch, contexts[0], cfg.d_ff, cfg.vocab_size))

# %% [markdown]
# The largest allocation is {glue:text}`mem_top_mib:.3g` MiB, made {glue:text}`mem_top_count` times at
# {glue:text}`mem_top_where`; matched against the shapes, it is {glue:text}`mem_top_what`. For comparison, a
# feed-forward hidden activation is {glue:text}`mem_ffn_mib:.3g` MiB and the logits are
# {glue:text}`mem_logits_mib:.3g` MiB in fp32. The widest tensors of the network are its largest allocations:
# the feed-forward network's hidden activations, made once per layer, and the logits over the vocabulary at the
# end; the table names the line of code behind each.

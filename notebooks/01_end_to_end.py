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
# # End-to-end benchmarking
#
# How long do the forward pass, the backward pass and the optimizer step of each model size take, and how
# much do the first, un-warmed steps distort that number? This chapter answers `benchmarking_script` of both
# editions of the handout: the 2025 one (§1.1.3) times forward and backward, the 2026 one (§2.1.3) adds the
# AdamW step and its 10B model.

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd

from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, cold_run, sweep
from systems.chapters.end_to_end import phase_table, scaling, warmup_effect
from systems.model import preset, preset_rows

profile = provenance.resolve_profile(profile)
if profile == "full":
    sizes, contexts, batch, warmup, steps = [r["size"] for r in preset_rows()], [128, 256, 512], 4, 5, 10
    warm_size, warm_steps = "small", 10
else:
    sizes, contexts, batch, warmup, steps = ["tiny"], [16, 32], 2, 1, 2
    warm_size, warm_steps = "tiny", 3
report.glue_all("e2e", {"batch": batch, "warmup": warmup, "steps": steps, "warm_size": warm_size})

# %% [markdown]
# ## (a) The benchmarking script
#
# The harness is `systems.bench.e2e`. It builds the model from a preset, draws random token batches (random,
# not zeros, so the embedding gathers do real work), runs `warmup` untimed steps and then `steps` timed
# ones. Every phase of a step (forward, backward, optimizer) is timed between two `torch.cuda.synchronize()`
# calls with `timeit.default_timer()`, because a CUDA call returns as soon as its work is queued: without the
# synchronisation the clock would measure how fast Python queues kernels, not how long the GPU runs them.
# The same function serves the later chapters (mixed precision, memory, `torch.compile`), and its command
# line runs sweeps:
#
# ```
# python -m systems.bench.e2e --size small medium large xl 2.7B 10B --context-length 128 256 512 \
#     --mode train --warmup 5 --steps 10 --json results.json
# ```
#
# The mode picks what a step does: `forward` (inference, no autograd), `forward_backward`, or `train` (also
# the AdamW step, the 2026 edition's third mode). A configuration that runs out of memory becomes a row with
# status `OOM` instead of ending the sweep, and the JSON file is rewritten after every row, so a sweep that
# dies half-way keeps what it measured. Each row also carries the step's model FLOPs and its model FLOPs
# utilisation (MFU), the share of the GPU's peak arithmetic the step achieved.
#
# The sizes, with their parameter counts from the architecture (vocabulary 10,000, SwiGLU feed-forward,
# untied embedding and output layer). The 2026 edition renamed our `2.7B` to "xl", dropped the 2025 xl and
# added a 10B model; both editions' names are in the table.

# %% tags=["nbval-check-output"]
report.table(pd.DataFrame(preset_rows()), floatfmt=".1f")

# %% [markdown]
# ## (b) The phases of a training step, for every size
#
# Batch {glue:text}`e2e_batch`, {glue:text}`e2e_warmup` warm-up steps, {glue:text}`e2e_steps` measured
# steps, full precision (fp32) and the naive attention of the handout's reference model. A step is a full
# training step, so each row times the forward pass, the backward pass and the AdamW step separately (mean
# and standard deviation in ms).

# %% tags=["nbval-ignore-output"]
base = BenchConfig(preset(sizes[0]), batch_size=batch, mode="train", warmup=warmup, steps=steps)
e2e = sweep(base, size=sizes, context_length=contexts)
report.save_table(e2e.drop(columns=[c for c in e2e if c.endswith("times_ms")]), data_dir, "train_step")
report.table(phase_table(e2e))

# %% tags=["remove-input", "nbval-ignore-output"]
figures.pass_times(e2e[e2e.status == "ok"], f"Time per pass, fp32, batch {batch}");

# %% tags=["remove-cell", "nbval-ignore-output"]
found = scaling(e2e, contexts[len(contexts) // 2])
report.glue_all("e2e", found)
report.glue("e2e_growth_words", report.pick(
    found["overhead_bound"],
    "more slowly than the work: the smallest model does not keep the GPU busy",
    "about as fast as the matrix-multiply work, which is parameters × tokens"))

# %% [markdown]
# At context length {glue:text}`e2e_context`, a forward pass takes {glue:text}`e2e_first_fwd_ms:.3g` ms for
# the {glue:text}`e2e_first` model and {glue:text}`e2e_last_fwd_ms:.3g` ms for {glue:text}`e2e_last`:
# {glue:text}`e2e_time_growth:.2g` times longer for {glue:text}`e2e_param_growth:.2g` times the parameters.
# Time grows {glue:text}`e2e_growth_words`. The {glue:text}`e2e_first` model's forward time changes by a
# factor of {glue:text}`e2e_ctx_growth:.2g` from {glue:text}`e2e_ctx_min` to {glue:text}`e2e_ctx_max` tokens
# per sequence: where that factor is far below the 4× growth of the work, the pass is bound by launching
# hundreds of small kernels from Python, not by arithmetic; large models, whose matrix multiplies are big
# enough to fill the GPU, scale with parameters × tokens.
#
# The backward pass costs {glue:text}`e2e_bwd_fwd_min:.2f` to {glue:text}`e2e_bwd_fwd_max:.2f` times the
# forward pass. Counting FLOPs predicts 2×: every weight matrix multiply of the forward pass needs two in the
# backward pass, one for the gradient of its input and one for the gradient of its weight. The ratio falls
# below 2 where a pass is dominated by fixed per-kernel costs rather than by arithmetic, and rises above it
# where the backward pass's extra element-wise work (the gradients of the softmax, the normalisations and the
# activation function) weighs more than in the forward. The AdamW step is element-wise work over every
# parameter and its two moments, so it grows with the parameter count and not with the context.
#
# The largest standard deviation is {glue:text}`e2e_max_cv_pct:.2g` % of its mean, for the
# {glue:text}`e2e_max_cv_size` model at context {glue:text}`e2e_max_cv_context`; the others vary less.
# Points that ran out of memory: {glue:text}`e2e_oom`. A 10B model needs 16 bytes per parameter for fp32
# weights, gradients and AdamW's two moments, about 190 GiB, more than any single GPU of this book has: the
# 2026 edition expects that row to read OOM.

# %% [markdown]
# ## (c) What warm-up does
#
# Each setting below runs in a fresh Python process, so that its first steps pay for everything a new job
# pays for once: creating the CUDA context, loading the kernels' modules, cuBLAS's workspaces and the caching
# allocator's first `cudaMalloc` calls. We time the {glue:text}`e2e_warm_size` model's forward and backward
# pass with 0, 1, 2 and 5 warm-up steps and keep every measured step.

# %% tags=["nbval-ignore-output"]
cold = pd.DataFrame([
    {"warmup": w, "step": i, "ms": t}
    for w in [0, 1, 2, 5]
    for i, t in enumerate(cold_run(BenchConfig(preset(warm_size, context_length=contexts[0]), batch_size=batch,
                                               warmup=w, steps=warm_steps))["step_times_ms"])
])
report.save_table(cold, data_dir, "warmup")
summary, facts = warmup_effect(cold)
report.table(summary)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.warmup_steps(cold, f"{warm_size} model, fresh process per warm-up setting");

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("e2e", facts)

# %% [markdown]
# Without warm-up the first measured step takes {glue:text}`e2e_w0_first:.3g` ms, about
# {glue:text}`e2e_first_over_median:.3g` times the median step ({glue:text}`e2e_w0_median:.3g` ms), so the
# mean over the measured steps is {glue:text}`e2e_w0_mean:.3g` ± {glue:text}`e2e_w0_std:.3g` ms against
# {glue:text}`e2e_most_mean:.3g` ± {glue:text}`e2e_most_std:.3g` ms after {glue:text}`e2e_most` warm-up
# steps; one or two warm-up steps give {glue:text}`e2e_w1_mean:.3g` and {glue:text}`e2e_w2_mean:.3g` ms.
#
# The first step pays one-time costs that a training run amortises over thousands of steps: the CUDA context
# and the kernels' modules are loaded lazily, cuBLAS picks algorithms and allocates its workspace, and the
# caching allocator has to `cudaMalloc` every activation buffer before it can recycle them. A step or two is
# usually enough to pay them, but later steps can still differ (allocator growth at a new peak, GPU clocks
# ramping up), which is why every benchmark in this book warms up before it times anything, and why a mean
# over steps that include the first one says little about steady-state speed.

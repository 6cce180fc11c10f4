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
# Which CUDA kernels does a forward pass, a backward pass and an AdamW step of the Transformer spend their GPU
# time in, and how does attention's softmax compare with its matrix multiplies? (2025 handout §1.1.4 and 2026
# §2.1.4, `nsys_profile`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, sweep, vary
from systems.chapters import profiles
from systems.model import preset
from systems.profiling import kernels as k
from systems.profiling import nsys

profile = provenance.resolve_profile(profile)
MODES = ("forward", "train")
if profile == "full":
    sizes, context, batch, warmup, steps, focus = ["small", "medium", "large", "xl", "2.7B"], 256, 4, 2, 3, "xl"
    timing = dict(warmup=5, steps=10)  # the unprofiled run of (a), as in the end-to-end chapter
    more = ([("small", c, m) for c in (128, 512, 1024) for m in MODES] + [("large", c, "train") for c in (512, 1024)]
            + [("2.7B", 512, "train"), ("xl", 1024, "train"), ("2.7B", 1024, "train")])
    two_sizes = ["small", "large", "2.7B"]  # the 2026 question: sizes at several contexts of a training step
else:
    sizes, context, batch, warmup, steps, focus = ["tiny"], 16, 2, 1, 2, "tiny"
    timing = dict(warmup=1, steps=2)
    more, two_sizes = [("tiny", 32, m) for m in MODES], ["tiny"]
points = [(s, context, m) for s in sizes for m in MODES] + more
base = BenchConfig(preset(sizes[0]), batch_size=batch, warmup=warmup, steps=steps)
configs = [vary(base, size=s, context_length=c, mode=m) for s, c, m in points]
report.glue_all("nsys", {"warmup": warmup, "steps": steps, "context": context, "focus": focus, "batch": batch})

# %% [markdown]
# ## How the profile is taken
#
# `systems.profiling.target` runs the end-to-end harness with NVTX ranges on: every configuration sits in a
# range `cfg:SIZE/CONTEXT/MODE`, its {glue:text}`nsys_warmup` warm-up steps in `warmup` and its
# {glue:text}`nsys_steps` profiled steps in `measured`, each step's phases in `forward`, `backward`,
# `optimizer`, each Transformer block in `attention` and `feed_forward`, and the naive attention's sub-steps
# in `attention_scores`, `attention_softmax` and `attention_output`. One `nsys profile` session covers all
# configurations:
#
# ```
# nsys profile -t cuda,nvtx -s none --cpuctxsw=none -o report \
#     python -m systems.profiling.target --size small medium --context-length 256 --mode forward train
# ```
#
# The report is exported to SQLite and every kernel is attributed to the NVTX ranges that were open on the CPU
# when it was *launched* (launches are asynchronous: a kernel often runs after its range has closed on the
# CPU). Only the `measured` steps are analysed, which keeps the warm-up out as the 2026 edition's
# `--nvtx-capture` advice intends. A configuration that runs out of memory is a row with status OOM, and the
# session goes on. `torch.compile` is off throughout: fused kernels would blur which operation a kernel
# belongs to.
#
# The profiled configurations: every 2025 size at context {glue:text}`nsys_context`, inference and a training
# step, the small model at the other context lengths, and training steps at longer contexts for the sizes of
# the 2026 question, all at batch {glue:text}`nsys_batch` in fp32.

# %% tags=["remove-cell", "nbval-ignore-output"]
prof, found = profiles.profiled(configs, profile == "full")
if not found["real"]:
    report.md("*No nsys profile on this machine: the kernel trace below is synthetic and its numbers mean nothing; "
              "the benchmark rows are real.*")
bench, kernels, ranges = prof["bench"], prof["kernels"], prof["ranges"]
measured = kernels[kernels.stage == "measured"]
report.save_table(nsys.kernel_summary(measured, by=["config", "phase", "op", "category", "name"]), data_dir, "kernels")
report.save_table(bench.drop(columns=[c for c in bench if c.endswith("times_ms")]), data_dir, "bench")
report.glue_all("nsys", {"check": found["check"], "oom": found["oom"]})

# %% [markdown]
# Configurations that ran out of memory: {glue:text}`nsys_oom`. The GPU time of all kernels read from the
# report's SQLite export {glue:text}`nsys_check` (the check of our reading against the tool's own table).
#
# ## (a) The forward pass, timed by nsys and by Python
#
# For each forward-only configuration: the `forward` ranges of the measured steps projected onto the GPU (from
# the start of the first kernel launched in the range to the end of the last), the Python timer of the same run
# (under the profiler), and the Python timer of a separate run without the profiler (5 warm-up and 10 measured
# steps, as in the end-to-end chapter).

# %% tags=["nbval-ignore-output"]
unprofiled = sweep(vary(base, mode="forward", context_length=context, **timing), size=sizes)
fwd = k.forward_times(bench, ranges, unprofiled, context)
report.save_table(fwd, data_dir, "forward_times")
report.table(fwd, missing="not timed")  # (the unprofiled timing covers context 256 only)
report.glue_all("nsys_a", profiles.forward_agreement(fwd, context))

# %% [markdown]
# At context {glue:text}`nsys_context` the forward pass measured by nsys takes {glue:text}`nsys_a_ratio_min:.3g`
# to {glue:text}`nsys_a_ratio_max:.3g` times the Python timing without the profiler (furthest apart for the
# {glue:text}`nsys_a_most_apart` model). The two {glue:text}`nsys_a_verdict`.
#
# ## (b) The kernels that dominate
#
# For each model size at context {glue:text}`nsys_context`: the kernel with the most GPU time in the forward
# pass of inference, its share of the pass and how often it runs per pass, and the same for a full training
# step's forward and backward passes.

# %% tags=["nbval-ignore-output"]
top = k.top_kernels(kernels, ranges, sizes, context)
report.save_table(top, data_dir, "top_kernels")
report.table(top, floatfmt=".2f")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("nsys_b", profiles.top_kernel_facts(top, focus))

# %% [markdown]
# For the {glue:text}`nsys_focus` model the kernel with the most forward-pass time is
# {glue:text}`nsys_b_top`, {glue:text}`nsys_b_share_pct:.0f` % of the pass, called
# {glue:text}`nsys_b_calls:.0f` times per forward pass. {glue:text}`nsys_b_matmul_words` In the training step
# {glue:text}`nsys_b_same`, at {glue:text}`nsys_b_train_share_pct:.0f` % of the forward and backward time for
# the {glue:text}`nsys_focus` model. The call count follows the architecture: each of the model's layers runs
# its four attention projections and three feed-forward matrices through GEMMs, and the most frequent GEMM
# shape is the one repeated in every layer.
#
# The top kernels of the forward pass of the {glue:text}`nsys_focus` model (inference, per pass):

# %% tags=["nbval-ignore-output"]
per_kernel = k.forward_kernels(kernels, ranges, focus, context)
report.table(per_kernel.head(12)[["name", "category", "count", "total_ms", "mean_us", "share"]], floatfmt=".3g")

# %% [markdown]
# ## (c) What besides matrix multiplies costs time
#
# The forward pass of the {glue:text}`nsys_focus` model by kernel category, and the non-matmul kernels that
# take at least 1 % of it:

# %% tags=["nbval-ignore-output"]
cats = k.forward_kernels(kernels, ranges, focus, context, by="category")
report.table(cats[["category", "count", "total_ms", "share"]], floatfmt=".3g")
report.table(per_kernel[(per_kernel.category != "matmul") & (per_kernel.share >= 0.01)]
             [["name", "category", "count", "total_ms", "share"]].head(12), floatfmt=".3g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("nsys_c", profiles.category_facts(cats))

# %% [markdown]
# Kernels other than matrix multiplies take {glue:text}`nsys_c_nonmm_pct:.0f` % of the forward pass:
# {glue:text}`nsys_c_parts`. The element-wise kernels (RoPE's multiplies and adds, the causal mask's
# `masked_fill`, the scaling of the scores, SwiGLU's sigmoid and products, the residual additions, RMSNorm's
# squares and products) and the softmax each read and write whole activation tensors for a handful of FLOPs
# per element, so they run at memory bandwidth, not at tensor-core speed; their share is the part of the pass
# that operator fusion (the `torch.compile` chapter) can remove.
#
# ## (d) A training step with AdamW
#
# Share of GPU time by kernel category, inference (forward only) against a full training step (forward,
# backward, AdamW), for every size at context {glue:text}`nsys_context`:

# %% tags=["nbval-ignore-output"]
category_shares = k.category_shares(kernels, sizes, context)
report.save_table(category_shares, data_dir, "category_shares")
report.table(category_shares, floatfmt=".3f")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("nsys_d", profiles.training_step_facts(category_shares, kernels, ranges, focus, context))

# %% [markdown]
# For the {glue:text}`nsys_focus` model matrix multiplies take {glue:text}`nsys_d_mm_inf_pct:.0f` % of the GPU
# time in inference and {glue:text}`nsys_d_mm_train_pct:.0f` % in a training step, where the GPU spends
# {glue:text}`nsys_d_forward_ms:.3g` ms in the forward pass, {glue:text}`nsys_d_backward_ms:.3g` ms in the
# backward pass and {glue:text}`nsys_d_optimizer_ms:.3g` ms in the optimizer step; AdamW's fused multi-tensor
# kernels take {glue:text}`nsys_d_optimizer_pct:.1f` % of the step. The matmul share is
# {glue:text}`nsys_d_words`.
#
# The 2026 edition asks for two sizes at three context lengths above 128, the longest being the longest that
# fits. The training steps profiled for it (ms per phase, Python timer under the profiler; a missing context ran
# out of memory):

# %% tags=["nbval-ignore-output"]
report.table(profiles.steps_by_context(bench, two_sizes), floatfmt=".1f")

# %% [markdown]
# The step time grows faster than linearly with the context for the naive attention: its score matrices are
# T × T per head, so their kernels (and the memory that runs out first) grow quadratically while everything
# else grows linearly.
#
# ## (e) Softmax against matrix multiplies inside attention
#
# The NVTX sub-ranges of the naive attention, per forward pass (inference), against their FLOPs: the scores
# $QK^\top$ and the output $PV$ each cost $2 B H T^2 d_h$ FLOPs, the softmax about $5 B H T^2$ (a maximum, a
# subtraction, an exponential, a sum and a division per score).

# %% tags=["nbval-ignore-output"]
attention = k.attention_ops(kernels, ranges, [(s, c) for s, c, m in points if m == "forward"], batch)
report.save_table(attention, data_dir, "attention_ops")
report.table(attention, floatfmt=".3g")

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(profiles.attention_parts(attention, sizes[0]), "context", "ms", "part",
              f"{sizes[0]} model: attention's parts against context length", "context length",
              "ms per forward pass (all layers)", palette=None);

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("nsys_e", profiles.attention_facts(attention, focus, context))

# %% [markdown]
# For the {glue:text}`nsys_focus` model at context {glue:text}`nsys_context` the softmax takes
# {glue:text}`nsys_e_time_ratio:.2g` times the time of the two attention matrix multiplies while doing only
# {glue:text}`nsys_e_flop_ratio:.2g` times their FLOPs: per FLOP it is {glue:text}`nsys_e_per_flop:.3g` times
# slower. The matrix multiplies do $4 d_h / 5$ times the softmax's FLOPs, yet the softmax takes a sizeable
# fraction of their time. The matrix multiplies run on tensor cores and reuse every loaded element $d_h$ times;
# the softmax reads and writes the whole $T \times T$ score matrix for a few operations per element, so it is
# bound by memory bandwidth, as are the scaling and masking that precede it. This is what FlashAttention
# removes: it fuses the scores, the softmax and the output product into one kernel that never writes the score
# matrix to memory.

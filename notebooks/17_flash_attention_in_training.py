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
# # FlashAttention in training: per call, at training shapes, in the model
#
# The previous chapter timed our FlashAttention-2 kernels alone. A user meets them elsewhere: once per layer and
# pass, called from Python, at the shapes of their model, inside a training step that also runs matrix products,
# norms and an optimizer. What does a call cost the host, how do the kernels do at the shapes people train with,
# and what does a training step with `attention="flash_triton"`, or with our fastest, `attention="flash"`, cost
# against one with `attention="sdpa"`?
# (2025 handout §1.3.2 (e), §1.3.4; 2026 §4.2.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined: CPU runs use the interpreter

from systems import figures, provenance, report
from systems.attention.fastest import fastest_flash
from systems.bench import call_overhead, flash_sweep as fs
from systems.chapters import flash_training as ft
from systems.device import local_device
from systems.model import preset
from systems.resumable import measured, measured_sweep

profile = provenance.resolve_profile(profile)
if profile == "full":
    overhead_run, floor_run = dict(shape=(1, 1, 128, 64), dtype="bf16", n_calls=300), dict(n_calls=300)
    train_shapes = dict(seq_lens=(512, 1024, 2048, 4096, 8192), head_dims=(64, 80, 128),
                        batch_heads=((4, 16), (8, 32)), dtypes=("bf16",))
    model_sizes, model_contexts, compiled_sizes = ["small", "medium", "large", "xl", "2.7B"], [512, 1024, 2048], ["small"]
    tokens, model_dtype, model_steps = 8192, "bf16", 20
else:
    overhead_run = dict(shape=(1, 1, 32, 16), dtype="fp32", n_calls=2)
    floor_run = dict(shape=(1, 1, 32, 16), dtype="fp32", n_calls=2, rounds=2, modes=("eager",))
    train_shapes = dict(seq_lens=(64,), head_dims=(16, 24), batch_heads=((1, 2),), dtypes=("fp16",))
    model_sizes, model_contexts, compiled_sizes, tokens, model_dtype, model_steps = ["tiny"], [32], [], 64, "fp32", 2
timing = dict(rep_ms=20, warmup_ms=5)
report.glue_all("flash", {"tokens": tokens, "model_steps": model_steps})

# %% [markdown]
# ## The per-call floor
#
# At one head of 128 tokens the kernels have almost nothing to do, so a call costs what the host spends issuing it.
# An eager call of ours on a GPU goes to a C++ operator with a C++ autograd node, which launches the kernels Triton
# compiled through the CUDA driver, with no Python per call: the first call of each layout runs the Python launcher
# and hands the C++ side a plan (which compiled kernels, grids and arguments), later calls of that layout launch
# from it (`systems/attention/flash_triton/host.py`). The Python path it replaced stays, as
# `attention="flash_triton_python"`, for comparison and where the C++ one cannot be built.
#
# First the Python path's forward layer by layer, called back to back: the Python checks; one kernel launch through
# Triton's JIT (argument binding, specialisation, cache look-up, then the compiled launcher), with fixed tiles and
# with the tiles chosen for the shape; the forward as a later call of the same layout makes it, allocating the
# outputs and handing them to the compiled kernel it remembered from the first call; the custom op that compiled
# code calls; the autograd function. Then the backward's allocations and remembered launches; the C++ operator's
# forward and backward alone; a Python autograd function that does nothing; SDPA's own FlashAttention-2 kernels (the
# aten operators behind its flash back end) inside a Python `autograd.Function` (what autograd through Python adds
# to a C++ kernel path; SDPA's own backward is C++); and whole calls of ours, from C++ and from Python, and of SDPA's
# back ends. Each whole call is timed twice: as a training loop runs it, where `backward()` hands the graph to
# autograd's device thread and waits for it, and with autograd's multithreading off
# (`torch.autograd.set_multithreading_enabled(False)`), where the backward runs on the calling thread. *host_us* is
# the time the host needs to issue one call, *wall_us* the time per call until the GPU has finished all of them:
# where the two agree, the host sets the pace.

# %% tags=["nbval-ignore-output"]
overhead = measured(data_dir, "flash_call_overhead", call_overhead.call_overhead, **overhead_run)
report.table(overhead, ".1f")

# %% tags=["remove-cell", "nbval-ignore-output"]
call = ft.call_facts(overhead)
report.glue("flash_call_words", call["words"])

# %% [markdown]
# {glue:text}`flash_call_words`

# %% [markdown]
# The same forward and backward call three ways, µs per call: eager; with the attention under `torch.compile`, where our
# Triton kernels are custom ops inside the compiled graph; and captured whole, forward and backward, in a CUDA graph
# (`torch.cuda.graph`) that is replayed, so no Python runs per call at all. Beside the Triton kernels from C++ and from
# Python, `flash_cuda`: our CUDA C++ kernels behind the same kind of C++ operator; and `flash`, our fastest
# FlashAttention for the device, the name to give the model to train rather than to compare kernels
# (`systems/attention/fastest.py`): here it runs {glue:text}`flash_fastest_kernels`, which on an H100 or H200 are the
# kernels written for Hopper of chapter 20 and elsewhere the Triton kernels. The eager calls are timed first, before
# anything is compiled or captured, as in an eager training loop; then the compiled ones, then the graphs. Within each,
# the implementations take turns, a block of calls each per round for five rounds, and the median block is kept: a floor
# this small drifts with the machine by more than the implementations differ, so they are timed side by side in time.

# %% tags=["nbval-ignore-output"]
floor = measured(data_dir, "flash_call_floor", call_overhead.call_floor,
                 **{"shape": overhead_run["shape"], "dtype": overhead_run["dtype"], **floor_run})
report.table(floor, ".1f")
report.glue_all("flash_floor", ft.floor_facts(floor))
report.glue("flash_fastest_kernels", fastest_flash(local_device()))

# %% [markdown]
# Eager, a call of ours launched from C++ costs {glue:text}`flash_floor_flash_triton_over_sdpa:.3g`× a call of SDPA's
# FlashAttention-2 back end, launched from Python {glue:text}`flash_floor_flash_triton_python_over_sdpa:.3g`×;
# `flash_cuda` costs {glue:text}`flash_floor_flash_cuda_over_sdpa:.3g`× and `flash`
# {glue:text}`flash_floor_flash_over_sdpa:.3g`×.
#
# A replayed graph removes the host from the call: what is left is the kernels' own time and their launch gaps on
# the GPU, what a model captured in CUDA graphs pays (`torch.compile(mode="reduce-overhead")` captures the same way,
# with bookkeeping of its own per call). In eager mode the floor is the host's path above (for ours, the C++
# operator), which the model pays once per layer and pass.
#
# ## At the shapes people train with
#
# Batch × heads of (4 × 16) and (8 × 32), sequences from 512 to 8192 tokens, head dims 64 (the 2025 presets), 80
# (the 2026 edition's xl, 2560 / 32: not a power of two; our kernels take it as two column blocks, 64 + 16 columns,
# every product in two parts) and 128 (the 10B), causal and not, bf16; forward and backward together, against both SDPA back ends in the same run. Our
# kernels run as a user's call runs them: tiles autotuned for each shape key at its first call (untimed), then
# remembered. The summary gives our time over each back end's (geometric mean over the sequences) and how many
# shapes are slower.

# %% tags=["nbval-ignore-output"]
shapes = measured(data_dir, "flash_training_shapes", fs.training_shapes, **train_shapes, **timing)
summary, found = ft.training_summary(shapes)
report.table(summary, ".3f")
report.glue_all("flash_train", found)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(ft.training_ratios(shapes), "n_q", "time ratio", "d", "ours over SDPA's back ends, forward + backward",
              "sequence length", "our time / theirs", style="causal", col="against", logy=False, reference=1,
              legend_below=True);

# %% [markdown]
# Of {glue:text}`flash_train_shapes` training shapes, ours is slower than SDPA's FlashAttention-2 back end at
# {glue:text}`flash_train_slower_sdpa_flash` and slower than cuDNN at {glue:text}`flash_train_slower_sdpa_cudnn`;
# over all of them our time is {glue:text}`flash_train_gm_sdpa_flash:.3g`× the FlashAttention-2 back end's and
# {glue:text}`flash_train_gm_sdpa_cudnn:.3g`× cuDNN's (geometric means). The shortest sequences sit near the
# per-call floor above: a call there takes a few tenths of a millisecond, and the host's jitter moves those ratios
# from run to run by more than the kernels differ. From {glue:text}`flash_train_long_from` tokens on
# ({glue:text}`flash_train_shapes_long` shapes), where the kernels set the time, ours is
# {glue:text}`flash_train_gm_sdpa_flash_long:.3g`× the FlashAttention-2 back end's time and
# {glue:text}`flash_train_gm_sdpa_cudnn_long:.3g`× cuDNN's, slower than cuDNN at
# {glue:text}`flash_train_slower_sdpa_cudnn_long` of them.
#
# ## In the model
#
# What a user of the model sees: full training steps (forward, backward, AdamW; bf16 autocast) of each size with
# `attention="flash_triton"` and with `attention="flash"` against `attention="sdpa"`, at contexts 512, 1024 and 2048,
# with {glue:text}`flash_tokens` tokens per batch (16, 8 or 4 sequences), eager and, for the small model, with
# `torch.compile` on the whole model. Each step runs as a training loop runs it: one device sync per step (where a loop
# would read the loss), none between the forward pass, the backward pass and the optimizer, so the host can run ahead of
# the GPU from one phase into the next. Steps that short are bound by the host, whose speed drifts during a run (clocks,
# where the threads land) by more than the difference we look for; so each point is one model whose blocks switch
# attention between steps (same weights, optimizer and allocator), the three interleaved (A B C, C B A, ...) after 3
# warm-up steps each. The table gives each attention's median of {glue:text}`flash_model_steps` steps. Each ratio of
# ours over SDPA's is the median of the rounds' ratios: a round's steps ran side by side, so the host's drift cancels
# in each. After each attention of ours, `low` and `high` give the ratio's 95% interval, from a bootstrap over the
# rounds: where it holds 1, the run cannot tell that one of ours from SDPA's. In the model, `sdpa` runs
# {glue:text}`flash_model_sdpa_backends` (PyTorch's dispatcher chooses by device, dtype and the inputs' shapes and
# strides); `flash` runs {glue:text}`flash_fastest_kernels`.

# %% tags=["nbval-ignore-output"]
chosen, backends = ft.sdpa_choices(model_sizes, model_contexts, tokens, model_dtype)
report.glue("flash_model_sdpa_backends", backends)
steps = measured_sweep(data_dir, "flash_model_steps", fs.model_step_at,
                       fs.model_step_points(model_sizes, model_contexts, compiled_sizes), tokens, model_dtype,
                       attentions=("sdpa", "flash_triton", "flash"), steps=model_steps)
table, found = ft.in_model(steps)
report.save_table(ft.in_model_rows(steps), data_dir, "in_model")
report.table(table, ".3f")
report.glue_all("flash_model", found)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(ft.in_model_ratios(table), "context_length", "ratio", "size", "training step: ours over sdpa",
              "context length", "our step time / SDPA's", style="mode", col="ours", logy=False, reference=1,
              palette=None, legend_below=True);

# %% [markdown]
# Over the {glue:text}`flash_model_points` training steps measured, `flash_triton` takes
# {glue:text}`flash_model_gm:.3f`× the SDPA model's step time (geometric mean) and is slower at
# {glue:text}`flash_model_slower` of them, at {glue:text}`flash_model_slower_clear` beyond the interval (faster beyond
# it at {glue:text}`flash_model_faster_clear`); the worst is {glue:text}`flash_model_worst`. Eager, ours is slower at
# {glue:text}`flash_model_slower_eager` of {glue:text}`flash_model_points_eager` points
# ({glue:text}`flash_model_slower_clear_eager` beyond the interval; {glue:text}`flash_model_gm_eager:.3f`×); compiled,
# where the compiler launches our kernels from its own code, at {glue:text}`flash_model_slower_compiled` of
# {glue:text}`flash_model_points_compiled` ({glue:text}`flash_model_slower_clear_compiled` beyond the interval;
# {glue:text}`flash_model_gm_compiled:.3f`×). Points that did not fit: {glue:text}`flash_model_oom`.
#
# Our fastest, `flash`, takes {glue:text}`flash_model_fastest_gm:.3f`× the SDPA model's step time and is slower at
# {glue:text}`flash_model_fastest_slower` of the {glue:text}`flash_model_fastest_points` points, at
# {glue:text}`flash_model_fastest_slower_clear` beyond the interval (faster beyond it at
# {glue:text}`flash_model_fastest_faster_clear`); the worst is {glue:text}`flash_model_fastest_worst`. Eager it is
# slower at {glue:text}`flash_model_fastest_slower_eager` of {glue:text}`flash_model_fastest_points_eager`
# ({glue:text}`flash_model_fastest_slower_clear_eager` beyond the interval;
# {glue:text}`flash_model_fastest_gm_eager:.3f`×), compiled at {glue:text}`flash_model_fastest_slower_compiled` of
# {glue:text}`flash_model_fastest_points_compiled` ({glue:text}`flash_model_fastest_slower_clear_compiled` beyond
# the interval; {glue:text}`flash_model_fastest_gm_compiled:.3f`×).
#
# Where the difference goes, at the eager point where `flash_triton` loses most: the same step with each attention, its
# wall time (the steps interleaved, as above) next to the GPU's kernel time (torch.profiler, summed over the step's
# kernels). The profiler runs in a Python process of its own: a profiler session slows the host-bound steps timed after
# it in its process. What the wall time has beyond the kernels is time the GPU waited for the host.

# %% tags=["nbval-ignore-output"]
eager = table[table["mode"] == "eager"].dropna(subset=["flash_triton/sdpa"])
worst = eager.loc[eager["flash_triton/sdpa"].idxmax()]
busy, _ = measured(data_dir, ("in_model_kernel_time", "in_model_kernel_time_own"), fs.step_kernel_time,
                   *ft.point(worst), tokens, model_dtype)
report.table(busy, ".1f")
report.glue_all("flash_busy", ft.busy_facts(busy, worst, preset(worst["size"]).num_layers, call))

# %% [markdown]
# At {glue:text}`flash_busy_point` our step takes {glue:text}`flash_busy_step_words` than SDPA's,
# {glue:text}`flash_busy_kernel_words`. {glue:text}`flash_busy_words`
#
# This chapter runs inside a Jupyter kernel, which has Python threads of its own, and after sections that left much
# loaded. An eager call of ours runs no Python past its checks, forward or backward, as SDPA's does not; a step still
# runs the rest of the model's Python. So the same point once more, interleaved as above, here and in a fresh Python
# process that runs nothing else:

# %% tags=["nbval-ignore-output"]
apart = measured(data_dir, "in_model_process", fs.here_and_apart, *ft.point(worst), tokens, model_dtype, model_steps)
report.table(apart, ".3f")
report.glue_all("flash_apart", ft.apart_facts(apart))

# %% [markdown]
# {glue:text}`flash_apart_words`
#
# Where the step is bound by the GPU instead, the host drops out and the kernels decide: the largest model that fit,
# at its longest context, timed as above, its kernels split into the attention's own (those that ran with one
# attention and not with the other) and the rest, which the model runs whichever attention it calls.

# %% tags=["nbval-ignore-output"]
bound = eager.iloc[-1]  # sizes and contexts ascend: the largest model that fit, at its longest context
bound_times, own = measured(data_dir, ("in_model_gpu_bound", "in_model_own_kernels"), fs.step_kernel_time,
                            *ft.point(bound), tokens, model_dtype)
report.table(bound_times, ".1f")
report.table(own.assign(kernel=own.kernel.str.slice(0, 72)), ".2f")
report.glue_all("flash_bound", ft.bound_facts(bound_times, own, bound, chosen[ft.point(bound)]))

# %% [markdown]
# At {glue:text}`flash_bound_point`, where SDPA runs its {glue:text}`flash_bound_backend` back end, our step takes
# {glue:text}`flash_bound_step_words`; our attention's own kernels take {glue:text}`flash_bound_own_words` per step
# than SDPA's, the kernels both share {glue:text}`flash_bound_shared_words`. {glue:text}`flash_bound_longest`

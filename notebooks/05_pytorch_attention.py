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
# # Attention in plain PyTorch, eager and compiled
#
# How long do the forward and backward passes of textbook attention take, how much memory does it keep for the
# backward pass, where does it run out, and what does `torch.compile` change? (2025 handout §1.2.1 and §1.3.1
# (a), 2026 §4.1, `pytorch_attention` and `torch_compile`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import torch

from systems import figures, provenance, report
from systems.bench.attention import (BATCH, HEAD_DIMS, SEQ_LENS, compiled_side_by_side, first_oom, memory_growth,
                                     naive_attention_memory, sweep)
from systems.chapters.attention import compile_facts

profile = provenance.resolve_profile(profile)
if profile == "full":
    head_dims, seq_lens, batch, warmup, steps, backend = HEAD_DIMS, SEQ_LENS, BATCH, 5, 100, "inductor"
else:
    # aot_eager traces the compiled path without code generation: the smoke run checks the path, not the speed
    head_dims, seq_lens, batch, warmup, steps, backend = (16, 32), (64, 128), 2, 1, 2, "aot_eager"
device_bytes = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 80 * 2**30
report.glue_all("attn", {"batch": batch, "warmup": warmup, "steps": steps})

# %% [markdown]
# ## The grid (§1.2.1)
#
# Single-head attention, batch {glue:text}`attn_batch`, inputs (B, N, d) in fp32, the naive formula of
# `systems.attention.reference` (scores, softmax, weighted sum, no mask). For each head dimension d and sequence
# length N: {glue:text}`attn_warmup` warm-up passes, then {glue:text}`attn_steps` timed forward passes and
# {glue:text}`attn_steps` timed backward passes (each backward after its own untimed forward), the device
# synchronised after every pass. `mem_before_bwd_MiB` is `torch.cuda.memory_allocated()` right before a backward
# pass: what the forward pass left for it. The same grid runs compiled further down; this table is the eager
# half.

# %% tags=["nbval-ignore-output"]
runs = sweep(head_dims, seq_lens, compiled=(False, True), batch=batch, warmup=warmup, steps=steps, backend=backend)
report.save_table(runs, data_dir, "attention_grid")
eager = runs[~runs.compiled].drop(columns="compiled")
report.table(eager, ".3f")

# %% tags=["remove-input", "nbval-ignore-output"]
ok = eager.apply(pd.to_numeric, errors="coerce").dropna()
times = ok.melt(id_vars=["d", "seq_len"], value_vars=["fwd_ms", "bwd_ms"], var_name="pass", value_name="ms")
figures.lines(times, "seq_len", "ms", "d", "naive attention, time per pass", "sequence length", "ms", style="pass");
figures.lines(ok, "seq_len", "mem_before_bwd_MiB", "d", "memory in use before the backward pass", "sequence length",
              "MiB");

# %% [markdown]
# ## Memory on paper
#
# What naive attention holds, from `naive_attention_memory` (fp32, batch {glue:text}`attn_batch`, d = 16): the
# forward pass forms the scores $S = QK^\top/\sqrt{d}$ and $P = \mathrm{softmax}(S)$, each $B \cdot N^2$
# numbers; autograd keeps P (the softmax backward and the product PV both need it) and frees S. The backward
# pass forms $dP = dO\,V^\top$ and $dS$ from it, two more $B \cdot N^2$ matrices, while P is still alive. The
# (B, N, d) tensors are a rounding error beside them.

# %% tags=["nbval-check-output"]
paper = pd.DataFrame([{"seq_len": n, **{k: v / 2**20 for k, v in naive_attention_memory(batch, n, 16).items()}}
                      for n in seq_lens])
report.table(paper, ".1f")

# %% tags=["remove-cell", "nbval-ignore-output"]
found = first_oom(eager, batch, device_bytes)
report.glue_all("attn_fail", found)
report.glue("attn_fail_words", report.pick(
    found["measured"], "The smallest configuration of the grid that ran out of memory is",
    "No configuration of the grid ran out of memory on this device; by the formula, the first power-of-two length "
    "that would is"))
report.glue_all("attn_mem", memory_growth(eager, batch))

# %% [markdown]
# {glue:text}`attn_fail_words` d = {glue:text}`attn_fail_d`, N = {glue:text}`attn_fail_n`. There one
# $B \cdot N^2$ fp32 matrix is {glue:text}`attn_fail_score_matrix_gib:.3g` GiB. The forward pass peaks at two of
# them (S and P, {glue:text}`attn_fail_peak_forward_gib:.3g` GiB), leaves one for the backward pass
# ({glue:text}`attn_fail_saved_for_backward_gib:.3g` GiB with the inputs), and the backward pass needs three at
# once (P, dP, dS: {glue:text}`attn_fail_peak_backward_gib:.3g` GiB) against
# {glue:text}`attn_fail_device_gib:.3g` GiB on the device.
#
# Measured, the memory held for the backward pass grows as $N^{\,s}$ with $s$ = {glue:text}`attn_mem_slope:.2f`
# over the longer sequences, against 2 for a quadratic; at N = {glue:text}`attn_mem_n` (d =
# {glue:text}`attn_mem_d`) the device held {glue:text}`attn_mem_measured_mib:.4g` MiB before the backward pass
# against {glue:text}`attn_mem_formula_mib:.4g` MiB by the formula.
#
# **What the numbers say.** The head dimension hardly matters for memory: everything that grows is $B \cdot
# N^2$, so each doubling of the sequence length quadruples what the forward pass keeps for the backward pass
# (the P matrix) and what the backward pass needs on top of it (dP and dS), and all of it is freed again once
# the gradients of Q, K and V are formed. The time behaves alike at long sequences, where the passes are
# dominated by reading and writing $N^2$ elements rather than by the $4 N^2 d$ FLOPs of the two products: the
# backward pass reads and writes more of these matrices and takes longer than the forward.
#
# **Removing the $N^2$ storage.** Nothing in attention needs the whole N × N matrix at once: each row of the
# output only needs the running maximum and sum of its softmax. FlashAttention-2 computes the output tile by
# tile with this online softmax, keeps only the N log-sum-exp values for the backward pass, and recomputes P tile
# by tile there. Memory becomes linear in N, and the $N^2$ traffic to global memory disappears (the
# FlashAttention chapter measures both). Cheaper partial fixes: activation checkpointing of the attention block
# (recompute P in the backward pass instead of keeping it), half precision (halves every term), or chunking the
# queries (bounds the live part of S to a chunk of rows).
#
# ## Compiled attention (§1.3.1 a)
#
# The same grid with the attention function wrapped in `torch.compile` (compiled afresh for each shape, during
# the warm-up passes, so the timed passes run compiled code only).

# %% tags=["nbval-ignore-output"]
side = compiled_side_by_side(runs)
report.save_table(side, data_dir, "attention_compiled")
report.table(side, ".3f")

# %% tags=["remove-input", "nbval-ignore-output"]
gains = side.dropna(subset=["fwd_speedup", "bwd_speedup"]).melt(
    id_vars=["d", "seq_len"], value_vars=["fwd_speedup", "bwd_speedup"], var_name="pass", value_name="speed-up")
figures.lines(gains, "seq_len", "speed-up", "d", "torch.compile on naive attention", "sequence length",
              "eager time / compiled time", style="pass", logy=False, reference=1);

# %% tags=["remove-cell", "nbval-ignore-output"]
found = compile_facts(side)
report.glue_all("attn_compile", found)
report.glue("attn_compile_faster", report.times(1 / found["fwd_long"], "slower", "faster"))
report.glue("attn_compile_mem_words", report.pick(found["mem_ratio"] < 0.9, "keeps less memory for the backward pass",
                                                  "keeps about as much memory for the backward pass"))
report.glue("attn_compile_oom_words", report.pick(
    found["eager_ooms"] + found["compiled_ooms"] == 0, "Neither version ran out of memory anywhere in the grid.",
    report.pick(found["same_ooms"], "Both run out of memory at the same points.",
                "They run out of memory at different points.")))

# %% [markdown]
# Compiled, the forward pass is {glue:text}`attn_compile_faster` than eager at the longest sequence that ran (N =
# {glue:text}`attn_compile_long_n`, on average over d), the backward pass {glue:text}`attn_compile_bwd_long:.3g`×
# as fast; over the whole grid the speed-ups range over {glue:text}`attn_compile_fwd_min:.3g` to
# {glue:text}`attn_compile_fwd_max:.3g` (forward) and {glue:text}`attn_compile_bwd_min:.3g` to
# {glue:text}`attn_compile_bwd_max:.3g` (backward). The compiled version {glue:text}`attn_compile_mem_words`
# (median ratio {glue:text}`attn_compile_mem_ratio:.3g`). {glue:text}`attn_compile_oom_words`
#
# Why: the compiler fuses the scaling, the softmax (maximum, subtraction, exponential, sum, division) and, in the
# backward pass, the softmax gradient into a few Triton kernels, so the $N^2$ matrices are read and written fewer
# times; the two matrix products stay with cuBLAS. It does not change the algorithm: the scores and probabilities
# are still materialised in global memory, so the memory still grows as $N^2$ and the speed-up is bounded by the
# element-wise share of the time. Removing that needs the tiled algorithm, which is where the next chapters go.

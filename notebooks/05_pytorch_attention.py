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
# How long do the forward and backward passes of textbook attention take, how much memory does it keep
# for the backward pass, where does it run out, and what does `torch.compile` change? (Handout §1.2.1,
# `pytorch_attention`, and §1.3.1 (a), `torch_compile`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.attention import BATCH, HEAD_DIMS, SEQ_LENS, naive_attention_memory, sweep
from systems.device import OOM

profile = provenance.resolve_profile(profile)

if profile == "full":
    head_dims, seq_lens, batch, warmup, steps, backend = HEAD_DIMS, SEQ_LENS, BATCH, 5, 100, "inductor"
else:
    # aot_eager traces the compiled path without code generation: the smoke run checks the path, not the speed
    head_dims, seq_lens, batch, warmup, steps, backend = (16, 32), (64, 128), 2, 1, 2, "aot_eager"
device_bytes = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 80 * 2**30
MiB = 2**20


# %% [markdown]
# ## The grid (§1.2.1)
#
# Single-head attention, batch {glue:text}`attn_batch`, inputs (B, N, d) in fp32, the naive formula of
# `systems.attention.reference` (scores, softmax, weighted sum, no mask). For each head dimension d and
# sequence length N: {glue:text}`attn_warmup` warm-up passes, then {glue:text}`attn_steps` timed forward
# passes and {glue:text}`attn_steps` timed backward passes (each backward after its own untimed forward),
# the device synchronised after every pass. `mem_before_bwd_MiB` is `torch.cuda.memory_allocated()` right
# before a backward pass: what the forward pass left for it.

# %% tags=["nbval-ignore-output"]
report.glue("attn_batch", batch)
report.glue("attn_warmup", warmup)
report.glue("attn_steps", steps)
runs = sweep(head_dims, seq_lens, compiled=(False, True), batch=batch, warmup=warmup, steps=steps, backend=backend)
report.save_table(runs, data_dir, "attention_grid")
eager = runs[~runs.compiled].drop(columns="compiled")
report.table(eager, ".3f")


# %%
def numeric(df, col):
    return pd.to_numeric(df[col], errors="coerce")


# %% tags=["nbval-ignore-output"]
ok = eager.assign(fwd_ms=numeric(eager, "fwd_ms"), bwd_ms=numeric(eager, "bwd_ms"),
                  mem=numeric(eager, "mem_before_bwd_MiB")).dropna()
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
long = ok.melt(id_vars=["d", "seq_len"], value_vars=["fwd_ms", "bwd_ms"], var_name="pass", value_name="ms")
sns.lineplot(data=long, x="seq_len", y="ms", hue="d", style="pass", marker="o", palette="viridis", ax=axes[0])
axes[0].set(xscale="log", yscale="log", title="naive attention, time per pass")
sns.lineplot(data=ok, x="seq_len", y="mem", hue="d", marker="o", palette="viridis", ax=axes[1])
analytic = [naive_attention_memory(batch, n, 16)["saved_for_backward"] / MiB for n in seq_lens]
axes[1].plot(seq_lens, analytic, "k--", lw=1, label="formula, d=16")
axes[1].legend()
axes[1].set(xscale="log", yscale="log", ylabel="MiB", title="memory in use before backward")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Memory on paper
#
# What naive attention holds, from `naive_attention_memory` (fp32, batch {glue:text}`attn_batch`, d = 16):
# the forward pass forms the scores S = QKᵀ/√d and P = softmax(S), each B·N² numbers; autograd keeps P
# (the softmax backward and the product PV both need it) and frees S. The backward pass forms dP = dO·Vᵀ and
# dS from it, two more B·N² matrices, while P is still alive. The (B, N, d) tensors are a rounding error
# beside them.

# %% tags=["nbval-check-output"]
paper = pd.DataFrame([{"seq_len": n, **{k: v / MiB for k, v in naive_attention_memory(batch, n, 16).items()}}
                      for n in seq_lens])
report.table(paper, ".1f")

# %% tags=["nbval-ignore-output"]
ooms = eager[eager.fwd_ms.eq(OOM) | eager.bwd_ms.eq(OOM)]
if len(ooms):
    first = ooms.sort_values(["seq_len", "d"]).iloc[0]
    fail_d, fail_n = int(first.d), int(first.seq_len)
    where = f"The smallest configuration that ran out of memory is d = {fail_d}, N = {fail_n}."
else:
    # Nothing failed: find where the formula says the backward peak first exceeds the device
    fail_d, fail_n = 16, seq_lens[-1]
    while naive_attention_memory(batch, fail_n, fail_d)["peak_backward"] <= device_bytes:
        fail_n *= 2
    where = (f"No configuration of the grid ran out of memory on this device "
             f"({device_bytes / 2**30:.0f} GiB); by the formula, the first power-of-two length that would is "
             f"N = {fail_n} (d = {fail_d}).")
acct = naive_attention_memory(batch, fail_n, fail_d)
report.glue("attn_fail_n", fail_n)
report.glue("attn_fail_d", fail_d)
report.glue("attn_fail_square_gib", report.fmt(acct["score_matrix"] / 2**30))
report.glue("attn_fail_saved_gib", report.fmt(acct["saved_for_backward"] / 2**30))
report.glue("attn_fail_peak_bwd_gib", report.fmt(acct["peak_backward"] / 2**30))
report.glue("attn_device_gib", report.fmt(device_bytes / 2**30))
report.md(
    f"{where} There one B·N² fp32 matrix is {acct['score_matrix'] / 2**30:.3g} GiB "
    f"(8 · {fail_n}² · 4 bytes). The forward pass peaks at two of them (S and P, "
    f"{acct['peak_forward'] / 2**30:.3g} GiB), leaves one for the backward pass "
    f"({acct['saved_for_backward'] / 2**30:.3g} GiB with the inputs), and the backward pass needs three at once "
    f"(P, dP, dS: {acct['peak_backward'] / 2**30:.3g} GiB) against {device_bytes / 2**30:.3g} GiB on the device."
)

# %% tags=["nbval-ignore-output"]
measured = ok[ok.d == ok.d.min()].set_index("seq_len").mem
formula = pd.Series({n: naive_attention_memory(batch, n, int(ok.d.min()))["saved_for_backward"] / MiB
                     for n in measured.index})
big = measured.index[measured.index >= 1024] if (measured.index >= 1024).sum() >= 2 else measured.index
slope = np.polyfit(np.log(big), np.log(measured[big]), 1)[0]
largest = measured.index.max()
report.glue("attn_mem_slope", report.fmt(slope, 2))
report.glue("attn_mem_largest_n", int(largest))
report.glue("attn_mem_largest_mib", report.fmt(measured[largest], 4))
report.glue("attn_mem_formula_mib", report.fmt(formula[largest], 4))
verdict = "quadratic, as the formula says" if 1.7 < slope < 2.3 else "not yet quadratic at these small sizes"
report.md(
    f"Measured, the memory held for the backward pass grows as N^{slope:.2f} over the longer sequences: "
    f"{verdict}. At N = {largest} (d = {int(ok.d.min())}) the device held {measured[largest]:.4g} MiB before "
    f"backward against {formula[largest]:.4g} MiB by the formula."
)

# %% [markdown]
# **What the numbers say.** The head dimension hardly matters for memory: everything that grows is
# B·N², so each doubling of the sequence length quadruples what the forward pass keeps for the backward
# pass (the P matrix) and what the backward pass needs on top of it (dP and dS), and all of it is freed
# again once the gradients of Q, K and V are formed. The time behaves alike at long sequences, where the
# passes are dominated by reading and writing N² elements rather than by the 4·N²·d FLOPs of the two
# products: the backward pass reads and writes more of these matrices and takes longer than the forward.
#
# **Removing the N² storage.** Nothing in attention needs the whole N × N matrix at once: each row of
# the output only needs the running maximum and sum of its softmax. FlashAttention-2 computes the output
# tile by tile with this online softmax, keeps only the N log-sum-exp values for the backward pass, and
# recomputes P tile by tile there. Memory becomes linear in N, and the N² traffic to global memory
# disappears (the FlashAttention chapter measures both). Cheaper partial fixes: activation checkpointing
# of the attention block (recompute P in the backward pass instead of keeping it), half precision (halves
# every term), or chunking the queries (bounds the live part of S to a chunk of rows).

# %% [markdown]
# ## Compiled attention (§1.3.1 a)
#
# The same grid with the attention function wrapped in `torch.compile` (compiled afresh for each shape,
# during the warm-up passes, so the timed passes run compiled code only).

# %% tags=["nbval-ignore-output"]
side = eager.merge(runs[runs.compiled].drop(columns="compiled"), on=["d", "seq_len"], suffixes=("", "_compiled"))
side = side[["d", "seq_len", "fwd_ms", "fwd_ms_compiled", "bwd_ms", "bwd_ms_compiled", "mem_before_bwd_MiB",
             "mem_before_bwd_MiB_compiled"]]
side["fwd_speedup"] = numeric(side, "fwd_ms") / numeric(side, "fwd_ms_compiled")
side["bwd_speedup"] = numeric(side, "bwd_ms") / numeric(side, "bwd_ms_compiled")
report.save_table(side, data_dir, "attention_compiled")
report.table(side, ".3f")

# %% tags=["nbval-ignore-output"]
both = side.dropna(subset=["fwd_speedup", "bwd_speedup"])
fig, ax = plt.subplots(figsize=(6, 4))
for col, marker in (("fwd_speedup", "o"), ("bwd_speedup", "s")):
    for d, part in both.groupby("d"):
        ax.plot(part.seq_len, part[col], marker=marker, label=f"{col.split('_')[0]} d={d}")
ax.axhline(1, color="grey", lw=1, ls="--")
ax.set(xscale="log", xlabel="seq_len", ylabel="eager time / compiled time", title="torch.compile on naive attention")
ax.legend(fontsize=7, ncol=2)
plt.show()

# %% tags=["nbval-ignore-output"]
long_n = both.seq_len.max()
at_long = both[both.seq_len == long_n]
fwd_gain, bwd_gain = at_long.fwd_speedup.mean(), at_long.bwd_speedup.mean()
mem_ratio = (numeric(side, "mem_before_bwd_MiB_compiled") / numeric(side, "mem_before_bwd_MiB")).dropna()
report.glue("attn_compile_fwd_long", report.fmt(fwd_gain))
report.glue("attn_compile_bwd_long", report.fmt(bwd_gain))
report.glue("attn_compile_long_n", int(long_n))
report.glue("attn_compile_fwd_range", f"{both.fwd_speedup.min():.3g}–{both.fwd_speedup.max():.3g}")
report.glue("attn_compile_bwd_range", f"{both.bwd_speedup.min():.3g}–{both.bwd_speedup.max():.3g}")
faster = "faster" if fwd_gain > 1.05 else ("no faster" if fwd_gain > 0.95 else "slower")
mem_words = ("keeps less memory for the backward pass" if mem_ratio.median() < 0.9
             else "keeps about as much memory for the backward pass")
report.md(
    f"Compiled, the forward pass is {faster} than eager at the longest sequence that ran (N = {long_n}: "
    f"{fwd_gain:.3g}× on average over d), the backward pass {bwd_gain:.3g}×; over the whole grid the speed-ups "
    f"range over {both.fwd_speedup.min():.3g}–{both.fwd_speedup.max():.3g} (forward) and "
    f"{both.bwd_speedup.min():.3g}–{both.bwd_speedup.max():.3g} (backward). The compiled version {mem_words} "
    f"(median ratio {mem_ratio.median():.3g}), and it runs out of memory "
    f"{'at the same points' if (side.fwd_ms.eq(OOM) == side.fwd_ms_compiled.eq(OOM)).all() else 'at different points'}."
)

# %% [markdown]
# Why: the compiler fuses the scaling, the softmax (maximum, subtraction, exponential, sum, division)
# and, in the backward pass, the softmax gradient into a few Triton kernels, so the N² matrices are read
# and written fewer times; the two matrix products stay with cuBLAS. It does not change the algorithm:
# the scores and probabilities are still materialised in global memory, so the memory still grows as N²
# and the speed-up is bounded by the element-wise share of the time. Removing that needs the tiled
# algorithm, which is where the next chapters go.

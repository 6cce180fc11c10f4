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
# # FlashAttention-2 in Triton
#
# Is our FlashAttention-2 (Triton forward and backward, `systems.attention.flash_triton`) correct, how
# fast is it against PyTorch's naive attention and against the FlashAttention-2 and cuDNN kernels behind
# `scaled_dot_product_attention`, and how does it do on the leaderboard's shape? (Handout §1.3.2 (e)
# `flash_benchmarking`, §1.3.3 leaderboard, §1.3.4.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import os

import pandas as pd
import seaborn as sns
import torch
from IPython.display import display
from matplotlib import pyplot as plt

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined: CPU runs use the interpreter

from systems import provenance, report
from systems.attention.flash_triton import FlashConfig, Tiles, autotune_report
from systems.bench import flash

profile = provenance.resolve_profile(profile)
on_gpu = torch.cuda.is_available()

if profile == "full":
    # About three minutes of H100 time: 80 sweep points x 4 implementations x 3 modes at 20 ms each,
    # compilation of the kernels per (d, dtype), the leaderboard, the variants and one cold start.
    seq_lens, head_dims, dtypes = flash.SEQ_LENS, flash.HEAD_DIMS, tuple(flash.DTYPES)
    rep_ms, warmup_ms, naive_max_seq = 20, 5, 32768
    rect_shapes = [(1024, 16384), (16384, 1024), (4096, 16384), (16384, 4096)]
    check_shapes, check_dtypes = [(4, 4096, 64), (4, 4096, 128), (2, 1000, 48), (16, 777, 16)], ("bf16", "fp32")
    board = dict(rep=2000, warmup=500)
    breakdown_run = dict(steps=20)
    variant_run = dict(rep=500, warmup=100)
    overhead_run = dict(shape=(1, 1, 128, 64), dtype="bf16", n_calls=300)
else:
    seq_lens, head_dims, dtypes = (64, 128), (16,), ("fp32",)  # the interpreter has no bf16
    rep_ms, warmup_ms, naive_max_seq = 20, 5, None
    rect_shapes = [(32, 128)]
    check_shapes, check_dtypes = [(2, 40, 16), (2, 33, 48)], ("fp32",)
    board = dict(rep=20, warmup=5, shape=(2, 64, 16), dtype=torch.float32)
    breakdown_run = dict(steps=2, shape=(2, 64, 16), dtype=torch.float32)
    variant_run = dict(rep=20, warmup=5, shape=(2, 64, 16), dtype=torch.float32)
    overhead_run = dict(shape=(1, 1, 32, 16), dtype="fp32", n_calls=2)
variant_names = None if profile == "full" else 6  # smoke: only the rows the prose below refers to



# %% [markdown]
# ## Correctness at the sizes we benchmark
#
# Forward output O, log-sum-exp L and the three gradients against the float64 naive formula
# (`systems.attention.oracle`), causal, random inputs; the test suite covers the rest (ragged and
# rectangular lengths, layouts, strides, head dims, the stride-0 gradient of `o.sum()`, `torch.compile`).
# The table shows the largest error relative to the largest reference entry, and whether it is within
# the tolerance of the dtype (`flash.tolerance`: bf16 rounds P and the outputs to 8 bits of mantissa; fp32
# products use TF32 on the GPU).

# %% tags=["nbval-check-output"]
errors = flash.correctness(check_shapes, check_dtypes)
report.table(errors[["batch", "n", "d", "dtype", "within_tolerance"]])

# %% tags=["nbval-ignore-output"]
report.table(errors, floatfmt=".2e")

# %% [markdown]
# ## The sweep (§1.3.2 e)
#
# Batch 1, one head, causal, inputs (1, 1, N, d) made once per point with `torch.randn`; each entry is
# the median of `triton.testing.do_bench` (warm-up {glue:text}`flash_warmup_ms` ms, repetitions for
# {glue:text}`flash_rep_ms` ms, L2 flushed in between). `fwd` is the forward pass with autograd
# recording, `bwd` the backward pass of a retained graph, `fwd_bwd` both. Our kernels run with their
# default tiles here (the first candidate that fits in shared memory and registers): tuning every one of
# the 80 shapes would cost more GPU time than the sweep itself; the leaderboard section below uses autotuning.
#
# **FLOP convention** (TFLOP/s below): a causal forward counts the visible half of the score matrix,
# 2·N²·d per head (half of 4·N²·d); the backward counts 2.5× the forward.

# %% tags=["nbval-ignore-output"]
report.glue("flash_warmup_ms", warmup_ms)
report.glue("flash_rep_ms", rep_ms)
runs = flash.sweep(seq_lens, head_dims, dtypes, config=FlashConfig(autotune=False), naive_max_seq=naive_max_seq,
                   rep_ms=rep_ms, warmup_ms=warmup_ms)
report.save_table(runs, data_dir, "flash_sweep")
table = flash.ratios(runs)
report.table(table, ".3f")

# %% tags=["nbval-ignore-output"]
plot = runs.assign(tflops=pd.to_numeric(runs.tflops, errors="coerce")).dropna(subset=["tflops"])
grid = sns.relplot(data=plot[plot.d == max(head_dims)], x="n_q", y="tflops", hue="impl", style="dtype",
                   col="mode", kind="line", marker="o", height=3.2, aspect=1.1)
grid.set(xscale="log", xlabel="sequence length")
grid.set_ylabels("TFLOP/s (causal convention)")
grid.figure.suptitle(f"d = {max(head_dims)}, batch 1, causal", y=1.03)
plt.show()

# %% tags=["nbval-ignore-output"]
ratio_plot = table.dropna(subset=["triton/sdpa_flash"]) if "triton/sdpa_flash" in table else table.iloc[:0]
if len(ratio_plot):
    grid = sns.relplot(data=ratio_plot, x="n_q", y="triton/sdpa_flash", hue="d", col="mode", style="dtype",
                       kind="line", marker="o", palette="viridis", height=3.2, aspect=1.1)
    grid.set(xscale="log", xlabel="sequence length")
    grid.set_ylabels("our time / SDPA flash time")
    for ax in grid.axes.flat:
        ax.axhline(1, color="grey", lw=1, ls="--")
    plt.show()

# %% tags=["nbval-ignore-output"]
num = lambda col: pd.to_numeric(table[col], errors="coerce") if col in table else pd.Series(dtype=float)  # noqa: E731
long_half = table[(table.n_q >= min(4096, max(seq_lens))) & (table.dtype == dtypes[0])]
vs_naive = num("triton/naive")[long_half.index].dropna()
vs_flash = num("triton/sdpa_flash")[long_half.index].dropna()
vs_cudnn = num("triton/sdpa_cudnn")[long_half.index].dropna()
naive_oom = runs[(runs.impl == "naive") & (runs.ms == flash.OOM)]
first_oom = naive_oom.sort_values("n_q").iloc[0] if len(naive_oom) else None
gm = lambda s: float(s.prod() ** (1 / len(s))) if len(s) else float("nan")  # noqa: E731 geometric mean
report.glue("flash_vs_naive_gm", report.fmt(1 / gm(vs_naive)))
report.glue("flash_vs_sdpa_gm", report.fmt(gm(vs_flash)))
report.glue("flash_vs_cudnn_gm", report.fmt(gm(vs_cudnn)))
oom_words = (f"Naive attention first runs out of memory at N = {int(first_oom.n_q)} ({first_oom.dtype}, d = "
             f"{int(first_oom.d)}, {first_oom['mode']})" if first_oom is not None
             else "Naive attention did not run out of memory in the points it ran")
skipped = runs[(runs.impl == "naive") & (runs.ms == flash.NOT_RUN)]
skip_words = f"; it was not run beyond N = {naive_max_seq} to save GPU time" if len(skipped) else ""
cmp = lambda r, who: (f"{1 / r:.3g}× faster than {who}" if r < 1 else f"{r:.3g}× slower than {who}")  # noqa: E731
report.md(
    f"From N = {min(4096, max(seq_lens))} on ({dtypes[0]}, all d and modes, geometric means), our kernels are "
    f"{cmp(gm(vs_naive), 'naive PyTorch')}, "
    + (f"{cmp(gm(vs_flash), 'SDPA’s FlashAttention-2 back end')}" if len(vs_flash) else "not compared with SDPA flash (it did not run)")
    + (f" and {cmp(gm(vs_cudnn), 'SDPA’s cuDNN back end')}. " if len(vs_cudnn) else ". ")
    + f"{oom_words}{skip_words}. Our kernels never hold an N × N matrix, so their memory grows linearly and the "
    f"longest sequences run. The SDPA back ends take no fp32 inputs (\"unsupported\" in the table), so in fp32 "
    f"the comparison is with naive PyTorch only."
)

# %% [markdown]
# Where ours is slower than SDPA's FlashAttention-2 from N = 1024 on, and why. A shape is in the
# *fixed cost* regime when our time is at most 1.5× our time at the shortest sequence (same d and mode):
# the work grew, the time did not, so what is measured is the cost of a call (the autograd function, the
# custom op's dispatch and checks, three to five kernel launches), which SDPA pays in C++. The other
# shapes are in the *kernel* regime; they are listed below.

# %% tags=["nbval-ignore-output"]
min_n = 1024
slow = flash.slower_shapes(table, min_n=min_n)
compared = num("triton/sdpa_flash")[table.n_q >= min_n].dropna()
by_regime = slow.regime.value_counts()
kernel = slow[slow.regime == "kernel"]
floor = runs[(runs.impl == "triton") & (runs["mode"] == "fwd_bwd") & (runs.n_q == min(seq_lens))]
report.md(
    "SDPA's flash back end did not run here, so there is nothing to explain." if not len(compared) else
    f"Ours is slower than SDPA's flash back end at {len(slow)} of the {len(compared)} shapes with N ≥ {min_n}: "
    f"{by_regime.get('fixed cost', 0)} in the fixed-cost regime and {by_regime.get('kernel', 0)} in the kernel "
    f"regime. At N = {min(seq_lens)} one forward and backward call of ours takes "
    f"{pd.to_numeric(floor.ms).min():.3g} to {pd.to_numeric(floor.ms).max():.3g} ms whatever d: that floor, not the "
    "kernels, is what the short sequences measure. "
    + ("" if not len(kernel) else
       f"The kernel-regime shapes have N from {kernel.n_q.min()} to {kernel.n_q.max()} and d in "
       f"{{{', '.join(str(d) for d in sorted(set(kernel.d)))}}}; by mode: "
       + ", ".join(f"{n} {m}" for m, n in kernel["mode"].value_counts().items())
       + ". Above d = 64 our backward takes two passes (one for dK and dV, one for dQ; see the design choices "
       "below), each recomputing the probabilities: 7 matrix products per tile pair where the one-pass backward "
       "we run up to d = 64 needs 5. And the sweep runs our kernels with their default, untuned tiles. The "
       "leaderboard below, with 16 heads and autotuned tiles, is the tuned comparison.")
)
report.table(kernel[["dtype", "d", "n_q", "mode", "triton", "sdpa_flash", "triton/sdpa_flash"]], ".3f")

# %% [markdown]
# ### Where the per-call floor goes
#
# At one head of 128 tokens the kernels have almost nothing to do, so a call costs what the host spends
# issuing it. The table times calls back to back at the shortest sequence of the sweep (one head, d = 64
# on the GPU): our forward's call path layer by layer (the Python checks, one launch of the forward kernel
# with fixed and with autotuned tiles, the function that allocates the outputs around it, called directly
# and through its custom op, the autograd function around that), then whole calls of ours and of SDPA's back ends. *host_us* is the time the host
# needs to issue one call, *wall_us* the time per call until the GPU has finished all of them: where the
# two agree, the host sets the pace, not the GPU.

# %% tags=["nbval-ignore-output"]
overhead = flash.call_overhead(**overhead_run)
report.save_table(overhead, data_dir, "flash_call_overhead")
report.table(overhead, ".1f")

# %% tags=["nbval-ignore-output"]
us = overhead.set_index(["impl", "what"])
host, wall = us.host_us, us.wall_us
fwd_path = ["input checks and tile choice (Python)", "forward kernel launch, fixed tiles",
            "forward kernel launch, autotuned", "forward, allocation + launch", "the same through the custom op",
            "forward (autograd.Function)"]
ours_host = {what: host[("triton", what)] for what in fwd_path}
sdpa_fb = wall.get(("sdpa_flash", "forward + backward"))
report.md(
    f"A forward and backward call of ours takes {wall[('triton', 'forward + backward')]:.3g} µs per call, and the "
    f"host needs {host[('triton', 'forward + backward')]:.3g} µs of it to issue the call"
    + (f"; SDPA's FlashAttention-2 back end takes {sdpa_fb:.3g} µs" if isinstance(sdpa_fb, float) else "")
    + f". Along our forward's path the host spends {ours_host[fwd_path[0]]:.3g} µs on the Python checks, "
    f"{ours_host[fwd_path[1]]:.3g} µs on a bare launch of the forward kernel ({ours_host[fwd_path[2]]:.3g} µs "
    f"through the autotuner's lookup), {ours_host[fwd_path[3]]:.3g} µs with the outputs' allocations "
    f"({ours_host[fwd_path[4]]:.3g} µs through the `torch.library` custom op, the path compiled code takes; eager "
    f"calls skip it) and {ours_host[fwd_path[5]]:.3g} µs for the whole autograd function. The backward adds its "
    "own launches (D, then one pass for dK, dV and dQ with the fill and the conversion of dQ's fp32 buffer "
    "around it, or two passes), and the autograd engine runs it on its CUDA thread: the Python backward has "
    "to take the GIL there and hand it back, where SDPA's backward is C++ code."
)

# %% [markdown]
# ## Rectangular shapes (Nq ≠ Nk)
#
# Causal masks with Nq ≠ Nk can be aligned at the top-left (query i sees keys 0..i, the CS336 convention
# and ours) or at the bottom-right (flash-attn ≥ 2.1). The alignment changes how much work there is, so
# first each back end is checked against the naive formula at one rectangular shape; then timed, d = 64.

# %% tags=["nbval-ignore-output"]
rect_impls = ("triton", "sdpa_flash", "sdpa_cudnn")
aligned = {impl: flash.causal_alignment_agrees(impl, d=min(64, max(head_dims))) for impl in rect_impls}
display(pd.DataFrame([aligned], index=["top-left causal, as ours"]))
rect = flash.rectangular(rect_shapes, d=min(64, max(head_dims)), dtype=dtypes[0], impls=rect_impls,
                         config=FlashConfig(autotune=False), rep_ms=rep_ms, warmup_ms=warmup_ms)
report.save_table(rect, data_dir, "flash_rectangular")
rect_table = flash.ratios(rect, against=("sdpa_flash", "sdpa_cudnn"))
report.table(rect_table, ".3f")

# %% tags=["nbval-ignore-output"]
rect_tf = flash.wide(rect, "tflops")
report.table(rect_tf, ".3f")
disagree = [impl for impl, ok in aligned.items() if ok is False]
report.md(
    ("Every back end that ran uses the same top-left alignment, so the timings compare equal work. "
     if not disagree else
     f"{', '.join(disagree)} align(s) the causal mask differently for Nq ≠ Nk, so their rectangular timings do a "
     f"different amount of work and are not a like-for-like comparison. ")
    + "With top-left alignment and Nq < Nk most keys are invisible to every query: our kernels skip those "
    "tiles entirely, so the time follows the visible area (the FLOP count above), not Nq·Nk."
)

# %% [markdown]
# ## The leaderboard (§1.3.3)
#
# The handout's test code as written: `q, k, v = torch.randn(3, 16, 16384, 64, bf16, requires_grad=True)`,
# `torch.compile(FlashAttention2.apply)`, one step is `flash(q, k, v, True).sum().backward()`, timed by
# `triton.testing.do_bench`, here with `rep` = {glue:text}`flash_board_rep` ms (the handout uses 10 000 ms;
# `flash.leaderboard()` defaults to it). The SDPA back ends run in the same harness and the same process,
# with the 16 "batches" passed as 16 heads of one batch, which is what their kernels expect.

# %% tags=["nbval-ignore-output"]
report.glue("flash_board_rep", board["rep"])
lb = flash.leaderboard(**board)
report.save_table(lb, data_dir, "flash_leaderboard")
report.table(lb, ".3f")

# %% tags=["nbval-ignore-output"]
ms = lb.set_index("impl").ms
ours = ms["triton"]
report.glue("flash_board_ms", report.fmt(ours) if isinstance(ours, float) else str(ours))
parts = []
for impl, label in (("sdpa_flash", "SDPA's FlashAttention-2"), ("sdpa_cudnn", "SDPA's cuDNN attention")):
    if isinstance(ms.get(impl), float) and isinstance(ours, float):
        parts.append(f"{label} takes {ms[impl]:.3g} ms, so ours is {cmp(ours / ms[impl], 'it')}")
    else:
        parts.append(f"{label} did not run ({ms.get(impl)})")
for impl in ("sdpa_flash", "sdpa_cudnn"):
    report.glue(f"flash_board_{impl}_ms", report.fmt(ms[impl]) if isinstance(ms.get(impl), float) else "n/a")
best_ms = flash.SPRING_2025_BEST_MS
verdict = ("n/a" if not isinstance(ours, float) else
           f"{best_ms / ours:.3g}× faster than" if ours < best_ms else f"{ours / best_ms:.3g}× slower than")
report.glue("flash_board_vs_best", verdict)
report.md(f"Our forward and backward step takes **{ours:.4g} ms** on the leaderboard shape; " + "; ".join(parts)
          + f". The best time of the Spring 2025 leaderboard was {best_ms} ms (as published, not measured here): ours "
          f"is {verdict} it.")

# %% [markdown]
# ### Where the step's time goes
#
# The same step under `torch.profiler`, {glue:text}`flash_breakdown_steps` steps after a warm-up: the
# device time per step of each kernel, for ours and for both SDPA back ends (the largest kernels by name,
# the rest summed as *other*; the names are the kernels' own, truncated).

# %% tags=["nbval-ignore-output"]
report.glue("flash_breakdown_steps", breakdown_run["steps"])
kernels = flash.kernel_breakdown(**breakdown_run)
report.save_table(kernels, data_dir, "flash_kernel_breakdown")
report.table(kernels, ".3f")

# %% tags=["nbval-ignore-output"]
mine = kernels[kernels.impl == "triton"].set_index("kernel").ms_per_step
kernel_ms = kernels.groupby("impl").ms_per_step.sum()
two_passes = "flash_bwd_dq_kernel" in mine  # else the dK/dV kernel adds dQ up as well
ours_parts = ({"forward": "flash_fwd_kernel", "dK/dV pass": "flash_bwd_dkdv_kernel", "dQ pass": "flash_bwd_dq_kernel"}
              if two_passes else {"forward": "flash_fwd_kernel", "one-pass backward": "flash_bwd_dkdv_kernel"})
if on_gpu and all(name in mine for name in ours_parts.values()):
    rivals = [f"{label} {kernel_ms[impl]:.3g} ms" for impl, label in
              (("sdpa_flash", "SDPA's FlashAttention-2"), ("sdpa_cudnn", "cuDNN")) if impl in kernel_ms]
    backward_ms = sum(mine[name] for label, name in ours_parts.items() if label != "forward")
    products = 7 if two_passes else 5  # per tile pair, against the forward's 2
    report.md(
        f"Our step spends {kernel_ms['triton']:.3g} ms per step in kernels: "
        + ", ".join(f"the {label} {mine[name]:.3g} ms ({mine[name] / kernel_ms['triton']:.0%})"
                    for label, name in ours_parts.items())
        + f", and the rest ({kernel_ms['triton'] - sum(mine[n] for n in ours_parts.values()):.3g} ms) in D, "
        + ("" if two_passes else "the fill and conversion of dQ's fp32 buffer, ")
        + "the loss's sum and its gradient, and copies. The backward's kernels take "
        f"{backward_ms / mine[ours_parts['forward']]:.3g}× the forward's time, for {products / 2:.3g}× its matrix "
        f"products ({products} per tile pair against 2; the causal skipping leaves out the same tiles in every "
        "kernel). The kernel time of the others: " + "; ".join(rivals) + "."
    )

# %% [markdown]
# ### Cold start: compiling and autotuning
#
# On a GPU the kernels are autotuned over a small, pruned set of tile configurations (shared-memory
# estimate), keyed on the sequence lengths rounded to a power of two (capped at 4096), the head dim,
# causality and dtype. The first call on a new machine pays for compiling every candidate and timing it;
# the choice is then cached on disk. Measured here in a fresh process with empty Triton and Inductor
# caches: the first leaderboard step (Dynamo and Inductor tracing, Triton compilation, autotuning) and the
# second one.

# %% tags=["nbval-ignore-output"]
if on_gpu:
    cold = flash.cold_start()
    report.glue("flash_cold_first_s", report.fmt(cold["first_call_s"]))
    report.glue("flash_cold_second_ms", report.fmt(cold["second_call_s"] * 1e3))
    tuning = {kind: r["tuning_s"] for kind, r in cold["autotune"].items()}
    display(pd.DataFrame([{"kernel": kind, "tuning_s": r["tuning_s"], "chosen": "; ".join(r["chosen"].values())}
                          for kind, r in cold["autotune"].items()]))
    report.md(
        f"The first step in a cold process took {cold['first_call_s']:.3g} s, of which autotuning the "
        f"kernels (compiling and timing each candidate) took {sum(t or 0 for t in tuning.values()):.3g} s; the "
        f"second step took {cold['second_call_s'] * 1e3:.3g} ms. "
        + ("That is well under the two-minute bound we set ourselves." if cold["first_call_s"] < 120
           else "That is over the two-minute bound we set ourselves: the candidate lists need pruning.")
    )
else:
    report.glue("flash_cold_first_s", "n/a (no GPU)")
    report.glue("flash_cold_second_ms", "n/a (no GPU)")
    report.md("Cold start is measured on a GPU only (the interpreter does not autotune).")

# %% [markdown]
# ## What was tried for speed
#
# Each row is the leaderboard harness (rep {glue:text}`flash_variant_rep` ms) with one change. The
# reference is our untuned default tiles; the causal rows switch off one optimisation each:
# *no tile skipping* walks every key tile for every query tile (and every query tile for every key tile in
# the dK/dV pass), masking the ones above the diagonal instead of leaving them out; *no diagonal split*
# keeps the skipping but compares indices on every tile instead of only on tiles that straddle the diagonal
# or the end of the sequence.
#
# At this shape (bf16, d = 64) the default backward is one pass: the dK/dV kernel also computes each key
# tile's share of dQ and the Hopper copy engine adds it into an fp32 buffer (bulk reductions through a
# tensor descriptor), five matrix products per tile pair. *two passes* is the backward that deterministic
# mode and head dims above 64 take: a second kernel owns query tiles and recomputes P and dP for dQ,
# seven products per tile pair and no additions from several programs into one place. *TMA loads* has the
# copy engine load the tiles a kernel streams (Q and dO in the dK/dV pass, K and V in the dQ pass and,
# in the last of these rows, in the forward) through tensor descriptors, zero-filled past the sequence and
# the head dim, instead of every thread computing addresses and masks; the one-pass default loads its
# tiles that way. *atomic adds* has the threads add dQ with atomic instructions instead of the copy
# engine. *dK/dV diagonal tiles first* runs the two-pass backward's dK/dV loops in the other order: masked
# tiles, then the rest. Compiled for the H100, that order makes ptxas serialise the kernel's tensor-core
# products (its warning C7515: dK and dV leave the first loop with products in flight), which the default
# order avoids; its effect is read against the two-pass row. (The one-pass kernel waits for each tile's dQ
# product before adding it up, so no product is in flight when a loop ends, and the order does not
# matter there; the compile test checks both.) The tile rows change one kernel's tiles, warps or pipeline
# stages (the dQ rows in the two-pass backward, which alone has a dQ kernel).

# %% tags=["nbval-ignore-output"]
report.glue("flash_variant_rep", variant_run["rep"])
base = FlashConfig(autotune=False)
tried = {
    "autotuned (the default)": None,
    "default tiles, untuned": base,
    "no causal tile skipping": FlashConfig(autotune=False, skip_masked_tiles=False),
    "no diagonal split": FlashConfig(autotune=False, split_diagonal=False),
    "two passes (deterministic)": FlashConfig(autotune=False, atomic_dq=False),
    "two passes, dK/dV diagonal tiles first": FlashConfig(autotune=False, atomic_dq=False, unmasked_first=False),
    "two passes, autotuned": FlashConfig(atomic_dq=False),
    "two passes, TMA loads": FlashConfig(autotune=False, atomic_dq=False, tma=True),
    "one pass, atomic adds for dQ": FlashConfig(autotune=False, atomic_dq=True, tma=False),
    "one pass, TMA loads in the forward too": FlashConfig(autotune=False, tma=True),
    "forward 128x64, 4 warps": FlashConfig(autotune=False, fwd=Tiles(128, 64, 4, 3)),
    "forward 128x64, 8 warps": FlashConfig(autotune=False, fwd=Tiles(128, 64, 8, 3)),
    "forward 2 stages": FlashConfig(autotune=False, fwd=Tiles(64, 64, 4, 2)),
    "dK/dV 32x64, 4 warps": FlashConfig(autotune=False, dkdv=Tiles(32, 64, 4, 4)),
    "dK/dV 64x128, 8 warps": FlashConfig(autotune=False, dkdv=Tiles(64, 128, 8, 3)),
    "two passes, dQ 128x64, 8 warps": FlashConfig(autotune=False, atomic_dq=False, dq=Tiles(128, 64, 8, 3)),
}
var = flash.variants(dict(list(tried.items())[:variant_names]), **variant_run)
ref_ms = var.set_index("variant").ms["default tiles, untuned"]
var["vs_default"] = [m / ref_ms if isinstance(m, float) else None for m in var.ms]
report.save_table(var, data_dir, "flash_variants")
report.table(var, ".3f")

# %% tags=["nbval-ignore-output"]
v = var.set_index("variant").vs_default
report.glue("flash_skip_gain", report.fmt(v["no causal tile skipping"]))
report.glue("flash_split_gain", report.fmt(v["no diagonal split"]))
order_ratio = v["two passes, dK/dV diagonal tiles first"] / v["two passes (deterministic)"]
report.glue("flash_order_gain", report.fmt(order_ratio))
report.glue("flash_two_pass_ratio", report.fmt(v["two passes (deterministic)"]))
report.glue("flash_tune_gain", report.fmt(1 / v["autotuned (the default)"]))
best = v.drop("default tiles, untuned").idxmin()


def effect(ratio, what):
    """How much slower (or not) the step is without an optimisation, in words."""
    if ratio > 1.03:
        return f"{what} makes the step {ratio:.3g}× as long"
    return f"{what} makes no measurable difference here ({ratio:.3g}×)"


report.md(
    effect(v["no causal tile skipping"], "Walking the fully masked tiles as well")
    + " (a causal step needs only half the tile pairs of a full one, and only skipping the rest realises that); "
    + effect(v["no diagonal split"], "comparing indices on every tile")
    + "; " + effect(order_ratio, "in the two-pass backward, running the dK/dV pass's diagonal tiles first "
                    "(serialised products)")
    + ". Autotuning "
    + (f"gains {1 / v['autotuned (the default)']:.3g}× over the default tiles. "
       if v["autotuned (the default)"] < 0.97 else f"does not beat the default tiles ({v['autotuned (the default)']:.3g}×). ")
    + (f"The two-pass backward takes {v['two passes (deterministic)']:.3g}× the default's time untuned, "
       f"{v['two passes, autotuned']:.3g}× autotuned and {v['two passes, TMA loads']:.3g}× with TMA loads; the one "
       "pass with atomic adds instead of the copy engine's reductions takes "
       f"{v['one pass, atomic adds for dQ']:.3g}×. "
       if "one pass, atomic adds for dQ" in v else "")
    + f"The fastest row is *{best}* ({v[best]:.3g}× the default)."
)

# %% tags=["nbval-ignore-output"]
if on_gpu:
    tuned = autotune_report()
    display(pd.DataFrame([{"kernel": kind, "key (Nq bucket, Nk bucket, d, causal, skip, split, dtypes)": key,
                           "tiles": tiles} for kind, r in tuned.items() for key, tiles in r["chosen"].items()]))

# %% [markdown]
# Design choices that the table does not isolate, and why they are in the kernels:
#
# - **One backward pass where it pays, two where it must.** Algorithm 2 of the handout accumulates dQ
#   with atomic adds from every key tile; our default does that (for 16-bit inputs with d ≤ 64 on a GPU)
#   through the copy engine's bulk reductions into an fp32 buffer, as FlashAttention-2 and cuDNN add dQ up
#   too. The additions land in any order, so dQ's last bits can change from run to run. Under
#   `torch.use_deterministic_algorithms(True)`, and where the extra product's operands would spill
#   registers (d > 64, fp32), the backward takes two passes instead: one owns key tiles and writes dK, dV,
#   a second owns query tiles and writes dQ, each recomputing P. No program adds into another's output,
#   and the result is the same bit for bit from run to run. The rows above measure both.
# - **dP's product before the exponentials.** In the dK/dV loop the product dPᵀ = V dOᵀ is issued before
#   Pᵀ = exp2(Sᵀ − L) is computed, so the tensor cores work on it while the exponentials run; the wgmma
#   waits complete in issue order, so issued after dV's product (the order of the equations) it would also
#   have waited for that one.
# - **exp2 and a folded scale.** Scores are kept in base-2 units (the 1/√d scale multiplied by log₂e once),
#   so every exponential is a single `exp2`; L is stored in natural log, as the tests expect. The forward
#   scales the row maximum rather than every score, and the scores only inside exp2's argument, where the
#   multiplication and the subtraction of the maximum are one fused multiply-add.
# - **Heavy tiles first.** With causal masking the last query tiles do the most work; the grid is walked
#   backwards so they start first and the short ones fill in at the end.
# - **fp32 state, inputs' dtype on the tensor cores.** m, l and the accumulators are fp32; P and dS are
#   cast to the inputs' dtype before their products, so bf16 runs on bf16 tensor cores.
# - **Not done:** warp specialisation (producer warps that only load, consumer warps that only multiply)
#   and a persistent grid; FlashAttention-3 and the Triton tutorial's fused attention use them on Hopper.

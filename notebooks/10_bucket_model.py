# ---
# jupyter:
#   systems:
#     requires: 2 gpus
#     depends_on: [09_ddp]
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A model of bucketed DDP's overhead
#
# How much time does bucketed data parallelism add to a training step, as a function of the bucket
# count, and which bucket size minimises it? We derive the model, fit its two constants to all-reduce
# measurements on this machine, and hold its prediction against the measured bucket sweep.
# (Handout §2.3.3(b), `ddp_bucketed_benchmarking`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd

from systems import figures, provenance, report
from systems.bench.allreduce import benchmark as allreduce
from systems.bench.ddp import DDPBenchConfig, benchmark
from systems.chapters import bucket_model as bm
from systems.model import parameter_count, preset

profile = provenance.resolve_profile(profile)
if profile == "full":
    backend, sizes_mb, iters = "nccl", [0.25, 1, 4, 16, 64, 256, 1024], 10
    cfg = DDPBenchConfig(preset("xl", context_length=128), batch_size=4, warmup=3, steps=20)
    own_sweep = [1, 10, 100, 1000]
else:
    backend, sizes_mb, iters = "gloo", [0.01, 0.04, 0.16], 3
    cfg = DDPBenchConfig(preset("tiny", context_length=16), batch_size=2, warmup=1, steps=2)
    own_sweep = [0.01, 1]
world = 2
s = parameter_count(cfg.model) * 4  # the model's fp32 gradient bytes
report.glue_all("bm", {"backend": f"{backend} with {world} processes", "s_gib": s / 2**30})

# %% [markdown]
# ## The model
#
# Let the model's gradients be $s$ bytes in $n_b$ equal buckets of $b = s/n_b$ bytes. An all-reduce of
# $x$ bytes takes $o + x/w$: a fixed overhead $o$ per call and the algorithm bandwidth $w$
# (bytes / time). The handout's assumption is that computing one bucket's gradients takes as long as
# communicating it. Then the all-reduce of bucket $i$ runs while the backward pass computes bucket
# $i+1$, and the transfers of all buckets but the last are hidden; the last bucket's transfer,
# $s/(n_b w)$, starts only when the backward pass ends and is exposed in full. The per-call overheads
# are not hidden: each call's launch and synchronisation occupies the issuing thread and the GPU
# whatever else runs, so they add up over the buckets. The overhead DDP adds to a step is
#
# $$
# T_\text{DDP}(n_b) \;=\; n_b\,o \;+\; \frac{s}{n_b\,w}.
# $$
#
# Few buckets expose a long last transfer; many buckets pay many overheads. Setting the derivative
# $o - s/(n_b^2 w)$ to zero gives the optimum
#
# $$
# n_b^\ast = \sqrt{\frac{s}{w\,o}}, \qquad b^\ast = \frac{s}{n_b^\ast} = \sqrt{s\,w\,o}, \qquad
# T_\text{DDP}^\ast = 2\sqrt{\frac{s\,o}{w}} .
# $$
#
# The optimal bucket is the geometric mean of the whole model's size and $w\,o$, the number of bytes
# the link could have moved during one call's overhead.
#
# ## Fitting $o$ and $w$
#
# All-reduces of float32 tensors from 0.25 MiB to 1 GiB on two GPUs (same benchmark as the all-reduce
# chapter: warm-up, barrier, synchronise, slowest rank), then a least-squares line
# time = $o$ + bytes / $w$.

# %% tags=["nbval-ignore-output"]
ar, o, w, fit = bm.fitted_link(allreduce(backend, [world], sizes_mb, warmup=5, iters=iters))
report.save_table(ar.drop(columns="times_ms"), data_dir, "allreduce_fit")
report.glue_all("bm", fit)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(bm.fit_curve(ar, o, w), "MiB", "ms", "what", "All-reduce cost model", "all-reduce size (MiB)",
              "time (ms)", palette=None);

# %% [markdown]
# With {glue:text}`bm_backend`, the fit gives $o$ = {glue:text}`bm_o_us:.3g` µs per call and $w$ =
# {glue:text}`bm_w_GBps:.3g` GB/s; the line is within {glue:text}`bm_fit_err_pct:.2g` % of every measured point.
# (The fit weights points by absolute time, so $w$ is set by the large sizes and $o$ is the intercept the small
# sizes pin down.) The parallelism chapter sets the same measurements against the ring all-reduce's formula.
#
# ## Prediction against the measured sweep
#
# $s$ = {glue:text}`bm_s_gib:.3g` GiB is the model's fp32 gradient bytes. The measured overhead of a bucket size
# is the bucketed step time minus the step time of the same model on one GPU with no communication (same per-GPU
# batch). The bucketed step times come from the DDP chapter's run, which the pipeline runs first; a run of this
# chapter alone (the smoke profile) measures its own sweep.

# %% tags=["nbval-ignore-output"]
from_ddp = [pd.read_csv(f"{data_dir}/../09_ddp/{name}.csv") for name in ("steps", "bucket_fine")] if data_dir else []
own = [("bucketed", {"bucket_size_mb": b}) for b in own_sweep]
sweep = pd.concat(from_ddp, ignore_index=True) if from_ddp else benchmark(cfg, own, world)
base_ms = benchmark(cfg, [("naive", {})], world_size=1).step_ms.iloc[0]  # one rank: nothing to communicate
model = bm.model_vs_measured(sweep, base_ms, s, o, w)
report.save_table(model, data_dir, "model_vs_measured")
report.table(model, floatfmt=".3g")
report.glue_all("bm", bm.findings(model, s, o, w, base_ms))

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(bm.overhead_curves(model, s, o, w), "MiB", "ms", "what",
              f"{cfg.model.name}: s = {s / 2**30:.3g} GiB of gradients", "bucket size (MiB)",
              "DDP overhead per step (ms)", logy=False, palette=None);

# %% [markdown]
# For $s$ = {glue:text}`bm_s_gib:.3g` GiB the model's optimum is $b^\ast$ = {glue:text}`bm_bstar_mib:.3g` MiB
# ($n_b^\ast$ ≈ {glue:text}`bm_nbstar:.3g` buckets) with an overhead of {glue:text}`bm_tstar_ms:.3g` ms per step.
# Measured, the smallest overhead is {glue:text}`bm_best_ms:.3g` ms at {glue:text}`bm_best_mb:g` MiB, against a
# 1-GPU step of {glue:text}`bm_base_ms:.3g` ms: the measured optimum lies {glue:text}`bm_close` the predicted one.
# {glue:text}`bm_sign_words`
#
# The model is deliberately crude: it has one bandwidth and one overhead for every message size, assumes perfectly
# balanced compute and communication per bucket and buckets of equal size (the real ones are cut at parameter
# boundaries, and one XL feed-forward matrix is already 39 MiB). Its use is the shape of the answer: the best
# bucket grows with the square root of the model size, of the link's bandwidth and of the per-call overhead, so a
# faster interconnect or a costlier call pushes towards larger buckets, and PyTorch's default of 25 MiB is a
# compromise for typical models and links.

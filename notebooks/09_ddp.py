# ---
# jupyter:
#   systems:
#     requires: 2 gpus
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Data-parallel training: naive, flat, overlapped, bucketed
#
# Does hand-written data parallelism train exactly like one process, what does its communication cost for the XL
# model on two GPUs, and how much of that cost do batching, overlapping and bucketing remove, next to PyTorch's
# `DistributedDataParallel`? (2025 handout §2.2.2–§2.2.3 and §2.3.1–§2.3.3(a); 2026 §5, where "xl" is our
# 2.7B and bucketing is gone.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import torch

from systems import figures, provenance, report
from systems.bench.ddp import DDPBenchConfig, benchmark, standard_runs, trace
from systems.chapters.ddp import against_torch, bucket_facts, overlap_facts, step_facts
from systems.ddp.check import compare
from systems.model import TransformerLM, preset

profile = provenance.resolve_profile(profile)
if profile == "full":
    cfg = DDPBenchConfig(preset("xl", context_length=128), batch_size=4, warmup=3, steps=20)
    bucket_sizes, refine = [1, 10, 100, 1000], [0.25, 0.5, 2, 4]  # then multiples of the best coarse size
else:
    cfg = DDPBenchConfig(preset("tiny", context_length=16), batch_size=2, warmup=1, steps=2)
    bucket_sizes, refine = [0.01, 1], [2]
world = 2
with torch.device("meta"):  # shapes only: how many gradient tensors and bytes one step communicates
    shapes = list(TransformerLM(cfg.model).parameters())
report.glue_all("ddp", {"n_tensors": len(shapes), "grad_gib": sum(p.numel() for p in shapes) * 4 / 2**30,
                        "size": cfg.model.name, "context": cfg.model.context_length, "batch": cfg.batch_size,
                        "global_batch": cfg.batch_size * world, "warmup": cfg.warmup, "steps": cfg.steps})

# %% [markdown]
# ## The implementations
#
# All variants live in `systems.ddp`, one short module each on one shared skeleton (`base.py`): rank 0's
# parameters and buffers are broadcast at construction; `forward` passes through;
# `finish_gradient_synchronization()` leaves every gradient averaged over the ranks; `no_sync()` accumulates
# micro-batches locally; a forward pass while a backward pass's gradients are still unsynchronised is an error.
# The variants differ only in how and when they communicate:
#
# | name | handout | communication |
# |---|---|---|
# | `naive` | §2.2.2 | after backward, one blocking all-reduce per parameter tensor |
# | `flat` | §2.3.1 | after backward, all gradients flattened into one buffer, one all-reduce |
# | `overlap` | §2.3.2 | per parameter, asynchronously, from a hook as soon as its gradient is ready |
# | `bucketed` | §2.3.3 | per bucket of ≤ `bucket_size_mb` MiB, asynchronously, when its last gradient is ready |
# | `torch` | — | `torch.nn.parallel.DistributedDataParallel` (25 MiB buckets, C++ reducer) |
#
# Collectives pair up across ranks by the order in which they are issued, so every rank issues them in the same
# fixed order (reverse parameter order), whatever order its hooks fire in; a parameter that got no gradient on a
# rank (a branch its data did not take) is reduced with zeros at synchronisation, and a last, tiny all-reduce
# tells each rank which parameters no rank used, so they keep `grad=None` as in single-process training. Nothing
# waits for a hook that never fires.
#
# ## Naive DDP trains exactly like one process (§2.2.2)
#
# A toy model (`systems.ddp.check`) with a frozen parameter, an embedding tied to the output head, a float64
# parameter, a layer that is never used and a branch that only some ranks' data takes, trained for four AdamW
# steps: once in one process on the whole batch, once on two gloo processes with half the batch each. The test
# suite (`tests/test_ddp.py`) checks the same for 2 and 3 processes, bucket sizes giving one, several and
# one-per-parameter buckets, and gradient accumulation under `no_sync()`.

# %% tags=["nbval-check-output"]
check = compare(["naive", "flat", "overlap", "bucketed", "torch"], world=2)
report.table(check[["variant", "ranks", "steps", "equal_at_1e-6"]])

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("ddp_check_max_diff", check.max_abs_diff.max())

# %% [markdown]
# The largest difference between any data-parallel weight and the single-process one, over every element, rank
# and variant, is {glue:text}`ddp_check_max_diff:.1e`: float32 sums taken in another order.
#
# ## Step time and communication time
#
# The {glue:text}`ddp_size` model at context {glue:text}`ddp_context`, batch {glue:text}`ddp_batch` per GPU
# ({glue:text}`ddp_global_batch` in all), fp32 with AdamW, {glue:text}`ddp_warmup` warm-up and
# {glue:text}`ddp_steps` measured steps; one launch of two processes runs every variant after the other, each with
# a freshly built model. One step holds {glue:text}`ddp_n_tensors` gradient tensors, {glue:text}`ddp_grad_gib:.3g`
# GiB. *Communication* is the time spent in `finish_gradient_synchronization`, measured between device
# synchronisations: the backward pass's kernels are waited for first, so for `naive` and `flat` it is the whole
# all-reduce phase, and for the overlapping variants only the communication the backward pass did not hide.
# PyTorch DDP communicates inside `backward()`, so it has no separate number. Times are the slowest rank's means.

# %% tags=["nbval-ignore-output"]
steps = benchmark(cfg, standard_runs(bucket_sizes), world)
report.save_table(steps.drop(columns=["rank_step_ms", "rank_comm_ms"]), data_dir, "steps")
report.table(steps[["run", "status", "step_ms", "step_std_ms", "comm_ms", "comm_share"]], floatfmt=".3g")

# %% tags=["remove-cell", "nbval-ignore-output"]
found = step_facts(steps, len(shapes))
report.glue_all("ddp", found)

# %% [markdown]
# ### Naive DDP (§2.2.3)
#
# A naive step takes {glue:text}`ddp_naive_step:.3g` ms, of which {glue:text}`ddp_naive_comm:.3g` ms
# ({glue:text}`ddp_naive_share_pct:.2g` %) are spent all-reducing gradients after the backward pass:
# {glue:text}`ddp_naive_per_call_us:.3g` µs per tensor on average. During that phase the GPUs compute nothing: the
# communication adds to the step in full. Two things make it slow: the {glue:text}`ddp_n_tensors` separate
# collectives each pay a fixed launch and synchronisation cost (many of the tensors, the norms' gains, are a few
# kilobytes), and none of them starts before the last gradient of the backward pass exists, although the last
# layer's gradients were ready long before. The two improvements of §2.3 attack one cause each.
#
# **Batching (§2.3.1).** One flattened all-reduce of all gradients takes {glue:text}`ddp_flat_comm:.3g` ms against
# {glue:text}`ddp_naive_comm:.3g` ms for the separate ones, a difference of {glue:text}`ddp_batching_saves:.3g`
# ms, and the step {glue:text}`ddp_flat_step:.3g` ms. {glue:text}`ddp_batching_words`
#
# **Overlapping (§2.3.2).** Launching each gradient's all-reduce from its hook gives
# {glue:text}`ddp_overlap_step:.3g` ms per step; after the backward pass it waits only
# {glue:text}`ddp_overlap_comm:.3g` ms for communication still in flight; the step takes
# {glue:text}`ddp_overlap_vs_sync` than the better synchronous variant's. {glue:text}`ddp_overlap_words`
#
# ### Seeing the overlap (§2.3.2(b))
#
# One training step of `naive` and of `overlap`, recorded with `torch.profiler` on both ranks after the warm-up;
# every GPU kernel of rank 0 is drawn as an interval on its CUDA stream (on a CPU smoke run: backward functions
# and collective calls on their threads), compute in blue and NCCL communication in orange. The data are the
# profiler's trace, not a screenshot.

# %% tags=["nbval-ignore-output"]
kernels = trace(cfg, [("naive", {}), ("overlap", {})], world)
rank0 = kernels[kernels["rank"] == 0]
report.save_table(rank0, data_dir, "timeline");

# %% tags=["remove-input", "nbval-ignore-output"]
figures.timeline(rank0);

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("ddp_trace", overlap_facts(rank0))

# %% [markdown]
# In the naive step the first all-reduce starts at {glue:text}`ddp_trace_naive_first_comm:.3g` ms, after the
# backward pass, and communication runs alongside compute for {glue:text}`ddp_trace_naive_overlap:.3g` ms (the
# optimizer step after it cannot start before the gradients are averaged). In the overlapped step communication
# starts at {glue:text}`ddp_trace_overlap_first_comm:.3g` ms, during the backward pass, and
# {glue:text}`ddp_trace_overlap_overlap:.3g` ms of its {glue:text}`ddp_trace_overlap_comm:.3g` ms of collectives
# run while compute kernels run on the other stream.
#
# ## Bucketed DDP (§2.3.3(a))
#
# The bucketed wrapper at the handout's four sizes ran in the launch above; a second launch refines around the
# best of them.

# %% tags=["nbval-ignore-output"]
coarse = steps[(steps.variant == "bucketed") & (steps.status == "ok")]
best = coarse.set_index("bucket_size_mb").step_ms.idxmin() if len(coarse) else bucket_sizes[0]
fine = benchmark(cfg, [("bucketed", {"bucket_size_mb": best * m}) for m in refine], world)
buckets = pd.concat([steps[steps.variant == "bucketed"], fine], ignore_index=True).sort_values("bucket_size_mb")
report.save_table(fine.drop(columns=["rank_step_ms", "rank_comm_ms"], errors="ignore"), data_dir, "bucket_fine")
report.table(buckets[["bucket_size_mb", "status", "step_ms", "step_std_ms", "comm_ms"]], floatfmt=".3g")

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(buckets[buckets.status == "ok"], "bucket_size_mb", "step_ms", None,
              f"{cfg.model.name}, {world} GPUs: bucket size sweep", "bucket size (MiB)", "ms per training step",
              logy=False, reference=found["overlap_step"], spread="step_std_ms");

# %% tags=["remove-cell", "nbval-ignore-output"]
found = bucket_facts(buckets)
report.glue_all("ddp_bucket", found)

# %% [markdown]
# The fastest bucket size is {glue:text}`ddp_bucket_best_mb:g` MiB at {glue:text}`ddp_bucket_best_ms:.3g` ms per step
# (the bars are one standard deviation of the steps either side, the dashed line is the per-parameter overlap), and the
# whole sweep spans {glue:text}`ddp_bucket_spread_pct:.2g` % of the step time. We expected a U shape: small buckets pay
# the per-call overhead many times (below the size of one parameter tensor a bucket holds one tensor, and bucketing
# becomes the per-parameter overlap), very large ones start communicating late and leave the last bucket's whole
# all-reduce exposed after the backward pass. {glue:text}`ddp_bucket_shape_words` A slower interconnect, more GPUs or a
# faster backward pass (bf16) would make the exposed tail and the calls weigh more. The bucket-model chapter turns this
# trade-off into a formula.
#
# ## Against PyTorch DDP
#
# Every variant's step time divided by PyTorch DDP's, measured in the same launches:

# %% tags=["nbval-ignore-output"]
table, found = against_torch(pd.concat([steps, fine], ignore_index=True))
report.table(table, floatfmt=".3g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("ddp_vs", found)

# %% [markdown]
# Our best variant, {glue:text}`ddp_vs_best_run`, takes {glue:text}`ddp_vs_best_ms:.3g` ms per step,
# {glue:text}`ddp_vs_best_vs_torch:.3g` times PyTorch DDP's step time. {glue:text}`ddp_vs_words`

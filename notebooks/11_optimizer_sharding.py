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
# # Optimizer state sharding (ZeRO stage 1)
#
# How much memory does sharding AdamW's state over two GPUs save when training the XL model, what does
# it cost in time per iteration, and how does it differ from stage 1 of the ZeRO paper? (2025 handout §3,
# `optimizer_state_sharding` and `optimizer_state_sharding_accounting`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd

from systems import figures, provenance, report
from systems.bench.sharding import ShardingConfig, measure, ownership
from systems.chapters.sharding import communication_facts, memory_facts, memory_table, predicted_table, timing_table
from systems.dist import launch
from systems.model import preset

profile = provenance.resolve_profile(profile)
world = 2
if profile == "full":
    cfg = ShardingConfig(preset("xl", context_length=128), batch_size=8, warmup=3, steps=10)
    backend, timeout_s = "nccl", 540
else:
    cfg = ShardingConfig(preset("tiny", context_length=32), batch_size=2, warmup=1, steps=2)
    backend, timeout_s = "gloo", 120
report.glue_all("zero", {"size": cfg.model.name, "world": world, "batch": cfg.batch_size,
                         "context": cfg.model.context_length, "steps": cfg.steps, "warmup": cfg.warmup})

# %% [markdown]
# ## The sharded optimizer
#
# `systems.zero.ShardedOptimizer(params, torch.optim.AdamW, lr=...)` is a `torch.optim.Optimizer`: its
# `param_groups` hold every parameter (so `zero_grad`, learning-rate schedules and checkpoints work as usual), but
# it builds the wrapped AdamW over only the parameters this rank *owns*. `step()` updates the owned parameters,
# then every owner broadcasts them to the other ranks, so all replicas agree again. Ownership is decided once,
# identically on every rank and without communication: parameters sorted by size, each given to the rank that owns
# the fewest bytes so far (greedy largest-first). Its `state_dict()` gathers every owner's state into the
# dictionary an unsharded AdamW would produce, so a checkpoint taken on 2 GPUs resumes on 1 or 8. The tests
# (`tests/test_zero.py`) train 10 steps at 2 and 3 ranks and compare every weight with unsharded AdamW (equal to
# 1e-6), with parameter groups of different hyper-parameters, tied and frozen parameters, more ranks than
# parameters, and parameters frozen or unfrozen after construction.
#
# How the greedy assignment splits the {glue:text}`zero_size` model over {glue:text}`zero_world` ranks (computed on
# the meta device, no memory needed):

# %% tags=["nbval-check-output"]
owners = ownership(cfg.model, world)
report.table(owners, floatfmt=".4g")
report.glue_all("zero", {"imbalance_pct": 100 * (owners.parameters.max() / (owners.parameters.sum() / world) - 1),
                         "largest_m": cfg.model.vocab_size * cfg.model.d_model / 1e6})

# %% [markdown]
# The fuller rank holds {glue:text}`zero_imbalance_pct:.2g` % more than an exact half: whole tensors cannot split
# more evenly than the largest one ({glue:text}`zero_largest_m:.3g` M parameters, the embedding or the output
# head) allows, which bounds the imbalance of the greedy rule.
#
# ## (a) Peak memory with and without sharding
#
# Two processes, one GPU each, train the {glue:text}`zero_size` model (fp32, batch {glue:text}`zero_batch` per
# GPU, context {glue:text}`zero_context`); gradients are averaged by the bucketed DDP wrapper. Four optimizers run
# one after the other in the same process group: plain AdamW; our `ShardedOptimizer` broadcasting parameter by
# parameter (`zero1`) or in flattened buckets per owner (`zero1_flat`); and PyTorch's `ZeroRedundancyOptimizer`
# (`torch_zero`) as the anchor. We read the allocator (`torch.cuda.memory_allocated` and the peak so far,
# `max_memory_allocated`) after building model, wrapper and optimizer, and directly before and after the optimizer
# step of the first iteration (which creates AdamW's state) and of the second (steady state). Each cell is the
# memory allocated at that point / the peak since the previous point, in GiB, the larger of the two ranks; the peak
# so far at any point, which the handout asks for, is the largest peak up to that row.

# %% tags=["nbval-ignore-output"]
rows = launch(measure, world, cfg, backend=backend, timeout_s=timeout_s)[0]
runs = pd.DataFrame(rows).drop(columns=["memory"])
report.save_table(runs, data_dir, "runs")
report.table(memory_table(rows))

# %% [markdown]
# The same step predicted from the sizes alone: parameters and gradients take 4 bytes per parameter each (fp32),
# AdamW's two moments 8 bytes per parameter the rank owns, and the activations are the bytes autograd saved for
# backward during the forward pass, counted tensor by tensor with `torch.autograd.graph.saved_tensors_hooks`
# (each storage once, weights excluded). The bars are the prediction; the dots are the allocator's numbers directly
# after the first step (allocated) and the peaks of the forward and backward passes and of the step. The prediction
# of the forward/backward peak is an upper bound: gradients grow while activations are freed, so the two never fully
# coexist.

# %% tags=["nbval-ignore-output"]
predicted = predicted_table(rows, int(owners.parameters.max()), world)
report.save_table(predicted.reset_index(), data_dir, "breakdown")
report.table(predicted.reset_index(), floatfmt=".3g")

# %% tags=["remove-input", "nbval-ignore-output"]
figures.memory_breakdown(predicted, f"{cfg.model.name} model, fp32 AdamW on {world} ranks");

# %% tags=["remove-cell", "nbval-ignore-output"]
found = memory_facts(predicted)
report.glue_all("zero", found)
report.glue("zero_half_words", report.pick(found["half"], "as expected for half the state on each of two ranks",
                                           "not the half expected from two ranks"))

# %% [markdown]
# After the first step each GPU holds {glue:text}`zero_after_adamw:.3g` GiB with plain AdamW and
# {glue:text}`zero_after_zero1:.3g` GiB with our sharded optimizer ({glue:text}`zero_after_torch:.3g` GiB with
# PyTorch's): sharding saves {glue:text}`zero_saving:.3g` GiB, {glue:text}`zero_saving_pct:.3g` % of the
# {glue:text}`zero_state_full:.3g` GiB of AdamW state, {glue:text}`zero_half_words`. The step's own peak lies
# {glue:text}`zero_transient_adamw:.3g` GiB above what stays allocated after it with plain AdamW and
# {glue:text}`zero_transient_zero1:.3g` GiB sharded, against {glue:text}`zero_moment:.3g` GiB for one moment of
# the parameters unsharded.
#
# Where the memory goes. *After initialisation* a rank holds the parameters, {glue:text}`zero_params_gib:.3g` GiB
# (4 bytes × parameters), nothing else: AdamW creates its state lazily, and the bucketed wrapper allocates its flat
# buffers only while a bucket is being reduced. *Directly before the first step* the gradients have joined them
# (another {glue:text}`zero_params_gib:.3g` GiB); the activations ({glue:text}`zero_act_gib:.3g` GiB saved for
# backward at this batch size) came and went during the forward and backward passes, which is why the peak so far
# is above the allocated memory. *Directly after the first step* the optimizer state exists:
# {glue:text}`zero_state_full:.3g` GiB (two fp32 moments per parameter) for plain AdamW on every GPU, about half of
# it per GPU when sharded. The step itself peaks higher than what stays allocated after it: PyTorch's multi-tensor
# (`foreach`) AdamW computes intermediates for a whole group of tensors at once (the square root of the second
# moment, for one), a transient as large as one moment of the parameters a rank updates, so sharding halves it as
# well. From the second iteration on, "before" and "after" the step hold the same things (the state persists), and
# a sharded rank keeps 4 + 4 + 8/2 = 12 bytes per parameter instead of 16.
#
# ## (b) Time per iteration

# %% tags=["nbval-ignore-output"]
timing, found = timing_table(runs)
report.table(timing, floatfmt=".3g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("zero_t", found)
report.glue("zero_t_broadcast_words", report.pick(found["broadcast_costs_more"], "the broadcast costs more than the "
                                                  "halved update saves", "the halved update outweighs the broadcast"))
report.glue("zero_t_flat_words", report.pick(found["flat_faster"], "faster", "no faster"))

# %% [markdown]
# A training iteration (forward, backward with gradient all-reduce, optimizer step) takes
# {glue:text}`zero_t_adamw_ms:.4g` ms with AdamW and {glue:text}`zero_t_zero1_ms:.4g` ms sharded
# ({glue:text}`zero_t_extra_ms:+.3g` ms, {glue:text}`zero_t_extra_pct:+.2g` %); the optimizer step alone goes from
# {glue:text}`zero_t_opt_adamw:.3g` to {glue:text}`zero_t_opt_zero1:.3g` ms. Sharding halves the update arithmetic
# but adds the broadcast of every updated parameter, and here {glue:text}`zero_t_broadcast_words`. Flattening the
# broadcasts into buckets takes {glue:text}`zero_t_flat_ms:.4g` ms per iteration ({glue:text}`zero_t_flat_words`
# than one broadcast per parameter); PyTorch's `ZeroRedundancyOptimizer` takes {glue:text}`zero_t_torch_ms:.4g` ms.
#
# Means over {glue:text}`zero_steps` iterations after {glue:text}`zero_warmup` warm-up iterations, each timed
# between `torch.cuda.synchronize()` calls, slowest rank. The time of an iteration is mostly the forward and
# backward passes and the gradient all-reduce, which sharding leaves alone; it changes only the optimizer step,
# trading half of the update's arithmetic for one broadcast of every parameter.
#
# ## (c) Comparison with ZeRO stage 1 of the paper

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("zero", communication_facts(rows[0]["params"], world))

# %% [markdown]
# **Memory.** The ZeRO paper (Rajbhandari et al., 2020, §5.1) trains in mixed precision: fp16 parameters and
# gradients (2 + 2 bytes per parameter) and K = 12 bytes of optimizer state (an fp32 master copy of the weights and
# the two Adam moments). Stage 1 ($P_{os}$) partitions those K bytes, so a rank holds (2 + 2 + K/N)·Ψ:
# {glue:text}`zero_paper_mem_gb:.3g` GB for this model on 2 ranks. Our fp32 training has no master copy, so only
# the 8 bytes of moments are sharded: (4 + 4 + 8/N)·Ψ = {glue:text}`zero_ours_mem_gb:.3g` GB against
# {glue:text}`zero_base_mem_gb:.3g` GB unsharded. The paper also partitions flat, contiguous slices of one big
# buffer, exactly 1/N each; we partition whole tensors, which keeps every update a plain `torch.optim.AdamW` call
# over ordinary parameters at the price of the imbalance shown above.
#
# **Communication.** With Ψ = {glue:text}`zero_psi_gb:.3g` GB of fp32 parameters, DDP's ring all-reduce of the
# gradients sends 2(N−1)/N·Ψ = {glue:text}`zero_ddp_gb:.3g` GB per rank per step. The handout's optimizer (ours)
# keeps that all-reduce, since every rank still holds full gradients, and adds the broadcast of the updated
# parameters from their owners, (N−1)/N·Ψ per rank on average: {glue:text}`zero_ours_gb:.3g` GB, 1.5× DDP. The
# paper's analysis (§7.2.1) gets stage 1 (with gradient partitioning) for free: an all-reduce *is* a
# reduce-scatter followed by an all-gather, so ZeRO splits it, reduce-scattering the gradients so that each owner
# receives just the sum of its shard, updating its shard, and all-gathering the new parameters instead of the
# gradient sums: 2(N−1)/N·Ψ = {glue:text}`zero_paper_gb:.3g` GB, the same as DDP. Doing the same here would mean a
# reduce-scatter in the DDP wrapper in place of its all-reduce and an all-gather of flat shards in place of
# per-owner broadcasts, which needs ownership by contiguous slices of a flat buffer rather than by whole tensors,
# and would also let each rank free the gradients it does not own (stage 2, $P_{os+g}$). Our FSDP (its own
# chapter) goes that way, one step further: it shards the parameters themselves.

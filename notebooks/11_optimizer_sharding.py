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
import seaborn as sns
import torch
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.e2e import SMOKE_MODEL
from systems.bench.sharding import ShardingConfig, analytic_mb, communication_bytes, measure
from systems.dist import launch
from systems.model import TransformerLM, preset
from systems.zero import assign_owners

profile = provenance.resolve_profile(profile)

world = 2
if profile == "full":
    cfg = ShardingConfig(size="xl", context_length=128, batch_size=8, warmup=3, steps=10)
    backend, timeout_s = "nccl", 540
else:
    cfg = ShardingConfig(size="small", context_length=32, batch_size=2, warmup=1, steps=2, model_overrides=SMOKE_MODEL)
    backend, timeout_s = "gloo", 120
model_cfg = preset(cfg.size, context_length=cfg.context_length, attention=cfg.attention, **cfg.model_overrides)
GiB = 1024  # MiB per GiB: the tables below are in GiB

# %% [markdown]
# ## The sharded optimizer
#
# `systems.zero.ShardedOptimizer(params, torch.optim.AdamW, lr=...)` is a `torch.optim.Optimizer`: its
# `param_groups` hold every parameter (so `zero_grad`, learning-rate schedules and checkpoints work as
# usual), but it builds the wrapped AdamW over only the parameters this rank *owns*. `step()` updates
# the owned parameters, then every owner broadcasts them to the other ranks, so all replicas agree
# again. Ownership is decided once, identically on every rank and without communication: parameters
# sorted by size, each given to the rank that owns the fewest bytes so far (greedy largest-first). Its
# `state_dict()` gathers every owner's state into the dictionary an unsharded AdamW would produce, so a
# checkpoint taken on 2 GPUs resumes on 1 or 8. The tests (`tests/test_zero.py`) train 10 steps at 2
# and 3 ranks and compare every weight with unsharded AdamW (equal to 1e-6), with parameter groups of
# different hyper-parameters, tied and frozen parameters, and more ranks than parameters.
#
# How the greedy assignment splits the {glue:text}`zero_size` model over {glue:text}`zero_world` ranks
# (computed on the meta device, no memory needed):

# %% tags=["nbval-check-output"]
with torch.device("meta"):
    shapes = [p.numel() for p in TransformerLM(model_cfg).parameters()]
owners = assign_owners([4 * n for n in shapes], [0] * world)
ownership = pd.DataFrame({"rank": owners, "parameters": shapes}).groupby("rank").agg(
    tensors=("parameters", "size"), parameters=("parameters", "sum")).reset_index()
ownership["share (%)"] = 100 * ownership.parameters / sum(shapes)
report.glue("zero_size", cfg.size)
report.glue("zero_world", world)
report.glue("zero_imbalance_pct", report.fmt(100 * (ownership.parameters.max() / (sum(shapes) / world) - 1), 2))
report.glue("zero_largest_m", report.fmt(max(shapes) / 1e6))
report.table(ownership, floatfmt=".4g")

# %% [markdown]
# The fuller rank holds {glue:text}`zero_imbalance_pct` % more than an exact half: whole tensors
# cannot split more evenly than the largest one ({glue:text}`zero_largest_m` M parameters, an embedding
# or the output head) allows, which bounds the imbalance of the greedy rule.
#
# ## (a) Peak memory with and without sharding
#
# Two processes, one GPU each, train the {glue:text}`zero_size` model (fp32, batch {glue:text}`zero_batch`
# per GPU, context {glue:text}`zero_context`); gradients are averaged by the bucketed DDP wrapper of
# §2.3.3. Four optimizers run one after the other in the same process group: plain AdamW; our
# `ShardedOptimizer` broadcasting parameter by parameter (`zero1`) or in flattened buckets per owner
# (`zero1_flat`); and PyTorch's `ZeroRedundancyOptimizer` (`torch_zero`) as the anchor. We read the
# allocator (`torch.cuda.memory_allocated` and the peak so far, `max_memory_allocated`) after building
# model, wrapper and optimizer, and directly before and after the optimizer step of the first
# iteration (which creates AdamW's state) and of the second (steady state). Each cell is the memory
# allocated at that point / the peak since the previous point, in GiB, the larger of the two ranks; the
# peak so far at any point, which the handout asks for, is the largest peak up to that row.

# %% tags=["nbval-ignore-output"]
report.glue("zero_batch", cfg.batch_size)
report.glue("zero_context", cfg.context_length)
rows = launch(measure, world, cfg, backend=backend, timeout_s=timeout_s)[0]
runs = pd.DataFrame(rows).drop(columns=["memory"])
memory = pd.DataFrame([{"optimizer": r["optimizer"], **m} for r in rows for m in r["memory"]])
report.save_table(runs, data_dir, "runs")
report.save_table(memory, data_dir, "memory")
# one cell per optimizer and point: allocated there / peak since the previous point (GiB)
cells = memory.assign(cell=[f"{a / GiB:.3g} / {p / GiB:.3g}" for a, p in zip(memory.allocated_mb, memory.peak_mb)])
shown = cells.pivot_table(index=["iteration", "point"], columns="optimizer", values="cell", aggfunc="first",
                          sort=False).reset_index()
report.table(shown[["iteration", "point"] + [r["optimizer"] for r in rows]])

# %% [markdown]
# The same step predicted from the sizes alone: parameters and gradients take 4 bytes per parameter
# each (fp32), AdamW's two moments 8 bytes per parameter the rank owns, and the activations are the
# bytes autograd saved for backward during the forward pass, counted tensor by tensor with
# `torch.autograd.graph.saved_tensors_hooks` (each storage once, weights excluded). The bars are the
# prediction; the dots are the allocator's numbers directly after the first step (allocated) and the
# peaks of the forward and backward passes and of the step. The prediction of the forward/backward
# peak is an upper bound: gradients grow while activations are freed, so the two never fully coexist.

# %% tags=["nbval-ignore-output"]
n_params = rows[0]["params"]
owned_max = max(ownership.parameters)
breakdown = []
for r in rows:
    sharded = r["optimizer"] != "adamw"
    parts = analytic_mb(n_params, world, owned_max if sharded else None)
    parts["optimizer state"] = max(r["state_mb_per_rank"]) if sharded else parts["optimizer state"]
    parts["activations"] = r["activations_mb"]
    breakdown += [{"optimizer": r["optimizer"], "component": k, "GiB": v / GiB} for k, v in parts.items()]
breakdown = pd.DataFrame(breakdown)
report.save_table(breakdown, data_dir, "breakdown")
predicted = breakdown.pivot_table(index="optimizer", columns="component", values="GiB", sort=False)
first = memory[memory.iteration == 1].pivot_table(index="optimizer", columns="point", values=["allocated_mb", "peak_mb"],
                                                  dropna=False) / GiB
predicted["predicted after step"] = predicted[["parameters", "gradients", "optimizer state"]].sum(axis=1)
predicted["measured after step"] = first[("allocated_mb", "after step")]
predicted["predicted fwd/bwd peak"] = predicted[["parameters", "gradients", "activations"]].sum(axis=1)
predicted["measured fwd/bwd peak"] = first[("peak_mb", "before step")]
predicted["measured step peak"] = first[("peak_mb", "after step")]
report.table(predicted.reset_index(), floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(7, 3.6))
order = ["parameters", "gradients", "optimizer state", "activations"]
bottom = pd.Series(0.0, index=predicted.index)
for component, color in zip(order, sns.color_palette("muted")):
    ax.bar(predicted.index, predicted[component], bottom=bottom, label=component, color=color)
    bottom += predicted[component]
ax.scatter(predicted.index, predicted["measured after step"], color="black", marker="o", zorder=3,
           label="measured: allocated after step 1")
if predicted["measured step peak"].notna().all():  # the CPU has no allocator peaks to show
    for column, marker in [("measured fwd/bwd peak", "_"), ("measured step peak", "x")]:
        ax.scatter(predicted.index, predicted[column], color="black", marker=marker, s=200, zorder=3,
                   label=column.replace("measured", "measured:"))
ax.set(ylabel="GiB per GPU (larger rank)", title=f"{cfg.size} model, fp32 AdamW on {world} ranks")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
plt.show()

# %% tags=["nbval-ignore-output"]
after = predicted["measured after step"]
saving = after["adamw"] - after["zero1"]
state_full = predicted.loc["adamw", "optimizer state"]
report.glue("zero_after_adamw", report.fmt(after["adamw"]))
report.glue("zero_after_zero1", report.fmt(after["zero1"]))
report.glue("zero_saving", report.fmt(saving))
report.glue("zero_state_full", report.fmt(state_full))
report.glue("zero_params_gib", report.fmt(predicted.loc["adamw", "parameters"]))
report.glue("zero_act_gib", report.fmt(predicted.loc["adamw", "activations"]))
step_peak = predicted["measured step peak"]
transient = step_peak - after
moment = predicted["optimizer state"] / 2
report.glue("zero_transient_adamw", report.fmt(transient["adamw"]))
report.glue("zero_transient_zero1", report.fmt(transient["zero1"]))
report.md(
    f"After the first step each GPU holds {after['adamw']:.3g} GiB with plain AdamW and {after['zero1']:.3g} GiB "
    f"with our sharded optimizer ({after['torch_zero']:.3g} GiB with PyTorch's): sharding saves "
    f"{saving:.3g} GiB, {100 * saving / state_full:.3g} % of the {state_full:.3g} GiB of AdamW state"
    + (", as expected for half the state on each of two ranks. " if abs(saving / state_full - 0.5) < 0.05
       else ", not the half expected from two ranks. ")
    + (f"The step's own peak lies {transient['adamw']:.3g} GiB above what stays allocated after it with plain "
       f"AdamW and {transient['zero1']:.3g} GiB sharded; "
       + ("that is about one moment's size (the transient of the multi-tensor update below), halved by sharding too."
          if abs(transient["adamw"] / moment["adamw"] - 1) < 0.25 else
          f"one moment is {moment['adamw']:.3g} GiB unsharded.")
       if step_peak.notna().all() else "(No allocator on the CPU: peaks are not measured in this run.)")
)

# %% [markdown]
# Where the memory goes. *After initialisation* a rank holds the parameters,
# {glue:text}`zero_params_gib` GiB (4 bytes × parameters), nothing else: AdamW creates its state lazily,
# and the bucketed wrapper allocates its flat buffers only while a bucket is being reduced. *Directly
# before the first step* the gradients have joined them (another {glue:text}`zero_params_gib` GiB);
# the activations ({glue:text}`zero_act_gib` GiB saved for backward at this batch size) came and went
# during the forward and backward passes, which is why the peak so far is above the allocated memory.
# *Directly after the first step* the optimizer state exists: {glue:text}`zero_state_full` GiB (two
# fp32 moments per parameter) for plain AdamW on every GPU, about half of it per GPU when sharded, so
# the sharded run ends {glue:text}`zero_saving` GiB lower. The step itself peaks higher than what stays
# allocated after it: PyTorch's multi-tensor (`foreach`) AdamW computes intermediates for a whole group
# of tensors at once (the square root of the second moment, for one), a transient as large as one
# moment of the parameters a rank updates, so sharding halves it as well. From the second iteration
# on, "before" and "after" the step hold the same things (the state persists), and a sharded rank
# keeps 4 + 4 + 8/2 = 12 bytes per parameter instead of 16.
#
# ## (b) Time per iteration

# %% tags=["nbval-ignore-output"]
timing = runs[["optimizer", "step_ms", "step_std_ms", "optimizer_ms", "optimizer_std_ms"]].copy()
timing["vs adamw"] = timing.step_ms / timing.step_ms[timing.optimizer == "adamw"].iloc[0]
report.table(timing, floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
t = timing.set_index("optimizer")
extra = t.step_ms["zero1"] - t.step_ms["adamw"]
report.glue("zero_steps", cfg.steps)
report.glue("zero_warmup", cfg.warmup)
report.md(
    f"A training iteration (forward, backward with gradient all-reduce, optimizer step) takes "
    f"{t.step_ms['adamw']:.4g} ms with AdamW and {t.step_ms['zero1']:.4g} ms sharded "
    f"({'+' if extra >= 0 else '−'}{abs(extra):.3g} ms, {100 * extra / t.step_ms['adamw']:+.2g} %); the optimizer "
    f"step alone goes from {t.optimizer_ms['adamw']:.3g} to {t.optimizer_ms['zero1']:.3g} ms. "
    + ("Sharding halves the update arithmetic but adds the broadcast of every updated parameter, "
       + ("and the broadcast costs more than the halved update saves. " if t.optimizer_ms['zero1'] > t.optimizer_ms['adamw']
          else "and the halved update outweighs it. ")
       )
    + f"Flattening the broadcasts into buckets takes {t.step_ms['zero1_flat']:.4g} ms per iteration "
    f"({'faster' if t.step_ms['zero1_flat'] < t.step_ms['zero1'] else 'no faster'} than one broadcast per "
    f"parameter); PyTorch's `ZeroRedundancyOptimizer` takes {t.step_ms['torch_zero']:.4g} ms."
)

# %% [markdown]
# Means over {glue:text}`zero_steps` iterations after {glue:text}`zero_warmup` warm-up iterations, each
# timed between `torch.cuda.synchronize()` calls, slowest rank. The time of an iteration is mostly the
# forward and backward passes and the gradient all-reduce, which sharding leaves alone; it changes only
# the optimizer step, trading half of the update's arithmetic for one broadcast of every parameter.
#
# ## (c) Comparison with ZeRO stage 1 of the paper

# %% tags=["nbval-ignore-output"]
volume = communication_bytes(n_params, world)
report.glue("zero_psi_gb", report.fmt(4 * n_params / 1e9))
report.glue("zero_ddp_gb", report.fmt(volume["ddp"] / 1e9))
report.glue("zero_ours_gb", report.fmt(volume["zero1 (ours)"] / 1e9))
report.glue("zero_paper_gb", report.fmt(volume["zero1 (paper)"] / 1e9))
report.glue("zero_paper_mem_gb", report.fmt((2 + 2 + 12 / world) * n_params / 1e9))
report.glue("zero_ours_mem_gb", report.fmt((4 + 4 + 8 / world) * n_params / 1e9))
report.glue("zero_base_mem_gb", report.fmt(16 * n_params / 1e9))
report.table(pd.DataFrame([{"scheme": k, "GB sent per rank per step": v / 1e9} for k, v in volume.items()]),
             floatfmt=".3g")

# %% [markdown]
# **Memory.** The ZeRO paper (Rajbhandari et al., 2020, §5.1) trains in mixed precision: fp16
# parameters and gradients (2 + 2 bytes per parameter) and K = 12 bytes of optimizer state (an fp32
# master copy of the weights and the two Adam moments). Stage 1 ($P_{os}$) partitions those K bytes, so
# a rank holds (2 + 2 + K/N)·Ψ: {glue:text}`zero_paper_mem_gb` GB for this model on 2 ranks. Our fp32
# training has no master copy, so only the 8 bytes of moments are sharded: (4 + 4 + 8/N)·Ψ =
# {glue:text}`zero_ours_mem_gb` GB against {glue:text}`zero_base_mem_gb` GB unsharded. The paper
# also partitions flat, contiguous slices of one big buffer, exactly 1/N each; we partition whole
# tensors, which keeps every update a plain `torch.optim.AdamW` call over ordinary parameters at the
# price of the imbalance shown above.
#
# **Communication.** With Ψ = {glue:text}`zero_psi_gb` GB of fp32 parameters, DDP's ring all-reduce of
# the gradients sends 2(N−1)/N·Ψ = {glue:text}`zero_ddp_gb` GB per rank per step. The handout's
# optimizer (ours) keeps that all-reduce, since every rank still holds full gradients, and adds the
# broadcast of the updated parameters from their owners, (N−1)/N·Ψ per rank on average:
# {glue:text}`zero_ours_gb` GB, 1.5× DDP. The paper's analysis (§7.2.1) gets stage 1 (with gradient
# partitioning) for free: an all-reduce *is* a reduce-scatter followed by an all-gather, so ZeRO splits
# it, reduce-scattering the gradients so that each owner receives just the sum of its shard, updating
# its shard, and all-gathering the new parameters instead of the gradient sums: 2(N−1)/N·Ψ =
# {glue:text}`zero_paper_gb` GB, the same as DDP. Doing the same here would mean a reduce-scatter in the
# DDP wrapper in place of its all-reduce and an all-gather of flat shards in place of per-owner
# broadcasts, which needs ownership by contiguous slices of a flat buffer rather than by whole tensors,
# and would also let each rank free the gradients it does not own (stage 2, $P_{os+g}$).

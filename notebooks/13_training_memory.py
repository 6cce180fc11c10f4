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
# # Where training memory goes
#
# Which tensors does autograd keep for the backward pass, what does operator fusion remove from them, and how far
# does activation checkpointing bring the memory of a training step down, at what cost in time? Enough, it turns
# out, to train the 2026 edition's xl model (our `2.7B`, 3.4 billion parameters) on one 80 GB GPU at batch 4 × 2048
# tokens. (2026 handout §3, `gradient_checkpointing`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import inspect

import torch

from systems import provenance, report
from systems.bench.e2e import BenchConfig, sweep
from systems.chapters import training_memory as tm
from systems.memory.checkpointing import nested_levels
from systems.model import parameter_count, preset
from systems.profiling import block_memory
from systems.recompute import run_blocks

profile = provenance.resolve_profile(profile)
device = "cuda" if torch.cuda.is_available() else "cpu"
if profile == "full":
    size, batch, context, norm_shape, fits_context = "2.7B", 4, 2048, (4, 512, 2560), 512
    groups = [0, 1, 2, 4]
else:
    size, batch, context, norm_shape, fits_context = "tiny", 2, 32, (2, 16, 64), 16
    groups = [0, 1, 2]
cfg = preset(size, context_length=context, attention="sdpa")
report.glue_all("tm", {"size": size, "batch": batch, "context": context, "layers": cfg.num_layers,
                       "params_b": parameter_count(cfg) / 1e9, "states_gib": 16 * parameter_count(cfg) / 2**30,
                       "norm_shape": " × ".join(map(str, norm_shape))})

# %% [markdown]
# ## What autograd keeps (§3.1)
#
# `systems.memory.saved.SavedTensors` wraps a forward pass in `torch.autograd.graph.saved_tensors_hooks`: its pack
# hook sees every tensor an operation keeps for its backward, and records it with the module running and the
# operation saving it. Parameters are listed but not counted (they exist anyway); a storage saved twice is counted
# once, which is what the memory holds. Here the RMSNorm of the model on an fp32 input of shape
# {glue:text}`tm_norm_shape`, eager and compiled:

# %% tags=["nbval-check-output"]
eager, fused, found = tm.norm_saved(norm_shape, device)
report.table(eager.table()[["op", "shape", "dtype", "parameter", "adds_bytes"]])
report.table(fused.table()[["op", "shape", "dtype", "parameter", "adds_bytes"]])
report.glue_all("tm_norm", found)

# %% [markdown]
# Eager, the norm saves {glue:text}`tm_norm_eager_n` tensors: `pow` keeps its input x for the derivative 2x; `rsqrt`
# keeps its result r (a (batch, tokens, 1) statistic); the product x · r keeps both of its factors; and the product
# with the weight keeps x · r (a second full-size tensor) and the weight. Three full-size tensors are saved, two of
# them the same storage, so {glue:text}`tm_norm_eager_mib:.3g` MiB stay alive. Compiled, the whole norm is one
# fused autograd function whose backward recomputes x · r from x and r: it saves {glue:text}`tm_norm_fused_n`
# tensors, the input, the weight and one statistic, {glue:text}`tm_norm_fused_mib:.3g` MiB. These tensors no longer
# have a `grad_fn` of their own, and they are loaded back in the fused backward's order, not in the reverse of the
# order they were saved in.
#
# ## One block of the 2026 xl
#
# The 2026 handout measures one compiled xl block at batch 4 × 2048 and reports 3651.31 MiB saved, about 114 GiB
# for 32 blocks. Its block has 16 heads, while the size table's xl has 32; and its attention is the textbook one,
# which keeps the (batch, heads, tokens, tokens) probabilities. Ours, measured the same way (compiled with
# `fullgraph=True`, fp32), with the naive attention at both head counts, and with PyTorch's fused attention
# (`sdpa`), which keeps no tokens × tokens matrix and is what the training steps below use:

# %% tags=["nbval-ignore-output"]
blocks, per_block = tm.blocks_saved(size, context, batch, cfg)
report.save_table(per_block, data_dir, "block_residuals")
report.table(per_block, floatfmt=".4g")
report.table(blocks["sdpa, 32 heads, eager"].by_op().head(8), floatfmt=".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
handout, naive32, sdpa = (blocks[name].total_bytes for name in tm.BLOCKS)
block_bytes, boundary = sdpa, batch * context * cfg.d_model * 4  # the residual stream between blocks, fp32
report.glue_all("tm", {"handout_block_mib": handout / tm.MIB, "naive32_mib": naive32 / tm.MIB,
                       "sdpa_mib": sdpa / tm.MIB, "boundary_mib": boundary / tm.MIB,
                       "all_blocks_gib": cfg.num_layers * sdpa / tm.GIB})

# %% [markdown]
# Our compiled 16-head block saves {glue:text}`tm_handout_block_mib:.6g` MiB against the handout's 3651.31 MiB;
# the difference is in what the two blocks are made of (the handout's block keeps different intermediates of its
# RoPE and its attention than ours; the probabilities alone are 4 · 16 · 2048² · 4 bytes = 1 GiB). With the xl's 32
# heads the naive attention's probabilities double, {glue:text}`tm_naive32_mib:.5g` MiB eager; with the fused
# attention a block keeps {glue:text}`tm_sdpa_mib:.5g` MiB, the largest contributions in the second table: the
# inputs of the feed-forward network's and the attention's projections and the outputs of their activations. For
# all {glue:text}`tm_layers` blocks that is {glue:text}`tm_all_blocks_gib:.3g` GiB, on top of
# {glue:text}`tm_states_gib:.3g` GiB of fp32 weights, gradients and AdamW moments (16 bytes per parameter,
# {glue:text}`tm_params_b:.3g` billion parameters): more than an 80 GB GPU holds.
#
# ## One block in Nsight Systems (`memory_profiling` f)
#
# The handout's `memory_profiling` (f) asks the same of a profiler: run one block forward and backward under Nsight
# Systems with its CUDA memory tracing (`nsys profile --cuda-memory-usage=true`) and PyTorch's NVTX ranges, and
# read from the trace what the block keeps for the backward pass and what its gradients take. PyTorch's caching
# allocator would hide the tensors from such a trace: it asks CUDA for large segments once and hands them out
# itself, so the trace would show a few segments and no frees. For this run it is switched off
# (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`), so that every tensor is a `cudaMalloc` and a `cudaFree` of its own.
# `systems.profiling.block_memory` runs the block of the {glue:text}`tm_size` model (fp32, fused attention, batch
# {glue:text}`tm_batch` × {glue:text}`tm_context`) once untraced, then inside the ranges `block:forward` and
# `block:backward`, each submodule in a range of its own and every operator in PyTorch's
# (`torch.autograd.profiler.emit_nvtx`). Each allocation is named by its module and the outermost operator
# running (`aten::linear`, not the `aten::empty` it calls). A residual is a tensor allocated in the forward range
# and freed in the backward range. The five largest operations among them, with their share of all residuals:

# %% tags=["nbval-ignore-output"]
rec, traced_block, real = tm.traced(size, context, batch, cfg, profile == "full")
if not real:
    report.md("*No GPU or no nsys on this machine: the trace below is made from the hook measurement above, so it "
              "cannot check it.*")
report.save_table(traced_block["by_op"], data_dir, "block_trace_residuals_by_op")
report.table(traced_block["by_op"].head(5)[["op", "tensors", "MiB", "share"]], floatfmt=".4g")

# %% tags=["remove-input", "nbval-ignore-output"]
block_memory.plot_curve(traced_block, title=f"one {size} block, batch {batch} × {context}: memory in use (nsys)");

# %% [markdown]
# The curve is the trace's memory in use, every allocation up and every free down, from the start of the forward
# range. By module, the trace against the hooks of the previous section (the same block, the same input). The two
# name different moments of a tensor's life: the hooks the module whose operation saves it, the trace the module
# whose operation allocated it. The outputs of `ffn.w1` and `ffn.w3`, for instance, are allocated by those
# projections and saved by the products in `ffn`; the product `ffn.w2` saves as its input was allocated in `ffn`.

# %% tags=["nbval-ignore-output"]
by_module = tm.hooks_against_trace(blocks["sdpa, 32 heads, eager"], traced_block)
report.save_table(by_module, data_dir, "block_trace_vs_hooks")
report.table(by_module, floatfmt=".4g")
report.glue_all("tm_trace", tm.trace_facts(traced_block, rec, cfg, block_bytes))

# %% [markdown]
# The trace finds {glue:text}`tm_trace_mib:.5g` MiB of residuals, of the {glue:text}`tm_trace_forward_mib:.5g`
# MiB the forward pass allocates; the hooks count {glue:text}`tm_sdpa_mib:.5g` MiB. The difference,
# {glue:text}`tm_trace_gap_mib:.4g` MiB, is {glue:text}`tm_trace_gap_words`. The five largest operations hold
# {glue:text}`tm_trace_top5_pct:.3g` % of the residuals, {glue:text}`tm_trace_top1` alone
# {glue:text}`tm_trace_top1_pct:.3g` % (a (batch, tokens, d_ff) tensor of the feed-forward network is four times the
# size of a (batch, tokens, d_model) one).
#
# Over the backward range, memory in use changes by {glue:text}`tm_trace_backward_change_mib:.5g` MiB: the
# backward pass frees the residuals and leaves the gradients. So the gradients take that change plus the residuals,
# {glue:text}`tm_trace_grad_handout_mib:.5g` MiB, {glue:text}`tm_trace_grad_words`: one fp32 number per parameter
# ({glue:text}`tm_trace_block_params_m:.4g` million in a block) and the gradient of the block's input, the size of
# the input, {glue:text}`tm_trace_grad_expected_mib:.5g` MiB in all. Counted directly, the
# {glue:text}`tm_trace_grad_tensors` tensors allocated in the backward range and alive after it take
# {glue:text}`tm_trace_grad_direct_mib:.5g` MiB.
#
# ## (a) The least memory, nesting allowed
#
# Checkpointing a group of consecutive blocks keeps only the group's input, the residual stream between blocks
# ({glue:text}`tm_boundary_mib:.4g` MiB here), and runs the group's forward again in the backward pass, holding
# its blocks' residuals only while that group's backward runs. If nesting is allowed, the recomputed group can
# itself be checkpointed, and so on. For N blocks the strategy that minimises peak activation memory halves the
# group at every level: checkpoint the two halves of the model, inside each recomputed half its two quarters, down
# to single blocks. At any moment one group per level is live and keeps two boundaries, so the peak is
# $O(\log N)$ boundaries plus one block's residuals, against $N$ blocks' residuals without checkpointing; in
# exchange every level recomputes the forward pass once, so compute grows to $O(N \log N)$ block forwards. This is
# the package's own code: the model takes the levels as `TransformerLM(cfg, checkpoint_blocks=levels)` and runs
# its blocks with

# %% tags=["nbval-check-output"]
report.md("```python\n" + inspect.getsource(run_blocks) + "```")
report.md(f"`nested_levels({cfg.num_layers})` = `{nested_levels(cfg.num_layers)}`")

# %% [markdown]
# `torch.utils.checkpoint` with `use_reentrant=False` nests: a checkpointed group that is recomputed runs its inner
# checkpoints again, which keep their inputs only until their own backward. With this model's sizes, the peak
# activation memory of each strategy on paper:

# %% tags=["nbval-ignore-output"]
paper, found = tm.paper_plans(cfg.num_layers, groups, block_bytes, boundary)
report.table(paper, floatfmt=".3g")
report.glue_all("tm", found)

# %% [markdown]
# ## (b) One level, measured
#
# With one level of groups of k blocks, the activations peak at $\lceil N/k \rceil$ boundaries plus k blocks'
# residuals, minimised at $k^\ast = \sqrt{N \cdot \text{boundary} / \text{block}}$ = {glue:text}`tm_k_star:.2g`:
# a block's residuals are so much larger than its input that single-block groups (k =
# {glue:text}`tm_best_k`) are best; there is no smaller group, so the next larger ones are measured beside it. A
# full training step of the {glue:text}`tm_size` model (forward, backward, AdamW; fp32; fused attention) at batch
# {glue:text}`tm_batch` × {glue:text}`tm_context` tokens, without checkpointing and with groups of each size. The
# peaks are `torch.cuda.max_memory_allocated`, over the measured step and over each of its phases; beside them the
# backward pass's peak less the {glue:text}`tm_states_gib:.3g` GiB of weights, gradients and AdamW moments, and the
# activations on paper.

# %% tags=["nbval-ignore-output"]
steps = tm.checkpointed_steps(sweep(BenchConfig(cfg, batch_size=batch, mode="train", warmup=1, steps=1),
                                    checkpoint_blocks=groups), cfg, block_bytes, boundary)
report.save_table(steps.drop(columns=[c for c in steps if c.endswith("times_ms")]), data_dir, "checkpointed_steps")
report.table(steps[["checkpoint_blocks", "status", "step_ms", "peak_gib", "backward_peak_gib", "optimizer_peak_gib",
                    "backward above states (GiB)", "activations on paper (GiB)"]], floatfmt=".4g")
report.glue_all("tm", tm.checkpoint_facts(steps, cfg))

# %% [markdown]
# The step {glue:text}`tm_fit_words` (without: {glue:text}`tm_unchecked`). Peaks of the whole step:
# {glue:text}`tm_peaks`; of the backward pass alone: {glue:text}`tm_bwd_peaks`. {glue:text}`tm_peak_phase_words`
# The backward pass's peak is where the group size shows: it holds the groups' inputs and one group's recomputed
# residuals on top of the model's state, and its distance above that state follows the activations on paper, plus
# the backward's own transients (a group's gradients of activations, the logits and their gradient).
#
# ## What recomputation costs
#
# Checkpointing runs every checkpointed block's forward twice; a forward is about a third of a training step's
# arithmetic (the backward costs twice the forward), so one level should cost about a third more time per step. At
# the longest context where the unchecked step still fits ({glue:text}`tm_recompute_fits` tokens), with and without single-
# block groups:

# %% tags=["nbval-ignore-output"]
overhead = sweep(BenchConfig(preset(size, context_length=fits_context, attention="sdpa"), batch_size=batch,
                             mode="train", warmup=1, steps=2), checkpoint_blocks=[0, 1])
report.table(overhead[["context_length", "checkpoint_blocks", "status", "forward_ms", "backward_ms", "step_ms"]],
             floatfmt=".4g")
report.glue_all("tm_recompute", tm.recompute_cost(overhead) | {"fits": fits_context})

# %% [markdown]
# With checkpointing the step {glue:text}`tm_recompute_words`. The trade is worth it where memory, not time, is what stops training: it turned a step that does not fit into
# one that does, for about a third more time, and on a larger GPU or with fewer layers checkpointed one can buy back
# part of that time. A middle way keeps the most expensive outputs to recompute through the recomputation:
# `TransformerLM(cfg, checkpoint_blocks=1, recompute="keep_attention")` (`systems.recompute`) keeps attention's
# outputs, so the backward recomputes the projections, norms and feed-forward network but not attention, at the
# memory of one (batch, tokens, d_model) output and its log-sum-exp per block; chapter 18 measures it at the 2026
# leaderboard's 32K-token context, where attention is nearly half of a block's arithmetic.

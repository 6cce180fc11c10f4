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

import pandas as pd
import torch

from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, sweep
from systems.memory.checkpointing import best_group, nested_levels, nested_peak, one_level_peak
from systems.memory.saved import SavedTensors, block_residuals
from systems.model import RMSNorm, _run_blocks, parameter_count, preset

profile = provenance.resolve_profile(profile)
device = "cuda" if torch.cuda.is_available() else "cpu"
if profile == "full":
    size, batch, context, norm_shape, fits_context = "2.7B", 4, 2048, (4, 512, 2560), 512
    groups = [0, 1, 2, 4]
else:
    size, batch, context, norm_shape, fits_context = "tiny", 2, 32, (2, 16, 64), 16
    groups = [0, 1, 2]
cfg = preset(size, context_length=context, attention="sdpa")
MiB = 2**20
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
torch.manual_seed(0)
with torch.device(device):
    norm, x = RMSNorm(norm_shape[-1]), torch.randn(*norm_shape, requires_grad=True)
with SavedTensors(norm) as eager:
    norm(x)
compiled = torch.compile(norm)
compiled(x)
with SavedTensors(norm, by_operation=False) as fused:
    compiled(x)
report.table(eager.table()[["op", "shape", "dtype", "parameter", "adds_bytes"]])
report.table(fused.table()[["op", "shape", "dtype", "parameter", "adds_bytes"]])
report.glue_all("tm_norm", {"eager_mib": eager.total_bytes / MiB, "fused_mib": fused.total_bytes / MiB,
                            "eager_n": len(eager.records), "fused_n": len(fused.records)})

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
blocks = {
    "naive attention, 16 heads, compiled": block_residuals(preset(size, context_length=context, num_heads=16,
                                                                  attention="naive"), batch, compiled=True),
    "naive attention, 32 heads (the xl's), eager": block_residuals(preset(size, context_length=context,
                                                                          attention="naive"), batch),
    "sdpa, 32 heads, eager": block_residuals(cfg, batch),
}
per_block = pd.DataFrame([{"block": name, "tensors": len(s.records), "MiB saved": s.total_bytes / MiB,
                           f"× {cfg.num_layers} blocks (GiB)": cfg.num_layers * s.total_bytes / 2**30}
                          for name, s in blocks.items()])
report.save_table(per_block, data_dir, "block_residuals")
report.table(per_block, floatfmt=".4g")
report.table(blocks["sdpa, 32 heads, eager"].by_op().head(8), floatfmt=".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
block_bytes = blocks["sdpa, 32 heads, eager"].total_bytes
boundary = batch * context * cfg.d_model * 4  # the residual stream between blocks, fp32
report.glue_all("tm", {"handout_block_mib": blocks["naive attention, 16 heads, compiled"].total_bytes / MiB,
                       "naive32_mib": blocks["naive attention, 32 heads (the xl's), eager"].total_bytes / MiB,
                       "sdpa_mib": block_bytes / MiB, "boundary_mib": boundary / MiB,
                       "all_blocks_gib": cfg.num_layers * block_bytes / 2**30})

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
report.md("```python\n" + inspect.getsource(_run_blocks) + "```")
report.md(f"`nested_levels({cfg.num_layers})` = `{nested_levels(cfg.num_layers)}`")

# %% [markdown]
# `torch.utils.checkpoint` with `use_reentrant=False` nests: a checkpointed group that is recomputed runs its inner
# checkpoints again, which keep their inputs only until their own backward. With this model's sizes, the peak
# activation memory of each strategy on paper:

# %% tags=["nbval-ignore-output"]
n = cfg.num_layers
plans = [("none", one_level_peak(n, 0, block_bytes, boundary), 0)]
plans += [(f"one level, groups of {k}", one_level_peak(n, k, block_bytes, boundary), 1) for k in groups if k]
plans.append((f"nested {nested_levels(n)}", nested_peak(n, nested_levels(n), block_bytes, boundary),
              len(nested_levels(n))))
paper = pd.DataFrame([{"strategy": s, "activation peak (GiB)": b / 2**30, "extra forward passes": f}
                      for s, b, f in plans])
report.table(paper, floatfmt=".3g")
report.glue("tm_best_k", best_group(n, block_bytes, boundary))
report.glue("tm_k_star", (n * boundary / block_bytes) ** 0.5)

# %% [markdown]
# ## (b) One level, measured
#
# With one level of groups of k blocks, the activations peak at $\lceil N/k \rceil$ boundaries plus k blocks'
# residuals, minimised at $k^\ast = \sqrt{N \cdot \text{boundary} / \text{block}}$ = {glue:text}`tm_k_star:.2g`:
# a block's residuals are so much larger than its input that single-block groups (k =
# {glue:text}`tm_best_k`) are best; there is no smaller group, so the next larger ones are measured beside it. A
# full training step of the {glue:text}`tm_size` model (forward, backward, AdamW; fp32; fused attention) at batch
# {glue:text}`tm_batch` × {glue:text}`tm_context` tokens, without checkpointing and with groups of each size; the
# peak is `torch.cuda.max_memory_allocated` over the measured step.

# %% tags=["nbval-ignore-output"]
base = BenchConfig(cfg, batch_size=batch, mode="train", warmup=1, steps=1)
steps = sweep(base, checkpoint_blocks=groups)
steps["peak_gib"] = steps.get("peak_memory_mb", pd.Series(float("nan"), index=steps.index)) / 1024
report.save_table(steps.drop(columns=[c for c in steps if c.endswith("times_ms")]), data_dir, "checkpointed_steps")
report.table(steps[["checkpoint_blocks", "status", "step_ms", "peak_gib"]], floatfmt=".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
ok = steps[steps.status == "ok"].set_index("checkpoint_blocks")
report.glue("tm_unchecked", steps.set_index("checkpoint_blocks").status[0])
report.glue("tm_fit_words", report.pick(
    steps.set_index("checkpoint_blocks").status[0] != "ok" and len(ok) > 0,
    "runs out of memory without checkpointing and fits with it", "does not show the difference on this machine"))
report.glue("tm_peaks", "; ".join(f"groups of {k}: {g:.3g} GiB" for k, g in ok.peak_gib.items()))

# %% [markdown]
# The step {glue:text}`tm_fit_words` (without: {glue:text}`tm_unchecked`). Measured peaks: {glue:text}`tm_peaks`.
# The measured peak sits above the activations on paper by the 16 bytes per parameter of the model's state, plus
# the backward's own transients (one group's gradients of activations, the logits and their gradient).
#
# ## What recomputation costs
#
# Checkpointing runs every checkpointed block's forward twice; a forward is about a third of a training step's
# arithmetic (the backward costs twice the forward), so one level should cost about a third more time per step. At
# the longest context where the unchecked step still fits ({glue:text}`tm_fits` tokens), with and without single-
# block groups:

# %% tags=["nbval-ignore-output"]
overhead = sweep(BenchConfig(preset(size, context_length=fits_context, attention="sdpa"), batch_size=batch,
                             mode="train", warmup=1, steps=2), checkpoint_blocks=[0, 1])
report.table(overhead[["context_length", "checkpoint_blocks", "status", "forward_ms", "backward_ms", "step_ms"]],
             floatfmt=".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("tm_fits", fits_context)
t = overhead.set_index("checkpoint_blocks")
report.glue("tm_overhead", t.step_ms[1] / t.step_ms[0] if (t.status == "ok").all() else float("nan"))
report.glue("tm_backward_growth", t.backward_ms[1] / t.backward_ms[0] if (t.status == "ok").all() else float("nan"))

# %% [markdown]
# With checkpointing the step takes {glue:text}`tm_overhead:.3g` times as long, against about 1.33 by the FLOP count;
# the backward pass alone grows {glue:text}`tm_backward_growth:.3g`×, because the recomputed forwards run inside it.
# The trade is worth it where memory, not time, is what stops training: it turned a step that does not fit into
# one that does, for about a third more time, and on a larger GPU or with fewer layers checkpointed one can buy back
# part of that time.
#
# *Not measured here:* the 2026 handout's `memory_profiling` (f), the same residuals read from an Nsight Systems
# memory trace.

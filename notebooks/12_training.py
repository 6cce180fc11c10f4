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
# # Training with every attention kernel and every data-parallel wrapper
#
# Putting the pieces of the book together: short training runs of one model with each attention
# implementation and each data-parallel wrapper. How many tokens per second does each combination
# train, how much memory does it take, and do they all learn the same thing?

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
from systems import figures, provenance, report
from systems.model import preset
from systems.train import WRAPPERS, TrainConfig
from systems.chapters.training import findings
from systems.train_runs import compare

profile = provenance.resolve_profile(profile)
world = 2
if profile == "full":
    base = TrainConfig(preset("small", context_length=256), global_batch_size=16, max_steps=20, warmup_steps=5,
                       lr=3e-4, progress=False)
    attentions, backend, timeout_s, skip = ["naive", "sdpa", "flash_triton"], "nccl", 300, 5
else:
    base = TrainConfig(preset("tiny", context_length=32), global_batch_size=4, max_steps=4, warmup_steps=1, lr=1e-3,
                       progress=False)
    attentions, backend, timeout_s, skip = ["naive", "sdpa"], "gloo", 120, 1
report.glue_all("train", {"size": base.model.name, "context": base.model.context_length,
                          "batch": base.global_batch_size, "steps": base.max_steps, "world": world, "skip": skip})

# %% [markdown]
# ## The runs
#
# `python -m systems.train` (or `systems.train.train(cfg)` from Python) trains the Transformer LM with AdamW (linear
# warm-up, cosine decay, gradient clipping) on seeded random tokens. The sampler draws the same global batch at every
# step whatever the number of processes, each rank takes its slice, and the wrapper averages the gradients, so every
# run below sees identical data and should follow the same loss curve. Here: the {glue:text}`train_size` model,
# context {glue:text}`train_context`, global batch {glue:text}`train_batch` sequences, {glue:text}`train_steps`
# steps, fp32. `none` trains on one GPU; the wrappers train on {glue:text}`train_world` GPUs (NCCL), each rank taking
# half the batch:
#
# - `naive`: one blocking all-reduce per parameter after the backward pass (§2.2);
# - `flat`: one all-reduce of all gradients flattened into a single buffer (§2.3.1);
# - `overlap`: an asynchronous all-reduce per parameter as soon as its gradient is ready (§2.3.2);
# - `bucketed`: gradients gathered into 25 MiB buckets, each all-reduced when complete (§2.3.3);
# - `torch`: PyTorch's `DistributedDataParallel`, the anchor;
# - `fsdp`: our fully sharded data parallelism, each rank holding half of every weight, gradient and AdamW moment and
#   gathering a layer's weights just before it runs (chapter 15);
# - `fsdp2`: PyTorch's `fully_shard`, the anchor for `fsdp`.
#
# Throughput is the median over the steps after the first {glue:text}`train_skip` (which pay for kernel compilation,
# autotuning and the allocator's growth); peak memory is the first rank's `torch.cuda.max_memory_allocated` over the
# whole run; MFU is the model FLOPs per second over the GPUs' peak.

# %% tags=["nbval-ignore-output"]
summary, records, skipped = compare(base, attentions, world, backend, timeout_s, skip)
report.save_table(summary, data_dir, "summary")
report.save_table(records, data_dir, "steps")
report.table(summary.drop(columns=["steps"]), floatfmt=".4g")

# %% tags=["remove-input", "nbval-ignore-output"]
figures.bars(summary, "wrapper", "tokens_per_s", "attention", None,
                     "tokens / s (median step)", "Throughput by wrapper", order=list(WRAPPERS), log=False);
figures.lines(records, "step", "loss", "wrapper", "Training loss of every run (one curve per wrapper)", "step",
              "loss", col="attention", logx=False, logy=False, palette=None);

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("train", findings(summary, records, world))
report.glue("train_skipped", "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "nothing")

# %% [markdown]
# Not run: {glue:text}`train_skipped`. The fastest combination is {glue:text}`train_fastest`,
# {glue:text}`train_fastest_tok_s:.4g` tokens/s. From one GPU to {glue:text}`train_world`, the best wrapper of each
# attention multiplies the tokens per second by {glue:text}`train_speedups`. Across wrappers, the median throughput
# ranks the attention implementations {glue:text}`train_ranking`. All runs see the same global batches: at every
# step, the losses of one attention's runs differ by at most {glue:text}`train_loss_spread:.2g`, float rounding of
# differently ordered reductions, so every wrapper trains the same model.
#
# What to take from the table. The wrappers differ only in how and when gradients cross between the GPUs, so their
# losses agree and their throughput measures the communication strategy: per-parameter blocking all-reduces
# (`naive`) pay a latency per tensor; one flat buffer (`flat`) pays one latency but waits for the whole backward
# pass; the overlapping variants hide communication behind the backward pass. A speed-up well below 2 from two GPUs
# says the model is too small for its gradients' all-reduce to hide behind its compute. The attention
# implementations change only the attention itself: the naive one materialises the (context × context) score matrix
# of every head and saves it for backward, the fused ones do not, which shows first in the memory column and grows
# with the context length. Reproduce one run from the command line:
#
# ```
# torchrun --nproc_per_node 2 -m systems.train --size small --context-length 256 --global-batch-size 16 \
#     --max-steps 20 --warmup-steps 5 --attention sdpa --wrapper bucketed --log-file run.jsonl
# ```

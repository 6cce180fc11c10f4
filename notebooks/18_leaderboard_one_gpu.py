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
# # The 2026 leaderboard on one GPU
#
# The 2026 handout ends (§9) with a leaderboard: one complete training step, forward, loss, backward and AdamW, of
# an 8.1-billion-parameter model at a context of 32,768 tokens, batch 2, in bf16, on two GPUs. This chapter builds
# and measures on one GPU everything that step is made of: the LM head and its loss, the optimizer, one Transformer
# block at that context, and the model itself with as many of its 34 blocks as one GPU holds. Each part is timed
# beside what plain PyTorch offers for it, in the same run, and the model's step is taken apart technique by
# technique. The chapter ends with the plan for two GPUs: what each will hold, and how long the step should take.

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import os
from dataclasses import replace
from itertools import product

import pandas as pd
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined: CPU runs use the interpreter

from systems import figures, pipeline, provenance, report
from systems.attention.fastest import fastest_flash
from systems.bench import leaderboard_2026 as lb
from systems.chapters import leaderboard as words
from systems.device import use_expandable_segments
from systems.hardware import H100, H200
from systems.model import LEADERBOARD_2026
from systems.resumable import measured, measured_sweep
from systems.scaling.plans import two_device_link

use_expandable_segments()  # before the first CUDA work of the process: the deepest steps fit in what it saves
profile = provenance.resolve_profile(profile)
ours, plain = lb.Recipe(), lb.PLAIN
if profile == "full":
    cfg, dtype, head_tokens, adamw_params = LEADERBOARD_2026, torch.bfloat16, 65_536, 10**9
    depths, ablation_layers, kernel_layers, rep = [2, 4, 8, 12, 16, 20], 2, 4, dict(rep=3000, warmup=1000)
    chunk_mib = [128, 256, 320, 512, 1024]
    ours = replace(ours, attention=fastest_flash(torch.device("cuda")))
else:  # the same code at a toy size, in fp32 (Triton's CPU interpreter has no bf16)
    cfg = replace(LEADERBOARD_2026, vocab_size=512, context_length=64, d_model=64, d_ff=96, num_layers=2, num_heads=4)
    dtype, head_tokens, adamw_params, depths, ablation_layers, kernel_layers = torch.float32, 128, 50_000, [1], 1, 1
    chunk_mib = [1]
    rep = dict(rep=1, warmup=1)
    ours, plain = replace(ours, compiled=False), replace(plain, attention="sdpa", compiled=False)
gpu = H200 if "H200" in provenance.stamp()["gpu"] else H100
report.glue_all("lb", {"context": cfg.context_length, "vocab": cfg.vocab_size,
                       "layers": cfg.num_layers, "head_tokens": head_tokens, "peak_tflops": gpu.peak_flops["bf16"] / 1e12,
                       "ablation_layers": ablation_layers, "kernel_layers": kernel_layers})

# %% [markdown]
# ## What the step is
#
# The model is the handout's `BasicsTransformerLM` (ours is `preset("leaderboard-2026")`): a vocabulary of
# {glue:text}`lb_vocab`, a context of {glue:text}`lb_context` tokens, d_model 4096, d_ff 11008, 32 heads of 128,
# {glue:text}`lb_layers` blocks. A step's arithmetic, counted as the attention tables of this book count it (only
# the visible half of a causal score matrix, its backward 2.5 times its forward, `systems.flops.step_flops`):

# %% tags=["nbval-check-output"]
flops, step = words.step_table(cfg, 2, gpu.peak_flops["bf16"])
report.table(flops, ".3g")
report.glue_all("lb_step", step)

# %% [markdown]
# That is {glue:text}`lb_step_pflop:.3g` PFLOP, {glue:text}`lb_step_peak_s:.3g` s at the dense bf16 peak of one
# GPU of this machine ({glue:text}`lb_peak_tflops:.4g` TFLOP/s). Attention is {glue:text}`lb_step_attention_share:.0%`
# of it: at 32K tokens the score matrices, not the weights, set the pace. What makes the step hard is memory:
# {glue:text}`lb_step_params_b:.3g` billion parameters take {glue:text}`lb_step_state_gib:.4g` GiB as fp32
# weights, gradients and AdamW's two moments, more than any one GPU holds, and the logits of the
# {glue:text}`lb_step_tokens` tokens would take {glue:text}`lb_step_logits_gib:.3g` GiB in bf16 alone, twice that
# again once the loss computes in fp32. Two GPUs must share the state, and nothing may hold the whole logits.
#
# ## The head and the loss without the logits
#
# The last layer maps each token's hidden state to a score per word, and the loss turns the scores into
# −log softmax at the target. Written as PyTorch runs it (the model's own `token_loss`), the scores exist in full
# in bf16, then in fp32, then as their gradient. `systems.fused.linear_cross_entropy` goes a chunk of tokens at a
# time instead: one matrix product for the chunk's scores, one Triton program per token that computes the
# log-sum-exp in fp32 and overwrites the scores with their gradient, two products for the gradients of the hidden
# states and of the weight. The three products are the same as the unfused head's; what changes is that only one
# chunk of scores, at most a GiB, ever exists. Here the head and the loss over {glue:text}`lb_head_tokens` tokens,
# forward and backward, three ways:

# %% tags=["nbval-ignore-output"]
head = measured(data_dir, "head_and_loss", lb.head_and_loss, head_tokens, cfg=cfg, dtype=dtype, **rep)
report.table(head.drop(columns=["vocab", "d_model"]), ".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("lb_head_words", words.head_words(head, provenance.stamp()["gpu"]))

# %% [markdown]
# {glue:text}`lb_head_words`
#
# The chunk is the fused head's one setting. A smaller one holds fewer scores at a time but runs narrower
# products, and the weight's gradient, which every chunk adds to, is read and written once per chunk. The
# sizes include the largest at which a chunk's scores and the two gradients the head returns should together stay
# under 2 GiB (a whole number of 128-token tiles):

# %% tags=["nbval-ignore-output"]
chunks = measured(data_dir, "head_chunks", lb.head_chunks, head_tokens, chunk_mib, cfg=cfg, dtype=dtype, **rep)
report.table(chunks, ".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("lb_chunk_words", words.chunk_words(chunks, head))

# %% [markdown]
# {glue:text}`lb_chunk_words`
#
# ## AdamW in one pass
#
# An optimizer step reads every parameter, its gradient and two moments and writes three of them back: 28 bytes per
# fp32 parameter and almost no arithmetic, so its time is memory traffic. PyTorch's default for-each AdamW runs the
# update as a dozen passes over lists of tensors; its `fused=True` one is a single CUDA kernel. Ours
# (`systems.fused.FusedAdamW`) is one Triton kernel launched once for every tensor of a dtype, each program updating
# a chunk of one tensor whose address it reads from a table, with the update written operation for operation as
# PyTorch's fused kernel writes it, in fp32 with fused multiply-adds (a GPU test holds it within one unit in the last
# place of PyTorch's). One step over the model's first parameters:

# %% tags=["nbval-ignore-output"]
adamw = measured(data_dir, "adamw", lb.adamw_step, adamw_params, cfg=cfg, **rep)
report.table(adamw, ".4g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("lb_adamw_words", words.adamw_words(adamw, gpu.memory_bandwidth))

# %% [markdown]
# {glue:text}`lb_adamw_words`
#
# ## One block at 32K tokens
#
# A block is 202 million parameters and, at batch 2 and 32K context, 65,536 tokens of activations. Its forward
# and backward, bf16 weights, for each attention (SDPA's cuDNN back end, plain PyTorch's fastest, and our fastest
# at head dim 128, {glue:text}`lb_ours_attention`), each way of recomputing (none; the whole block recomputed in the
# backward, keeping only its input; the block recomputed but attention's outputs kept,
# `recompute="keep_attention"`), eager and compiled:

# %% tags=["remove-cell"]
report.glue("lb_ours_attention", ours.attention)

# %% tags=["nbval-ignore-output"]
blocks = measured(data_dir, "block", lb.block_step, [plain.attention, ours.attention],
                  compiled=[False, True] if ours.compiled else [False], cfg=cfg, dtype=dtype, **rep)
comparison = words.block_comparison(blocks, ours.attention, plain.attention)
report.table(comparison, ".4g")
report.glue("lb_block_words", words.block_words(comparison, ours.attention, plain.attention))
report.glue("lb_keeping_words", words.keeping_words(blocks, [plain.attention, ours.attention]))
# our recipe recomputes its blocks the faster of the two checkpointed ways this table measured for them; where that
# way keeps attention's output in a compiled step, the model's step keeps the feed-forward's products too, offloaded
ours = words.offloading(replace(ours, recompute=words.faster_recompute(blocks, ours.attention, ours.compiled)))
report.glue("lb_ours_recipe", ours.label)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.bars(blocks[blocks.status == "ok"].assign(mode=lambda d: d.compiled.map({True: "compiled", False: "eager"})),
             "recompute", "ms", "attention", "mode", "forward + backward (ms)", "one block, batch 2",
             order=["none", "all", "keep_attention"], log=False);

# %% [markdown]
# {glue:text}`lb_block_words` Attention at head dimension 128 is where chapter 07 found our kernel
# furthest behind cuDNN's, and here it is nearly half the block's arithmetic.
#
# What a policy recomputes depends on how the compiler sees the attention. SDPA's back ends and the Hopper forward
# are operators it can run again: under "all" it recomputes them, under `keep_attention` it keeps their output.
# Our Triton attention is a `triton_op` whose body the compiler traces, and its partitioner does not run the Triton
# kernel it finds there a second time, so compiled, "all" keeps that attention's output as well (the experiment log
# counts the kernels each way launches). {glue:text}`lb_keeping_words`
#
# ## The step, as deep as one GPU holds
#
# The whole model does not fit on one GPU, so the step runs with fewer blocks: the embedding, the head and the
# loss at full size, the blocks as many as fit. Every step is the handout's (zero the gradients, forward and
# loss, backward, AdamW), timed with `triton.testing.do_bench`, weights and gradients in bf16, each compiled anew.
# `do_bench` repeats a step as often as it fits in the time of repetitions, which here is a tenth of the
# handout's, and at least once; a step it would repeat fewer than three times is timed three times more and their
# mean taken (`systems.bench.timing.handout_ms`), so that no time below is a single step.
# Two recipes: ours ({glue:text}`lb_ours_recipe`: our attention, the fused loss, our AdamW, each block recomputed the
# faster way the table above found, offloaded where that way keeps attention's output, as the next paragraph says)
# and plain PyTorch's (SDPA's cuDNN attention, the unfused loss compiled with the model, PyTorch's fused AdamW, each
# block recomputed whole). A depth that did not fit says OOM.
#
# Where the table found keeping attention's output faster, our model's step keeps more: the feed-forward's two
# products W1 x and W3 x as well (`recompute="offload"`, `systems.offload`), so that a block's backward recomputes
# only the projections to q, k, v and attention's output, not the feed-forward's two widest matrix products. Every
# block keeping them on the GPU would not fit, so what each group of blocks saves goes to pinned host memory, on a
# stream of its own while the forward goes on, and comes back while the backward of the group after it runs: the
# GPU holds what the last group saved and what the next one back needs. The copies take the PCIe link, not the
# tensor cores (the experiment log measured both, and the step with and without them). The groups are compiled one
# by one: autograd hands over a compiled region's saved tensors only when the region has run.
#
# Keeping attention's output on the GPU (`recompute="keep_attention"`) costs memory in every block that keeps it
# (`kept_blocks` counts them), so at some depth such a recipe stops fitting where recomputing everything still
# fits. There it tries again keeping attention's output in the first blocks only (`kept_groups`): as many as a
# straight line through its peaks at the shallower depths says fit in 90 % of the GPU's memory (the allocator's fragments and the compiler's workspaces take the
# rest), each block that recomputes its attention counted as freeing its output and log-sum-exp; if that does not
# fit, one block fewer, three tries at most. Every try is a row. The chapter's process asks PyTorch's allocator
# for expandable segments (`systems.device.use_expandable_segments`): it grows a segment in place instead of
# reserving one of each new size, so the deepest steps are not refused for the fragments of the segments it split.
# With the allocator's defaults, the memory it reserved was where the deepest step ran out (the experiment log
# measured both ways, in an 80 GB GPU's memory).

# %% tags=["nbval-ignore-output"]
steps = measured_sweep(data_dir, "model_step", lb.step_at, list(product(depths, [ours, plain])), cfg=cfg,
                       dtype=dtype, **rep)
report.table(steps[["layers", "recipe", "kept_blocks", "status", "ms", "mfu", "extra_gib", "peak_gib"]], ".4g")
report.glue("lb_deep_words", words.deepest(steps, ours.label, plain.label))

# %% tags=["remove-input", "nbval-ignore-output"]
figures.lines(steps[steps.status == "ok"], "layers", "ms", "recipe", "the step against its depth", "blocks",
              "step (ms)", logx=False, logy=False, legend_below=True);

# %% [markdown]
# {glue:text}`lb_deep_words`
#
# ## Where the step's time goes
#
# The step of each recipe at {glue:text}`lb_kernel_layers` blocks once more, under `torch.profiler`: every kernel
# the GPU ran in two steps after three of warm-up, grouped by what it does (`systems.bench.kernel_groups`; the
# command `python -m systems.bench.leaderboard_2026 kernels` prints the same), in milliseconds a step and as a share
# of the step's kernel time. The kernels the compiler fused are the norms, SwiGLU, the rotary embedding and the
# casts; plain PyTorch's loss is among them. An offloading step's copies to and from host memory run beside the
# kernels, on streams of their own: their row gives their time as a share of the kernels', not a part of it.

# %% tags=["nbval-ignore-output"]
kernels = measured(data_dir, "step_kernels", lb.step_kernels, kernel_layers, [ours, plain], cfg=cfg, dtype=dtype)
report.table(words.kernel_group_table(kernels, ours.label, plain.label), ".3g")
report.glue("lb_kernel_words", words.kernel_words(kernels, steps, ours.label, plain.label))

# %% [markdown]
# {glue:text}`lb_kernel_words` Both recipes run their matmuls through cuBLAS, so a faster step at the deepest depth
# has to come from the attention, or from recomputing less, which takes memory that depth has little of on the GPU:
# what a block keeps beyond its input and attention's output has to live elsewhere, as offloading keeps it.
#
# ## Each technique on and off
#
# Our recipe with one technique at a time swapped for plain PyTorch's, at {glue:text}`lb_ablation_layers` blocks:
# few enough that every variant fits, and that each of the eight, compiled anew, is measured in about a minute. At
# this depth the head and the loss weigh more in the step than they do in the full model, so the fused loss's share
# is larger here than it would be at 34 blocks. Where ours offloads, the row that recomputes the other way keeps
# attention's output on the GPU, and so does the eager row: offloading needs its groups compiled.

# %% tags=["nbval-ignore-output"]
swaps = lb.ablation_recipes(ours, plain)
ablation = measured_sweep(data_dir, "ablation", lb.step_at, [(ablation_layers, swap) for swap in swaps], cfg=cfg,
                          dtype=dtype, **rep)
report.table(words.ablation_table(ablation, ours.label, "extra_gib"), ".4g")
report.glue("lb_ablation_words", words.ablation_words(ablation, ours.label, plain.label))

# %% [markdown]
# The first row is every technique on; each row below changes one, and the last is plain PyTorch's recipe. A
# time ratio above one means the technique that row switched off was worth that much; a memory difference above
# zero, that it saved that much. {glue:text}`lb_ablation_words`
#
# ## The plan for two GPUs
#
# On two GPUs FSDP2 shards the fp32 weights, gradients and moments, gathers each block's weights in bf16 just
# before it runs and reduces its gradients just after, and each GPU takes one of the two sequences. What a GPU then
# holds, part by part (`systems.scaling.leaderboard.memory_per_gpu`), with one block's activations as measured
# here at one sequence:

# %% tags=["nbval-ignore-output"]
one_sequence = measured(data_dir, "block_one_sequence", lb.block_step, [ours.attention], ["none", "all"],
                        [ours.compiled], batch=1, cfg=cfg, dtype=dtype, **rep)
half_head = measured(data_dir, "head_one_sequence", lb.head_and_loss, head_tokens // 2, ["fused"], cfg=cfg,
                     dtype=dtype, **rep)
link = two_device_link(pd.read_csv(pipeline.BOOK_DATA / "08_allreduce" / "allreduce.csv"))
plans, plan = words.two_gpu_plan(cfg, one_sequence, half_head, adamw, link)
report.table(words.plan_table(plans), ".3g")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("lb_plan_words", words.plan_words(plans, plan, H200.memory_bytes, link))  # the two-GPU machines' GPUs

# %% [markdown]
# The two-GPU machines the next chapter runs on have H200s. The step the plan predicts is every block's measured
# forward and backward with recomputation (at one sequence, the forward taken as a quarter of it: one forward, then
# a forward again and the backward's two), the fused head and loss, FSDP's gathers and reduce-scatters scheduled as
# `systems.scaling.simulate` schedules them (two blocks' gathers ahead of the compute), then our AdamW over each
# GPU's half of the parameters. {glue:text}`lb_plan_words`
#
# What the two-GPU run will check: that the plan's memory is what FSDP2 holds (the peak per GPU), that the
# communication hides as the simulation says (a trace of one step, the streams side by side), and that the step
# takes the predicted time, with our recipe and with plain PyTorch's on the same machine.

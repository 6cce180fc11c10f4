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
# # FlashAttention written for Hopper
#
# Chapter 07 found where our Triton kernels lose to cuDNN on an H100: Triton 3.6 waits for each S = QKᵀ product
# before the exponentials, so the softmax never runs while the tensor cores work. FlashAttention-3 and cuDNN get
# their lead from that overlap, and Hopper gives the means: a copy engine that moves tiles into shared memory while
# the threads do something else (TMA), matrix products that run asynchronously (`wgmma`), and registers moved between
# warpgroups (`setmaxnreg`). This chapter is about `flash_hopper`, a forward written that way in CUDA C++
# (`systems/attention/flash_cpp/flash_hopper_forward.cu`): what each warpgroup does, what each of its switches brings,
# and where it stands against cuDNN, forward and backward. It needs an sm_90 GPU (H100, H200); elsewhere the name
# `flash_hopper` says why it cannot run.

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import os

import pandas as pd
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined: CPU runs use the interpreter

from systems import figures, provenance, report
from systems.bench import flash_sweep as fs
from systems.chapters import hopper
from systems.flops import peak_flops
from systems.resumable import measured

profile = provenance.resolve_profile(profile)
on_hopper = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
if profile == "full":
    shapes, dtype, rep_ms, rounds = fs.TABLE_SHAPES, "bf16", 100, 3
    model_sizes, model_context, max_batch, model_steps = ["small", "medium", "large", "xl", "2.7B"], 2048, 64, 10
else:
    shapes, dtype, rep_ms, rounds = (((1, 2, 64, 16), True),), "fp32", 5, 1  # the interpreter has no bf16
    model_sizes, model_context, max_batch, model_steps = ["tiny"], 32, 2, 2
impls = ("flash_hopper", "flash_triton", "sdpa_cudnn", "sdpa_flash")
peak = peak_flops(torch.cuda.get_device_name(), "bf16") if torch.cuda.is_available() else None
report.glue_all("hopper", {"rep_ms": rep_ms, "rounds": rounds, "peak_tflops": peak / 1e12 if peak else float("nan"),
                           "model_context": model_context, "max_batch": max_batch, "model_steps": model_steps})

# %% [markdown]
# ## What each warpgroup does
#
# A query tile is 128 query rows (192 at head dimension 64) of one head. The grid is persistent: one block on each
# multiprocessor, of three or four warpgroups of four warps, takes query tiles in turn, the next from a counter in
# global memory, so that one tile's end (its last products, O and L written) runs while the next one's Q and first
# K and V tiles are copied in. The counter goes through a head's tiles one after another, sharing its K and V in L2,
# the longest first when causal; there the last heads, as many as hold two turns of the grid's blocks, are taken tile
# by tile across them, so that the last tiles taken are the shortest and no block starts a long one as the others
# run out of work:
#
# - **The producer** gives most of its registers away (`setmaxnreg` down to 24) and uses one thread: it names each
#   query tile to the consumers and starts the copy engine on its Q and on every K and V tile, into a ring of two or
#   three shared-memory stages that goes on from tile to tile, in the 128-byte swizzle `wgmma` reads. Each stage has
#   two mbarriers: *full*, which the copy engine completes when the bytes have landed, and *empty*, which the
#   consumers arrive on when they are done with the tile; Q has the same pair.
# - **Two consumers** (three at head dimension 64) take the registers (240, or 160 with three) and own 64 query rows
#   each. Per K/V tile j a consumer waits on *full*, issues S(j) = Q K(j)ᵀ from shared memory together with
#   P(j−1) V(j−1) (P from registers), waits for S(j), masks it, and computes the online softmax. The source asks
#   for the exponentials while P(j−1) V(j−1) is still on the tensor cores, as FlashAttention-3 has it; the compiled
#   code (ptxas of CUDA 13.0) waits for that product right after the mask, so within one consumer only the mask runs
#   under it.
# - **Ping-pong**: the consumers take turns at the tensor cores through named barriers, so one's exponentials run
#   while the other's products do.
#
# The schematic below draws both orders from these rules alone, with made-up durations (a 64-row product takes 1,
# a softmax 1.3, a tile's copy 0.6): in order, the tensor cores wait for every softmax; in this kernel, only while
# the first softmax and the last one run.

# %% tags=["remove-input"]
figures.timeline(hopper.schedules(), by="schedule", title="schematic", colors=hopper.COLORS,
                 xlabel="time (one 64-row S = Q Kᵀ product takes 1)");

# %% [markdown]
# ## The forward's switches
#
# Each variant of the forward is built ahead of time (ring depth 2 or 3, ping-pong on or off, two or three
# consumers) and timed alone with `triton.testing.do_bench` (median, {glue:text}`hopper_rep_ms` ms of repetitions)
# beside cuDNN, SDPA's FlashAttention-2 and our Triton forward, in the model's layout ((B, N, H, d) memory), bf16,
# causal but for the 8192-token row: ms per shape (B×H×N×d), and in the last column the largest difference from
# cuDNN's output over cuDNN's largest value at any shape, so a fast wrong kernel would show.

# %% tags=["nbval-ignore-output"]
if on_hopper:
    from systems.bench import hopper as hopper_bench

    forward = measured(data_dir, "hopper_forward_variants", hopper_bench.forward_variants, shapes, rep_ms, gluon=False)
    effects = hopper.variant_effects(forward)
    report.table(hopper.variant_table(forward), ".3f")
else:
    effects = None
    report.md("Not measured here: the kernels need a Hopper GPU.")

# %% [markdown]
# Each switch, as the time without it over the time with it, the other two held as in the fastest variant of the
# shape (above 1: the switch helps):

# %% tags=["nbval-ignore-output"]
if effects is not None:
    report.table(effects, ".3f")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("hopper_variant", hopper.variant_facts(effects))

# %% [markdown]
# A third ring stage gains {glue:text}`hopper_variant_third_ring_stage_words`, ping-pong
# {glue:text}`hopper_variant_pingpong_words` and a third consumer at head dimension 64
# {glue:text}`hopper_variant_third_consumer_words`. The registered kernel takes three stages, ping-pong, and three
# consumers at head dimension 64, two at 128 (`systems_flash_hopper::fastest`); at 64 with the causal mask below
# 2,048 keys it takes two, where a tile of 192 queries, whose consumers all walk the keys its last one sees, was the
# slower on an H200 (`book/log.md`, 2026-11-29). With two consumers and the mask below 8,192 keys it also halves a
# consumer's last key tile where its queries see only the first half (the first consumer's, on the diagonal): S and
# P V over those 64 keys alone, in a kernel of its own, since the halving lengthens the tile loop. That paid on an H200
# where query tiles walk few key tiles and cost at 8,192 keys and more (`book/log.md`, 2026-11-30). A consumer writes
# its 64 rows of O 16 bytes a lane (`store_rows`, which the backward's dK, dV and dQ share): each quad of lanes holds
# a row, and trades its words in two rounds of shuffles so that every lane holds whole 16-byte chunks of it. Stored
# as the accumulators hold them, 4 bytes a lane, a warp's store is eight rows of 16 bytes, and a query tile's
# epilogue took on an H200 almost as long as one of its key tiles; written 16 bytes a lane, the forward took 0.92 to
# 0.99 of its time at head dimension 128 below 16,384 keys (the log times where a query tile's time goes, in cycles).
#
# ## Against cuDNN, forward and backward
#
# The registered attention (`get_attention("flash_hopper")`) takes this forward and the CUDA backward of the next
# section under one C++ autograd node (until the backward caught up at head dimension 64 it took our Triton kernels'
# backward there at short lengths and small batches; the next section times both). Both
# passes at the table's shapes, as chapter 07's sweep times them (inputs (B, H, N, d), the forward with autograd
# recording, forward+backward), in one process with our Triton kernels and SDPA's two back ends, each the fastest of
# {glue:text}`hopper_rounds` calls of `do_bench` taken in turn (one call's median moves by several percent from call
# to call); the share of peak is the achieved FLOP rate (the visible half of a causal score matrix, `systems.flops`)
# over the GPU's dense bf16 peak ({glue:text}`hopper_peak_tflops:.0f` TFLOP/s).

# %% tags=["nbval-ignore-output"]
runs = measured(data_dir, "hopper_table", fs.table, impls, shapes=shapes, dtype=dtype, rep_ms=rep_ms, rounds=rounds)
versus = hopper.against_cudnn(runs, "flash_hopper", peak)
report.table(versus, ".3f")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("hopper_table", hopper.table_facts(versus))

# %% [markdown]
# At the 2025 leaderboard's shape (1×16×16384×64) the forward alone is {glue:text}`hopper_table_forward_board_words`
# than cuDNN's, and forward+backward {glue:text}`hopper_table_both_board_words`; over the table's shapes the forward
# takes {glue:text}`hopper_table_forward_range_words` times cuDNN's time and forward+backward
# {glue:text}`hopper_table_both_range_words`, at {glue:text}`hopper_table_peak_words` of the tensor cores' peak.
# {glue:text}`hopper_table_board_vs_triton_words` {glue:text}`hopper_table_forward_behind_words` At short sequences
# a query tile has few key tiles and its fixed work (filling the ring, writing O) weighs more; the persistent grid
# runs it under the next tile's products (the experiment log times the forward with a block per query tile and
# with one per multiprocessor). Two runs of this
# chapter on the same machine differed by a few percent at some shapes (the experiment log has both), so
# differences that small are not findings.
#
# ## The backward written for Hopper, alone
#
# A backward in the forward's shape is built too (`flash_hopper_backward.cu`, `backward_hopper_cuda`): a dK/dV kernel
# in which a block owns 128 keys and its two consumers walk the query tiles that see them (Sᵀ and dPᵀ from shared
# memory, dV and dK from registers). One producer warp feeds the ring through the copy engine; a second copies each
# query tile's L and D (its row sums of dO ∘ O) into the same stage, so no consumer waits on a global load inside its
# loop. It takes one pass: each consumer also stores its dSᵀ in shared memory, multiplies its share of the tile's dQ
# (dS K, both operands read transposed by wgmma) and hands it to the copy engine, which adds it into an fp32
# accumulator while the next tile's products run, and a last kernel scales the sums into dQ. At head dimension 64
# the consumers take the query tiles in turn: the one whose turn it is waits at a named barrier for the other's dSᵀ
# and multiplies the tile's whole dQ over the block's 128 keys, while the other only arrives there and goes on, so
# the copy engine has one addition a tile and neither consumer waits on the other at every tile; at 128 each
# multiplies half of dQ's columns over the block's 128 keys, from both consumers' dSᵀ after a barrier both wait at:
# 32 accumulators instead of 64, and half the additions. Under `torch.use_deterministic_algorithms` it takes two
# passes, the second a dQ kernel that owns 128 queries and walks the keys, nothing added up in a changing order. A
# consumer issues the next tile's S and dP before the last product of the tile it is finishing, so the tensor cores
# have work while it computes P and dS; at head dimension 128 the dK/dV kernel's accumulators leave no registers for
# a second tile's S and dP, and it keeps the order of one tile at a time, with dQ's product and dK's issued together.
# It is correct at every tested shape; here it is timed alone beside the others' backward on the Triton forward's O
# and L (SDPA's and our Triton one through autograd), with the warp-specialised Gluon backward of an earlier attempt.

# %% tags=["nbval-ignore-output"]
if on_hopper:
    backward = measured(data_dir, "hopper_backward", hopper_bench.backward_kernels, shapes, rep_ms)
    report.table(backward.pivot_table(index="impl", columns="shape", values="ms", sort=False).reset_index(), ".3f")
else:
    backward = None
    report.md("Not measured here: the kernels need a Hopper GPU.")

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("hopper_backward", hopper.backward_facts(backward))

# %% [markdown]
# The CUDA backward is {glue:text}`hopper_backward_vs_triton_words`, and {glue:text}`hopper_backward_vs_cudnn_words`.
# One pass does five matrix products per tile pair, two passes seven. Sharing dSᵀ between the consumers pays at head
# dimension 128, where it frees registers and halves the additions, and not at 64: there an early version in which
# one consumer added dQ up was slower than two passes, and a later one that split dQ's columns (32 each) was 1.02
# to 1.06 times slower than the unshared pass (the log has both). Summing the two shares in shared memory before
# the copy engine's one addition does pay at 64, if the second consumer sums them where both used to hand theirs
# over: the kernel got faster at every causal shape the log's runs timed on an H200, after the tables above were
# measured; summed after the second consumer's dSᵀ, or with the two roles (handing over, summing) alternating by
# tile, it got slower. Later
# still, the one pass's dK/dV kernel became a persistent grid: a block per multiprocessor, each taking its next block
# of keys from a counter in the order the hardware launches them (the last heads, causal, block by block across them as
# in the forward), so one block's start and end run under the products of the others; with each consumer's index passed
# through a warp shuffle, so that the compiler keeps the wgmma descriptors in uniform registers, it got faster at every
# shape the log's runs timed on an H200. With the mask, a block's first query tile ends before its second consumer's
# keys; at head dimension 128 that consumer now skips the tile's products (its dSᵀ is zeros, and it still adds its
# half of dQ's columns), which made the backward faster on an H200 where blocks walk few tiles, up to 2,048 keys, and
# left it level at 16,384 and 32,768. Causal, the backward's loops over tiles now take apart the tiles the mask
# reaches (the first one or two of a key block's walk, the last one or two of a query block's) from the others, which
# carry no compare and select per element: on an H200 that made the two passes taken under deterministic algorithms
# faster at head dimension 64 and left the one pass level. At head dimension 64 the two passes now also hold each
# consumer's own rows in registers (K and V in the dK/dV kernel, Q and dO in the dQ kernel), the A operands of the two
# products that read them every tile, which then read only the walked tile from shared memory: on an H200 that made
# them faster again; the one pass has the registers for K alone, and holding it left it level. The one pass at 64
# then stopped summing two shares of each tile's dQ (the first consumer's handed through shared memory to the
# second, which added its own): with the consumers taking whole tiles in turn it got faster at every causal shape
# the log's runs timed on an H200, and no slower without the mask once it read each tile's L and D after its waits.
# The registered attention takes this backward at every shape: at head dimensions 72, 80 and 128 it was the faster
# from the first, and at 64, where it once lost to the Triton one below 8,192 keys unless the batch and the heads gave
# it eight waves of blocks, the log's last runs on an H200 found it the faster at every length and batch they timed,
# causal and not. The experiment log (`book/log.md`) has every attempt with its numbers, and what a next one needs.

# %% [markdown]
# ## In the model's training step
#
# What a user trains with: the training step of each preset (bf16 autocast, AdamW) at context
# {glue:text}`hopper_model_context`, the whole model under `torch.compile`, with `attention="flash_hopper"` against
# `attention="sdpa"` on one model, the two interleaved as chapter 17 times them ({glue:text}`hopper_model_steps`
# timed steps each; the ratio the median of the rounds' ratios, with its 95 % interval), at the largest batch (a
# power of two up to {glue:text}`hopper_max_batch`) whose eager step fits on the GPU. The 2.7B preset's head
# dimension, 80, runs in the kernels of head dimension 128: the copy engine fills the columns past 80 with zeros, the
# products over the head dimension (S = QKᵀ; in the backward Sᵀ, dPᵀ, S and dP) take its first 80 columns alone, and
# those as wide as it (PV, dV, dK, dQ) stay 128 wide, their stores stopping at column 80; the log has the measured
# effect. The name to train with, `attention="flash"` (`systems.attention.fastest`), takes `flash_hopper` on an H100
# or H200 where its kernels build, and our Triton kernels on other GPUs.

# %% tags=["nbval-ignore-output"]
if on_hopper:
    steps = pd.concat([measured(data_dir, f"hopper_model_steps_{size}", fs.compiled_steps_at_largest_batch, [size],
                                model_context, dtype, max_batch=max_batch, steps=model_steps)
                       for size in model_sizes], ignore_index=True)  # a size at a time: a stopped run resumes there
    step_table, step_facts = hopper.model_steps(steps)
    report.table(step_table, ".3f")
else:
    step_facts = {"words": "Not measured here: `flash_hopper` needs a Hopper GPU."}
    report.md(step_facts["words"])

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue("hopper_model_steps_words", step_facts["words"])

# %% [markdown]
# {glue:text}`hopper_model_steps_words`

"""The 2026 leaderboard's training step (handout §9) and its parts, each timed beside what plain PyTorch does.

The model is :data:`systems.model.LEADERBOARD_2026` (8.1 B parameters, context 32,768, vocabulary 151,936); every
function here takes smaller sizes for smoke runs. Each returns one row per variant: its time, what it achieves
(TFLOP/s, model FLOPs utilisation against the GPU's dense bf16 peak, or bandwidth), and the memory it takes above
what existed before the call (``extra_gib``: the peak during one call less what was allocated before it; the
gradients a call returns count, since it makes them), that peak in all (``peak_gib``), and the most the allocator
held, compilation and warm-up included (``reserved_gib``). A variant that does not fit has the status "OOM", one a
back end refuses "unsupported", and no numbers.

* :func:`head_and_loss`: the LM head and the loss over ``tokens`` tokens: eager (bf16 logits, the loss in fp32, as
  the model computes it), the same under ``torch.compile``, and the fused kernel (:mod:`systems.fused`);
  :func:`head_chunks` the fused kernel at each size of its chunk of logits;
* :func:`adamw_step`: one optimizer step over fp32 parameters shaped like the model's: PyTorch's for-each and
  fused AdamW, and ours;
* :func:`block_step`: one Transformer block, forward and backward, per attention, recomputation and compilation;
* :func:`model_step`: the model with a number of its blocks, timed as the handout times the whole step (zero the
  gradients, forward and loss, backward, optimizer step), each technique of the step switchable; where keeping
  attention's output in every block does not fit, it keeps it in as many as fit
  (:func:`~systems.memory.checkpointing.kept_groups_that_fit`); :func:`step_at` one depth and recipe of it;
* :func:`step_kernels`: where the step's time goes, kernel by kernel and group by group (matmuls, attention, ...).

Times are ``triton.testing.do_bench`` means, as the handout's harness takes them, of three steps at least
(:func:`~systems.bench.timing.handout_ms`).
FLOPs are :func:`systems.flops.step_flops`'s: causal attention's visible half, its backward 2.5× its forward.
The command runs with the allocator's expandable segments (:func:`systems.device.use_expandable_segments`), as
chapter 18 does.

    python -m systems.bench.leaderboard_2026 head --tokens 65536
    python -m systems.bench.leaderboard_2026 model --layers 4 --attention sdpa_cudnn flash   # flash: our fastest here
    python -m systems.bench.leaderboard_2026 kernels --layers 4 --attention flash_hopper --recompute keep_attention
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from itertools import product
from typing import Iterable

import pandas as pd
import torch
from tqdm.auto import tqdm

from systems.attention import available, runs_as
from systems.bench.kernel_groups import group_times, kernels_of
from systems.bench.points import GIB, Step, achieved, measure, surviving
# The chapters read the recipes from here, beside what measures them.
from systems.bench.recipe import (PLAIN, Recipe, ablation_recipes, adamw_for, build_model,  # noqa: F401
                                  our_kernels_unavailable)
from systems.cli import integer
from systems.device import OOM, allocatable_bytes, local_device, use_expandable_segments
from systems.flops import step_flops
from systems.memory.checkpointing import kept_attention_bytes, kept_groups_that_fit
from systems.model import LEADERBOARD_2026, ModelConfig, TransformerBlock, TransformerLM, token_loss
from systems.recompute import FFN_KEPT, run_blocks

HEAD_VARIANTS = ("eager", "compiled", "fused")
ADAMW_VARIANTS = ("foreach", "torch fused", "ours")
RECOMPUTE = ("none", "all", "keep_attention")  # of a block: no checkpoint, checkpointed, checkpointed keeping attention


# ---- the LM head and the loss --------------------------------------------------------------------------------

def _head_flops(tokens: int, cfg: ModelConfig) -> int:
    """The head's three products over ``tokens`` tokens, forward and backward: the logits, then the gradients of
    the hidden states and of the weight."""
    return 6 * tokens * cfg.vocab_size * cfg.d_model


def _head_step(variant: str, tokens: int, cfg: ModelConfig, dtype: torch.dtype, chunk_tokens: int | None = None
               ) -> Step:
    where = local_device()
    hidden = torch.randn(tokens, cfg.d_model, device=where, dtype=dtype, requires_grad=True)
    weight = (torch.randn(cfg.vocab_size, cfg.d_model, device=where) / math.sqrt(cfg.d_model)).to(dtype)
    weight.requires_grad_()
    targets = torch.randint(0, cfg.vocab_size, (tokens,), device=where)
    if variant == "fused":
        from systems.fused import linear_cross_entropy

        loss = lambda: linear_cross_entropy(hidden, weight, targets, chunk_tokens=chunk_tokens)  # noqa: E731
    else:
        # the model's own head and loss: logits in the weights' dtype, the loss over them in fp32 (one sequence)
        unfused = lambda h, w, t: token_loss((h @ w.T)[None], t[None])  # noqa: E731
        if variant == "compiled":
            unfused = torch.compile(unfused)
        loss = lambda: unfused(hidden, weight, targets)  # noqa: E731

    def clear():
        hidden.grad = weight.grad = None

    def run():
        clear()
        loss().backward()

    return Step(run, clear)


def head_and_loss(tokens: int = 2 * LEADERBOARD_2026.context_length, variants: Iterable[str] = HEAD_VARIANTS,
                  cfg: ModelConfig = LEADERBOARD_2026, dtype: torch.dtype = torch.bfloat16, rep: int = 1000,
                  warmup: int = 200) -> pd.DataFrame:
    """The head and the loss, forward and backward (6·tokens·V·d FLOPs), per variant of :data:`HEAD_VARIANTS`;
    ``gradients_gib``: what the two gradients it returns take, part of ``extra_gib``."""
    flops = _head_flops(tokens, cfg)
    grads = (tokens + cfg.vocab_size) * cfg.d_model * torch.finfo(dtype).bits / 8 / GIB
    rows = []
    for variant in tqdm(list(variants), desc="head and loss"):
        point = measure(lambda: _head_step(variant, tokens, cfg, dtype), rep=rep, warmup=warmup)
        rows.append({"variant": variant, "tokens": tokens, "vocab": cfg.vocab_size, "d_model": cfg.d_model, **point,
                     "gradients_gib": grads, **achieved(flops, point["ms"])})
    return pd.DataFrame(rows)


def head_chunks(tokens: int = 2 * LEADERBOARD_2026.context_length, chunk_mib: Iterable[int] = (128, 256, 512, 1024),
                cfg: ModelConfig = LEADERBOARD_2026, dtype: torch.dtype = torch.bfloat16, rep: int = 1000,
                warmup: int = 200) -> pd.DataFrame:
    """The fused head and loss with its chunk of logits held to each budget of ``chunk_mib`` MiB: what a smaller
    chunk saves in memory and costs in time (more, narrower products; the weight's gradient read and written once
    per chunk)."""
    from systems.fused.cross_entropy import chunk_tokens_for

    flops = _head_flops(tokens, cfg)
    rows = []
    for mib in tqdm(list(chunk_mib), desc="fused head, chunk sizes"):
        chunk = min(tokens, chunk_tokens_for(cfg.vocab_size, torch.finfo(dtype).bits // 8, mib * 2**20))
        point = measure(lambda: _head_step("fused", tokens, cfg, dtype, chunk), rep=rep, warmup=warmup)
        rows.append({"chunk_mib": mib, "chunk_tokens": chunk, "tokens": tokens, **point,
                     **achieved(flops, point["ms"])})
    return pd.DataFrame(rows)


# ---- AdamW ------------------------------------------------------------------------------------------------------

def model_shapes(cfg: ModelConfig, params: int) -> list[torch.Size]:
    """The shapes of the model's parameters, in order, as many as add up to at most ``params`` values (one at least)."""
    with torch.device("meta"):
        shapes = [p.shape for p in TransformerLM(cfg).parameters()]
    kept, total = [], 0
    for shape in shapes:
        if kept and total + shape.numel() > params:
            break
        kept.append(shape)
        total += shape.numel()
    return kept


def _adamw(variant: str, shapes: list[torch.Size]) -> Step:
    where = local_device()
    weights = [torch.nn.Parameter(torch.randn(s, device=where)) for s in shapes]
    for w in weights:
        w.grad = torch.randn_like(w)
    options = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if variant == "ours":
        from systems.fused import FusedAdamW

        optimizer = FusedAdamW(weights, **options)
    else:
        optimizer = torch.optim.AdamW(weights, **options, **({"fused": True} if variant == "torch fused" else
                                                             {"foreach": True}))
    optimizer.step()  # the moments exist before the timing
    return Step(optimizer.step)


def adamw_step(params: int = 10**9, variants: Iterable[str] = ADAMW_VARIANTS, cfg: ModelConfig = LEADERBOARD_2026,
               rep: int = 1000, warmup: int = 200) -> pd.DataFrame:
    """One AdamW step over fp32 parameters shaped like the model's first ``params`` values, per variant of
    :data:`ADAMW_VARIANTS`; ``tb_per_s``: the 28 bytes each parameter's update must move (read the parameter, its
    gradient and two moments; write three) over the time."""
    shapes = model_shapes(cfg, params)
    n = sum(s.numel() for s in shapes)
    rows = []
    for variant in tqdm(list(variants), desc="AdamW"):
        point = measure(lambda: _adamw(variant, shapes), rep=rep, warmup=warmup)
        ms = point["ms"]
        rows.append({"variant": variant, "params": n, "tensors": len(shapes), **point, "tb_per_s": 28 * n / ms / 1e9})
    return pd.DataFrame(rows)


# ---- one block -------------------------------------------------------------------------------------------------

def _block(attention: str, recompute: str, compiled: bool, batch: int, cfg: ModelConfig, dtype: torch.dtype) -> Step:
    where = local_device()
    block = TransformerBlock(replace(cfg, attention=attention)).to(where, dtype)
    x = torch.randn(batch, cfg.context_length, cfg.d_model, device=where, dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    blocks = torch.nn.ModuleList([block])
    if recompute == "none":
        forward = block
    else:
        forward = lambda x: run_blocks(blocks, x, (1,), recompute)  # noqa: E731
    if compiled:
        forward = torch.compile(forward)

    def clear():
        block.zero_grad(set_to_none=True)
        x.grad = None

    def run():
        clear()
        forward(x).backward(dy)

    return Step(run, clear)


def block_step(attentions: Iterable[str] = ("sdpa_cudnn", "flash_triton"), recomputes: Iterable[str] = RECOMPUTE,
               compiled: Iterable[bool] = (False, True), batch: int = 2, cfg: ModelConfig = LEADERBOARD_2026,
               dtype: torch.dtype = torch.bfloat16, rep: int = 1000, warmup: int = 200) -> pd.DataFrame:
    """One block forward and backward on ``batch`` sequences of the context, bf16 weights, per attention,
    recomputation (:data:`RECOMPUTE`) and compilation; MFU counts the block's FLOPs (:func:`systems.flops.step_flops`),
    not the recomputation's."""
    one = step_flops(replace(cfg, num_layers=1), batch)
    flops = one["blocks"] + one["attention"]
    rows = []
    for attention, recompute, comp in tqdm(list(product(attentions, recomputes, compiled)), desc="block"):
        point = measure(lambda: _block(attention, recompute, comp, batch, cfg, dtype), rep=rep, warmup=warmup)
        rows.append({"attention": attention, "recompute": recompute, "compiled": comp, "batch": batch,
                     "context": cfg.context_length, **point, **achieved(flops, point["ms"])})
    return pd.DataFrame(rows)


# ---- the step --------------------------------------------------------------------------------------------------

def _model(cfg: ModelConfig, recipe: Recipe, batch: int, dtype: torch.dtype) -> Step:
    where = local_device()
    model = build_model(cfg, recipe, where, dtype)
    adamw, options = adamw_for(recipe)
    optimizer = adamw(model.parameters(), **options)
    tokens, targets = torch.randint(0, cfg.vocab_size, (2, batch, cfg.context_length), device=where)
    forward = torch.compile(model) if recipe.compiled else model

    def run():  # the handout's step: zero the gradients, forward and loss, backward, optimizer step
        optimizer.zero_grad(set_to_none=True)
        forward(tokens, targets).backward()
        optimizer.step()

    return Step(run, lambda: optimizer.zero_grad(set_to_none=True))


def model_step(layers: Iterable[int], recipes: Iterable[Recipe] = (Recipe(), PLAIN), batch: int = 2,
               cfg: ModelConfig = LEADERBOARD_2026, dtype: torch.dtype = torch.bfloat16, rep: int = 3000,
               warmup: int = 1000, capacity_gib: float | None = None, tries: int = 3) -> pd.DataFrame:
    """The step of the model with ``layers`` of its blocks (weights and gradients in ``dtype``), per recipe: time,
    MFU of the step's FLOPs (:func:`systems.flops.step_flops`), memory above what existed before the step and in all.

    A recipe that keeps attention's output in every block and runs out of memory tries again keeping it in the
    first blocks only, as many as :func:`~systems.memory.checkpointing.kept_groups_that_fit` predicts from the
    peaks the same recipe reached at the depths it ran before (give the layers in increasing order) and
    ``capacity_gib`` (None: what the device can give), then one fewer at a time, ``tries`` times at most. Each try
    is a row; ``kept_blocks`` counts the blocks that kept attention's output. A (depth, recipe) is a :func:`step_at`."""
    rows = pd.DataFrame()
    for point in tqdm(list(product(layers, recipes)), desc="model step"):
        more = step_at(point, rows, batch, cfg, dtype, rep, warmup, capacity_gib, tries)
        rows = pd.DataFrame([*rows.to_dict("records"), *more.to_dict("records")])
    return rows


def step_at(point: tuple[int, Recipe], earlier: pd.DataFrame, batch: int = 2, cfg: ModelConfig = LEADERBOARD_2026,
            dtype: torch.dtype = torch.bfloat16, rep: int = 3000, warmup: int = 1000, capacity_gib: float | None = None,
            tries: int = 3) -> pd.DataFrame:
    """:func:`model_step`'s rows for one ``(depth, recipe)``; ``earlier`` holds the rows of the points measured
    before it, through whose peaks a retry's prediction draws its line."""
    n, recipe = point
    if capacity_gib is None:
        capacity_gib = allocatable_bytes() / GIB
    reduced, attempt, rows, first = replace(cfg, num_layers=n), recipe, earlier.to_dict("records"), len(earlier)
    for _ in range(1 + tries):
        timed = measure(lambda: _model(reduced, attempt, batch, dtype), rep=rep, warmup=warmup)
        rows.append({"layers": n, "recipe": recipe.label, **vars(attempt), "kept_blocks": attempt.kept_blocks(n),
                     "batch": batch, **timed, **achieved(step_flops(reduced, batch)["total"], timed["ms"])})
        if timed["status"] != OOM or recipe.recompute != "keep_attention" or recipe.kept_groups is not None:
            break
        attempt = _fewer_kept(pd.DataFrame(rows), recipe, attempt, reduced, batch, dtype, capacity_gib)
        if attempt is None:
            break
    return pd.DataFrame(rows[first:])


def step_kernels(layers: int, recipes: Iterable[Recipe] = (Recipe(), PLAIN), batch: int = 2,
                 cfg: ModelConfig = LEADERBOARD_2026, dtype: torch.dtype = torch.bfloat16, steps: int = 2,
                 warmup: int = 3) -> pd.DataFrame:
    """Where the step's time goes: per recipe, the kernels of the step of the model with ``layers`` blocks
    (:func:`~systems.bench.kernel_groups.kernels_of`), with ``recipe`` and ``status``; a recipe that does not fit
    is one row of its status ("OOM")."""
    reduced = replace(cfg, num_layers=layers)
    frames = []
    for recipe in tqdm(list(recipes), desc="step kernels"):
        kernels = surviving(lambda: _model(reduced, recipe, batch, dtype),
                            lambda step: kernels_of(step, steps, warmup).assign(status="ok"),
                            lambda why: pd.DataFrame([{"status": why}]))
        frames.append(kernels.assign(recipe=recipe.label, layers=layers))
    return pd.concat(frames, ignore_index=True)


def _fewer_kept(rows: pd.DataFrame, recipe: Recipe, failed: Recipe, cfg: ModelConfig, batch: int,
                dtype: torch.dtype, capacity_gib: float) -> Recipe | None:
    """The next try after ``failed`` ran out of memory: the prediction after every block kept it (less the stored
    blocks: they keep it too), then one block fewer; None where nothing is left to try (no prediction, none kept)."""
    n = cfg.num_layers
    if failed.kept_groups is None:
        ran = rows[(rows.recipe == recipe.label) & (rows.status == "ok") & (rows.kept_blocks == rows.layers)]
        per_block = kept_attention_bytes(batch, cfg.context_length, cfg.d_model, cfg.num_heads,
                                         torch.finfo(dtype).bits // 8) / GIB
        kept = kept_groups_that_fit(ran.layers, ran.peak_gib, n, capacity_gib, per_block)
        kept = None if kept is None else kept - recipe.stored_groups
    else:
        kept = failed.kept_groups - 1
    return None if kept is None or kept < 0 else replace(recipe, kept_groups=kept)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(prog="python -m systems.bench.leaderboard_2026", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=("head", "chunks", "adamw", "block", "model", "kernels"))
    p.add_argument("--tokens", type=integer(1), default=2 * LEADERBOARD_2026.context_length)
    p.add_argument("--params", type=integer(1), default=10**9)
    p.add_argument("--layers", type=integer(1), nargs="+", default=[2], help="model: the depths; kernels: the first")
    p.add_argument("--attention", nargs="+", default=["sdpa_cudnn", "flash"], choices=available(),
                   help="block, model, kernels: our recipe's attentions (flash: our fastest on this GPU, named in the "
                        "tables by the kernels it takes)")
    p.add_argument("--recompute", choices=(*RECOMPUTE, *FFN_KEPT), default="all", help="model: how our recipes "
                   "recompute each block (plain PyTorch's recomputes each whole); keep_attention_and_ffn, offload: "
                   "systems.offload")
    p.add_argument("--kept-groups", type=integer(0), default=None,
                   help="model, with --recompute keep_attention: the first blocks that keep attention's output")
    p.add_argument("--stored-blocks", type=integer(0), default=0,
                   help="model: the last blocks run without recomputation, every activation stored, in every recipe "
                        "(plain PyTorch's too: the same checkpointing)")
    p.add_argument("--rep", type=integer(1), default=1000, help="do_bench's time of repetitions, ms")
    a = p.parse_args(argv)
    why = our_kernels_unavailable(local_device())
    if why:  # every part times our kernels beside PyTorch's
        p.error(why)
    ours = Recipe(recompute=a.recompute, kept_groups=a.kept_groups)
    for flag, recipe in (("--kept-groups", ours), ("--stored-blocks", replace(ours, stored_groups=a.stored_blocks))):
        try:
            recipe.check(min(a.layers))
        except ValueError as exc:
            p.error(f"{flag}: {exc}")
    warmup = max(1, a.rep // 5)
    if a.part == "head":
        df = head_and_loss(a.tokens, rep=a.rep, warmup=warmup)
    elif a.part == "chunks":
        df = head_chunks(a.tokens, rep=a.rep, warmup=warmup)
    elif a.part == "adamw":
        df = adamw_step(a.params, rep=a.rep, warmup=warmup)
    else:
        # flash named by the kernels it takes here (asking builds the Hopper ones: the parts above do not ask)
        attentions = list(dict.fromkeys(runs_as(att, local_device()) for att in a.attention))
        recipes = [replace(ours, attention=att, stored_groups=a.stored_blocks) for att in attentions]
        recipes.append(replace(PLAIN, stored_groups=a.stored_blocks))
        if a.part == "block":
            df = block_step(attentions, rep=a.rep, warmup=warmup)
        elif a.part == "kernels":  # at the first depth given; a recipe that did not run says why
            kernels = step_kernels(a.layers[0], recipes)
            df = pd.concat([group_times(kernels), kernels.loc[kernels.status != "ok", ["recipe", "status"]]])
        else:
            df = model_step(a.layers, recipes, rep=a.rep, warmup=warmup)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    use_expandable_segments()  # the process's setting, before its first CUDA work
    main()

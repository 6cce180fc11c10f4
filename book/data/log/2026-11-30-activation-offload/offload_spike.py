"""The leaderboard model's step with its blocks compiled one by one and the feed-forward's products W1 x and W3 x
kept (not recomputed), on the GPU or moved to host memory (systems.offload), beside chapter 18's recipe (the model
compiled whole, attention kept). argv: layers [variants...] [--toy] (--toy: a small config, sdpa, for a CPU)."""
import functools, json, sys, time
from contextlib import nullcontext
from dataclasses import replace

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import systems.model as sm
from systems.bench.points import Step, achieved, measure
from systems.bench.recipe import Recipe, adamw_for, build_model
from systems.flops import step_flops
from systems.offload import ActivationOffload, last_dim_is
from systems.recompute import ATTENTION_OPS, run_blocks

args = [a for a in sys.argv[1:] if not a.startswith("--")]
toy = "--toy" in sys.argv
layers = int(args[0])
variants = args[1:] or ["whole", "groups", "groups_ffn", "groups_ffn_offload"]
cfg = replace(sm.LEADERBOARD_2026, num_layers=layers)
attention = "flash_hopper"
if toy:
    cfg = replace(cfg, vocab_size=512, context_length=64, d_model=64, d_ff=176, num_heads=4)
    attention = "sdpa"
torch._dynamo.config.recompile_limit = 64
where = torch.device("cuda" if torch.cuda.is_available() else "cpu")
MM = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


def policy(keep_ffn, ctx, op, *a, **k):
    name = op.name() if hasattr(op, "name") else ""
    if name in ATTENTION_OPS:
        return CheckpointPolicy.MUST_SAVE
    if keep_ffn and op in MM and a[-1].shape[-1] == cfg.d_ff:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def grouped(keep_ffn, offload):
    def one(block, x):
        return checkpoint(block, x, use_reentrant=False,
                          context_fn=functools.partial(create_selective_checkpoint_contexts,
                                                       functools.partial(policy, keep_ffn)))
    compiled = torch.compile(one)

    @torch.compiler.disable
    def blocks(layers_, x, levels, recompute="all", kept_groups=None, stored_groups=0):
        for i, block in enumerate(layers_):
            with (offload.group(i, move=i < len(layers_) - 1) if offload is not None else nullcontext()):
                x = compiled(block, x)
        return x
    return blocks


def make(variant):
    recipe = Recipe(attention=attention, recompute="keep_attention", fused_adamw=not toy, fused_loss=not toy)
    model = build_model(cfg, recipe, where, torch.bfloat16 if where.type == "cuda" else torch.float32)
    offload = None
    if variant == "whole":
        sm.run_blocks = run_blocks
    else:
        if variant.endswith("offload"):
            offload = ActivationOffload(last_dim_is(cfg.d_ff), exclude=model.parameters())
        sm.run_blocks = grouped("ffn" in variant, offload)
    adamw, options = adamw_for(recipe)
    optimizer = adamw(model.parameters(), **options)
    tokens, targets = torch.randint(0, cfg.vocab_size, (2, 2, cfg.context_length), device=where)
    forward = torch.compile(model)

    def run():
        optimizer.zero_grad(set_to_none=True)
        forward(tokens, targets).backward()
        optimizer.step()
    make.offload = offload
    return Step(run, lambda: optimizer.zero_grad(set_to_none=True))


def profiled(variant, out):
    """three steps, then two under torch.profiler (CUDA activity), the trace written to ``out``"""
    torch._dynamo.reset()
    step = make(variant)
    for _ in range(3):
        step.run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step.run()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)
    del step


if "--profile" in sys.argv:
    for variant in variants:
        profiled(variant, f"{sys.argv[-1]}/trace_{layers}_{variant}.json")
    sys.exit(0)

for variant in variants:
    t0 = time.perf_counter()
    timed = measure(lambda: make(variant), rep=3000 if not toy else 50, warmup=1000 if not toy else 10)
    moved = make.offload.moved_bytes if getattr(make, "offload", None) is not None else 0
    print(json.dumps({"layers": layers, "variant": variant, **timed, **achieved(step_flops(cfg, 2)["total"], timed["ms"]),
                      "moved_gib": moved / 2**30, "seconds": time.perf_counter() - t0}), flush=True)

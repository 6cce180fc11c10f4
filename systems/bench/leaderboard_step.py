"""The 2026 leaderboard's whole training step on the GPUs of one host (handout §9), sharded, timed as the handout
times it: the model (:data:`systems.model.LEADERBOARD_2026`, all 34 blocks unless fewer are asked for) sharded with
PyTorch's FSDP2 (``fully_shard``: built on the meta device, each rank given memory for its shards only) or with our
FSDP (:mod:`systems.fsdp`: built whole, then sharded), every technique of
:class:`~systems.bench.recipe.Recipe` switchable, fp32 master weights gathered and computed in bf16.

The handout's harness is ``triton.testing.do_bench(train_step)``, whose repetition count comes from each process's
own estimate of a step: two ranks can count differently, and a rank that steps once more waits in a collective
forever. :func:`agreed_ms` times as ``do_bench`` does (a mean over ``rep`` ms of steps after ``warmup`` ms) with the
counts every rank takes from the slowest rank's estimate. Reported: the slowest rank's mean, every rank's peak
memory, MFU against the GPUs' dense bf16 peak, the first step's loss (the same weights for every recipe of a
sharding: the recipes must agree on it), and, with a trace, one step's kernels per stream on rank 0 (compute,
communication, idle: :func:`systems.bench.ddp.step_intervals`).

    torchrun --nproc_per_node 2 -m systems.bench.leaderboard_step --sharding fsdp2 fsdp --recompute keep_attention --json step.json
    torchrun --nproc_per_node 2 -m systems.bench.leaderboard_step --plain --json plain.json   # plain PyTorch

Without GPUs the same code runs at a toy size in processes joined by gloo (``--toy``; the tests do).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import torch
import torch.distributed as dist

from systems import dist as sdist
from systems.attention.fastest import fastest_flash
from systems.bench.ddp import idle_ms, overlap_ms, step_intervals
from systems.bench.recipe import PLAIN, Recipe, adamw_for, our_kernels_unavailable
from systems.cli import integer
from systems.device import is_oom, local_device, synchronize, timed
from systems.flops import mfu, step_flops
from systems.model import LEADERBOARD_2026, ModelConfig
from systems.parallel import TrainStep, wrap
from systems.recompute import FFN_KEPT, RECOMPUTE

SHARDINGS = ("fsdp2", "fsdp")
# a model of the leaderboard's shape at a size two CPU processes run in seconds
TOY = replace(LEADERBOARD_2026, vocab_size=512, context_length=64, d_model=64, d_ff=96, num_layers=2, num_heads=4,
              name="leaderboard-2026 (toy)")


def agreed_ms(step: Callable[[], Any], *, rep: int, warmup: int) -> float:
    """ms per step, the mean over about ``rep`` ms of steps after about ``warmup`` ms, every rank running the same
    number of steps (the counts from the largest of the ranks' estimates); the slowest rank's mean."""
    step()  # compilation and tuning, outside every count
    with timed() as first:
        for _ in range(3):
            step()
    estimate = torch.tensor([first.ms / 3], dtype=torch.float64, device=local_device())
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
    for _ in range(max(1, round(warmup / estimate.item()))):
        step()
    repeats = max(1, round(rep / estimate.item()))
    dist.barrier()
    with timed() as elapsed:
        for _ in range(repeats):
            step()
    mean = torch.tensor([elapsed.ms / repeats], dtype=torch.float64, device=local_device())
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    return mean.item()


def sharded_model(cfg: ModelConfig, recipe: Recipe, sharding: str, compute: torch.dtype | None, seed: int = 0):
    """The strategy (:func:`systems.parallel.wrap`) over the recipe's model of ``cfg``, on this rank's device, its
    weights drawn from ``seed`` (the same for every recipe of one sharding)."""
    torch.manual_seed(seed)
    if sharding == "fsdp2":  # the shards alone ever take memory
        with torch.device("meta"):
            model = recipe.model(cfg)
        strategy = wrap("fsdp2", model, compute_dtype=compute)
        model.to_empty(device=local_device())
        model.init_weights()
        return strategy
    with torch.device(local_device()):
        model = recipe.model(cfg)
    return wrap("fsdp", model, compute_dtype=compute)


def _worker(rank: int, world: int, cfg: ModelConfig, recipe: Recipe, sharding: str, batch: int, rep: int,
            warmup: int, trace: bool) -> dict[str, Any]:
    where = local_device()
    on_gpu = where.type == "cuda"
    row = {"sharding": sharding, "recipe": recipe.label, **asdict(recipe), "layers": cfg.num_layers, "gpus": world,
           "batch": batch, "context": cfg.context_length}
    try:
        strategy = sharded_model(cfg, recipe, sharding, torch.bfloat16 if on_gpu else None)
        adamw, options = adamw_for(recipe)
        step = TrainStep(strategy, strategy.optimizer(adamw, **options))
        if recipe.compiled:  # block by block, as FSDP2 is compiled: its collectives stay between the graphs
            for block in strategy.model.layers:
                block.compile()
        tokens, targets = torch.randint(0, cfg.vocab_size, (2, batch // world, cfg.context_length), device=where,
                                        generator=torch.Generator(where).manual_seed(rank))
        run = lambda: step(tokens, targets)  # noqa: E731  (zero, forward and loss, backward, sync, update)
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        row["first_loss"] = run()[0].item()  # the global batch's loss before any update
        ms = agreed_ms(run, rep=rep, warmup=warmup)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_oom(exc):
            raise
        return {**row, "status": "OOM"}
    peaks = [None] * world
    dist.all_gather_object(peaks, torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None)
    gpu = torch.cuda.get_device_name() if on_gpu else ""
    row |= {"status": "ok", "ms": ms, "peak_gib_per_rank": peaks,
            "mfu": mfu(step_flops(cfg, batch)["total"] / world, ms / 1e3, gpu, "bf16")}
    if trace:
        kernels = step_intervals(run, where)
        row |= {"overlap_ms": overlap_ms(kernels), "idle_ms": idle_ms(kernels),
                "trace": kernels.to_dict(orient="records") if rank == 0 else None}
    synchronize()
    return row


def leaderboard_step(cfg: ModelConfig = LEADERBOARD_2026, recipe: Recipe = Recipe(), sharding: str = "fsdp2",
                     batch: int = 2, rep: int = 30_000, warmup: int = 10_000, trace: bool = False) -> dict[str, Any]:
    """One row (rank 0's) of the step inside the current process group: every rank calls it."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    if batch % dist.get_world_size():
        raise ValueError(f"a batch of {batch} sequences does not split over {dist.get_world_size()} ranks")
    return _worker(dist.get_rank(), dist.get_world_size(), cfg, recipe, sharding, batch, rep, warmup, trace)


def launched(world: int, cfg: ModelConfig, recipe: Recipe, sharding: str, batch: int, rep: int, warmup: int,
             trace: bool = False, timeout_s: float = 600.0, empty_caches: bool = False) -> dict[str, Any]:
    """The same in ``world`` processes started here (gloo on a CPU): rank 0's row, with ``wall_s``, the seconds from
    starting the processes to their end (building the model, compiling, tuning and every step). ``empty_caches``:
    the processes start from empty caches of compiled code (TorchInductor's, Triton's, and the C++ extensions'), as
    the handout's ten-minute rule for a whole run assumes."""
    with tempfile.TemporaryDirectory(prefix="cold-") as cold, mock.patch.dict(
            os.environ, {name: f"{cold}/{name.lower()}" for name in CACHE_VARIABLES} if empty_caches else {}):
        start = time.perf_counter()
        row = sdist.launch(_worker, world, cfg, recipe, sharding, batch, rep, warmup, trace, timeout_s=timeout_s)[0]
        return {**row, "wall_s": time.perf_counter() - start, "empty_caches": empty_caches}


# where the processes keep compiled code between runs: TorchInductor's graphs, Triton's kernels and tunings, our C++
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(prog="torchrun --nproc_per_node N -m systems.bench.leaderboard_step",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sharding", nargs="+", default=["fsdp2"], choices=SHARDINGS)
    p.add_argument("--plain", action="store_true", help="the plain-PyTorch recipe (SDPA cuDNN, unfused loss, "
                                                        "torch's fused AdamW) instead of ours (our fastest attention "
                                                        "here, the fused loss, our AdamW)")
    p.add_argument("--recompute", choices=("none", *RECOMPUTE, *FFN_KEPT), default="all",
                   help="how each block is recomputed in the backward (chapter 18's block table says which is faster "
                        "for an attention); keep_attention_and_ffn and offload (systems.offload) with --sharding "
                        "fsdp2 and on GPUs only: each block a compiled group between FSDP2's gathers")
    p.add_argument("--stored-blocks", type=integer(0), default=0,
                   help="the last blocks run without recomputation, every activation stored (memory left over)")
    p.add_argument("--layers", type=integer(1), default=None, help="blocks of the model (default: all of them)")
    p.add_argument("--batch", type=integer(1), default=2)
    p.add_argument("--rep", type=integer(1), default=30_000, help="ms of timed steps (the handout's do_bench rep)")
    p.add_argument("--warmup", type=integer(0), default=10_000, help="ms of steps before the timing")
    p.add_argument("--trace", action="store_true", help="profile one more step: kernels per stream on rank 0")
    p.add_argument("--toy", action="store_true", help="a toy model of the same shape (CPU and gloo: seconds; the "
                                                      "Triton parts need TRITON_INTERPRET=1 there)")
    p.add_argument("--json", type=Path, default=None, help="write the rows here (rank 0)")
    a = p.parse_args(argv)
    base = TOY if a.toy else LEADERBOARD_2026
    cfg = replace(base, num_layers=a.layers or base.num_layers)
    wanted = replace(PLAIN if a.plain else Recipe(), recompute=a.recompute, stored_groups=a.stored_blocks)
    if a.recompute in FFN_KEPT and "fsdp" in a.sharding:
        p.error(f"--recompute {a.recompute} compiles each block by itself, and our FSDP gathers each layer's weight "
                f"inside the blocks, which would run them eagerly: use --sharding fsdp2")
    if a.recompute in FFN_KEPT and not on_this_machine(wanted).compiled:
        p.error(f"--recompute {a.recompute} runs each block compiled, which this command does on GPUs only")
    try:
        wanted.check(cfg.num_layers)
    except ValueError as exc:
        p.error(f"--stored-blocks: {exc}")
    why = None if a.plain else our_kernels_unavailable(local_device())
    if why:
        p.error(f"{why}; --plain runs without them")
    with sdist.group_from_environment():
        if not dist.is_initialized():
            p.error("start it with torchrun (torchrun --nproc_per_node N -m systems.bench.leaderboard_step ...)")
        # (asking whether our Hopper kernel runs builds it: a plain run does not ask)
        recipe = on_this_machine(wanted if a.plain else replace(wanted, attention=fastest_flash(local_device())))
        rows = [leaderboard_step(cfg, recipe, sharding, a.batch, a.rep, a.warmup, a.trace) for sharding in a.sharding]
        if dist.get_rank() == 0:
            text = json.dumps(rows, indent=1, default=str)
            print(text)
            if a.json:
                a.json.write_text(text)
    return rows


def on_this_machine(recipe: Recipe) -> Recipe:
    """The recipe as a machine without a GPU can run it: uncompiled, SDPA's CPU kernel for cuDNN's."""
    if torch.cuda.is_available():
        return recipe
    return replace(recipe, compiled=False, attention="sdpa" if recipe.attention == "sdpa_cudnn" else recipe.attention)


if __name__ == "__main__":
    main()

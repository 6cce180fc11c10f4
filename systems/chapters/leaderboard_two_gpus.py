"""What chapter 19 (the 2026 leaderboard on two GPUs) says of its runs: the step of each sharding and recipe against
plain PyTorch's and the class's best, the run from empty caches against the handout's ten minutes, one traced
step, and the measurement against chapter 18's plan. Sentences are
built from the rows, a run that did not finish said as such (:mod:`systems.chapters.leaderboard`)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from systems.bench.recipe import Recipe
from systems.chapters.leaderboard import (CLASS_BEST_MS, GIB, faster_recompute, has, ratio_words, row_where,
                                          two_gpu_plan, value)
from systems.model import ModelConfig

HANDOUT_LIMIT_S = 600  # a whole run from empty caches (the 2026 handout, §9)


def recomputed_as_chosen(one_gpu_dir: str | None, recipe: Recipe) -> Recipe:
    """``recipe`` with its blocks recomputed the way chapter 18's block table (in ``one_gpu_dir``) found faster for its
    attention; as it is where that table is not at hand."""
    blocks = Path(one_gpu_dir or "", "block.csv")
    if one_gpu_dir is None or not blocks.is_file():
        return recipe
    return replace(recipe, recompute=faster_recompute(pd.read_csv(blocks), recipe.attention, recipe.compiled))


def steps_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """The runs (rows of :func:`systems.bench.leaderboard_step.launched`) with the fuller rank's peak memory."""
    steps = pd.DataFrame(runs)
    peaks = steps["peak_gib_per_rank"] if "peak_gib_per_rank" in steps else [None] * len(steps)
    steps["peak GiB (fuller rank)"] = [max(p) if isinstance(p, list) and None not in p else math.nan for p in peaks]
    return steps


def ablation_steps(steps: pd.DataFrame, swapped: list[dict[str, Any]], ours: str, plain: str) -> pd.DataFrame:
    """Under FSDP2: our recipe's step (``ours``, a label), the steps with one technique swapped, plain PyTorch's."""
    under_fsdp2 = steps[steps.sharding == "fsdp2"]
    return pd.concat([under_fsdp2[under_fsdp2.recipe == ours], steps_table(swapped),
                      under_fsdp2[under_fsdp2.recipe == plain]], ignore_index=True)


def step_words(steps: pd.DataFrame, ours: str, plain: str) -> str:
    """Ours against plain PyTorch's and the class's best under FSDP2, ours under our FSDP, and how far apart the two
    recipes' first losses are on the same weights."""
    mine, theirs, own = (row_where(steps, sharding=s, recipe=r) for s, r in (("fsdp2", ours), ("fsdp2", plain),
                                                                              ("fsdp", ours)))
    class_best = pd.Series({"status": "ok", "ms": float(CLASS_BEST_MS)})
    spreads = [abs(a.first_loss - b.first_loss) / abs(b.first_loss)
               for s in steps.sharding.unique()
               for a, b in [(row_where(steps, sharding=s, recipe=ours), row_where(steps, sharding=s, recipe=plain))]
               if a is not None and b is not None and a.status == b.status == "ok"]
    agreement = (f"The first step's loss, from the same weights, is the same for both recipes of a sharding to within "
                 f"{max(spreads):.2g} (relative): the techniques change how the step is computed, not what."
                 if spreads else "")
    efficiency = (f": an MFU of {mine.mfu:.0%} of the two GPUs' dense bf16 peak, counting the step's FLOPs as "
                  "chapter 18 counts them" if has(mine, "mfu") else "")
    return (f"With FSDP2 our step takes {value(mine, 'ms', '.5g', ' ms')}, {ratio_words(mine, theirs)} than plain "
            f"PyTorch's {value(theirs, 'ms', '.5g', ' ms')}, and {ratio_words(mine, class_best)} than the class's best "
            f"of {CLASS_BEST_MS:,} ms (on two B200s, each with more than twice an H200's dense bf16 throughput)"
            f"{efficiency}. Our own FSDP takes {value(own, 'ms', '.5g', ' ms')} with the same recipe. {agreement}")


def cold_start_words(cold: dict[str, Any]) -> str:
    """How long the run from empty caches took (a row of :func:`systems.bench.leaderboard_step.launched`), against
    the handout's ten minutes."""
    if cold.get("status") != "ok":
        return f"The run from empty caches did not finish here ({cold.get('status', 'no result')})."
    verdict = "within" if cold["wall_s"] < HANDOUT_LIMIT_S else "over"
    return (f"It took {cold['wall_s']:.0f} s from start to end, {verdict} the handout's {HANDOUT_LIMIT_S // 60} "
            f"minutes, and timed the step at {cold['ms']:.5g} ms.")


def trace_words(traced: dict[str, Any]) -> tuple[pd.DataFrame, str]:
    """A traced run's kernels on rank 0 (lane, kind, name, start_ms, end_ms) and what the trace shows, in words."""
    kernels = pd.DataFrame(traced.get("trace") or [], columns=["lane", "kind", "name", "start_ms", "end_ms"])
    if kernels.empty:
        return kernels, f"The traced step did not run here ({traced.get('status', 'no trace')})."
    span = kernels.end_ms.max() - kernels.start_ms.min()
    idle = traced["idle_ms"]
    return kernels, (f"The step spans {span:.5g} ms on rank 0's GPU. Communication overlaps compute for "
                     f"{traced['overlap_ms']:.4g} ms of it, and the compute streams are idle for {idle:.4g} ms "
                     f"({idle / span:.1%} of the step): the time the GPU waited, for a gather that had not arrived or "
                     "for the host.")


def against_plan(steps: pd.DataFrame, ours: str, memory: dict[str, float], plan: dict[str, float]) -> pd.DataFrame:
    """The measured step of our recipe under FSDP2 beside the plan's prediction: step time and the fuller GPU's peak
    memory (a measured peak includes every transient tensor, which the plan's parts do not list)."""
    run = row_where(steps, sharding="fsdp2", recipe=ours)
    ok = run is not None and run.status == "ok"
    rows = [("step (ms)", plan["step"] * 1e3, run.ms if ok else math.nan),
            ("memory (GiB, fuller GPU)", memory["total"] / GIB, run["peak GiB (fuller rank)"] if ok else math.nan)]
    df = pd.DataFrame(rows, columns=["quantity", "predicted", "measured"])
    df["ratio"] = df.measured / df.predicted
    return df


def plan_check(one_gpu_dir: str | None, cfg: ModelConfig, steps: pd.DataFrame, ours: str,
               link: tuple[float, float]) -> tuple[pd.DataFrame, str]:
    """The measured step beside the plan made from the one-GPU chapter's data in ``one_gpu_dir``, and in words (a run
    that keeps no data, ``None``, has no plan to compare with: the table is empty)."""
    if one_gpu_dir is None:
        return (pd.DataFrame(columns=["quantity", "predicted", "measured", "ratio"]),
                "This run keeps no data, so it has no plan of the previous chapter's to compare with.")
    parts = {name: pd.read_csv(f"{one_gpu_dir}/{name}.csv")
             for name in ("block_one_sequence", "head_one_sequence", "adamw")}
    memory, plan = two_gpu_plan(cfg, parts["block_one_sequence"], parts["head_one_sequence"], parts["adamw"], link)
    side = against_plan(steps, ours, memory["fused loss, recomputed blocks"], plan)
    ratio = side.set_index("quantity").ratio
    if ratio.isna().any():
        return side, "The comparison needs both the measured step and the plan's parts; one of them is missing here."
    return side, (f"The measured step is {ratio['step (ms)']:.3g} times the predicted one, and the fuller GPU's peak "
                  f"memory {ratio['memory (GiB, fuller GPU)']:.3g} times the plan's.")

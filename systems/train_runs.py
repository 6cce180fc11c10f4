"""Training runs side by side: one model trained with each attention kernel and each data-parallel wrapper, their
throughput, memory and loss curves (chapter 12). Every run sees the same global batches, so their losses should
agree to rounding and their speed measures the kernel and the communication strategy alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd
import torch

from systems.attention import get_attention
from systems.dist import launch
from systems.train import WRAPPERS, TrainConfig, summarize, train_many


def unusable(attention: str) -> str | None:
    """Why an attention implementation cannot run on this machine, or None."""
    if attention == "flash_triton" and not torch.cuda.is_available():
        return "needs a GPU"
    try:
        get_attention(attention)
    except ImportError as exc:
        return f"not importable: {exc}"
    return None


def compare(base: TrainConfig, attentions, world_size: int, backend: str, timeout_s: float, skip: int
            ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """Each attention on one process (no wrapper) and on ``world_size`` processes with every wrapper: a summary row
    per run, every step's record, and what could not run and why (one broken kernel does not hide the others)."""
    skipped = {a: why for a in attentions if (why := unusable(a))}
    summary, records = [], []
    for attention in [a for a in attentions if a not in skipped]:
        for n_ranks, wrappers in [(1, ["none"]), (world_size, [w for w in WRAPPERS if w != "none"])]:
            cfgs = [replace(base, model=replace(base.model, attention=attention), wrapper=w) for w in wrappers]
            try:
                runs = launch(train_many, n_ranks, cfgs, backend=backend, timeout_s=timeout_s)[0]
            except (RuntimeError, TimeoutError) as exc:
                skipped[f"{attention} ({n_ranks} GPU)"] = str(exc).strip().splitlines()[-1]
                continue
            for cfg, run in zip(cfgs, runs):
                summary.append({"attention": attention, "wrapper": cfg.wrapper, "gpus": n_ranks, **summarize(run, skip)})
                records += [{"attention": attention, "wrapper": cfg.wrapper, **r} for r in run]
    return pd.DataFrame(summary), pd.DataFrame(records), skipped


def findings(summary: pd.DataFrame, records: pd.DataFrame, world_size: int) -> dict[str, Any]:
    """The fastest combination, each attention's speed-up from one GPU to ``world_size``, the attentions ranked by
    median throughput, and how far apart the runs' final losses are."""
    s = summary.set_index(["attention", "wrapper"])
    fastest = s.tokens_per_s.idxmax()
    ddp = summary[summary.wrapper != "none"]
    best = ddp.loc[ddp.groupby("attention").tokens_per_s.idxmax()].set_index("attention")
    single = summary[summary.wrapper == "none"].set_index("attention")
    speedup = (best.tokens_per_s / single.tokens_per_s).dropna()
    final = records[records.step == records.step.max()]
    ranked = summary.groupby("attention").tokens_per_s.median().sort_values(ascending=False)
    return {"fastest": f"{fastest[0]} + {fastest[1]}", "fastest_tok_s": s.tokens_per_s.max(),
            "speedups": "; ".join(f"{a}: {x:.3g}× with {best.wrapper[a]}" for a, x in speedup.items()),
            "best_speedup": speedup.max(), "ranking": " > ".join(f"{a} ({v:.4g})" for a, v in ranked.items()),
            "loss_spread": final.groupby("attention").loss.agg(lambda x: x.max() - x.min()).max()}

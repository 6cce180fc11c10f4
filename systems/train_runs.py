"""Training runs side by side: one model trained with each attention kernel and each data-parallel wrapper, their
throughput, memory and loss curves (chapter 12). Every run sees the same global batches, so their losses should
agree to rounding and their speed measures the kernel and the communication strategy alone."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from systems.attention import get_attention
from systems.dist import launch
from systems.train import WRAPPERS, TrainConfig, summarize, train_many


def unusable(attention: str) -> str | None:
    """Why an attention implementation cannot run on this machine, or None."""
    if attention in ("flash", "flash_triton") and not torch.cuda.is_available():
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



"""What chapter 12 (training) says of its runs side by side."""

from __future__ import annotations

from typing import Any

import pandas as pd


def findings(summary: pd.DataFrame, records: pd.DataFrame, world_size: int) -> dict[str, Any]:
    """The fastest combination, each attention's speed-up from one GPU to ``world_size``, the attentions ranked by
    median throughput, and how far apart the losses of one attention's runs are at any step."""
    s = summary.set_index(["attention", "wrapper"])
    fastest = s.tokens_per_s.idxmax()
    ddp = summary[summary.wrapper != "none"]
    best = ddp.loc[ddp.groupby("attention").tokens_per_s.idxmax()].set_index("attention")
    single = summary[summary.wrapper == "none"].set_index("attention")
    speedup = (best.tokens_per_s / single.tokens_per_s).dropna()
    return {"fastest": f"{fastest[0]} + {fastest[1]}", "fastest_tok_s": s.tokens_per_s.max(),
            "speedups": "; ".join(f"{a}: {x:.3g}× with {best.wrapper[a]}" for a, x in speedup.items()),
            "best_speedup": speedup.max(), "ranking": ranking(summary),
            "loss_spread": records.groupby(["attention", "step"]).loss.agg(lambda x: x.max() - x.min()).max()}


def ranking(summary: pd.DataFrame) -> str:
    """The attentions by median throughput over the wrappers, each beside the next with the number of wrappers under
    which it was the faster of the two: one run per pair says little, a majority of wrappers says more."""
    ranked = summary.groupby("attention").tokens_per_s.median().sort_values(ascending=False)
    per_wrapper = summary.pivot_table(index="wrapper", columns="attention", values="tokens_per_s")
    said = [f"{ranked.index[0]} ({ranked.iloc[0]:.4g} tokens/s)"]
    for (a, _), (b, v) in zip(ranked.items(), list(ranked.items())[1:]):
        both = per_wrapper[[a, b]].dropna()
        said.append(f"{b} ({v:.4g}; {a} the faster under {int((both[a] > both[b]).sum())} of {len(both)} wrappers)")
    return ", then ".join(said)

"""What chapters 11 (optimizer sharding) and 16 say of the sharding measurements: memory measured and predicted,
step times, communication volumes."""

from __future__ import annotations

from typing import Any

import pandas as pd

from systems.bench.sharding import analytic_mb, communication_bytes
from systems.device import OOM


def memory_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per iteration and point, one column per optimizer: allocated there / peak since the previous
    point (GiB), the larger of the ranks; "OOM" down the column of one that ran out of memory."""
    memory = pd.DataFrame([{"optimizer": r["optimizer"], **m} for r in rows for m in r.get("memory", [])])
    if memory.empty:
        return pd.DataFrame([{"iteration": "", "point": "", **{r["optimizer"]: r.get("status", "") for r in rows}}])
    cells = memory.assign(cell=[f"{a / 1024:.3g} / {p / 1024:.3g}" for a, p in zip(memory.allocated_mb, memory.peak_mb)])
    table = cells.pivot_table(index=["iteration", "point"], columns="optimizer", values="cell", aggfunc="first",
                              sort=False).reset_index()
    for r in rows:
        if r.get("status") == OOM:
            table[r["optimizer"]] = OOM
    return table[["iteration", "point"] + [r["optimizer"] for r in rows]]


def predicted_table(rows: list[dict[str, Any]], owned_max: int, world_size: int) -> pd.DataFrame:
    """Per optimizer, the memory predicted from the sizes (GiB: parameters, gradients, optimizer state, the
    activations autograd saved) against the allocator's numbers of the first iteration."""
    memory = pd.DataFrame([{"optimizer": r["optimizer"], **m} for r in rows for m in r["memory"]])
    parts = []
    for r in rows:
        sharded = r["optimizer"] != "adamw"
        mb = analytic_mb(r["params"], world_size, owned_max if sharded else None)
        mb["optimizer state"] = max(r["state_mb_per_rank"]) if sharded else mb["optimizer state"]
        mb["activations"] = r["activations_mb"]
        parts += [{"optimizer": r["optimizer"], "component": k, "GiB": v / 1024} for k, v in mb.items()]
    table = pd.DataFrame(parts).pivot_table(index="optimizer", columns="component", values="GiB", sort=False)
    first = memory[memory.iteration == 1].pivot_table(index="optimizer", columns="point",
                                                      values=["allocated_mb", "peak_mb"], dropna=False) / 1024
    return table.assign(**{
        "predicted after step": table[["parameters", "gradients", "optimizer state"]].sum(axis=1),
        "measured after step": first[("allocated_mb", "after step")],
        "predicted fwd/bwd peak": table[["parameters", "gradients", "activations"]].sum(axis=1),
        "measured fwd/bwd peak": first[("peak_mb", "before step")], "measured step peak": first[("peak_mb", "after step")],
    })


def memory_facts(predicted: pd.DataFrame) -> dict[str, Any]:
    after, peak = predicted["measured after step"], predicted["measured step peak"]
    state = predicted.loc["adamw", "optimizer state"]
    return {"after_adamw": after["adamw"], "after_zero1": after["zero1"], "after_torch": after["torch_zero"],
            "saving": after["adamw"] - after["zero1"], "saving_pct": 100 * (after["adamw"] - after["zero1"]) / state,
            "state_full": state, "params_gib": predicted.loc["adamw", "parameters"],
            "act_gib": predicted.loc["adamw", "activations"], "transient_adamw": peak["adamw"] - after["adamw"],
            "transient_zero1": peak["zero1"] - after["zero1"], "moment": state / 2,
            "half": bool(abs((after["adamw"] - after["zero1"]) / state - 0.5) < 0.05)}


def timing_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    t = runs[["optimizer", "step_ms", "step_std_ms", "optimizer_ms", "optimizer_std_ms"]].copy()
    t["vs adamw"] = t.step_ms / t.step_ms[t.optimizer == "adamw"].iloc[0]
    s = t.set_index("optimizer")
    extra = s.step_ms["zero1"] - s.step_ms["adamw"]
    return t, {"adamw_ms": s.step_ms["adamw"], "zero1_ms": s.step_ms["zero1"], "extra_ms": extra,
               "extra_pct": 100 * extra / s.step_ms["adamw"], "opt_adamw": s.optimizer_ms["adamw"],
               "opt_zero1": s.optimizer_ms["zero1"], "broadcast_costs_more": bool(s.optimizer_ms["zero1"] > s.optimizer_ms["adamw"]),
               "flat_ms": s.step_ms["zero1_flat"], "flat_faster": bool(s.step_ms["zero1_flat"] < s.step_ms["zero1"]),
               "torch_ms": s.step_ms["torch_zero"]}


def communication_facts(n_params: int, world_size: int) -> dict[str, float]:
    """GB per rank per step of DDP, our ZeRO-1 and the paper's, and the paper's and our per-rank memory."""
    volume = communication_bytes(n_params, world_size)
    return {"psi_gb": 4 * n_params / 1e9, "ddp_gb": volume["ddp"] / 1e9, "ours_gb": volume["zero1 (ours)"] / 1e9,
            "paper_gb": volume["zero1 (paper)"] / 1e9, "paper_mem_gb": (2 + 2 + 12 / world_size) * n_params / 1e9,
            "ours_mem_gb": (4 + 4 + 8 / world_size) * n_params / 1e9, "base_mem_gb": 16 * n_params / 1e9}


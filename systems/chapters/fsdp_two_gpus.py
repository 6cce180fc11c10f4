"""What chapter 16 (FSDP on two GPUs) says of its measurements: whether the gathers arrive in time, memory and time of
every data-parallel setup against the goals set for our FSDP, and the measured steps against the simulation."""

from __future__ import annotations

from typing import Any

import pandas as pd

from systems.bench.ddp import idle_ms
from systems.chapters.ddp import overlap_facts


def timeline_facts(rank0: pd.DataFrame) -> dict[str, Any]:
    """Our FSDP's and FSDP2's profiled steps on rank 0 (``run`` "fsdp" and "fsdp2"): communication, its overlap with
    compute, the compute streams' idle time and the step's span, and whether our gathers arrive in time (the compute
    idle for under 5 % of the step)."""
    facts = overlap_facts(rank0)
    idle = {run: idle_ms(g) for run, g in rank0.groupby("run")}
    spans = {run: g.end_ms.max() - g.start_ms.min() for run, g in rank0.groupby("run")}
    return {"ours_comm": facts["fsdp_comm"], "ours_overlap": facts["fsdp_overlap"], "ours_idle": idle["fsdp"],
            "ours_span": spans["fsdp"], "theirs_comm": facts["fsdp2_comm"], "theirs_overlap": facts["fsdp2_overlap"],
            "theirs_idle": idle["fsdp2"], "theirs_span": spans["fsdp2"],
            "verdict": ("arrive in time: the compute stream is busy for all but" if idle["fsdp"] < 0.05 * spans["fsdp"]
                        else "do not all arrive in time: the compute stream waits for")}


def setup_summary(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per setup (rows of :func:`systems.bench.sharding.measure`): step time, memory after the step, the step's peak."""
    return pd.DataFrame([{"setup": r["optimizer"], "step_ms": r["step_ms"],
                          "after step (GiB)": r["memory"][-1]["allocated_mb"] / 1024,
                          "step peak (GiB)": max(m["peak_mb"] for m in r["memory"]) / 1024} for r in rows])


def goal_facts(summary: pd.DataFrame) -> dict[str, Any]:
    """Our FSDP against FSDP2 and DDP, with the goals set for it: step time within 10 % of FSDP2's (fp32 and bf16),
    peak memory within 5 %, the state after the step within 5 % of half of DDP's."""
    s = summary.set_index("setup")
    goals = {"step_ratio": s.step_ms["FSDP (ours)"] / s.step_ms["FSDP2"],
             "step_ratio_bf16": s.step_ms["FSDP (ours) bf16"] / s.step_ms["FSDP2 bf16"],
             "peak_ratio": s["step peak (GiB)"]["FSDP (ours)"] / s["step peak (GiB)"]["FSDP2"],
             "state_vs_half_ddp": s["after step (GiB)"]["FSDP (ours)"] / (s["after step (GiB)"]["DDP"] / 2)}
    within = lambda ok: "within" if ok else "outside"  # noqa: E731
    return goals | {"time_words": within(goals["step_ratio"] <= 1.10), "peak_words": within(goals["peak_ratio"] <= 1.05),
                    "state_words": within(abs(goals["state_vs_half_ddp"] - 1) <= 0.05)}


def against_simulation(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """The measured steps (bucketed DDP and our FSDP) beside the parallelism chapter's simulation of the same step on
    two devices, under both of its latency readings."""
    sim2 = simulated.query("devices == 2 and strategy in ['bucketed', 'fsdp']").pivot_table(
        index="strategy", columns="latency", values="step_ms")
    side = measured.rename(columns={"variant": "strategy"})[["strategy", "status", "step_ms"]].merge(
        sim2.reset_index(), on="strategy", how="left")
    return side.rename(columns={"step_ms": "measured (ms)", "call": "simulated, latency per call (ms)",
                                "step": "simulated, latency per ring step (ms)"})

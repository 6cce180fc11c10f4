"""What chapter 16 (FSDP on two GPUs) says of its measurements: whether the gathers arrive in time, memory and time of
every data-parallel setup against the goals set for our FSDP, and the measured steps against the simulation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from systems.bench.ddp import step_summary
from systems.device import OOM
from systems.report import listed


def timeline_facts(rank0: pd.DataFrame) -> dict[str, Any]:
    """Our FSDP's and FSDP2's profiled steps on rank 0 (``run`` "fsdp" and "fsdp2", and where traced "fsdp
    bfloat16" and "fsdp2 bfloat16"): communication, its overlap with compute, the compute streams' idle time and the
    step's span, whether our gathers arrive in time (the compute idle for under 5 % of the step), and the bf16 steps
    side by side in words."""
    runs = {run: step_summary(g) for run, g in rank0.groupby("run")}
    ours, theirs = runs["fsdp"], runs["fsdp2"]
    out = {f"ours_{k}": v for k, v in ours.items()} | {f"theirs_{k}": v for k, v in theirs.items()}
    out["verdict"] = ("arrive in time: the compute stream is busy for all but" if ours["idle"] < 0.05 * ours["span"]
                      else "do not all arrive in time: the compute stream waits for")
    mine, fsdp2 = runs.get("fsdp bfloat16"), runs.get("fsdp2 bfloat16")
    if mine is None or fsdp2 is None:
        return out | {"bf16_words": "No bf16 step was traced here."}
    share, their_share = mine["idle"] / mine["span"], fsdp2["idle"] / fsdp2["span"]
    said = (f"In bf16 our FSDP's step spans {mine['span']:.4g} ms, of which its compute stream idles "
            f"{mine['idle']:.3g} ms ({share:.0%}), against FSDP2's {fsdp2['span']:.4g} ms with {fsdp2['idle']:.3g} ms "
            f"idle ({their_share:.0%}). Ours runs {mine['collectives']} communication kernels a step where FSDP2 runs "
            f"{fsdp2['collectives']}: a gather and a reduce-scatter per Linear layer, each launched from a Python "
            "hook, against FSDP2's one of each per Transformer block. ")
    if share > their_share + 0.05:
        said += ("Ours leaves the GPU idle for the larger share of its step: bf16's shorter layers leave less compute "
                 "to hide each layer's gather and its hook behind.")
    elif their_share > share + 0.05:
        said += "FSDP2 leaves the GPU idle for the larger share of its step."
    else:
        said += "Both keep the GPU about as busy, within 5 % of the step."
    return out | {"bf16_words": said}


def setup_summary(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per setup (rows of :func:`systems.bench.sharding.measure`): step time, memory after the step, the step's peak;
    a setup that ran out of memory has "OOM" for its status and no numbers."""
    def numbers(r: dict[str, Any]) -> dict[str, float]:
        if r.get("status") == OOM:
            return {"step_ms": np.nan, "after step (GiB)": np.nan, "step peak (GiB)": np.nan}
        return {"step_ms": r["step_ms"], "after step (GiB)": r["memory"][-1]["allocated_mb"] / 1024,
                "step peak (GiB)": max(m["peak_mb"] for m in r["memory"]) / 1024}

    return pd.DataFrame([{"setup": r["optimizer"], "status": r.get("status", "ok"), **numbers(r)} for r in rows])


def goal_facts(summary: pd.DataFrame, params: int, world: int) -> dict[str, Any]:
    """Our FSDP against FSDP2, with the goals set for it: step time within 10 % of FSDP2's in fp32 and in bf16, peak
    memory within 5 %, and after the step the fp32 weights, gradients and AdamW moments of its share of the ``params``
    (16 bytes each, over ``world`` GPUs) to within 5 %. A setup that did not run leaves its comparisons unsaid."""
    s = summary.set_index("setup")
    missing = [name for name in ("FSDP (ours)", "FSDP2", "FSDP (ours) bf16", "FSDP2 bf16")
               if name not in s.index or s.status.get(name) != "ok"]
    if missing:
        return {"time_words": f"{listed(missing)} did not run to the end here (out of memory), so our FSDP is not "
                              "held to its goals.", "memory_words": "", "state_ratio": np.nan}
    times = {"fp32": s.step_ms["FSDP (ours)"] / s.step_ms["FSDP2"],
             "bf16": s.step_ms["FSDP (ours) bf16"] / s.step_ms["FSDP2 bf16"]}
    met = [dtype for dtype, ratio in times.items() if ratio <= 1.10]
    aim = {2: "within the 10 % we aim for in both", 1: f"within the 10 % we aim for in {''.join(met)} only",
           0: "outside the 10 % we aim for in both"}[len(met)]
    peak = s["step peak (GiB)"]["FSDP (ours)"] / s["step peak (GiB)"]["FSDP2"]
    share_gib = 16 * params / world / 2**30
    state = s["after step (GiB)"]["FSDP (ours)"] / share_gib
    within = lambda ok: "within" if ok else "outside"  # noqa: E731
    return {"time_words": f"Our FSDP takes {times['fp32']:.3g} times FSDP2's step time in fp32 and "
                          f"{times['bf16']:.3g} times in bf16: {aim}.",
            "memory_words": f"Its peak memory is {peak:.3g} times FSDP2's ({within(peak <= 1.05)} 5 %). After the "
                            f"step, its weights, gradients and optimizer state take {state:.3g} times the "
                            f"{share_gib:.3g} GiB of one GPU's share ({within(abs(state - 1) <= 0.05)} 5 % of what "
                            "sharding over two GPUs promises).", "state_ratio": state}


def against_simulation(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """The measured steps (bucketed DDP and our FSDP) beside the parallelism chapter's simulation of the same step on
    two devices, under both of its latency readings."""
    sim2 = simulated.query("devices == 2 and strategy in ['bucketed', 'fsdp']").pivot_table(
        index="strategy", columns="latency", values="step_ms")
    side = measured.rename(columns={"variant": "strategy"})[["strategy", "status", "step_ms"]].merge(
        sim2.reset_index(), on="strategy", how="left")
    return side.rename(columns={"step_ms": "measured (ms)", "call": "simulated, latency per call (ms)",
                                "step": "simulated, latency per ring step (ms)"})

"""What chapter 03 (mixed precision) says of its measurements: the accumulation experiment and the speed-ups of
each precision."""

from __future__ import annotations

import pandas as pd
import torch


def accumulation_facts(table: pd.DataFrame) -> dict:
    """The numbers the accumulation loops' discussion quotes, from :func:`accumulation_table`."""
    err, result = table.abs_error, table.result
    return {"fp32_err": err[0], "fp16_result": result[1], "fp16_err": err[1], "mixed_result": result[2],
            "mixed_err": err[2], "fp16_over_fp32": err[1] / err[0], "cast_same": bool(result[2] == result[3]),
            "value_fp16": torch.tensor(0.01, dtype=torch.float16).item()}


def speedup_table(runs: pd.DataFrame, sizes) -> pd.DataFrame:
    """Forward and backward ms in fp32 and with bf16 autocast per size, and the speed-ups (an end-to-end sweep
    over ``size`` × ``dtype``); sizes that ran out of memory in either dtype show as empty rows."""
    ok = runs[runs.status == "ok"]
    wide = ok.pivot(index="size", columns="dtype", values=["forward_ms", "backward_ms"]).reindex(sizes)
    return pd.DataFrame({
        "fp32 forward (ms)": wide["forward_ms"]["fp32"], "bf16 forward (ms)": wide["forward_ms"]["bf16"],
        "forward speed-up": wide["forward_ms"]["fp32"] / wide["forward_ms"]["bf16"],
        "fp32 backward (ms)": wide["backward_ms"]["fp32"], "bf16 backward (ms)": wide["backward_ms"]["bf16"],
        "backward speed-up": wide["backward_ms"]["fp32"] / wide["backward_ms"]["bf16"],
    }).reset_index()


def speedup_facts(table: pd.DataFrame, runs: pd.DataFrame) -> dict:
    """First and last size that ran: their speed-ups, and whether the gain grows with the model."""
    s = table.dropna().set_index("size")
    first, last = s.index[0], s.index[-1]
    return {"first": first, "last": last, "fwd_first": s["forward speed-up"][first], "fwd_last": s["forward speed-up"][last],
            "bwd_first": s["backward speed-up"][first], "bwd_last": s["backward speed-up"][last],
            "grows": bool(s["forward speed-up"][last] > s["forward speed-up"][first]),
            "oom": ", ".join(sorted({f"{r.size} ({r.dtype})" for r in runs[runs.status != "ok"].itertuples()})) or "none"}


"""What chapter 05 (PyTorch attention) says of naive attention, eager against compiled."""

from __future__ import annotations

import pandas as pd

from systems.bench.attention import numeric
from systems.device import OOM


def compile_facts(side: pd.DataFrame) -> dict:
    """Speed-ups at the longest sequence that ran and over the grid, memory ratio, where each ran out."""
    both = side.dropna(subset=["fwd_speedup", "bwd_speedup"])
    at_long = both[both.seq_len == both.seq_len.max()]
    mem_ratio = (numeric(side, "mem_before_bwd_MiB_compiled") / numeric(side, "mem_before_bwd_MiB")).dropna()
    eager_oom, compiled_oom = side.fwd_ms.eq(OOM) | side.bwd_ms.eq(OOM), side.fwd_ms_compiled.eq(OOM) | side.bwd_ms_compiled.eq(OOM)
    return {"long_n": int(both.seq_len.max()), "fwd_long": at_long.fwd_speedup.mean(), "bwd_long": at_long.bwd_speedup.mean(),
            "fwd_min": both.fwd_speedup.min(), "fwd_max": both.fwd_speedup.max(), "bwd_min": both.bwd_speedup.min(),
            "bwd_max": both.bwd_speedup.max(), "mem_ratio": mem_ratio.median(), "eager_ooms": int(eager_oom.sum()),
            "compiled_ooms": int(compiled_oom.sum()), "same_ooms": bool((eager_oom == compiled_oom).all())}


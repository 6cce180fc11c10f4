"""Naive attention at scale (handout §1.2.1) and compiled (§1.3.1 a): time, memory, where it runs out.

For every head dimension d and sequence length N of the grid, single-head attention (batch 8, inputs
(B, N, d), no head dimension) runs ``steps`` timed forward passes and ``steps`` timed backward
passes after ``warmup`` untimed ones, with the device synchronised around each. The memory in use
just before a backward pass (``torch.cuda.memory_allocated``) shows what the forward pass keeps for
the backward. Out-of-memory is a row, not a crash. :func:`naive_attention_memory` is the same
accounting on paper, to explain the measured numbers and the first size that does not fit.

    python -m systems.bench.attention --d 16 64 --seq 256 1024 --compiled
"""

from __future__ import annotations

import argparse
from itertools import product

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from systems.attention.reference import naive_attention
from systems.bench.timing import summarize, time_steps
from systems.cli import integer
from systems.device import OOM, free_memory, run_or_oom, synchronize, timed

HEAD_DIMS = (16, 32, 64, 128)
SEQ_LENS = (256, 1024, 4096, 8192, 16384)
BATCH = 8


def naive_attention_memory(batch: int, n: int, d: int, dtype: torch.dtype = torch.float32) -> dict[str, int]:
    """Bytes that naive (non-causal) attention holds, from the formula, as autograd runs it.

    Forward: S = QKᵀ/√d and P = softmax(S) are (B, N, N) each; autograd keeps P (softmax and P @ V
    both need it) and frees S. Backward: dP = dO Vᵀ and dS = softmax'(dP) are (B, N, N) again, and P
    is still held while they are formed. Everything else is (B, N, d): Q, K, V, O and their gradients.
    """
    e = torch.finfo(dtype).bits // 8
    square = batch * n * n * e  # one (B, N, N) matrix
    thin = batch * n * d * e  # one (B, N, d) matrix
    return {
        "score_matrix": square,
        "inputs_outputs": 4 * thin,  # Q, K, V, O
        "saved_for_backward": square + 4 * thin,  # P and the thin tensors: what memory_allocated sees
        "peak_forward": 2 * square + 4 * thin,  # S and P coexist while softmax runs
        "peak_backward": 3 * square + 8 * thin,  # P, dP, dS, plus dO, dQ, dK, dV
    }


def _time_backward(q, k, v, fn, *, warmup: int, steps: int, device) -> tuple[float, float]:
    """Backward passes timed alone (each after an untimed forward); also the memory in use before them."""
    do = torch.randn_like(q)
    times, mem = [], 0
    for i in range(warmup + steps):
        out = fn(q, k, v)
        synchronize(device)
        mem = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        with timed(device, sync_start=False) as elapsed:  # synchronised just above, before reading the memory
            out.backward(do)
        if i >= warmup:
            times.append(elapsed.ms)
        q.grad = k.grad = v.grad = None
        del out
    return summarize(times, warmup).mean_ms, mem / 2**20


def bench_point(d: int, n: int, *, batch: int = BATCH, warmup: int = 10, steps: int = 100, compiled: bool = False,
                backend: str = "inductor", dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                seed: int = 0) -> dict:
    """One (d, N) point: mean forward and backward ms, MiB in use before backward; "OOM" where it ran out.

    ``backend="aot_eager"`` traces the compiled path without generating code (CPU smoke runs).
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    row = {"d": d, "seq_len": n, "compiled": compiled, "fwd_ms": OOM, "bwd_ms": OOM, "mem_before_bwd_MiB": OOM}
    if compiled:
        # A fresh compile per shape: otherwise twenty shapes exceed Dynamo's recompile limit and the
        # later points silently fall back to eager. Compilation happens in the warm-up calls.
        torch._dynamo.reset()
        fn = torch.compile(naive_attention, dynamic=False, backend=backend)
    else:
        fn = naive_attention
    torch.manual_seed(seed)

    def run():
        q, k, v = (torch.randn(batch, n, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        row["fwd_ms"] = time_steps(lambda: fn(q, k, v), warmup=warmup, steps=steps, device=device).mean_ms
        row["bwd_ms"], row["mem_before_bwd_MiB"] = _time_backward(q, k, v, fn, warmup=warmup, steps=steps,
                                                                  device=device)

    run_or_oom(run)  # an OOM leaves the columns not yet filled at "OOM"
    free_memory()
    return row


def sweep(head_dims=HEAD_DIMS, seq_lens=SEQ_LENS, *, compiled=(False,), **kwargs) -> pd.DataFrame:
    """The §1.2.1 grid (``compiled=(False, True)`` adds §1.3.1 a), one row per (compiled, d, seq_len)."""
    points = list(product(compiled, head_dims, seq_lens))
    rows = [bench_point(d, n, compiled=c, **kwargs) for c, d, n in tqdm(points, desc="attention grid")]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=integer(1), nargs="+", default=list(HEAD_DIMS))
    p.add_argument("--seq", type=integer(1), nargs="+", default=list(SEQ_LENS))
    p.add_argument("--compiled", action="store_true", help="also time torch.compile(naive_attention)")
    p.add_argument("--warmup", type=integer(0), default=10)
    p.add_argument("--steps", type=integer(1), default=100)
    a = p.parse_args(argv)
    df = sweep(a.d, a.seq, compiled=(False, True) if a.compiled else (False,), warmup=a.warmup, steps=a.steps)
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()


# ---- what the grid says (chapter 05) -----------------------------------------------------------------------


def numeric(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce")


def first_oom(eager: pd.DataFrame, batch: int, device_bytes: int) -> dict:
    """Where naive attention first runs out of memory: the smallest failing (d, N) of the grid, or, if nothing
    failed, the first power-of-two length at which the formula's backward peak exceeds the device; with the
    formula's sizes there (GiB)."""
    ooms = eager[eager.fwd_ms.eq(OOM) | eager.bwd_ms.eq(OOM)]
    if len(ooms):
        first = ooms.sort_values(["seq_len", "d"]).iloc[0]
        d, n, measured = int(first.d), int(first.seq_len), True
    else:
        d, n, measured = 16, int(eager.seq_len.max()), False
        while naive_attention_memory(batch, n, d)["peak_backward"] <= device_bytes:
            n *= 2
    acct = naive_attention_memory(batch, n, d)
    return {"d": d, "n": n, "measured": measured, "device_gib": device_bytes / 2**30,
            **{f"{k}_gib": v / 2**30 for k, v in acct.items()}}


def memory_growth(eager: pd.DataFrame, batch: int) -> dict:
    """How the memory held for the backward pass grows with N at the smallest d (the log-log slope over the
    longer sequences), against the formula at the longest N that ran."""
    ok = eager.assign(mem=numeric(eager, "mem_before_bwd_MiB")).dropna(subset=["mem"])
    d = int(ok.d.min())
    measured = ok[ok.d == d].set_index("seq_len").mem
    longer = measured.index[measured.index >= 1024] if (measured.index >= 1024).sum() >= 2 else measured.index
    n = int(measured.index.max())
    return {"slope": float(np.polyfit(np.log(longer), np.log(measured[longer]), 1)[0]), "d": d, "n": n,
            "measured_mib": measured[n], "formula_mib": naive_attention_memory(batch, n, d)["saved_for_backward"] / 2**20}


def compiled_side_by_side(runs: pd.DataFrame) -> pd.DataFrame:
    """Eager and compiled timings and memory per (d, N), with the compiled speed-ups."""
    eager = runs[~runs.compiled].drop(columns="compiled")
    side = eager.merge(runs[runs.compiled].drop(columns="compiled"), on=["d", "seq_len"], suffixes=("", "_compiled"))
    side = side[["d", "seq_len", "fwd_ms", "fwd_ms_compiled", "bwd_ms", "bwd_ms_compiled", "mem_before_bwd_MiB",
                 "mem_before_bwd_MiB_compiled"]]
    return side.assign(fwd_speedup=numeric(side, "fwd_ms") / numeric(side, "fwd_ms_compiled"),
                       bwd_speedup=numeric(side, "bwd_ms") / numeric(side, "bwd_ms_compiled"))



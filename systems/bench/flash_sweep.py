"""FlashAttention-2 timed against the anchors over shapes: the §1.3.2 (e) sweep, rectangular shapes, the shapes
people train with, and what the ratios say.

Every measurement is ``triton.testing.do_bench`` (median of at least ten repetitions after warm-up, L2 flushed
between them) of one of three modes: ``fwd`` (the forward with autograd recording, as in training), ``bwd`` (a
retained graph's backward alone) and ``fwd_bwd``; with ``rounds``, the fastest of that many, taken in turn.
Implementations go by the registry's names (:mod:`systems.attention`): ours (``flash_triton``, ``naive``) and
PyTorch's (``sdpa_flash``, ``sdpa_cudnn``, ``flex``), compared in the same run. A back end that refuses an input
(the SDPA kernels take no fp32) is recorded as "unsupported", a point that does not fit in memory as "OOM".
Without a GPU (smoke runs) the timer falls back to :func:`systems.bench.timing.time_steps` so the code path can be
checked on a CPU. FLOPs follow :mod:`systems.flops`.

    python -m systems.bench.flash_sweep --max-seq 4096
    python -m systems.bench.flash_sweep --table --rounds 3 --impls flash_hopper flash_triton sdpa_cudnn --json t.json
"""

from __future__ import annotations

import argparse
import functools
from itertools import product
from typing import Callable

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from systems.attention import available, get_attention, unavailable
from systems.attention.peers import refused, sdpa_choice
from systems.attention.reference import naive_attention
from systems.bench.attention_steps import (interleaved, interleaved_apart, kernel_times_apart, largest_batch,
                                           paired_ratio, ratio_interval)
from systems.bench.e2e import BenchConfig, bench_device, vary
from systems.bench.timing import make_timer
from systems.cli import dump_json, integer
from systems.files import write_text_atomically
from systems.device import OOM, free_memory, is_oom
from systems.flops import attention_flops
from systems.model import preset
from systems.provenance import stamp

UNSUPPORTED = "unsupported"
NOT_RUN = "not run"
MODES = ("fwd", "bwd", "fwd_bwd")
IMPLS = ("flash_triton", "naive", "sdpa_flash", "sdpa_cudnn")
SEQ_LENS = tuple(2**i for i in range(7, 17))  # 128 .. 65536
HEAD_DIMS = (16, 32, 64, 128)
TENSOR_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}  # the inputs' dtype
# (B, H, N, d), causal: the kernels' table, the 2025 leaderboard's shape first, the 2026 leaderboard's attention last
TABLE_SHAPES = (((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True),
                ((4, 16, 2048, 64), True), ((1, 16, 8192, 64), False), ((2, 32, 32768, 128), True))


def attention(name: str, config=None) -> Callable:
    """The attention function behind a registry name; ``config`` fixes our Triton kernels' tiles and switches."""
    if name == "flash_triton" and config is not None:
        from systems.attention.flash_triton import flash_attention_triton

        return functools.partial(flash_attention_triton, config=config)
    return get_attention(name)


def measure(fn: Callable, q, k, v, is_causal: bool, modes, timer) -> dict[str, float | str]:
    """ms per mode for one implementation and input; "OOM" / "unsupported" where it cannot run."""
    results: dict[str, float | str] = {}
    try:
        o = fn(q, k, v, is_causal)  # also the graph that "bwd" replays
        do = torch.randn_like(o)
        for mode in modes:
            if mode == "fwd":
                results[mode] = timer(lambda: fn(q, k, v, is_causal), [q, k, v])
            elif mode == "bwd":
                results[mode] = timer(lambda: o.backward(do, retain_graph=True), [q, k, v])
            else:
                results[mode] = timer(lambda: fn(q, k, v, is_causal).backward(do), [q, k, v])
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not (is_oom(exc) or refused(exc)):
            raise
        status = OOM if is_oom(exc) else UNSUPPORTED
        results = {mode: results.get(mode, status) for mode in modes}
    finally:
        q.grad = k.grad = v.grad = None
        free_memory()
    return results


def fastest_of(rounds: list[dict[str, float | str]]) -> dict[str, float | str]:
    """Per mode the fastest of the rounds' times, or a round's status ("OOM", "unsupported") where one has no time."""
    return {mode: min(r[mode] for r in rounds) if all(isinstance(r[mode], float) for r in rounds)
            else next(r[mode] for r in rounds if not isinstance(r[mode], float)) for mode in rounds[0]}


def run(points, impls=IMPLS, modes=MODES, *, config=None, naive_max_seq: int | None = None, rep_ms: int = 20,
        warmup_ms: int = 5, seed: int = 0, rounds: int = 1, desc: str = "attention shapes") -> pd.DataFrame:
    """Every implementation at every point ``(dtype, d, n_q, n_k, batch, heads, causal)``; one row per mode. With
    ``rounds`` > 1 the implementations are timed in turn that many times at each point and the fastest kept: one
    ``do_bench`` median moves by several percent between calls (book/log.md, 2026-11-29), and a long call gets few
    repetitions in ``rep_ms``."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    timer = make_timer(rep_ms, warmup_ms)
    rows = []
    for dtype, d, n_q, n_k, batch, heads, causal in tqdm(points, desc=desc):
        torch.manual_seed(seed)
        q = torch.randn(batch, heads, n_q, d, device=device, dtype=TENSOR_DTYPES[dtype], requires_grad=True)
        k, v = (torch.randn(batch, heads, n_k, d, device=device, dtype=TENSOR_DTYPES[dtype], requires_grad=True)
                for _ in "kv")
        times = {impl: [] for impl in impls}
        for _, impl in product(range(rounds), impls):
            if impl == "naive" and naive_max_seq is not None and max(n_q, n_k) > naive_max_seq:
                times[impl].append(dict.fromkeys(modes, NOT_RUN))
            elif unavailable(impl, device, TENSOR_DTYPES[dtype], d):  # a kernel's documented limits (dtype, head dim)
                times[impl].append(dict.fromkeys(modes, UNSUPPORTED))
            else:
                times[impl].append(measure(attention(impl, config), q, k, v, causal, modes, timer))
        for impl in impls:
            for mode, t in fastest_of(times[impl]).items():
                flops = attention_flops(n_q, n_k, d, batch * heads, causal, mode)
                rows.append({"dtype": dtype, "d": d, "n_q": n_q, "n_k": n_k, "batch": batch, "heads": heads,
                             "causal": causal, "impl": impl, "mode": mode, "ms": t,
                             "tflops": flops / t / 1e9 if isinstance(t, float) else t})
        del q, k, v
    return pd.DataFrame(rows)


def sweep(seq_lens=SEQ_LENS, head_dims=HEAD_DIMS, dtypes=("bf16", "fp32"), impls=IMPLS, modes=MODES, *,
          is_causal: bool = True, batch: int = 1, max_seq: int | None = None, **kwargs) -> pd.DataFrame:
    """§1.3.2 (e): one row per (dtype, d, N, impl, mode) with ms and TFLOP/s; inputs (batch, 1, N, d).

    ``max_seq`` caps the sweep (smoke runs); ``naive_max_seq`` marks longer naive points "not run" to
    bound GPU time; ``config`` is the Triton kernels' :class:`~systems.attention.flash_triton.FlashConfig`
    (None: autotuned).
    """
    points = [(dt, d, n, n, batch, 1, is_causal) for dt, d, n in product(dtypes, head_dims, seq_lens)
              if max_seq is None or n <= max_seq]
    return run(points, impls, modes, desc="flash sweep", **kwargs)


def table(impls=IMPLS, modes=("fwd", "fwd_bwd"), shapes=TABLE_SHAPES, dtype: str = "bf16", **kwargs) -> pd.DataFrame:
    """Every implementation at the kernels' table of shapes (:data:`TABLE_SHAPES`), in ``dtype``."""
    points = [(dtype, d, n, n, batch, heads, causal) for (batch, heads, n, d), causal in shapes]
    return run(points, impls, modes, desc="table", **kwargs)


def rectangular(shapes, d: int = 64, dtype: str = "bf16", impls=("flash_triton", "sdpa_flash", "sdpa_cudnn"),
                modes=MODES, *, is_causal: bool = True, batch: int = 1, **kwargs) -> pd.DataFrame:
    """The same measurements at (Nq, Nk) pairs with Nq != Nk; FLOPs count the top-left visible area."""
    points = [(dtype, d, n_q, n_k, batch, 1, is_causal) for n_q, n_k in shapes]
    return run(points, impls, modes, desc="rectangular", **kwargs)


def training_shapes(seq_lens=(256, 512, 1024, 2048, 4096, 8192), head_dims=(64, 80, 96, 128),
                    batch_heads=((1, 16), (4, 16), (8, 32), (16, 32)), dtypes=("bf16", "fp16"),
                    causal=(True, False), impls=("flash_triton", "sdpa_flash", "sdpa_cudnn"), modes=("fwd_bwd",),
                    **kwargs) -> pd.DataFrame:
    """The shapes models train with: (batch, heads) pairs, head dims of both editions' presets (80 is the 2026
    xl's), causal and not, both half types; forward and backward."""
    points = [(dt, d, n, n, b, h, c) for dt, d, n, (b, h), c in product(dtypes, head_dims, seq_lens, batch_heads, causal)]
    return run(points, impls, modes, desc="training shapes", **kwargs)


def wide(df: pd.DataFrame, value: str = "ms") -> pd.DataFrame:
    """One row per shape and mode, one column per implementation."""
    index = [c for c in ("dtype", "d", "n_q", "n_k", "batch", "heads", "causal", "mode") if c in df]
    out = df.pivot_table(index=index, columns="impl", values=value, aggfunc="first").reset_index()
    out.columns.name = None
    return out


def ratios(df: pd.DataFrame, base: str = "flash_triton", against=("sdpa_flash", "sdpa_cudnn", "naive")) -> pd.DataFrame:
    """``base`` time over each other implementation's time (below 1: ``base`` is faster); NaN where either failed."""
    table = wide(df)
    for other in against:
        if other in table:
            num = pd.to_numeric(table[base], errors="coerce")
            table[f"{base}/{other}"] = num / pd.to_numeric(table[other], errors="coerce")
    return table


def slower_shapes(table: pd.DataFrame, base: str = "flash_triton", other: str = "sdpa_flash", min_n: int = 1024,
                  fixed_cost_factor: float = 1.5) -> pd.DataFrame:
    """The rows of a :func:`ratios` table from ``min_n`` tokens on where ``base`` is slower than ``other``, with why.

    ``regime`` is "fixed cost" where ``base`` takes at most ``fixed_cost_factor`` times its time at the
    shortest sequence of the same (dtype, d, mode): the time hardly grows with the work, so it is the cost
    of a call (dispatch, checks, kernel launches), not of the kernels. Elsewhere it is "kernel": the
    kernels themselves are slower at that shape.
    """
    ratio = f"{base}/{other}"
    if ratio not in table:
        return table.iloc[:0].assign(regime=pd.Series(dtype=str))
    ms = pd.to_numeric(table[base], errors="coerce")
    floor = ms.groupby([table.dtype, table.d, table["mode"]]).transform(
        lambda s: s.loc[table.loc[s.index, "n_q"].idxmin()])
    slower = table[(table.n_q >= min_n) & (pd.to_numeric(table[ratio], errors="coerce") > 1)]
    regime = (ms[slower.index] <= fixed_cost_factor * floor[slower.index]).map({True: "fixed cost", False: "kernel"})
    return slower.assign(regime=regime)


def geometric_mean(values: pd.Series) -> float:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.prod() ** (1 / len(values))) if len(values) else float("nan")


# ---- what the sweeps say (chapter 07) -----------------------------------------------------------------------


def _step_config(size: str, context: int, tokens: int, dtype: str, warmup: int, steps: int,
                 compiled: bool = False) -> BenchConfig:
    """A training step of preset ``size`` at ``context`` with ``tokens`` per batch."""
    return BenchConfig(preset(size, context_length=context), batch_size=max(1, tokens // context), mode="train",
                       dtype=dtype, warmup=warmup, steps=steps, compile=compiled)


def model_step_points(sizes, contexts, compiled_sizes=()) -> list[tuple[str, int, bool]]:
    """The points of :func:`model_step_at`: (size, context, compiled) for each model size at each context, eager
    and, for ``compiled_sizes``, under ``torch.compile`` too."""
    return [(size, context, compiled) for size in sizes for context in contexts
            for compiled in ((False, True) if size in compiled_sizes else (False,))]


def model_step_at(point: tuple[str, int, bool], earlier: pd.DataFrame | None = None, tokens: int = 8192,
                  dtype: str = "bf16", attentions=("sdpa", "flash_triton"), warmup: int = 3,
                  steps: int = 10) -> pd.DataFrame:
    """Training steps at one point of :func:`model_step_points` (``tokens`` per batch): every attention on one
    model, interleaved (:func:`systems.bench.attention_steps.interleaved`). A point at a time, so that
    :func:`systems.resumable.measured_sweep` records each as it finishes; ``earlier``, the points before it, which
    the sweep passes, is not needed here."""
    size, context, compiled = point
    return interleaved(_step_config(size, context, tokens, dtype, warmup, steps, compiled), attentions)


def compiled_steps_at_largest_batch(sizes, context: int, dtype: str = "bf16",
                                    attentions=("sdpa", "flash_hopper"), max_batch: int = 64,
                                    steps: int = 10) -> pd.DataFrame:
    """The training step of each preset at ``context``, the whole model under ``torch.compile``, every attention
    on one model, interleaved (:func:`systems.bench.attention_steps.interleaved`), at the largest batch (a power of
    two up to ``max_batch``) whose eager step with the first attention fits
    (:func:`systems.bench.attention_steps.largest_batch`), halved while the compiled steps do not; a size where one
    sequence does not fit is a row of OOMs (at batch 0 where not even the eager step fits)."""
    runs = []
    for size in tqdm(sizes, desc="compiled steps at the largest batch"):
        cfg = vary(_step_config(size, context, context, dtype, 3, steps, compiled=True), attention=attentions[0])
        batch = largest_batch(cfg, max_batch)
        if batch is None:
            point = {"size": size, "context_length": context, "compile": True, "batch_size": 0, "dtype": dtype}
            runs.append(pd.DataFrame([{**point, "attention": a, "status": OOM, "step_ms": float("nan")}
                                      for a in attentions]))
            continue
        rows = interleaved(vary(cfg, batch_size=batch), attentions)
        while (rows.status == OOM).any() and batch > 1:
            batch //= 2
            rows = interleaved(vary(cfg, batch_size=batch), attentions)
        runs.append(rows)
    return pd.concat(runs, ignore_index=True)


def here_and_apart(size: str, context: int, tokens: int, dtype: str, steps: int,
                   attentions=("sdpa", "flash_triton")) -> pd.DataFrame:
    """One eager in-model point timed twice: in this process, then in a fresh one
    (:func:`systems.bench.attention_steps.interleaved_apart`). Where the two disagree, the process around the steps
    (a notebook's kernel, what earlier work left loaded) is part of the result. :func:`model_table`'s table, one row
    per process (column ``process``)."""
    cfg = _step_config(size, context, tokens, dtype, 3, steps)
    return pd.concat([model_table(run(cfg, attentions)).assign(process=where)
                      for where, run in (("this process", interleaved), ("a fresh process", interleaved_apart))],
                     ignore_index=True)


def model_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Training steps of the model with each attention (rows of :func:`systems.bench.attention_steps.interleaved`,
    one per size, mode, context and attention): ms per step side by side ("OOM" where the model did not fit), and
    each of ours over SDPA's (:func:`paired_ratio`) with its 95% interval (:func:`ratio_interval`): columns
    ``A/sdpa``, ``A low`` and ``A high`` for every attention ``A`` but ``sdpa``."""
    # a point where every attention ran out of memory has no times at all, not even an empty column of them
    runs = runs.reindex(columns=[*runs.columns, *{"step_ms", "step_times_ms"} - set(runs.columns)])
    ok = runs.assign(mode=runs.compile.map({False: "eager", True: "compiled"}))
    steps = ok.step_ms.astype(object).where(ok.status == "ok", ok.status)
    point = ["size", "mode", "context_length"]
    ours_all = [a for a in ok.attention.unique() if a != "sdpa"]  # in the order the steps took them
    table = ok.assign(step_ms=steps).pivot(index=point, columns="attention", values="step_ms")
    table = table.reindex(index=pd.MultiIndex.from_frame(ok[point].drop_duplicates()), columns=["sdpa", *ours_all])
    table = table.reset_index()
    table.columns.name = None
    times = ok[ok.status == "ok"].set_index(point + ["attention"]).step_times_ms
    for ours in ours_all:
        paired = [(times[(*key, ours)], times[(*key, "sdpa")])
                  if (*key, ours) in times.index and (*key, "sdpa") in times.index else None
                  for key in table[point].itertuples(index=False)]
        table[f"{ours}/sdpa"] = [np.nan if p is None else paired_ratio(*p) for p in paired]
        bounds = [(np.nan, np.nan) if p is None else ratio_interval(*p) for p in paired]
        table[f"{ours} low"], table[f"{ours} high"] = [b[0] for b in bounds], [b[1] for b in bounds]
    return table


def step_kernel_time(size: str, context: int, tokens: int, dtype: str, attentions=("sdpa", "flash_triton"),
                     steps: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One training step of the model (``tokens`` per batch) per attention: wall ms (the median of ``steps``, the
    attentions interleaved on one model, :func:`systems.bench.attention_steps.interleaved`) and GPU kernel ms
    (profiled afterwards in a process of its own, :func:`systems.bench.attention_steps.kernel_times_apart`: a
    profiler session slows the host-bound steps timed after it); the difference is time the GPU waited for the
    host. ``own_kernel_ms`` is the time of the kernels that ran with this attention and with no other, its
    attention's own kernels (the rest of the model runs the same kernels whichever attention it calls). Also those
    kernels one by one (``attention``, ``kernel``, ``ms`` per step), longest first."""
    cfg = _step_config(size, context, tokens, dtype, 3, steps)
    walls = interleaved(cfg, attentions).set_index("attention").step_ms
    kernels = kernel_times_apart(cfg, attentions)
    own = pd.DataFrame([{"attention": attention, "kernel": name, "ms": ms}
                        for attention, times in kernels.items() for name, ms in times.items()
                        if not any(name in other for a, other in kernels.items() if a != attention)],
                       columns=["attention", "kernel", "ms"]).sort_values(["attention", "ms"], ascending=[True, False])
    table = pd.DataFrame([{"attention": attention, "step_ms": walls[attention],
                           "kernel_ms": sum(times.values()) if times else float("nan")}
                          for attention, times in kernels.items()])
    table["host_wait_ms"] = table.step_ms - table.kernel_ms
    mine = own.groupby("attention").ms.sum()
    table["own_kernel_ms"] = [mine.get(a, 0.0) if kernels[a] else float("nan") for a in table.attention]
    return table, own.reset_index(drop=True)


def model_attention_inputs(size: str, context: int, tokens: int, dtype: str
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uninitialised q, k, v laid out as the model's attention gets them at this point (``tokens`` per batch): q and
    k contiguous after the rotary embedding, v a view of its projection's (B, N, H, d) output."""
    cfg = _step_config(size, context, tokens, dtype, 0, 1)
    batch, heads, head_dim = cfg.batch_size, cfg.model.num_heads, cfg.model.head_dim
    like = dict(dtype=TENSOR_DTYPES[dtype], device=bench_device(cfg))
    q, k = (torch.empty(batch, heads, context, head_dim, **like) for _ in range(2))
    return q, k, torch.empty(batch, context, heads, head_dim, **like).transpose(1, 2)


def model_sdpa_choice(size: str, context: int, tokens: int, dtype: str) -> str:
    """The back end ``sdpa`` runs in the model at this point (:func:`systems.attention.peers.sdpa_choice`)."""
    return sdpa_choice(*model_attention_inputs(size, context, tokens, dtype), True)


def causal_alignment_agrees(impl: str, n_q: int = 64, n_k: int = 256, d: int = 64) -> bool | str:
    """Whether a back end's causal mask with Nq != Nk is top-left aligned like ours ("unsupported" if it can't run)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q, k, v = (torch.randn(1, 1, n, d, device=device, dtype=dtype) for n in (n_q, n_k, n_k))
    try:
        out = attention(impl)(q, k, v, True)
    except RuntimeError as exc:
        if not refused(exc):
            raise
        return UNSUPPORTED
    expected = naive_attention(q.double(), k.double(), v.double(), True)
    return bool(torch.allclose(out.double(), expected, atol=3e-2, rtol=3e-2))


def causal_alignments(impls, d: int = 64) -> pd.DataFrame:
    """:func:`causal_alignment_agrees` for each back end, as one row."""
    return pd.DataFrame([{impl: causal_alignment_agrees(impl, d=d) for impl in impls}],
                        index=["top-left causal, as ours"])


def measured_points(runs: pd.DataFrame, d: int) -> pd.DataFrame:
    """The points of :func:`sweep` at head dim ``d`` that have a throughput (not out of memory, not run)."""
    at_d = runs[runs.d == d]
    return at_d.assign(tflops=pd.to_numeric(at_d.tflops, errors="coerce")).dropna(subset=["tflops"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m systems.bench.flash_sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-seq", type=integer(1), default=None, help="longest sequence of the §1.3.2 (e) sweep")
    p.add_argument("--training-shapes", action="store_true", help="time the training shapes instead")
    p.add_argument("--table", action="store_true", help="time the kernels' table of shapes instead (bf16, forward "
                   "and forward+backward)")
    p.add_argument("--impls", nargs="+", choices=available(), default=list(IMPLS), help="implementations, by name")
    p.add_argument("--rounds", type=integer(1), default=1, help="time the implementations in turn this many times "
                   "at each shape and keep the fastest")
    p.add_argument("--json", help="write the rows (with provenance) here")
    a = p.parse_args(argv)
    if a.table:
        df = table(a.impls, rounds=a.rounds)
    elif a.training_shapes:
        df = training_shapes(impls=a.impls, rounds=a.rounds)
    else:
        df = sweep(impls=a.impls, max_seq=a.max_seq, rounds=a.rounds)
    if a.json:
        write_text_atomically(a.json, dump_json({"stamp": stamp(), "rows": df.to_dict("records")}, indent=1))
    base = a.impls[0]
    print(ratios(df, base=base, against=[i for i in a.impls if i != base]).to_string(index=False))


if __name__ == "__main__":
    main()

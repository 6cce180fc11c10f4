"""FlashAttention-2 benchmarks: the §1.3.2 (e) sweep, rectangular shapes, the §1.3.3 leaderboard.

Every measurement is ``triton.testing.do_bench`` (median of repetitions after warm-up, L2 flushed
between them) of one of three modes: ``fwd`` (the forward with autograd recording, as in training),
``bwd`` (a retained graph's backward alone) and ``fwd_bwd``. Implementations, compared in the same run:

    triton      ours (systems.attention.flash_triton)
    naive       the textbook formula (systems.attention.reference), materialising the N x N scores
    sdpa_flash  torch.nn.functional.scaled_dot_product_attention restricted to its FlashAttention-2 back end
    sdpa_cudnn  the same, restricted to cuDNN's fused attention

A back end that refuses an input (the SDPA kernels take no fp32) is recorded as "unsupported", a point
that does not fit in memory as "OOM". Without a GPU (smoke runs) the timer falls back to
:func:`systems.bench.timing.time_steps` so the code path can be checked on a CPU.

FLOP convention (written next to the numbers it makes): a non-causal forward is two matmuls,
4·Nq·Nk·d FLOPs per head; a causal one counts only the visible half, 2·N²·d for Nq = Nk (the square's
lower triangle; for Nq ≠ Nk the visible area with top-left alignment); the backward is 2.5x the
forward (five matmuls instead of two), forward+backward 3.5x.

    python -m systems.bench.flash leaderboard --rep 1000
    python -m systems.bench.flash cold-start
    python -m systems.bench.flash overhead      # µs per call at one head of 128 tokens
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import timeit
from itertools import product
from typing import Callable

import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from systems.attention.reference import naive_attention
from systems.bench.timing import time_steps
from systems.device import OOM, free_memory, is_oom, synchronize

UNSUPPORTED = "unsupported"
NOT_RUN = "not run"
MODES = ("fwd", "bwd", "fwd_bwd")
IMPLS = ("triton", "naive", "sdpa_flash", "sdpa_cudnn")
SEQ_LENS = tuple(2**i for i in range(7, 17))  # 128 .. 65536
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
LEADERBOARD = dict(batch=16, seq=16384, d=64, dtype=torch.bfloat16)  # (16, 16384, 64): 16 heads as the batch
# The best forward+backward time of the CS336 Spring 2025 leaderboard at that shape, as published (not measured here)
SPRING_2025_BEST_MS = 5.364
BWD_FACTOR = 2.5


def visible_pairs(n_q: int, n_k: int, causal: bool) -> float:
    """Query-key pairs that contribute, as the continuous area (the convention: N²/2 when causal, square)."""
    if not causal:
        return n_q * n_k
    if n_q <= n_k:  # top-left aligned: query i sees keys 0..i
        return n_q * n_q / 2
    return n_k * n_k / 2 + (n_q - n_k) * n_k


def attention_flops(n_q: int, n_k: int, d: int, batch_heads: int, causal: bool, mode: str) -> float:
    """FLOPs of one call: forward 4·d per visible pair (QKᵀ and PV), backward 2.5x that, fwd_bwd 3.5x."""
    fwd = 4 * d * visible_pairs(n_q, n_k, causal) * batch_heads
    return {"fwd": fwd, "bwd": BWD_FACTOR * fwd, "fwd_bwd": (1 + BWD_FACTOR) * fwd}[mode]


def _sdpa(backend: SDPBackend) -> Callable:
    def attend(q, k, v, is_causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    return attend


def _refused(exc: BaseException) -> bool:
    """An SDPA back end saying it cannot run this input (dtype, head dim, device), as opposed to a bug."""
    return any(words in str(exc) for words in ("No available kernel", "No viable backend"))


def implementation(name: str, config=None) -> Callable:
    """The attention function ``(q, k, v, is_causal) -> o`` behind a name of :data:`IMPLS`."""
    if name == "triton":
        from systems.attention.flash_triton import flash_attention_triton

        return lambda q, k, v, is_causal: flash_attention_triton(q, k, v, is_causal, config)
    if name == "naive":
        return naive_attention
    if name == "sdpa_flash":
        return _sdpa(SDPBackend.FLASH_ATTENTION)
    if name == "sdpa_cudnn":
        return _sdpa(SDPBackend.CUDNN_ATTENTION)
    raise ValueError(f"unknown implementation {name!r}; choose one of {IMPLS}")


def make_timer(rep_ms: int = 20, warmup_ms: int = 5) -> Callable[[Callable, list], float]:
    """Median ms of a call: do_bench on a GPU (gradients reset between calls), a few timed steps on a CPU."""
    if torch.cuda.is_available():
        import triton.testing

        return lambda fn, grads: triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grads,
                                                         return_mode="median")
    return lambda fn, grads: time_steps(fn, warmup=1, steps=3).median_ms


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
        if not (is_oom(exc) or _refused(exc)):
            raise
        status = OOM if is_oom(exc) else UNSUPPORTED
        results = {mode: results.get(mode, status) for mode in modes}
    finally:
        q.grad = k.grad = v.grad = None
        free_memory()
    return results


def _run(points, impls, modes, *, is_causal: bool, batch: int, config, naive_max_seq: int | None, rep_ms: int,
         warmup_ms: int, seed: int, desc: str) -> pd.DataFrame:
    """Measure every implementation at every (dtype, d, n_q, n_k) point; one row per mode."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    timer = make_timer(rep_ms, warmup_ms)
    rows = []
    for dtype, d, n_q, n_k in tqdm(points, desc=desc):
        torch.manual_seed(seed)
        q = torch.randn(batch, 1, n_q, d, device=device, dtype=DTYPES[dtype], requires_grad=True)
        k, v = (torch.randn(batch, 1, n_k, d, device=device, dtype=DTYPES[dtype], requires_grad=True) for _ in "kv")
        for impl in impls:
            if impl == "naive" and naive_max_seq is not None and max(n_q, n_k) > naive_max_seq:
                ms = dict.fromkeys(modes, NOT_RUN)
            else:
                ms = measure(implementation(impl, config), q, k, v, is_causal, modes, timer)
            for mode, t in ms.items():
                flops = attention_flops(n_q, n_k, d, batch, is_causal, mode)
                rows.append({"dtype": dtype, "d": d, "n_q": n_q, "n_k": n_k, "causal": is_causal, "impl": impl,
                             "mode": mode, "ms": t, "tflops": flops / t / 1e9 if isinstance(t, float) else t})
        del q, k, v
    return pd.DataFrame(rows)


def sweep(seq_lens=SEQ_LENS, head_dims=HEAD_DIMS, dtypes=tuple(DTYPES), impls=IMPLS, modes=MODES, *,
          is_causal: bool = True, batch: int = 1, config=None, max_seq: int | None = None,
          naive_max_seq: int | None = None, rep_ms: int = 20, warmup_ms: int = 5, seed: int = 0) -> pd.DataFrame:
    """§1.3.2 (e): one row per (dtype, d, N, impl, mode) with ms and TFLOP/s; inputs (batch, 1, N, d).

    ``max_seq`` caps the sweep (smoke runs); ``naive_max_seq`` marks longer naive points "not run" to
    bound GPU time; ``config`` is the Triton kernels' :class:`~systems.attention.flash_triton.FlashConfig`
    (None: autotuned).
    """
    points = [(dt, d, n, n) for dt, d, n in product(dtypes, head_dims, seq_lens) if max_seq is None or n <= max_seq]
    return _run(points, impls, modes, is_causal=is_causal, batch=batch, config=config, naive_max_seq=naive_max_seq,
                rep_ms=rep_ms, warmup_ms=warmup_ms, seed=seed, desc="flash sweep")


def rectangular(shapes, d: int = 64, dtype: str = "bf16", impls=("triton", "sdpa_flash", "sdpa_cudnn"),
                modes=MODES, *, is_causal: bool = True, batch: int = 1, config=None, rep_ms: int = 20,
                warmup_ms: int = 5, seed: int = 0) -> pd.DataFrame:
    """The same measurements at (Nq, Nk) pairs with Nq != Nk; FLOPs count the top-left visible area."""
    points = [(dtype, d, n_q, n_k) for n_q, n_k in shapes]
    return _run(points, impls, modes, is_causal=is_causal, batch=batch, config=config, naive_max_seq=None,
                rep_ms=rep_ms, warmup_ms=warmup_ms, seed=seed, desc="rectangular")


def wide(df: pd.DataFrame, value: str = "ms") -> pd.DataFrame:
    """One row per (dtype, d, n_q, n_k, mode), one column per implementation."""
    index = ["dtype", "d", "n_q", "n_k", "mode"]
    out = df.pivot_table(index=index, columns="impl", values=value, aggfunc="first").reset_index()
    out.columns.name = None
    return out


def ratios(df: pd.DataFrame, base: str = "triton", against=("sdpa_flash", "sdpa_cudnn", "naive")) -> pd.DataFrame:
    """``base`` time over each other implementation's time (below 1: ``base`` is faster); NaN where either failed."""
    table = wide(df)
    for other in against:
        if other in table:
            num = pd.to_numeric(table[base], errors="coerce")
            table[f"{base}/{other}"] = num / pd.to_numeric(table[other], errors="coerce")
    return table


def slower_shapes(table: pd.DataFrame, base: str = "triton", other: str = "sdpa_flash", min_n: int = 1024,
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


def causal_alignment_agrees(impl: str, n_q: int = 64, n_k: int = 256, d: int = 64) -> bool | str:
    """Whether a back end's causal mask with Nq != Nk is top-left aligned like ours ("unsupported" if it can't run)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    q = torch.randn(1, 1, n_q, d, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    k, v = torch.randn(1, 1, n_k, d, device=device, dtype=q.dtype), torch.randn(1, 1, n_k, d, device=device, dtype=q.dtype)
    try:
        out = implementation(impl)(q, k, v, True)
    except RuntimeError as exc:
        if not _refused(exc):
            raise
        return UNSUPPORTED
    expected = naive_attention(q.double(), k.double(), v.double(), True)
    return bool(torch.allclose(out.double(), expected, atol=3e-2, rtol=3e-2))


def tolerance(dtype: str, device: torch.device) -> float:
    """Largest error relative to the largest reference entry that we accept (as in the tests).

    bf16 rounds P and the outputs to 8 mantissa bits; fp32 products use TF32 tensor cores on the GPU.
    """
    return {"bf16": 3e-2, "fp16": 1e-2, "fp32": 1e-2 if device.type == "cuda" else 1e-4}[dtype]


def correctness(shapes, dtypes=("bf16",), *, is_causal: bool = True, seed: int = 0) -> pd.DataFrame:
    """Ours against the float64 oracle at (batch, N, d) shapes: max error over max |reference| per output."""
    from systems.attention.flash_triton import flash_attention_triton
    from systems.attention.oracle import max_relative_error, reference_forward_backward

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for (batch, n, d), dtype in product(shapes, dtypes):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(batch, n, d, device=device, dtype=DTYPES[dtype], requires_grad=True) for _ in "qkv")
        o = flash_attention_triton(q, k, v, is_causal)
        L = [t for t in o.grad_fn.saved_tensors if t.shape == q.shape[:-1]][0]
        do = torch.randn_like(o)
        o.backward(do)
        expected = reference_forward_backward(q, k, v, do, is_causal)
        errors = {name: max_relative_error(t, e) for name, t, e in
                  zip(("O", "L", "dQ", "dK", "dV"), (o, L, q.grad, k.grad, v.grad), expected)}
        rows.append({"batch": batch, "n": n, "d": d, "dtype": dtype, **errors,
                     "within_tolerance": max(errors.values()) <= tolerance(dtype, device)})
    return pd.DataFrame(rows)


# ---- the per-call floor ---------------------------------------------------------------------------------


def _per_call_us(fn: Callable, n_calls: int, device: torch.device) -> tuple[float, float]:
    """µs per call of ``fn`` called back to back: host time to issue the calls, wall time until the device is done."""
    fn()  # compiled, tuned and allocated before the clock starts
    synchronize(device)
    start = timeit.default_timer()
    for _ in range(n_calls):
        fn()
    issued = timeit.default_timer()
    synchronize(device)
    done = timeit.default_timer()
    return (issued - start) / n_calls * 1e6, (done - start) / n_calls * 1e6


def call_overhead(shape=(1, 1, 128, 64), dtype: str = "bf16", *, n_calls: int = 300, is_causal: bool = True,
                  sdpa=("sdpa_flash", "sdpa_cudnn")) -> pd.DataFrame:
    """Where a call's time goes at a shape too small to keep the GPU busy (the sweep's per-call floor).

    One row per layer of our forward's call path, from the Python checks to the autograd function, then
    whole calls of ours and of SDPA's back ends; ``host_us`` is the time the host needs to issue one call,
    ``wall_us`` the time per call until the device has finished them all. Where the two agree, the host
    (Python, dispatch, kernel launches) sets the pace, not the kernels.
    """
    from systems.attention import flash_triton as ft
    from systems.attention._checks import check_attention_inputs

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    q, k, v = (torch.randn(*shape, device=device, dtype=DTYPES[dtype], requires_grad=True) for _ in "qkv")
    do = torch.randn_like(q)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    o, L = torch.empty_like(qd), torch.empty(shape[:-1], device=device, dtype=torch.float32)
    tuned, untuned = ft.FlashConfig(), ft.FlashConfig(autotune=False)
    code = tuned.encode()

    def backward_of(attend):
        def step():
            q.grad = k.grad = v.grad = None
            attend(q, k, v, is_causal).backward(do)
        return step

    ours = lambda q, k, v, is_causal: ft.flash_attention_triton(q, k, v, is_causal)  # noqa: E731
    steps = {
        ("triton", "input checks and tile choice (Python)"):
            lambda: (check_attention_inputs(q, k, v), ft.FlashConfig.decode(code), ft._meta(qd, kd, is_causal, tuned)),
        ("triton", "forward kernel launch, fixed tiles"): lambda: ft.launch_forward(qd, kd, vd, o, L, is_causal, untuned),
        ("triton", "forward kernel launch, autotuned"): lambda: ft.launch_forward(qd, kd, vd, o, L, is_causal, tuned),
        ("triton", "forward, allocation + launch"): lambda: ft.forward_outputs(qd, kd, vd, is_causal, code),
        ("triton", "the same through the custom op"): lambda: ft.flash_fwd(qd, kd, vd, is_causal, code),
        ("triton", "forward (autograd.Function)"): lambda: ours(q, k, v, is_causal),
        ("triton", "forward + backward"): backward_of(ours),
    }
    for name in sdpa:
        steps[(name, "forward")] = lambda attend=implementation(name): attend(q, k, v, is_causal)
        steps[(name, "forward + backward")] = backward_of(implementation(name))
    rows = []
    for (impl, what), fn in tqdm(steps.items(), desc="per-call cost"):
        try:
            host, wall = _per_call_us(fn, n_calls, device)
        except RuntimeError as exc:
            if not _refused(exc):
                raise
            host = wall = UNSUPPORTED
        rows.append({"impl": impl, "what": what, "host_us": host, "wall_us": wall})
    return pd.DataFrame(rows)


# ---- the §1.3.3 leaderboard harness ------------------------------------------------------------------


def _leaderboard_fn(impl: str, config=None) -> Callable:
    """What the handout's test compiles: ``FlashAttention2.apply`` for ours, an SDPA call for the others."""
    if impl == "triton":
        from systems.attention.flash_triton import FlashAttentionTriton

        if config is None:
            return FlashAttentionTriton.apply
        return lambda q, k, v, is_causal: FlashAttentionTriton.apply(q, k, v, is_causal, config)
    sdpa = implementation(impl)
    # SDPA's fused back ends want (B, H, N, d): the handout's (16, N, 64) becomes one batch of 16 heads
    return lambda q, k, v, is_causal: sdpa(q[None], k[None], v[None], is_causal)[0]


def leaderboard_ms(impl: str = "triton", *, rep: int = 10000, warmup: int = 1000, config=None,
                   shape: tuple[int, int, int] | None = None, dtype: torch.dtype = torch.bfloat16) -> float | str:
    """The handout's test, verbatim: (16, 16384, 64) bf16, causal, torch.compile(apply), o.sum().backward().

    ``shape`` and ``dtype`` shrink it for smoke runs; without a GPU a few timed steps replace do_bench.
    """
    step = None
    try:
        step = _leaderboard_step(impl, config, shape, dtype)
        if torch.cuda.is_available():
            import triton.testing

            return triton.testing.do_bench(step, rep=rep, warmup=warmup)
        return time_steps(step, warmup=1, steps=2).median_ms
    except RuntimeError as exc:
        if is_oom(exc):
            return OOM
        if _refused(exc):
            return UNSUPPORTED
        raise
    finally:
        del step  # the step holds q, k, v and their gradients: drop them before the cache is emptied
        free_memory()


def _leaderboard_step(impl: str, config, shape: tuple[int, int, int] | None, dtype: torch.dtype) -> Callable[[], None]:
    """One step of the handout's test on fresh random inputs: compiled ``apply``, ``o.sum().backward()``."""
    n_heads, sequence_length, d_head = shape or (LEADERBOARD["batch"], LEADERBOARD["seq"], LEADERBOARD["d"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = torch.randn(3, n_heads, sequence_length, d_head, device=device, dtype=dtype, requires_grad=True)
    torch._dynamo.reset()  # a fresh compile per call: variants would otherwise hit Dynamo's recompile limit
    flash = torch.compile(_leaderboard_fn(impl, config))

    def flash_forward_backward():
        o = flash(q, k, v, True)
        loss = o.sum()
        loss.backward()

    return flash_forward_backward


def kernel_breakdown(impls=("triton", "sdpa_flash", "sdpa_cudnn"), *, steps: int = 20, top: int = 6,
                     shape: tuple[int, int, int] | None = None, dtype: torch.dtype = torch.bfloat16) -> pd.DataFrame:
    """Where the leaderboard step's time goes: device time per step of each kernel, per implementation.

    Profiled with ``torch.profiler`` over ``steps`` steps after a warm-up; the ``top`` kernels by time are
    named, the rest summed as "other". Without a GPU the CPU operators stand in for kernels.
    """
    on_gpu = torch.cuda.is_available()
    activity = torch.profiler.ProfilerActivity.CUDA if on_gpu else torch.profiler.ProfilerActivity.CPU
    rows = []
    for impl in tqdm(impls, desc="kernel breakdown"):
        step = None
        try:
            step = _leaderboard_step(impl, None, shape, dtype)
            for _ in range(3):  # compile, tune and allocate outside the profile
                step()
            synchronize()
            with torch.profiler.profile(activities=[activity]) as prof:
                for _ in range(steps):
                    step()
                synchronize()
        except RuntimeError as exc:
            if not _refused(exc):
                raise
            rows.append({"impl": impl, "kernel": UNSUPPORTED, "ms_per_step": None})
            continue
        finally:
            del step  # its q, k, v before the cache is emptied
            free_memory()
        # on the GPU the device kernels carry the device time; on the CPU the top-level operators the CPU time
        per_kernel = {e.key: (e.self_device_time_total if on_gpu else e.self_cpu_time_total) / steps / 1e3
                      for e in prof.key_averages()}
        ranked = sorted(((ms, name) for name, ms in per_kernel.items() if ms > 0), reverse=True)
        rows += [{"impl": impl, "kernel": name[:70], "ms_per_step": ms} for ms, name in ranked[:top]]
        rows.append({"impl": impl, "kernel": "other", "ms_per_step": sum(ms for ms, _ in ranked[top:])})
    df = pd.DataFrame(rows)
    totals = df.groupby("impl").ms_per_step.transform("sum")
    df["share"] = df.ms_per_step / totals
    return df


def leaderboard(impls=("triton", "sdpa_flash", "sdpa_cudnn"), *, rep: int = 10000, warmup: int = 1000,
                **kwargs) -> pd.DataFrame:
    """ms of the leaderboard harness per implementation, in one run, with each time over ours."""
    rows = [{"impl": impl, "ms": leaderboard_ms(impl, rep=rep, warmup=warmup, **kwargs)}
            for impl in tqdm(impls, desc="leaderboard")]
    df = pd.DataFrame(rows)
    ours = df.set_index("impl").ms.get("triton")
    df["ratio_to_ours"] = [m / ours if isinstance(m, float) and isinstance(ours, float) else None for m in df.ms]
    return df


def variants(configs: dict, *, rep: int = 1000, warmup: int = 200, **kwargs) -> pd.DataFrame:
    """The leaderboard harness for named FlashConfigs (None: autotuned): what each kernel choice buys."""
    rows = [{"variant": name, "ms": leaderboard_ms("triton", rep=rep, warmup=warmup, config=cfg, **kwargs)}
            for name, cfg in tqdm(configs.items(), desc="variants")]
    return pd.DataFrame(rows)


def _cold_start_child() -> dict:
    """In a fresh process: first and second call of the leaderboard step, and what autotuning chose."""
    from systems.attention.flash_triton import FlashAttentionTriton, autotune_report

    q, k, v = torch.randn(3, LEADERBOARD["batch"], LEADERBOARD["seq"], LEADERBOARD["d"], device="cuda",
                          dtype=torch.bfloat16, requires_grad=True)
    flash = torch.compile(FlashAttentionTriton.apply)
    times = []
    for _ in range(2):
        start = timeit.default_timer()
        flash(q, k, v, True).sum().backward()
        torch.cuda.synchronize()
        times.append(timeit.default_timer() - start)
    return {"first_call_s": times[0], "second_call_s": times[1], "autotune": autotune_report()}


def cold_start() -> dict:
    """Seconds for the first leaderboard step with empty Triton and Inductor caches (compile + autotune)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = os.environ | {"TRITON_CACHE_DIR": f"{tmp}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor"}
        start = timeit.default_timer()
        out = subprocess.run([sys.executable, "-m", "systems.bench.flash", "cold-start-child"], env=env,
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["process_s"] = timeit.default_timer() - start
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["sweep", "leaderboard", "cold-start", "overhead", "cold-start-child"])
    p.add_argument("--rep", type=int, default=10000, help="leaderboard: do_bench rep in ms")
    p.add_argument("--max-seq", type=int, default=None, help="sweep: longest sequence")
    a = p.parse_args(argv)
    if a.what == "sweep":
        print(wide(sweep(max_seq=a.max_seq)).to_string(index=False))
    elif a.what == "leaderboard":
        print(leaderboard(rep=a.rep, warmup=min(1000, a.rep // 10)).to_string(index=False))
    elif a.what == "cold-start":
        print(json.dumps(cold_start(), indent=1))
    elif a.what == "overhead":
        print(call_overhead().to_string(index=False))
    else:
        print(json.dumps(_cold_start_child()))


if __name__ == "__main__":
    main()

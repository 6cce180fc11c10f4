"""The CS336 Spring 2025 FlashAttention leaderboard (§1.3.3), and what each part of our kernel buys there.

The harness is the handout's test, verbatim: q, k, v of (16, 16384, 64) in bf16, causal, ``torch.compile``
of the autograd function's ``apply``, ``o.sum().backward()``, timed with ``triton.testing.do_bench``. The
SDPA back ends and our CUDA C++ kernels (``flash_cuda``, ``flash_hopper``) run the same harness in the same
process. :func:`variants` times named
:class:`~systems.attention.flash_triton.FlashConfig` settings against each other, :func:`kernel_breakdown`
profiles where a step's device time goes, :func:`cold_start` times the first step with empty caches.

    python -m systems.bench.leaderboard --rep 1000
    python -m systems.bench.leaderboard --cold-start
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Callable

import pandas as pd
import torch
from tqdm.auto import tqdm

from systems.attention import unavailable
from systems.attention.peers import Unavailable, refused
from systems.bench.flash_sweep import UNSUPPORTED, attention
from systems.bench.timing import handout_ms
from systems.cli import integer
from systems.device import OOM, free_memory, is_oom, synchronize, timed

SHAPE = (16, 16384, 64)  # (batch, N, d): the handout's 16 heads as the batch
IMPLS = ("flash_triton", "flash_cuda", "flash_hopper", "sdpa_flash", "sdpa_cudnn")
# The best forward+backward time of the CS336 Spring 2025 leaderboard at that shape, as published (not measured here)
SPRING_2025_BEST_MS = 5.364


def _harness_fn(impl: str, config=None) -> Callable:
    """What the handout's test compiles: ``FlashAttention2.apply`` for ours, an SDPA call for the others."""
    if impl == "flash_triton":
        from systems.attention.flash_triton import FlashAttentionTriton

        if config is None:
            return FlashAttentionTriton.apply
        return lambda q, k, v, is_causal: FlashAttentionTriton.apply(q, k, v, is_causal, config)
    fused = attention(impl)
    # SDPA's fused back ends want (B, H, N, d): the handout's (16, N, 64) becomes one batch of 16 heads
    return lambda q, k, v, is_causal: fused(q[None], k[None], v[None], is_causal)[0]


def _step(impl: str, config, shape: tuple[int, int, int] | None, dtype: torch.dtype) -> Callable[[], None]:
    """One step of the handout's test on fresh random inputs: compiled ``apply``, ``o.sum().backward()``."""
    n_heads, sequence_length, d_head = shape or SHAPE
    device = "cuda" if torch.cuda.is_available() else "cpu"
    why = unavailable(impl, torch.device(device), dtype, d_head)
    if why:
        raise Unavailable(f"{impl} {why}")
    q, k, v = torch.randn(3, n_heads, sequence_length, d_head, device=device, dtype=dtype, requires_grad=True)
    torch._dynamo.reset()  # a fresh compile per call: variants would otherwise hit Dynamo's recompile limit
    flash = torch.compile(_harness_fn(impl, config))

    def flash_forward_backward():
        o = flash(q, k, v, True)
        loss = o.sum()
        loss.backward()

    return flash_forward_backward


def leaderboard_ms(impl: str = "flash_triton", *, rep: int = 10000, warmup: int = 1000, config=None,
                   shape: tuple[int, int, int] | None = None, dtype: torch.dtype = torch.bfloat16) -> float | str:
    """ms of one harness step (``shape`` and ``dtype`` shrink it for smoke runs; a CPU times a few steps)."""
    step = None
    try:
        step = _step(impl, config, shape, dtype)
        return handout_ms(step, rep=rep, warmup=warmup)
    except RuntimeError as exc:
        if is_oom(exc):
            return OOM
        if refused(exc):
            return UNSUPPORTED
        raise
    finally:
        del step  # the step holds q, k, v and their gradients: drop them before the cache is emptied
        free_memory()


def leaderboard(impls=IMPLS, *, rep: int = 10000, warmup: int = 1000, **kwargs) -> pd.DataFrame:
    """ms of the harness per implementation, in one run, with each time over ours."""
    rows = [{"impl": impl, "ms": leaderboard_ms(impl, rep=rep, warmup=warmup, **kwargs)}
            for impl in tqdm(impls, desc="leaderboard")]
    df = pd.DataFrame(rows)
    ours = df.set_index("impl").ms.get("flash_triton")
    df["ratio_to_ours"] = [m / ours if isinstance(m, float) and isinstance(ours, float) else None for m in df.ms]
    return df


def variants(configs: dict, *, rep: int = 1000, warmup: int = 200, **kwargs) -> pd.DataFrame:
    """The harness for named FlashConfigs (None: autotuned): what each kernel choice buys."""
    rows = [{"variant": name, "ms": leaderboard_ms("flash_triton", rep=rep, warmup=warmup, config=cfg, **kwargs)}
            for name, cfg in tqdm(configs.items(), desc="variants")]
    return pd.DataFrame(rows)


def backward_tiles(tiles, *, rep: int = 300, warmup: int = 50, shape: tuple[int, int, int] | None = None,
                   dtype: torch.dtype = torch.bfloat16) -> pd.DataFrame:
    """The backward alone at the leaderboard shape (causal, random O and dO from our forward), once per dK/dV tile
    in ``tiles`` with one pass and with two (the dQ pass at its default tiles), untuned: ms by
    ``triton.testing.do_bench`` (median), and what the compiled dK/dV kernel holds per thread and per program.
    The first row is cuDNN's backward alone (SDPA's cuDNN back end, a retained graph) in the same run."""
    import triton.testing

    from systems.attention.flash_triton import launch
    from systems.attention.flash_triton.tiles import FlashConfig

    n_heads, sequence_length, d_head = shape or SHAPE
    q, k, v = torch.randn(3, 1, n_heads, sequence_length, d_head, device="cuda", dtype=dtype)
    o, L = launch.forward(q, k, v, True, FlashConfig())
    do = torch.randn_like(o)
    rows = [{"impl": "sdpa_cudnn", "ms": _cudnn_backward_ms(q, k, v, do, rep, warmup)}]
    for t, one in tqdm([(t, one) for t in tiles for one in (True, False)], desc="backward tiles"):
        cfg = FlashConfig(dkdv=t, atomic_dq=one, autotune=False)
        ms = triton.testing.do_bench(lambda: launch.backward(q, k, v, o, do, L, True, cfg), rep=rep, warmup=warmup,
                                     return_mode="median")
        dkdv = launch.backward_plan(q, k, v, o, do, L, True, cfg)[1]
        rows.append({"impl": "flash_triton", "block_q": t.block_q, "block_k": t.block_k, "warps": t.num_warps,
                     "stages": t.num_stages, "passes": 1 if one else 2, "registers": dkdv.registers,
                     "spills": dkdv.spills, "shared_kib": dkdv.shared_bytes / 1024, "ms": ms})
    del q, k, v, o, do, L
    free_memory()
    df = pd.DataFrame(rows, columns=["impl", "block_q", "block_k", "warps", "stages", "passes", "registers", "spills",
                                     "shared_kib", "ms"])
    df["vs_cudnn"] = df.ms / df.ms.iloc[0] if isinstance(df.ms.iloc[0], float) else None
    # counts stay integers beside the cuDNN row's blanks (a float column would print them as 64.000)
    return df.astype({c: "Int64" for c in ("block_q", "block_k", "warps", "stages", "passes", "registers", "spills")})


def _cudnn_backward_ms(q, k, v, do, rep: int, warmup: int) -> float | str:
    import triton.testing

    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    try:
        o = attention("sdpa_cudnn")(q, k, v, True)
    except RuntimeError as exc:
        if not refused(exc):
            raise
        return UNSUPPORTED
    return triton.testing.do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), rep=rep,
                                   warmup=warmup, return_mode="median")


def kernel_breakdown(impls=IMPLS, *, steps: int = 20, top: int = 6, shape: tuple[int, int, int] | None = None,
                     dtype: torch.dtype = torch.bfloat16) -> pd.DataFrame:
    """Where a harness step's time goes: device time per step of each kernel, per implementation.

    Profiled with ``torch.profiler`` over ``steps`` steps after a warm-up; the ``top`` kernels by time are
    named, the rest summed as "other". Without a GPU the CPU operators stand in for kernels.
    """
    on_gpu = torch.cuda.is_available()
    activity = torch.profiler.ProfilerActivity.CUDA if on_gpu else torch.profiler.ProfilerActivity.CPU
    rows = []
    for impl in tqdm(impls, desc="kernel breakdown"):
        step = None
        try:
            step = _step(impl, None, shape, dtype)
            for _ in range(3):  # compile, tune and allocate outside the profile
                step()
            synchronize()
            with torch.profiler.profile(activities=[activity]) as prof:
                for _ in range(steps):
                    step()
                synchronize()
        except RuntimeError as exc:
            if not refused(exc):
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


# ---- what the runs say (chapter 07) ---------------------------------------------------------------------------


def _cold_start_child() -> dict:
    """In a fresh process: first and second call of the harness step, and what autotuning chose."""
    from systems.attention.flash_triton import FlashAttentionTriton, autotune_report

    q, k, v = torch.randn(3, *SHAPE, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    flash = torch.compile(FlashAttentionTriton.apply)
    times = []
    for _ in range(2):
        with timed() as elapsed:
            flash(q, k, v, True).sum().backward()
        times.append(elapsed.ms / 1e3)
    return {"first_call_s": times[0], "second_call_s": times[1], "autotune": autotune_report()}


def cold_start() -> dict:
    """Seconds for the first harness step with empty Triton and Inductor caches (compile + autotune)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = os.environ | {"TRITON_CACHE_DIR": f"{tmp}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor"}
        with timed(sync_start=False, sync_end=False) as process:
            out = subprocess.run([sys.executable, "-m", "systems.bench.leaderboard", "--cold-start-child"], env=env,
                                 capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["process_s"] = process.ms / 1e3
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m systems.bench.leaderboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rep", type=integer(1), default=10000, help="do_bench repetitions in ms")
    p.add_argument("--cold-start", action="store_true", help="time the first step with empty caches")
    p.add_argument("--cold-start-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.cold_start_child:
        print(json.dumps(_cold_start_child()))
    elif a.cold_start:
        print(json.dumps(cold_start(), indent=1))
    else:
        print(leaderboard(rep=a.rep, warmup=min(1000, a.rep // 10)).to_string(index=False))


if __name__ == "__main__":
    main()

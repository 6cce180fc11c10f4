"""One measured point of a benchmark that must survive what it measures: a step timed as the handout times it
(:func:`~systems.bench.timing.handout_ms`), the memory it adds and holds, and running out of memory (or a back end
refusing) recorded as the point's status, never raised. Everything a point holds is freed before the next."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from systems.attention.peers import refused
from systems.bench.flash_sweep import UNSUPPORTED
from systems.bench.timing import handout_ms
from systems.device import OOM, free_memory, is_oom, synchronize
from systems.flops import mfu

GIB = 2**30


@dataclass
class Step:
    """What a point times: ``run`` one call; ``clear`` drops what a call leaves (gradients) before memory is read."""

    run: Callable[[], Any]
    clear: Callable[[], None] = lambda: None


def measure(make: Callable[[], Step], *, rep: int, warmup: int) -> dict[str, Any]:
    """``make()``'s step timed and its memory read: {"status": "ok", "ms", "extra_gib", "peak_gib",
    "reserved_gib"}, or the status saying why not ("OOM", "unsupported") with NaN values. Everything the step holds
    is freed before the next point."""
    on_gpu = torch.cuda.is_available()

    def timed(step: Step) -> dict[str, Any]:
        ms = handout_ms(step.run, rep=rep, warmup=warmup)
        reserved = torch.cuda.max_memory_reserved() / GIB if on_gpu else math.nan
        extra, peak = _extra_and_peak_bytes(step) if on_gpu else (math.nan, math.nan)
        return {"status": "ok", "ms": ms, "extra_gib": extra / GIB, "peak_gib": peak / GIB, "reserved_gib": reserved}

    def failed(why: str) -> dict[str, Any]:
        return {"status": why, "ms": math.nan, "extra_gib": math.nan, "peak_gib": math.nan, "reserved_gib": math.nan}

    return surviving(make, timed, failed)


def surviving(make: Callable[[], Step], work: Callable[[Step], Any], failed: Callable[[str], Any]) -> Any:
    """``work(make())``, or ``failed(status)`` where making or working ran out of memory ("OOM") or a back end
    refused ("unsupported"); any other error is raised. Compiled anew, and everything the step holds freed after."""
    step = None
    # a fresh compile per point: a sweep's later points would otherwise pass Dynamo's recompile limit for the same
    # code (the model's forward at another depth or recipe) and run eagerly, silently
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        step = make()
        return work(step)
    except RuntimeError as exc:
        why = OOM if is_oom(exc) else UNSUPPORTED if refused(exc) else None
        if why is None:
            raise
        return failed(why)
    finally:
        del step
        free_memory()


def _extra_and_peak_bytes(step: Step) -> tuple[int, int]:
    """What one call allocates at its peak above what existed before it, and that peak in all."""
    step.clear()
    synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step.run()
    synchronize()
    peak = torch.cuda.max_memory_allocated()
    return peak - before, peak


def achieved(flops: float, ms: float) -> dict[str, float]:
    """TFLOP/s and MFU (against the GPU's dense bf16 peak) of ``flops`` done in ``ms`` (NaN where not timed)."""
    if math.isnan(ms):
        return {"tflops": math.nan, "mfu": math.nan}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return {"tflops": flops / ms / 1e9, "mfu": mfu(flops, ms / 1e3, gpu, "bf16") or math.nan}

"""Wall-clock timing of device work, done properly, and out-of-memory as a result.

``time_steps`` runs ``warmup`` untimed calls, then ``steps`` timed ones, synchronising the device before
and after each so that the clock measures the GPU work and not only the kernel launches (CUDA calls
return as soon as the work is queued). ``timeit.default_timer`` is the clock, as the handout asks.
"""

from __future__ import annotations

import gc
import statistics
import timeit
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

OOM = "OOM"


def synchronize(device: torch.device | str | None = None) -> None:
    device = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    mean_ms: float
    std_ms: float
    median_ms: float
    min_ms: float
    steps: int
    warmup: int
    times_ms: list[float] = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(times_ms: list[float], warmup: int) -> Timing:
    if not times_ms:
        raise ValueError("no timed steps: steps must be at least 1")
    return Timing(
        mean_ms=statistics.fmean(times_ms),
        std_ms=statistics.stdev(times_ms) if len(times_ms) > 1 else 0.0,
        median_ms=statistics.median(times_ms),
        min_ms=min(times_ms),
        steps=len(times_ms),
        warmup=warmup,
        times_ms=times_ms,
    )


def time_steps(
    step: Callable[[], Any],
    *,
    warmup: int,
    steps: int,
    device: torch.device | str | None = None,
) -> Timing:
    """Mean, std and all samples (ms) of ``steps`` calls of ``step`` after ``warmup`` untimed ones."""
    if warmup < 0 or steps < 1:
        raise ValueError(f"need warmup >= 0 and steps >= 1, got warmup={warmup}, steps={steps}")
    for _ in range(warmup):
        step()
    synchronize(device)
    times = []
    for _ in range(steps):
        start = timeit.default_timer()
        step()
        synchronize(device)
        times.append((timeit.default_timer() - start) * 1e3)
    return summarize(times, warmup)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def free_memory() -> None:
    """Return cached blocks after an OOM so the next point of a sweep starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_or_oom(fn: Callable[[], Any]) -> Any:
    """``fn()``, or :data:`OOM` if it ran out of memory (any other error propagates)."""
    try:
        return fn()
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_oom(exc):
            raise
        del exc
        free_memory()
        return OOM

"""Statistics of timed device work: warm-up, repetitions, and the summary every benchmark reports.

``time_steps`` runs ``warmup`` untimed calls, then ``steps`` timed ones, each through
:func:`systems.device.timed` (the device synchronised before and after, so the clock measures the GPU
work and not only the kernel launches). ``summarize`` turns a list of times into the :class:`Timing`
the tables show. ``handout_ms`` times a step as the handouts' leaderboards do (``triton.testing.do_bench``, a mean of at least
``HANDOUT_MIN_REPS`` calls), and
``make_timer`` makes the attention sweeps' timer (do_bench's median of at least ``MIN_REPS`` calls).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from systems.device import synchronize, timed

MIN_REPS = 10  # the fewest calls a do_bench median is taken over
HANDOUT_MIN_REPS = 3  # the fewest calls a handout_ms mean is taken over


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
        with timed(device) as t:
            step()
        times.append(t.ms)
    return summarize(times, warmup)


def make_timer(rep_ms: int = 20, warmup_ms: int = 5, min_reps: int = MIN_REPS) -> Callable[[Callable, list], float]:
    """Median ms of a call: do_bench on a GPU (gradients reset between calls), a few timed steps on a CPU.

    do_bench repeats a call as many times as its estimate of one call fits into ``rep_ms``, and at least once: the
    median of a call longer than ``rep_ms`` is one sample, which moves with the GPU's clocks (book/log.md,
    2026-12-01). A call that got fewer than ``min_reps`` repetitions is timed again over ``min_reps`` calls' time."""
    if torch.cuda.is_available():
        import triton.testing

        def bench(fn: Callable, grads: list, rep: float) -> float:
            return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep, grad_to_none=grads, return_mode="median")

        def timer(fn: Callable, grads: list) -> float:
            ms = bench(fn, grads, rep_ms)
            return ms if ms * min_reps <= rep_ms else bench(fn, grads, ms * min_reps)

        return timer
    return lambda fn, grads: time_steps(fn, warmup=1, steps=3).median_ms


def handout_ms(step: Callable[[], Any], *, rep: int, warmup: int, min_reps: int = HANDOUT_MIN_REPS) -> float:
    """ms of one call of ``step`` as the handouts' leaderboards time it: ``triton.testing.do_bench`` (its mean over
    ``rep`` ms of calls after ``warmup`` ms) on a GPU; on a CPU, for smoke runs, the median of two timed calls.

    do_bench repeats a call as many times as its estimate fits into ``rep`` ms, and at least once: a call longer than
    ``rep / min_reps`` (a model step of several seconds, with ``rep`` shortened from the handout's 30 s) is then
    timed ``min_reps`` times more, warmed up by do_bench's calls, and their mean returned, so that the time is not
    one sample."""
    if torch.cuda.is_available():
        import triton.testing

        ms = triton.testing.do_bench(step, rep=rep, warmup=warmup)
        return ms if ms * min_reps <= rep else time_steps(step, warmup=0, steps=min_reps).mean_ms
    return time_steps(step, warmup=1, steps=2).median_ms


def apart(a_ms: float, a_std_ms: float, b_ms: float, b_std_ms: float, steps: int) -> bool:
    """Whether two means of ``steps`` timed steps each differ by more than twice the standard error of their
    difference: a difference smaller than that is as likely the steps' run-to-run spread as a real one."""
    return abs(a_ms - b_ms) > 2 * ((a_std_ms**2 + b_std_ms**2) / steps) ** 0.5

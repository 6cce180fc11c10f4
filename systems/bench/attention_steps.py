"""One model's training steps with its attention swapped between them: the fair way to compare attentions where it
matters, in the step a user trains with.

Steps here run as a training loop runs them, one device sync per step and none between its phases, so that the host
can run ahead of the GPU from the forward pass into the backward pass and the optimizer; a step that is bound by the
host pays for its host time once, not at every phase (:class:`systems.bench.e2e.Step` times phases separately for
the other chapters).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from systems.bench.e2e import BenchConfig, Step, bench_device, in_fresh_process, timed_steps, vary
from systems.cli import HelpFormatter
from systems.device import OOM, free_memory, run_or_oom


def interleaved(cfg: BenchConfig, attentions: tuple[str, ...]) -> pd.DataFrame:
    """``cfg``'s step with each attention in turn on one model (:meth:`TransformerLM.set_attention`): the same
    weights, optimizer state and allocator, and the steps interleaved (A B, B A, A B, ...), so that drift over the
    run (clocks, thread placement, other work on the host) falls on every attention alike, as separate runs one
    after the other cannot promise for host-bound steps. ``cfg.warmup`` untimed steps per attention first
    (compilation, autotuning), then ``cfg.steps`` timed ones each. A row per attention: the median step (ms) and
    every step's time, or status "OOM"."""
    if not attentions:
        raise ValueError("interleaved needs at least one attention to time")
    device = bench_device(cfg)
    free_memory()  # a previous point's model lingers in reference cycles until collected: two large ones do not fit

    def measure() -> dict[str, list[float]]:
        step = Step(cfg, device, per_phase=False)
        for name in attentions:
            step.model.set_attention(name)
            timed_steps(step, cfg.warmup, device)
        times: dict[str, list[float]] = {name: [] for name in attentions}
        for i in range(cfg.steps):
            for name in attentions if i % 2 == 0 else attentions[::-1]:
                step.model.set_attention(name)
                times[name] += timed_steps(step, 1, device)
        return times

    try:
        result = run_or_oom(measure)
    finally:
        free_memory()
    point = {"size": cfg.model.name, "context_length": cfg.model.context_length, "compile": cfg.compile,
             "batch_size": cfg.batch_size, "dtype": cfg.dtype}
    return pd.DataFrame([{**point, "attention": name, "status": OOM, "step_ms": float("nan")} if result == OOM else
                         {**point, "attention": name, "status": "ok", "step_ms": float(pd.Series(result[name]).median()),
                          "step_times_ms": result[name]} for name in attentions])


def _pair_ratios(ours, theirs) -> np.ndarray:
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"steps taken in pairs need as many of ours as of theirs, got {a.shape} and {b.shape}")
    return a / b


def paired_ratio(ours, theirs) -> float:
    """Ours over theirs for steps taken in pairs (interleaved, so that step i of each saw the same moment of the
    host): the median of the pairs' ratios. A pair shares the host's drift, which cancels in its ratio; a ratio of
    the two medians lets it through wherever the medians fall on steps the host ran at different speeds."""
    return float(np.median(_pair_ratios(ours, theirs)))


def ratio_interval(ours, theirs, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% interval of :func:`paired_ratio`: a bootstrap over the pairs, seeded so the table repeats."""
    ratios = _pair_ratios(ours, theirs)
    idx = np.random.default_rng(seed).integers(0, len(ratios), (draws, len(ratios)))
    low, high = np.percentile(np.median(ratios[idx], axis=1), [2.5, 97.5])
    return float(low), float(high)


def largest_power_of_two(fits: Callable[[int], bool], cap: int) -> int | None:
    """The largest power of two n <= ``cap`` with ``fits(n)``, trying 1, 2, 4, ... and stopping at the first that
    does not fit (what a batch needs only grows with it); None where 1 does not fit."""
    if cap < 1:
        raise ValueError(f"the largest batch to try must be at least 1, got {cap}")
    best, n = None, 1
    while n <= cap and fits(n):
        best, n = n, 2 * n
    return best


def largest_batch(cfg: BenchConfig, cap: int) -> int | None:
    """The largest batch (a power of two up to ``cap``) with which one step of ``cfg`` fits in the device's
    memory, each batch tried eager (compiled, every batch would be a compile of its own); None where one sequence
    does not fit. The caller runs its compiled step at that batch and records OOM if that does not fit."""
    device = bench_device(cfg)

    def fits(batch: int) -> bool:
        free_memory()  # the last try's model lingers in reference cycles until collected
        try:
            step = lambda: timed_steps(Step(vary(cfg, batch_size=batch, compile=False), device, per_phase=False), 1,
                                       device)
            return run_or_oom(step) != OOM
        finally:
            free_memory()

    return largest_power_of_two(fits, cap)


def kernel_times(cfg: BenchConfig) -> dict[str, float]:
    """GPU kernel ms per step of ``cfg`` by kernel name (CUDA activity of torch.profiler over ``cfg.steps`` steps,
    after ``cfg.warmup``; one stream, so kernels do not overlap); empty on the CPU. A profiler session slows the
    host-bound steps that run after it in its process: :func:`kernel_times_apart` keeps it out of this one."""
    from torch.profiler import ProfilerActivity, profile

    device = bench_device(cfg)
    if device.type != "cuda":
        return {}
    free_memory()  # a previous point's model lingers in reference cycles until collected: two large ones do not fit
    step = Step(cfg, device, per_phase=False)
    timed_steps(step, cfg.warmup, device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        timed_steps(step, cfg.steps, device)
    return {e.key: e.self_device_time_total / 1e3 / cfg.steps for e in prof.key_averages()
            if e.self_device_time_total > 0}


def kernel_times_apart(cfg: BenchConfig, attentions: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """:func:`kernel_times` of ``cfg``'s step with each attention, profiled in a fresh Python process, so that no
    step timed later in this one pays for the profiler. Empty dicts on the CPU, where there is nothing to profile."""
    if bench_device(cfg).type != "cuda":
        return {name: {} for name in attentions}
    return _in_fresh_process(cfg, attentions, "kernels", what="kernel times in a fresh process")


def _in_fresh_process(cfg: BenchConfig, attentions: tuple[str, ...], measure: str, what: str) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps({"config": asdict(cfg), "attentions": list(attentions), "measure": measure}))
        in_fresh_process("systems.bench.attention_steps", str(spec), str(out), what=what)
        return json.loads(out.read_text())


def interleaved_apart(cfg: BenchConfig, attentions: tuple[str, ...]) -> pd.DataFrame:
    """:func:`interleaved` in a fresh Python process: the steps without a notebook's kernel (and its threads) around
    them, and without what earlier measurements left loaded. The same rows."""
    return pd.DataFrame(_in_fresh_process(cfg, attentions, "steps", what="model steps in a fresh process"))


def main(argv: list[str] | None = None) -> None:
    """``python -m systems.bench.attention_steps SPEC OUT``: what :func:`interleaved_apart` and
    :func:`kernel_times_apart` run."""
    parser = argparse.ArgumentParser(prog="python -m systems.bench.attention_steps", formatter_class=HelpFormatter,
                                     description="Interleaved training steps of one model with each attention "
                                                 "(systems.bench.attention_steps.interleaved), rows written as JSON; "
                                                 'with "measure": "kernels", each attention\'s kernel times instead.')
    parser.add_argument("spec", type=Path, help='JSON: {"config": a BenchConfig as a dict, "attentions": [names], '
                                                '"measure": "steps" (the default) or "kernels"}')
    parser.add_argument("out", type=Path, help="where the rows go, as JSON")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(args.spec.read_text())
        cfg, attentions = BenchConfig.from_dict(spec["config"]), tuple(spec["attentions"])
        measure = spec.get("measure", "steps")
        if not attentions:
            raise ValueError("no attentions listed")
        if measure not in ("steps", "kernels"):
            raise ValueError(f'"measure" must be "steps" or "kernels", not {measure}')
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        parser.error(f"cannot read the spec {args.spec}: {exc!r}")
    args.out.write_text(json.dumps({name: kernel_times(vary(cfg, attention=name)) for name in attentions})
                        if measure == "kernels" else interleaved(cfg, attentions).to_json(orient="records"))


if __name__ == "__main__":
    main()

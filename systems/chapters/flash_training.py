"""What chapter 17 (FlashAttention in training) says of its measurements: the per-call floor and where its host
time goes, the shapes people train with, the model's steps with each attention, and where the difference goes at
the host-bound and at the GPU-bound point."""

from __future__ import annotations

import math

import pandas as pd

from systems.bench.call_overhead import ON_CALLING_THREAD, OPERATORS
from systems.bench.flash_sweep import geometric_mean, model_sdpa_choice, model_table, ratios
from systems.report import fmt, more_or_less, pick

PYTHON_SDPA = "SDPA flash kernels in a Python autograd.Function"
NOTHING = "autograd.Function doing nothing"


def call_facts(overhead: pd.DataFrame) -> dict:
    """Host time per forward and backward call: ours launched from C++ and from Python, SDPA's flash kernels inside a
    Python autograd function, SDPA's flash back end, and what handing the backward to autograd's device thread costs
    each (the rows of :func:`systems.bench.call_overhead.call_overhead`); in words, with ``measured`` False where
    SDPA's kernels could not run (no GPU)."""
    host = overhead.set_index(["impl", "what"]).host_us
    ours, from_python, in_python, sdpa = (host[impl, "forward + backward"] for impl in
                                          ("flash_triton", "flash_triton_python", PYTHON_SDPA, "sdpa_flash"))
    if not all(isinstance(x, float) for x in (ours, from_python, in_python, sdpa)):  # "unsupported"
        return {"measured": False, "words": "SDPA's flash kernels need a GPU: on this machine autograd's Python layer "
                                            "and our launch path cannot be told apart."}
    layer = in_python - sdpa
    layer_words = (f"autograd through Python adds {layer:.0f} µs to a call" if layer > 0 else
                   f"autograd through Python adds nothing this run can see (SDPA's C++ path took {-layer:.0f} µs "
                   "longer)")
    host_path = pick(from_python > ours, f"the C++ host path takes {from_python - ours:.0f} µs off our call",
                     f"the C++ host path adds {ours - from_python:.0f} µs to our call")
    # what the calling thread saves over the hand-off to autograd's device thread: on some hosts it costs instead
    on_calling_thread = {impl: more_or_less(host[impl, "forward + backward"] - host[impl, ON_CALLING_THREAD], "µs",
                                            more="less", less="more")
                         for impl in ("flash_triton", "flash_triton_python", NOTHING, "sdpa_flash")}
    words = (f"Per forward and backward call the host spends {ours:.0f} µs on ours launched from C++, "
             f"{from_python:.0f} µs on the same kernels launched from Python, {in_python:.0f} µs on SDPA's flash "
             f"kernels inside a Python autograd function and {sdpa:.0f} µs on SDPA's flash back end: {layer_words}; "
             f"{host_path}, which costs {ours / sdpa:.2f}× SDPA's. With the backward run on the calling thread "
             f"instead of autograd's device thread, a call of ours from C++ takes {on_calling_thread['flash_triton']}, "
             f"one from Python {on_calling_thread['flash_triton_python']}, one of a Python autograd function doing "
             f"nothing {on_calling_thread[NOTHING]} and one of SDPA's flash back end "
             f"{on_calling_thread['sdpa_flash']}.")
    return {"measured": True, "ours_us": ours, "sdpa_us": sdpa, "words": words + _fastest_call_words(host)}


def _operators_us(host: pd.Series, impl: str) -> float | None:
    """Host µs of ``impl``'s C++ operator pair alone, forward and backward, or None where they did not run."""
    forward, backward = OPERATORS[impl][2:]
    if (impl, forward) not in host.index or not isinstance(host[impl, forward], float):
        return None
    return host[impl, forward] + host[impl, backward]


def _fastest_call_words(host: pd.Series) -> str:
    """Our fastest attention's call beside its operators, where the Hopper kernels' operators ran (then it is
    theirs): how much of its host time is the operators' own, and what the Triton kernels' and the CUDA C++ kernels'
    operators take."""
    fastest = host.get(("flash", "forward + backward"))
    hopper = _operators_us(host, "flash_hopper")
    if not isinstance(fastest, float) or hopper is None:
        return ""
    others = {words: us for words, us in (("the Triton kernels'", _operators_us(host, "flash_triton")),
                                          ("the CUDA C++ kernels'", _operators_us(host, "flash_cuda")))
              if us is not None}
    return (f" Our fastest, attention \"flash\", runs the Hopper kernels here: the host spends {fastest:.0f} µs on "
            f"its forward and backward call, {hopper:.0f} µs of it in their two C++ operators alone"
            + "".join(f"; {words} take {us:.0f} µs" for words, us in others.items()) + ".")


def floor_facts(floor: pd.DataFrame) -> dict:
    """The eager per-call floor of each of ours over SDPA's flash back end's (the table of
    :func:`systems.bench.call_overhead.call_floor`); NaN where one could not run."""
    eager = pd.to_numeric(floor.set_index("impl").eager, errors="coerce")
    return {f"{impl}_over_sdpa": eager.get(impl, float("nan")) / eager.get("sdpa_flash", float("nan"))
            for impl in ("flash", "flash_triton", "flash_triton_python", "flash_cuda")}


# Sequences from here on give a forward and backward call more work than the host spends issuing it. Below, a call
# takes a few tenths of a millisecond, near the per-call floor, and the host's jitter sets the ratios: two runs of
# the same code on the same kind of GPU disagreed there by up to several times, and from here on by under a tenth
# (the log's entry on chapter 17 at 9cd442a).
KERNEL_BOUND_FROM = 2048


def training_summary(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The training shapes: per head dim, dtype and causality, the geometric-mean ratio to each SDPA back end and
    how many shapes are slower; counts and geometric means over all shapes, and (``..._long``) over those from
    :data:`KERNEL_BOUND_FROM` tokens on, where the kernels and not the host set the time."""
    table = ratios(runs, against=("sdpa_flash", "sdpa_cudnn"))
    cols = [c for c in ("flash_triton/sdpa_flash", "flash_triton/sdpa_cudnn") if c in table]
    summary = table.groupby(["dtype", "d", "causal"])[cols].agg(geometric_mean).reset_index()
    for col in cols:
        summary[f"slower than {col.split('/')[1]}"] = table.groupby(["dtype", "d", "causal"])[col].agg(
            _slower_count).values
    long = table[table.n_q >= KERNEL_BOUND_FROM]
    facts = {"long_from": KERNEL_BOUND_FROM}
    for suffix, rows in (("", table), ("_long", long)):
        facts[f"shapes{suffix}"] = len(rows)
        for col in cols:
            against = col.split("/")[1]
            facts[f"slower_{against}{suffix}"] = _slower_count(rows[col])
            facts[f"gm_{against}{suffix}"] = geometric_mean(rows[col])
    return summary, facts


def _slower_count(ratios: pd.Series) -> int:
    """How many time ratios of ours show it slower (above 1); a failed shape's ratio (NaN or text) counts as none."""
    return int((pd.to_numeric(ratios, errors="coerce") > 1).sum())


def training_ratios(shapes: pd.DataFrame) -> pd.DataFrame:
    """The training shapes' time ratios to each SDPA back end, one row per shape and back end (for a figure)."""
    return ratios(shapes, against=("sdpa_flash", "sdpa_cudnn")).melt(
        id_vars=["d", "n_q", "batch", "heads", "causal"], value_vars=["flash_triton/sdpa_flash", "flash_triton/sdpa_cudnn"],
        var_name="against", value_name="time ratio").dropna()


def in_model(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """:func:`systems.bench.flash_sweep.model_table`, and where ours is slower: overall, per mode, and beyond the
    interval (its low end above 1), for our Triton kernels (``flash_triton``) and, where the steps ran it, for our
    fastest attention on the device (``flash``; its facts named ``fastest_...``)."""
    table = model_table(runs)
    ours = [a for a in ("flash_triton", "flash") if a in table]
    # where a side did not run, the row says why (its "OOM"), never shows a bare gap
    why = table[["sdpa", *ours]].map(lambda x: x if isinstance(x, str) else None).bfill(axis=1).iloc[:, 0]
    table["status"] = why.fillna("ok")
    facts = {"oom": ", ".join(f"{r.size}/{r.attention}/{r.context_length}" for r in
                              runs[runs.status != "ok"].itertuples()) or "none"}
    for attention in ours:
        prefix = "" if attention == "flash_triton" else "fastest_"
        facts |= {prefix + name: value for name, value in _slower(table, attention).items()}
    return table, facts


def _slower(table: pd.DataFrame, ours: str) -> dict:
    """Of :func:`in_model`'s table, for one of ours: :func:`_tally` over all points and per mode, the points where it
    is faster beyond the interval, and the worst point in words."""
    ratio = table[f"{ours}/sdpa"]
    worst = table.loc[ratio.idxmax()] if (ratio > 1).any() else None
    facts = {**_tally(table, ours), "faster_clear": int((table[f"{ours} high"] < 1).sum()),
             "worst": "none" if worst is None else
             f"{worst['size']}, {worst['mode']}, context {worst['context_length']}: {worst[f'{ours}/sdpa']:.3f}×"}
    for mode in ("eager", "compiled"):
        facts |= {f"{name}_{mode}": value for name, value in _tally(table[table["mode"] == mode], ours).items()}
    return facts


def _tally(rows: pd.DataFrame, ours: str) -> dict:
    """Of :func:`in_model`'s rows: the points with a ratio of ``ours`` over SDPA's, where ours is slower (also beyond
    the interval), and the ratios' geometric mean."""
    ratio = rows[f"{ours}/sdpa"]
    return {"points": int(ratio.notna().sum()), "slower": int((ratio > 1).sum()),
            "slower_clear": int((rows[f"{ours} low"] > 1).sum()), "gm": geometric_mean(ratio)}


def in_model_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`in_model`'s ratios of ours over SDPA's step, one row per point and attention of ours (``ours``,
    ``ratio``), for a figure with a panel per attention."""
    return table.melt(id_vars=["size", "mode", "context_length"],
                      value_vars=[column for column in table if column.endswith("/sdpa")],
                      var_name="ours", value_name="ratio").assign(ours=lambda t: t.ours.str.removesuffix("/sdpa"))


def sdpa_choices(sizes, contexts, tokens: int, dtype: str) -> tuple[pd.Series, str]:
    """The back end ``sdpa`` runs at each (size, context) of the model, and that in words."""
    chosen = pd.Series({(size, context): model_sdpa_choice(size, context, tokens, dtype)
                        for size in sizes for context in contexts})
    return chosen, pick(chosen.nunique() == 1, f"its {chosen.iloc[0]} back end at every point", "; ".join(
        f"{backend} at {', '.join(f'{s} {c}' for s, c in points)}"
        for backend, points in chosen.groupby(chosen).groups.items()))


def in_model_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """The model's steps as the raw data keeps them: one row per size, attention, mode and context."""
    return steps.assign(mode=steps.compile.map({False: "eager", True: "compiled"}))[
        ["size", "attention", "mode", "context_length", "step_ms", "status", "step_times_ms"]]


def point(row: pd.Series) -> tuple[str, int]:
    """The (size, context) of a row of :func:`in_model`'s table."""
    return row["size"], int(row.context_length)


def busy_facts(busy: pd.DataFrame, worst: pd.Series, layers: int, call: dict) -> dict:
    """At the host-bound point where ours loses most: the extra step time, the part of it in kernels, and (where
    the per-call table measured it) the per-call host time summed over the model's layers, in words. Where the step
    is not longer here, or the model's table could not tell the point from SDPA's (its interval holds 1), the words
    say so rather than place a difference that may be noise."""
    by = busy.set_index("attention")
    extra_step, extra_kernels = by.step_ms.flash_triton - by.step_ms.sdpa, by.kernel_ms.flash_triton - by.kernel_ms.sdpa
    low, high = worst.get("flash_triton low", float("nan")), worst.get("flash_triton high", float("nan"))
    if extra_step <= 0:
        words = "Timed again here, our step is not the longer one: there is no difference to place."
    elif low <= 1:
        words = (f"Even at this, the worst point, the model's table could not tell the two steps apart (its interval, "
                 f"{low:.3f} to {high:.3f}, holds 1): a difference this small, and its split between kernels and "
                 f"host, is within what the steps vary by.")
    elif extra_kernels >= 0.5 * extra_step:
        words = "Most of the difference is in the kernels themselves, not in the host's work around them."
    else:
        words = ("Most of the difference is not in the kernels: with ours, the GPU waits longer for the host."
                 + _priced_per_call(call, layers, extra_step - extra_kernels))
    share = fmt(100 * abs(extra_step) / by.step_ms.sdpa, 2)
    return {"point": f"{worst['size']}, context {int(worst.context_length)}",
            "step_words": more_or_less(extra_step, unit=f"ms ({share} %)", more="longer", less="shorter"),
            "kernel_words": pick(extra_kernels >= 0, f"of which the kernels account for {fmt(extra_kernels)} ms",
                                 f"while its kernels take {fmt(-extra_kernels)} ms less"), "words": words}


def _priced_per_call(call: dict, layers: int, extra_host_ms: float) -> str:
    """The per-call table's extra host time of ours (where it was measured), once per layer, weighed against the
    step's extra host time, in words; empty where the per-call table did not measure it."""
    if not call["measured"]:
        return ""
    per_call_ms = (call["ours_us"] - call["sdpa_us"]) * layers / 1e3
    unexplained = "host time that this chapter does not explain yet (the log records the hypotheses tried)."
    if per_call_ms <= 0:
        return (f" In the per-call table a call of ours costs the host less than one of SDPA's flash back end "
                f"({-per_call_ms:.2g} ms less over the model's {layers} layers), so the calls themselves explain "
                f"none of it: it is {unexplained}")
    return (f" The per-call table's extra host time of ours over SDPA's flash back end, once for each of the model's "
            f"{layers} layers, comes to {per_call_ms:.2g} ms: "
            + pick(per_call_ms >= 0.5 * extra_host_ms, "most of it.", f"a small part of it. The rest is {unexplained}"))


def apart_facts(apart: pd.DataFrame) -> dict:
    """The same point timed in the notebook's process and in a fresh one: both ratios and their intervals, and what
    they say, in one sentence (``words``); where the point did not run in one of the two, that instead."""
    by = apart.set_index("process")
    here, fresh = by.loc["this process"], by.loc["a fresh process"]
    ratios = {"here": here["flash_triton/sdpa"], "fresh": fresh["flash_triton/sdpa"],
              "here_low": here["flash_triton low"], "here_high": here["flash_triton high"],
              "fresh_low": fresh["flash_triton low"], "fresh_high": fresh["flash_triton high"]}
    missing = [f"{where} ({row.flash_triton if isinstance(row.flash_triton, str) else 'no time'})"
               for where, row in (("this process", here), ("a fresh process", fresh))
               if not math.isfinite(row["flash_triton/sdpa"])]
    if missing:
        return {**ratios, "words": f"The point did not run in {' and '.join(missing)}, so the two processes cannot "
                                   f"be compared here."}
    # three places: the ratios sit within a few percent of 1, where two would print 1.01 (1.01 to 1.01)
    measured = (f"Ours over SDPA's step: {ratios['here']:.3f}× here ({ratios['here_low']:.3f} to "
                f"{ratios['here_high']:.3f}), {ratios['fresh']:.3f}× in a fresh process ({ratios['fresh_low']:.3f} "
                f"to {ratios['fresh_high']:.3f}). ")
    if ratios["fresh_high"] < ratios["here_low"]:
        verdict = ("The intervals do not overlap: outside the notebook's kernel ours fares better, so part of the "
                   "difference measured here belongs to the process around the steps, not to the kernels or the "
                   "launch path.")
    elif ratios["fresh"] < ratios["here"] and ratios["fresh_low"] <= 1 < ratios["here_low"]:
        verdict = ("In the fresh process the interval holds 1 where here it does not, but the two intervals overlap: "
                   "a hint that the process around the steps costs ours more than SDPA's, not a measurement of how "
                   "much.")
    elif ratios["fresh"] < ratios["here"]:
        verdict = ("The ratio is lower in the fresh process, but the two intervals overlap: this run cannot tell the "
                   "two processes apart.")
    else:
        verdict = ("Outside the notebook's kernel the ratio is no better: the process around the steps is not what "
                   "sets it.")
    return {**ratios, "words": measured + verdict}


def bound_facts(times: pd.DataFrame, own: pd.DataFrame, row: pd.Series, backend: str) -> dict:
    """At the GPU-bound point: the extra step time, split into the attention's own kernels and those both run; the
    longest kernel of each attention, in words (names cut to 72 characters: glued text is not read as Markdown)."""
    by = times.set_index("attention")
    shared = by.kernel_ms - by.own_kernel_ms
    longest = own.groupby("attention").first()  # own is sorted longest first within each attention
    names = {a: name if len(name) <= 72 else name[:72] + "…" for a, name in longest.kernel.items()}
    return {"point": f"{row['size']}, context {int(row.context_length)}", "backend": backend,
            "step_words": more_or_less(by.step_ms.flash_triton - by.step_ms.sdpa, more="longer", less="shorter"),
            "own_words": more_or_less(by.own_kernel_ms.flash_triton - by.own_kernel_ms.sdpa),
            "shared_words": more_or_less(shared.flash_triton - shared.sdpa), "longest": pick(
                {"sdpa", "flash_triton"} <= set(longest.index),
                f"The longest of ours is {names.get('flash_triton')} at {longest.ms.get('flash_triton', 0):.3g} ms "
                f"per step, of SDPA's {names.get('sdpa')} at {longest.ms.get('sdpa', 0):.3g} ms.",
                "On this machine no kernel times were recorded (they need a GPU).")}

"""What chapter 07 (FlashAttention-2 in Triton) says of its measurements: the sweep and the shapes where ours is
slower, the leaderboard, its kernels, the cold start, the tuning variants and the backward's tiles. Chapter 17 (in
training) has :mod:`systems.chapters.flash_training`."""

from __future__ import annotations

import pandas as pd

from systems.attention.flash_triton import FlashConfig, Tiles
from systems.bench.flash_sweep import NOT_RUN, geometric_mean, slower_shapes
from systems.report import pick, times
from systems.bench.leaderboard import SPRING_2025_BEST_MS
from systems.device import OOM


def sweep_summary(table: pd.DataFrame, min_n: int, base: str = "flash_triton") -> pd.DataFrame:
    """Per dtype, head dim and mode, the geometric mean of ``base``'s time over each other implementation's, from
    ``min_n`` tokens on (below 1: ``base`` is faster): the sweep in one screen."""
    ratios_ = [c for c in table if c.startswith(f"{base}/")]
    long = table[table.n_q >= min_n]
    summary = long.groupby(["dtype", "d", "mode"])[ratios_].agg(geometric_mean).reset_index()
    # a ratio is missing where the other implementation never ran at these sizes: SDPA's back ends take no fp32
    return summary.assign(status=summary[ratios_].isna().any(axis=1).map({True: "unsupported", False: "ok"}))


def sweep_facts(runs: pd.DataFrame, table: pd.DataFrame, min_n: int, dtype: str) -> dict:
    """Geometric-mean ratios from ``min_n`` tokens on in ``dtype`` against each implementation, and where naive
    attention first ran out of memory (or was not run)."""
    long = table[(table.n_q >= min_n) & (table.dtype == dtype)]
    naive = runs[runs.impl == "naive"]
    oom = naive[naive.ms == OOM].sort_values("n_q")
    out = {"min_n": min_n, "dtype": dtype, "naive_oom_n": int(oom.n_q.iloc[0]) if len(oom) else 0,
           "naive_oom_d": int(oom.d.iloc[0]) if len(oom) else 0,
           "naive_not_run": int(naive[naive.ms == NOT_RUN].n_q.min()) if (naive.ms == NOT_RUN).any() else 0}
    for other in ("naive", "sdpa_flash", "sdpa_cudnn"):
        col = f"flash_triton/{other}"
        out[f"vs_{other}"] = geometric_mean(long[col]) if col in long else float("nan")
        out[f"vs_{other}_words"] = times(out[f"vs_{other}"])
    out["oom_words"] = pick(
        out["naive_oom_n"] > 0, f"first runs out of memory at N = {out['naive_oom_n']} (d = {out['naive_oom_d']})",
        "did not run out of memory in the points it ran") + (
        "" if not out["naive_not_run"] else f"; it was not run from N = {out['naive_not_run']} on, to save GPU time")
    return out


def slower_facts(table: pd.DataFrame, runs: pd.DataFrame, min_n: int) -> tuple[pd.DataFrame, dict]:
    """The shapes from ``min_n`` on where ours is slower than SDPA's flash back end, by regime; the kernel-regime
    ones as a table; the per-call floor at the shortest sequence."""
    slow = slower_shapes(table, min_n=min_n)
    kernel = slow[slow.regime == "kernel"]
    compared = pd.to_numeric(table.get("flash_triton/sdpa_flash", pd.Series(dtype=float)), errors="coerce")
    floor = runs[(runs.impl == "flash_triton") & (runs["mode"] == "fwd_bwd") & (runs.n_q == runs.n_q.min())]
    floor_ms = pd.to_numeric(floor.ms, errors="coerce")
    counts = slow.regime.value_counts()
    return kernel[["dtype", "d", "n_q", "mode", "flash_triton", "sdpa_flash", "flash_triton/sdpa_flash"]], {
        "slow": len(slow), "compared": int(compared[table.n_q >= min_n].notna().sum()),
        "fixed": int(counts.get("fixed cost", 0)), "kernel": int(counts.get("kernel", 0)),
        "floor_n": int(runs.n_q.min()), "floor_min_ms": floor_ms.min(), "floor_max_ms": floor_ms.max()}


def backward_tile_facts(tiles: pd.DataFrame | None) -> dict:
    """The fastest tile's backward against cuDNN's, how many kernels spill registers, and whether every tile larger
    than the reference (the first one, one pass) spills or runs slower than it; None: no tiles were timed (the
    interpreter compiles no kernels)."""
    if tiles is None:
        return {"words": "This machine compiles no kernels (Triton's interpreter): no tiles were timed."}
    ours = tiles[tiles.impl == "flash_triton"].astype({"ms": float, "block_q": int, "block_k": int, "warps": int,
                                                       "stages": int})  # ints, also from a CSV with blanks
    best, ref = ours.loc[ours.ms.idxmin()], ours[ours.passes == 1].iloc[0]
    larger = ours[ours.block_q * ours.block_k > ref.block_q * ref.block_k]
    found = {"best": f"{best.block_q} × {best.block_k}, {best.warps} warps, {best.stages} stages",
             "best_passes": int(best.passes), "best_ms": best.ms, "best_vs_cudnn": best.vs_cudnn,
             "cudnn_ms": tiles.ms.iloc[0], "spilling": int((ours.spills > 0).sum()), "tried": len(ours),
             "ref": f"{ref.block_q} × {ref.block_k}", "ref_registers": int(ref.registers),
             "larger_lose": bool(len(larger)) and bool(((larger.spills > 0) | (larger.ms > ref.ms)).all())}
    found["words"] = (
        f"The fastest is {found['best']} with {found['best_passes']} " + pick(found["best_passes"] == 1, "pass", "passes")
        + f", {found['best_ms']:.3g} ms against cuDNN's {found['cudnn_ms']:.3g} ms ({found['best_vs_cudnn']:.3g}×). "
        f"{found['spilling']} of the {found['tried']} kernels spill registers. " + pick(
            found["larger_lose"],
            f"Every tile larger than {found['ref']} spills registers or runs slower than it: at {found['ref']} a "
            f"thread already holds {found['ref_registers']} of the 255 registers it can have (the accumulators and "
            "the score tiles), so the larger tiles, which would read K, V, Q and dO from shared memory fewer times "
            "per product and add dQ up less often per key, spill, or, spread over more warps to fit, lose more than "
            "they save. FlashAttention-3 fits them by giving the multiplying warps more registers than the loading "
            "ones (setmaxnreg, with warp specialisation), which Triton 3.6 cannot do for these kernels.",
            f"A tile larger than {found['ref']} ran faster than it without spilling: the default tiles should "
            "change."))
    return found


def cold_facts(cold: dict | None) -> tuple[pd.DataFrame, dict]:
    """The cold start (:func:`systems.bench.leaderboard.cold_start`; None where it was not run, without a GPU): the
    tuning per kernel as a table, and the first and second step's times."""
    cold = cold or {"first_call_s": float("nan"), "second_call_s": float("nan"), "autotune": {}}
    table = pd.DataFrame([{"kernel": kind, "tuning_s": r["tuning_s"], "chosen": "; ".join(r["chosen"].values())}
                          for kind, r in cold["autotune"].items()], columns=["kernel", "tuning_s", "chosen"])
    return table, {"first_s": cold["first_call_s"], "second_ms": cold["second_call_s"] * 1e3,
                   "tuning_s": sum(r["tuning_s"] or 0 for r in cold["autotune"].values()),
                   "words": pick(cold["first_call_s"] < 120, "well under", "over")}


def _against(ms: pd.Series, impl: str, peer: str, peer_words: str, needs: str) -> str:
    """``impl``'s time against ``peer``'s in words, or why there is none (what ``impl`` needs to run)."""
    mine, theirs = ms.get(impl), ms.get(peer)
    if isinstance(mine, float) and isinstance(theirs, float):
        return f"{mine:.3g} ms, {times(mine / theirs)} than {peer_words}"
    return f"no time here ({mine or 'not run'}: {needs})"


def board_facts(board: pd.DataFrame) -> dict:
    """Ours against each SDPA back end and against the Spring 2025 best; our CUDA C++ kernels against SDPA's
    FlashAttention-2 and the Hopper ones against cuDNN, in words."""
    ms = board.set_index("impl").ms
    ours = ms.get("flash_triton")
    out = {"ours_ms": ours, "best_2025_ms": SPRING_2025_BEST_MS}
    for impl in ("sdpa_flash", "sdpa_cudnn"):
        theirs = ms.get(impl)
        out |= {f"{impl}_ms": theirs, f"vs_{impl}": ours / theirs if isinstance(theirs, float) else float("nan")}
    out["vs_2025"] = ours / SPRING_2025_BEST_MS if isinstance(ours, float) else float("nan")
    out["cuda_words"] = _against(ms, "flash_cuda", "sdpa_flash", "SDPA's FlashAttention-2 back end",
                                 "they need a GPU of compute capability 8.0 or newer and nvcc")
    out["hopper_words"] = _against(ms, "flash_hopper", "sdpa_cudnn", "SDPA's cuDNN back end",
                                   "it needs a Hopper GPU and nvcc")
    return out | {f"{key}_words": times(out[key]) for key in ("vs_sdpa_flash", "vs_sdpa_cudnn", "vs_2025")}


def breakdown_facts(kernels: pd.DataFrame) -> dict:
    """Our step's kernel time by pass (forward, one-pass or two-pass backward), against the others' totals."""
    mine = kernels[kernels.impl == "flash_triton"].set_index("kernel").ms_per_step
    totals = kernels.groupby("impl").ms_per_step.sum()
    two_passes = "flash_bwd_dq_kernel" in mine
    backward = mine.get("flash_bwd_dkdv_kernel", float("nan")) + (mine.get("flash_bwd_dq_kernel", 0.0))
    return {"ours_ms": totals.get("flash_triton", float("nan")), "forward_ms": mine.get("flash_fwd_kernel", float("nan")),
            "backward_ms": backward, "passes": 2 if two_passes else 1, "products": 7 if two_passes else 5,
            "sdpa_flash_ms": totals.get("sdpa_flash", float("nan")), "sdpa_cudnn_ms": totals.get("sdpa_cudnn", float("nan")),
            "bwd_over_fwd": backward / mine.get("flash_fwd_kernel", float("nan"))}


# The tuning variants the chapter times at the leaderboard shape, by the label its table and prose use.
UNTUNED = FlashConfig(autotune=False)
REFERENCE = "default tiles, untuned"
ABLATION = {
    "autotuned (the default)": None,
    REFERENCE: UNTUNED,
    "no causal tile skipping": FlashConfig(autotune=False, skip_masked_tiles=False),
    "no diagonal split": FlashConfig(autotune=False, split_diagonal=False),
    "programs one head after another": FlashConfig(autotune=False, head_group=1),
    "two passes (deterministic)": FlashConfig(autotune=False, atomic_dq=False),
    "two passes, dK/dV diagonal tiles first": FlashConfig(autotune=False, atomic_dq=False, unmasked_first=False),
    "two passes, autotuned": FlashConfig(atomic_dq=False),
    "two passes, TMA loads": FlashConfig(autotune=False, atomic_dq=False, tma=True),
    "one pass, atomic adds for dQ": FlashConfig(autotune=False, atomic_dq=True, tma=False),
    "one pass, TMA loads in the forward too": FlashConfig(autotune=False, tma=True),
    "forward 128x64, 8 warps": FlashConfig(autotune=False, fwd=Tiles(128, 64, 8, 3)),
    "forward 2 stages": FlashConfig(autotune=False, fwd=Tiles(64, 64, 4, 2)),
    "dK/dV 32x64, 4 warps": FlashConfig(autotune=False, dkdv=Tiles(32, 64, 4, 4)),
    "dK/dV 64x128, 8 warps": FlashConfig(autotune=False, dkdv=Tiles(64, 128, 8, 3)),
    "two passes, dQ 128x64, 8 warps": FlashConfig(autotune=False, atomic_dq=False, dq=Tiles(128, 64, 8, 3)),
}


def variant_facts(variants_: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Each variant of :data:`ABLATION` timed (rows of :func:`systems.bench.leaderboard.variants`, a smoke run
    times only the first) over the reference's time, and the ratios the chapter quotes."""
    ref = variants_.set_index("variant").ms[REFERENCE]
    table = variants_.assign(vs_default=[m / ref if isinstance(m, float) else None for m in variants_.ms])
    v = table.set_index("variant").vs_default
    get = lambda name: v.get(name, float("nan"))  # noqa: E731 (a smoke run times only the first rows)
    best = v.drop(REFERENCE).astype(float).idxmin()
    return table, {"skip": get("no causal tile skipping"), "split": get("no diagonal split"),
                   "order": get("two passes, dK/dV diagonal tiles first") / get("two passes (deterministic)"),
                   "two_pass": get("two passes (deterministic)"), "two_pass_tuned": get("two passes, autotuned"),
                   "two_pass_tma": get("two passes, TMA loads"), "atomic": get("one pass, atomic adds for dQ"),
                   "tuned": get("autotuned (the default)"), "heads": get("programs one head after another"),
                   "best": best, "best_ratio": v[best]}


def tuned_tiles(report_: dict) -> pd.DataFrame:
    """The tiles autotuning chose in this process (:func:`systems.attention.flash_triton.autotune_report`)."""
    return pd.DataFrame([{"kernel": kind, "shape key": key, "tiles": tiles}
                         for kind, r in report_.items() for key, tiles in r["chosen"].items()],
                        columns=["kernel", "shape key", "tiles"])

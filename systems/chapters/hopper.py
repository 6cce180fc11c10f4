"""What chapter 20 (FlashAttention written for Hopper) shows and says: the schedule its design follows, drawn from a
model of the kernel's ordering rules; the effect of each of the forward's switches; the kernels against cuDNN and
against the tensor cores' peak."""

from __future__ import annotations

import numpy as np
import pandas as pd

from systems.bench.attention_steps import paired_ratio, ratio_interval
from systems.bench.flash_sweep import wide
from systems.report import listed, pick, times

TENSOR_CORES, COPY = "tensor cores", "copy engine (producer)"
# the schedule figure's colours: each consumer's products in its own hue, its S darker than its P V
COLORS = {"copy K, V": "tab:gray", "softmax": "tab:purple", "S = Q Kᵀ": "tab:green", "P V": "yellowgreen",
          "S = Q Kᵀ, consumer 0": "tab:blue", "P V, consumer 0": "lightskyblue",
          "S = Q Kᵀ, consumer 1": "tab:orange", "P V, consumer 1": "navajowhite"}


def schedule(overlapped: bool, n_tiles: int = 4, copy: float = 0.6, product: float = 1.0, softmax: float = 1.3,
             stages: int = 3) -> pd.DataFrame:
    """The forward's main loop over ``n_tiles`` K/V tiles as intervals (lane, kind, start_ms, end_ms), in units of one
    S = Q K^T product, from the kernel's ordering rules alone (a schematic, not a measurement).

    ``overlapped``: this kernel. A producer copies K and V tiles into a ring of ``stages``; two consumers share the
    tensor cores, taking turns (ping-pong); each issues S(j) and P(j-1) V(j-1) together once its softmax of j-1 is
    done, each for 64 query rows, and computes the softmax of S(j) once both are done: the source asks for the
    exponentials under P(j-1) V(j-1), but the compiled code waits for that product first (book/log.md, 2026-11-29),
    so what runs under a consumer's softmax is the other consumer's products. Otherwise the same 128 rows
    in one block of warps that waits for S, computes the softmax, then P V, in order, its loads started ahead (what
    Triton 3.6 compiles our kernel to)."""
    rows = []

    def add(lane, kind, start, length):
        rows.append({"lane": lane, "kind": kind, "start_ms": start, "end_ms": start + length})
        return start + length

    if not overlapped:  # the same 128 rows in one block of warps, its loads started ahead (a ring of its own)
        t, loaded = 0.0, [add("warps: loads", "copy K, V", 0.0, copy)]
        for j in range(n_tiles):
            t = add(TENSOR_CORES, "S = Q Kᵀ", max(t, loaded[j]), 2 * product)
            if j + 1 < n_tiles:
                loaded.append(add("warps: loads", "copy K, V", max(t - 2 * product, loaded[j]), copy))
            t = add("warps: softmax", "softmax", t, softmax)
            t = add(TENSOR_CORES, "P V", t, 2 * product)
        return pd.DataFrame(rows)
    copied, released, tensor_free, copy_free = [], [], 0.0, 0.0
    softmax_done = [0.0, 0.0]
    for j in range(n_tiles + 1):  # the last round issues P V of the last tile alone
        if j < n_tiles:
            start = max(copy_free, released[j - stages] if j >= stages else 0.0)
            copy_free = add(COPY, "copy K, V", start, copy)
            copied.append(copy_free)
        done = 0.0
        for c in (0, 1):  # the consumers take turns at the tensor cores
            t = max(tensor_free, softmax_done[c], copied[j] if j < n_tiles else 0.0)
            if j < n_tiles:
                t = add(TENSOR_CORES, f"S = Q Kᵀ, consumer {c}", t, product)
            if j > 0:
                t = add(TENSOR_CORES, f"P V, consumer {c}", t, product)
            tensor_free = t
            if j < n_tiles:
                softmax_done[c] = add(f"consumer {c}: softmax", "softmax", t, softmax)
            done = max(done, t)
        if j > 0:
            released.append(done)  # both consumers' P V of tile j-1 issued and done: its stage is free
    return pd.DataFrame(rows)


def schedules() -> pd.DataFrame:
    """Both schedules of :func:`schedule`, by name, for one figure."""
    return pd.concat([schedule(False).assign(schedule="in order (Triton 3.6)"),
                      schedule(True).assign(schedule="this kernel: producer, two consumers, ping-pong")])


# each switch of the forward, by the name the tables give it and the one its glued words take
SWITCHES = {"a third ring stage": "third_ring_stage", "ping-pong": "pingpong", "a third consumer": "third_consumer"}


def variant_table(forward: pd.DataFrame) -> pd.DataFrame:
    """The forward's rows as one line per implementation: ms per shape, the largest difference from cuDNN."""
    table = forward.pivot_table(index="impl", columns="shape", values="ms", sort=False)
    table["largest difference"] = forward.groupby("impl", sort=False).err_vs_cudnn.max()
    table.index = table.index.str.removeprefix("CUDA C++, ")
    table.columns.name = None
    return table.reset_index().rename(columns={"impl": "implementation (ours: CUDA C++)"})


def variant_effects(forward: pd.DataFrame) -> pd.DataFrame:
    """Per shape, the time of the CUDA C++ forward without each switch over its time with it (above 1: the switch
    helps), the others held as in the fastest variant: a third ring stage, ping-pong, a third consumer (head dim 64)."""
    cuda = forward.dropna(subset=["stages"]).astype({"stages": int, "consumers": int, "pingpong": bool})
    rows = []
    for shape, g in cuda.groupby("shape", sort=False):
        ms = g.set_index(["stages", "pingpong", "consumers"]).ms
        best = ms.idxmin()
        for switch, without in zip(SWITCHES, ((2, best[1], best[2]), (best[0], False, best[2]),
                                              (best[0], best[1], 2))):
            changed = without != best and without in ms.index
            rows.append({"shape": shape, "switch": switch,
                         "without / with": ms[without] / ms[best] if changed else np.nan})
    return pd.DataFrame(rows).pivot(index="switch", columns="shape", values="without / with").reset_index()


def variant_facts(effects: pd.DataFrame | None) -> dict:
    """The smallest and largest gain of each switch over the shapes, in percent, in words (None: not measured)."""
    if effects is None:
        effects = pd.DataFrame({"switch": list(SWITCHES)})
    out = {}
    for _, row in effects.iterrows():
        gains = 100 * (row.drop("switch").astype(float).dropna() - 1)
        out[f"{SWITCHES[row['switch']]}_words"] = pick(len(gains) > 0, f"{gains.min():.0f} to {gains.max():.0f} %",
                                   "not measured (it needs a Hopper GPU, or no variant without it is built)")
    return out


def against_cudnn(runs: pd.DataFrame, impl: str = "flash_hopper", peak_flops: float | None = None) -> pd.DataFrame:
    """From :func:`systems.bench.flash_sweep.table`'s rows: per shape (B×H×N×d, "not causal" marked) and pass, every
    implementation's ms, ``impl``'s time over cuDNN's (below 1: ``impl`` is faster) and its FLOP rate as a share of
    the GPU's dense peak (if known)."""
    ms = wide(runs)
    impls = list(dict.fromkeys(runs.impl))
    shape = ms.batch.astype(str) + "×" + ms.heads.astype(str) + "×" + ms.n_q.astype(str) + "×" + ms.d.astype(str)
    out = pd.DataFrame({"shape": shape.where(ms.causal, shape + " not causal"), "pass": ms["mode"]})
    for name in impls:
        out[name] = pd.to_numeric(ms[name], errors="coerce")
    out[f"{impl} / cuDNN"] = out[impl] / out["sdpa_cudnn"]
    rate = pd.to_numeric(wide(runs, "tflops")[impl], errors="coerce")
    out["share of peak"] = rate * 1e12 / peak_flops if peak_flops else np.nan
    return out


def table_facts(versus: pd.DataFrame, impl: str = "flash_hopper") -> dict:
    """The forward and forward+backward ratios against cuDNN (and against flash_triton) at the 2025 leaderboard's shape,
    and their ranges over the shapes, in words."""
    ratio = versus[f"{impl} / cuDNN"]
    out = {}
    for mode, name in (("fwd", "forward"), ("fwd_bwd", "both")):
        r = ratio[versus["pass"] == mode].dropna()
        out[f"{name}_range_words"] = pick(len(r) > 0, f"{r.min():.2f} to {r.max():.2f}", "not measured")
        board = versus[(versus["pass"] == mode) & (versus["shape"] == "1×16×16384×64")]
        for against, column in (("", f"{impl} / cuDNN"), ("_vs_triton", None)):
            r = board[column] if column else board[impl] / board["flash_triton"]
            value = r.iloc[0] if len(r) else float("nan")
            out[f"{name}_board{against}_words"] = times(value) if pd.notna(value) else "not measured"
    out["board_vs_triton_words"] = (
        f"At the leaderboard's shape the pairing's forward+backward is {out['both_board_vs_triton_words']} than "
        f"flash_triton's, its forward {out['forward_board_vs_triton_words']}.")
    behind = versus[(versus["pass"] == "fwd") & (ratio > 1)]["shape"].tolist()
    out["forward_behind_words"] = pick(len(behind) > 0, f"The forward is behind cuDNN's at {listed(behind)}.",
                                       "The forward is nowhere behind cuDNN's.")
    share = versus["share of peak"].dropna()
    out["peak_words"] = pick(len(share) > 0, f"{100 * share.min():.0f} to {100 * share.max():.0f} %", "not measured")
    return out


def span(ratios: pd.Series, digits: int = 2) -> str:
    """The range of ``ratios`` in words ("0.91 to 1.05"), one number where both ends print alike."""
    low, high = f"{ratios.min():.{digits}f}", f"{ratios.max():.{digits}f}"
    return low if low == high else f"{low} to {high}"


def backward_facts(backward: pd.DataFrame | None, impl: str = "CUDA C++ (Hopper)") -> dict:
    """From :func:`systems.bench.hopper.backward_kernels`'s rows: where ``impl``'s backward is faster and where slower
    than our Triton one, and its range of times over cuDNN's, in words."""
    if backward is None or impl not in set(backward.impl):
        return {"vs_triton_words": "not measured (it needs a Hopper GPU)", "vs_cudnn_words": "not measured"}
    label = backward["shape"].where(backward.causal.astype(bool), backward["shape"] + " not causal")
    ms = backward.assign(label=label).pivot_table(index="label", columns="impl", values="ms", sort=False)
    over_triton, over_cudnn = ms[impl] / ms["ours (Triton)"], ms[impl] / ms["SDPA cuDNN"]
    faster, slower = over_triton[over_triton < 1], over_triton[over_triton >= 1]
    parts = [f"faster than our Triton backward at {listed(faster.index)} ({span(faster)} times its time)"] \
        if len(faster) else []
    parts += [f"slower at {listed(slower.index)} ({span(slower)} times its time)" if parts else
              f"slower than our Triton backward at every shape ({span(slower)} times its time)"] if len(slower) else []
    return {"vs_triton_words": ", ".join(parts), "vs_cudnn_words": f"{span(over_cudnn)} times cuDNN's time"}


def model_steps(runs: pd.DataFrame, ours: str = "flash_hopper") -> tuple[pd.DataFrame, dict]:
    """From :func:`systems.bench.flash_sweep.compiled_steps_at_largest_batch`'s rows: per size its batch, each
    attention's median step (ms, or why it has none), ``ours`` over ``sdpa``
    (:func:`systems.bench.attention_steps.paired_ratio`) with its 95 % interval
    (:func:`systems.bench.attention_steps.ratio_interval`); and where ours is slower, in words."""
    rows = []
    for size, point in runs.groupby("size", sort=False):
        by = point.set_index("attention")
        row = {"size": size, "batch": int(by.batch_size.iloc[0])}
        for name in (ours, "sdpa"):
            row[name] = by.step_ms[name] if by.status[name] == "ok" else by.status[name]
        ran = by.status[ours] == "ok" and by.status["sdpa"] == "ok"
        pair = (by.step_times_ms[ours], by.step_times_ms["sdpa"])
        row[f"{ours} / sdpa"] = paired_ratio(*pair) if ran else np.nan
        row["low"], row["high"] = ratio_interval(*pair) if ran else (np.nan, np.nan)
        rows.append(row)
    table = pd.DataFrame(rows)
    ratio = table[f"{ours} / sdpa"].dropna()
    slower = table[table[f"{ours} / sdpa"] > 1]
    clear = table[table.low > 1]
    others = len(ratio) - len(slower)
    words = pick(len(ratio) == 0, "No size ran with both attentions.", pick(
        len(slower) == 0, f"The step with {ours} is no slower than with sdpa at "
                          f"{pick(len(ratio) == 1, 'the one size that ran', f'any of the {len(ratio)} sizes that ran')}"
                          f" ({span(ratio, 3)} times its time).",
        f"The step with {ours} is slower than with sdpa at {listed(slower['size'])} "
        f"({span(slower[f'{ours} / sdpa'], 3)} times its time; "
        + pick(len(clear) == 0, "no 95 % interval lies wholly above 1",
               f"the 95 % interval lies wholly above 1 at {listed(clear['size'])}") + ")"
        + pick(others == 0, ".", f", and no slower at the other {others} of the {len(ratio)} sizes that ran.")))
    return table, {"words": words, "sizes": len(table), "slower": len(slower)}

"""What chapter 18 (the 2026 leaderboard on one GPU) says of its measurements: the step's FLOPs and state by part,
each part against plain PyTorch's, the deepest model that fits, the ablation, and the plan for two GPUs."""

from __future__ import annotations

from typing import Any

import pandas as pd

from systems.flops import step_flops
from systems.model import ModelConfig, parameter_count
from systems.report import times
from systems.scaling.leaderboard import MeasuredParts, memory_per_gpu, predicted_step
from systems.scaling.simulate import Cluster

GIB, PFLOP = 2**30, 1e15


def step_table(cfg: ModelConfig, batch: int, peak_flops: float) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The step's FLOPs by part (:func:`systems.flops.step_flops`), each part's share and its time at ``peak_flops``,
    with the sizes that make the step hard to fit: fp32 training state and the logits."""
    parts = step_flops(cfg, batch)
    names = {"blocks": "blocks' matrix products", "attention": "causal attention (visible half)",
             "head": "LM head's matrix products"}
    df = pd.DataFrame([{"part": names[k], "PFLOP": parts[k] / PFLOP, "share": parts[k] / parts["total"],
                        "s at peak": parts[k] / peak_flops} for k in names])
    tokens = batch * cfg.context_length
    facts = {"pflop": parts["total"] / PFLOP, "peak_s": parts["total"] / peak_flops,
             "params_b": parameter_count(cfg) / 1e9, "state_gib": 16 * parameter_count(cfg) / GIB,
             "logits_gib": 2 * tokens * cfg.vocab_size / GIB, "tokens": tokens,
             "attention_share": parts["attention"] / parts["total"]}
    return df, facts


def _ms(df: pd.DataFrame, column: str, value: str) -> float:
    row = df[(df[column] == value) & (df.status == "ok")]
    return float(row.ms.iloc[0]) if len(row) else float("nan")


def head_facts(df: pd.DataFrame, budget_gib: float = 2.0) -> dict[str, Any]:
    """The fused head and loss against the compiled and eager unfused ones: time, memory above the inputs, and the
    workspace (that memory less the two gradients any head returns)."""
    by = df.set_index("variant")
    fused, compiled = by.loc["fused"], by.loc["compiled"]
    workspace = fused.extra_gib - fused.gradients_gib
    return {"fused_ms": fused.ms, "compiled_ms": compiled.ms, "eager_ms": by.loc["eager"].ms,
            "vs_compiled": times(fused.ms / compiled.ms), "fused_gib": fused.extra_gib,
            "compiled_gib": compiled.extra_gib, "eager_gib": by.loc["eager"].extra_gib, "workspace_gib": workspace,
            "grads_gib": fused.gradients_gib, "fused_tflops": fused.tflops,
            "budget": f"{'below' if workspace < budget_gib else 'above'} the {budget_gib:g} GiB set as the goal"}


def adamw_facts(df: pd.DataFrame, hbm_bytes_per_s: float) -> dict[str, Any]:
    """Ours against PyTorch's fused and for-each AdamW, and the bandwidth each reaches of the memory's peak."""
    by = df.set_index("variant")
    ours = by.loc["ours"]
    return {"params_b": ours.params / 1e9, "tensors": int(ours.tensors), "ours_ms": ours.ms,
            "fused_ms": by.loc["torch fused"].ms, "foreach_ms": by.loc["foreach"].ms,
            "vs_fused": times(ours.ms / by.loc["torch fused"].ms), "vs_foreach": times(ours.ms / by.loc["foreach"].ms),
            "ours_tbs": ours.tb_per_s, "peak_share": ours.tb_per_s * 1e12 / hbm_bytes_per_s,
            "fused_tbs": by.loc["torch fused"].tb_per_s}


def block_comparison(df: pd.DataFrame, ours: str = "flash_triton", plain: str = "sdpa_cudnn") -> pd.DataFrame:
    """Per recomputation and compilation: our attention's block time over plain PyTorch's (SDPA cuDNN's), and each
    one's MFU."""
    ok = df[df.status == "ok"]
    pivot = ok.pivot_table(index=["recompute", "compiled"], columns="attention", values=["ms", "mfu"], dropna=False)
    out = pd.DataFrame({f"{ours} ms": pivot["ms"].get(ours), f"{plain} ms": pivot["ms"].get(plain),
                        f"{ours} MFU": pivot["mfu"].get(ours), f"{plain} MFU": pivot["mfu"].get(plain)})
    out["ours / plain"] = out[f"{ours} ms"] / out[f"{plain} ms"]
    return out.reset_index()


def block_facts(comparison: pd.DataFrame, ours: str = "flash_triton", plain: str = "sdpa_cudnn") -> dict[str, Any]:
    """Where our block wins and loses against the plain one, and the fastest configuration of each."""
    c = comparison.dropna(subset=["ours / plain"])
    faster = c[c["ours / plain"] < 1]
    fastest_ours = comparison.loc[comparison[f"{ours} ms"].idxmin()]
    fastest_plain = comparison.loc[comparison[f"{plain} ms"].idxmin()]
    describe = lambda r: f"{'compiled' if r.compiled else 'eager'}, recompute {r.recompute}"  # noqa: E731
    return {"compared": len(c), "faster": len(faster),
            "where_faster": "; ".join(describe(r) for r in faster.itertuples()) or "none",
            "ours_best": describe(fastest_ours), "ours_best_ms": fastest_ours[f"{ours} ms"],
            "ours_best_mfu": fastest_ours[f"{ours} MFU"], "plain_best": describe(fastest_plain),
            "plain_best_ms": fastest_plain[f"{plain} ms"], "plain_best_mfu": fastest_plain[f"{plain} MFU"],
            "best_vs_best": times(fastest_ours[f"{ours} ms"] / fastest_plain[f"{plain} ms"])}


def deepest_facts(steps: pd.DataFrame, ours: str, plain: str) -> dict[str, Any]:
    """The deepest model both recipes ran, and ours against the plain one there (time, MFU, memory)."""
    ran = steps[steps.status == "ok"].pivot_table(index="layers", columns="recipe", values=["ms", "mfu", "extra_gib"],
                                                  dropna=False)
    both = ran["ms"][[ours, plain]].dropna()
    if both.empty:
        return {"layers": 0, "words": "no depth ran with both recipes"}
    n = int(both.index.max())
    return {"layers": n, "ours_ms": ran["ms"].loc[n, ours], "plain_ms": ran["ms"].loc[n, plain],
            "vs_plain": times(ran["ms"].loc[n, ours] / ran["ms"].loc[n, plain]),
            "ours_mfu": ran["mfu"].loc[n, ours], "plain_mfu": ran["mfu"].loc[n, plain],
            "ours_gib": ran["extra_gib"].loc[n, ours], "plain_gib": ran["extra_gib"].loc[n, plain],
            "deepest_ours": int(ran["ms"][ours].dropna().index.max())}


def ablation_table(steps: pd.DataFrame, full: str) -> pd.DataFrame:
    """Each recipe's step against the recipe with every technique on (``full``, a label): time, its ratio, memory."""
    ok = steps.set_index("recipe")
    base = ok.loc[full]
    out = steps[["recipe", "status", "ms", "mfu", "extra_gib"]].copy()
    out["time / all on"] = out.ms / base.ms
    out["memory − all on (GiB)"] = out.extra_gib - base.extra_gib
    return out


def plan_table(memory: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Memory per GPU (GiB) of each plan (name -> :func:`systems.scaling.leaderboard.memory_per_gpu`), part by part."""
    return pd.DataFrame([{"plan": name, **{k: v / GIB for k, v in parts.items()}} for name, parts in memory.items()])


def two_gpu_plan(cfg: ModelConfig, one_sequence: pd.DataFrame, half_head: pd.DataFrame, adamw: pd.DataFrame,
                 link: tuple[float, float]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The plan for two GPUs from one GPU's measurements at one sequence (a block with recomputation "none" and
    "all", the fused head over one sequence's tokens, our AdamW) and the two-GPU link's fit (o, w): the memory per
    GPU of each plan (fused loss or not, blocks recomputed or not) and the step predicted for the fused and recomputed
    one (a recomputed block's forward taken as a quarter of its time: one forward, then again and the backward)."""
    block = one_sequence.set_index("recompute")
    memory = {f"{'fused' if fused else 'unfused'} loss, {'recomputed' if recompute else 'kept'} blocks":
              memory_per_gpu(cfg, 2, 2, recompute=recompute, fused_loss=fused,
                             block_bytes=block.extra_gib.get("none", float("nan")) * GIB)
              for fused in (True, False) for recompute in (True, False)}
    ours = adamw.set_index("variant").loc["ours"]
    parts = MeasuredParts(block_ms=block.ms["all"], forward_share=0.25, head_ms=half_head.ms.iloc[0],
                          adamw_ms_per_param=ours.ms / ours.params)
    cluster = Cluster.from_two_device_fit(*link, inter_bandwidth=link[1], latency="call")
    return memory, predicted_step(cfg, 2, parts, cluster)


def _run(steps: pd.DataFrame, sharding: str, recipe: str) -> pd.Series | None:
    row = steps[(steps.sharding == sharding) & (steps.recipe == recipe)]
    return row.iloc[0] if len(row) and row.iloc[0].status == "ok" else None


def two_gpu_facts(steps: pd.DataFrame, ours: str, plain: str, class_best_ms: float) -> dict[str, Any]:
    """The two-GPU step (chapter 19) in words: ours against plain PyTorch's and the class's best under FSDP2, ours
    under our FSDP, and how far apart the recipes' first losses are (a run that did not finish says why)."""
    mine, theirs, own = _run(steps, "fsdp2", ours), _run(steps, "fsdp2", plain), _run(steps, "fsdp", ours)
    why = lambda s, r: steps[(steps.sharding == s) & (steps.recipe == r)].status.iloc[0]  # noqa: E731
    facts: dict[str, Any] = {
        "ours_ms": mine.ms if mine is not None else why("fsdp2", ours),
        "plain_ms": theirs.ms if theirs is not None else why("fsdp2", plain),
        "ours_fsdp_ms": own.ms if own is not None else why("fsdp", ours),
        "ours_mfu": mine.mfu if mine is not None else 0.0,
        "vs_plain": times(mine.ms / theirs.ms) if mine is not None and theirs is not None else "not comparable",
        "vs_class": times(mine.ms / class_best_ms) if mine is not None else "not comparable",
    }
    spreads = []
    for sharding in steps.sharding.unique():
        a, b = _run(steps, sharding, ours), _run(steps, sharding, plain)
        if a is not None and b is not None:
            spreads.append(abs(a.first_loss - b.first_loss) / abs(b.first_loss))
    facts["loss_spread"] = max(spreads) if spreads else 0.0
    return facts


def against_plan(steps: pd.DataFrame, ours: str, memory: dict[str, float], plan: dict[str, float]) -> pd.DataFrame:
    """The measured two-GPU step of our recipe under FSDP2 beside the plan's prediction: step time and the fuller
    GPU's peak memory (measured peaks include the allocator's caching of freed blocks, not the plan's parts)."""
    run = _run(steps, "fsdp2", ours)
    measured_ms = run.ms if run is not None else float("nan")
    peak = max(run.peak_gib_per_rank) if run is not None and None not in run.peak_gib_per_rank else float("nan")
    rows = [("step (ms)", plan["step"] * 1e3, measured_ms), ("memory (GiB, fuller GPU)", memory["total"] / GIB, peak)]
    df = pd.DataFrame(rows, columns=["quantity", "predicted", "measured"])
    df["ratio"] = df.measured / df.predicted
    return df


def steps_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """The two-GPU runs (rows of :func:`systems.bench.leaderboard_step.launched`) with the fuller rank's peak."""
    steps = pd.DataFrame(runs)
    peaks = steps["peak_gib_per_rank"] if "peak_gib_per_rank" in steps else [None] * len(steps)
    steps["peak GiB (fuller rank)"] = [max(p) if isinstance(p, list) and None not in p else float("nan")
                                       for p in peaks]
    return steps


def trace_facts(traced: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, float]]:
    """A traced run's kernels on rank 0 (lane, kind, name, start_ms, end_ms) and its span, overlap and idle time."""
    kernels = pd.DataFrame(traced.get("trace") or [], columns=["lane", "kind", "name", "start_ms", "end_ms"])
    span = kernels.end_ms.max() - kernels.start_ms.min() if len(kernels) else float("nan")
    idle = traced.get("idle_ms", float("nan"))
    return kernels, {"span_ms": span, "overlap_ms": traced.get("overlap_ms", float("nan")), "idle_ms": idle,
                     "idle_share": idle / span}


def plan_check(one_gpu_dir: str, cfg: ModelConfig, steps: pd.DataFrame, ours: str,
               link: tuple[float, float]) -> pd.DataFrame:
    """The measured two-GPU step beside the plan made from the one-GPU chapter's data in ``one_gpu_dir``."""
    parts = {name: pd.read_csv(f"{one_gpu_dir}/{name}.csv")
             for name in ("block_one_sequence", "head_one_sequence", "adamw")}
    memory, plan = two_gpu_plan(cfg, parts["block_one_sequence"], parts["head_one_sequence"], parts["adamw"], link)
    return against_plan(steps, ours, memory["fused loss, recomputed blocks"], plan)

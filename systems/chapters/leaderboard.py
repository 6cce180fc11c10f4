"""What chapter 18 (the 2026 leaderboard on one GPU) says of its measurements: the step's FLOPs and state by part,
each part against plain PyTorch's, the deepest model that fits, the ablation, and the plan for two GPUs.

Every sentence that quotes a measurement is built here from the rows (the chapter glues it whole), so a variant that
did not run (out of memory, refused by a back end) or a quantity a machine cannot measure (device memory on a CPU)
is said in words where its number would stand."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pandas as pd

from systems.bench.kernel_groups import group_times
from systems.bench.recipe import Recipe
from systems.device import OOM
from systems.flops import step_flops
from systems.model import ModelConfig, parameter_count
from systems.report import fmt, more_or_less, percent_against, times
from systems.scaling.leaderboard import MeasuredParts, memory_per_gpu, predicted_step
from systems.scaling.simulate import Cluster

MFU_MARK = 0.55  # the MFU the 2026 leaderboard's reduced-depth step is to reach on one GPU

GIB, PFLOP = 2**30, 1e15
CLASS_BEST_MS = 6199  # the Spring 2026 class leaderboard's best step, two B200s (published, not measured here)
SAME_GIB = 0.05  # two memory figures closer than this (about 50 MiB) are "the same" in words


def value(row: pd.Series | None, column: str, spec: str, unit: str = "") -> str:
    """A measured number for a sentence, or why there is none: the row's status where it did not run, "not
    measured" where the quantity is missing (device memory on a CPU)."""
    if row is None:
        return "not run"
    if row.get("status", "ok") != "ok":
        return f"not run here ({row.status})"
    x = row.get(column, math.nan)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "not measured on this machine"
    return f"{x:{spec}}{unit}"


def has(row: pd.Series | None, column: str) -> bool:
    """Whether ``row`` ran and has a number in ``column``."""
    if row is None or row.get("status", "ok") != "ok":
        return False
    x = row.get(column, math.nan)
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def ratio_words(a: pd.Series | None, b: pd.Series | None, column: str = "ms") -> str:
    """``a``'s time against ``b``'s ("1.2× faster", "3% slower"), or why the two cannot be compared."""
    ok = [r is not None and r.get("status", "ok") == "ok" and math.isfinite(r[column]) for r in (a, b)]
    return times(a[column] / b[column]) if all(ok) else "not comparable here (one of the two did not run)"


def row_where(df: pd.DataFrame, **where) -> pd.Series | None:
    """The first row whose columns equal ``where`` (None: no such row)."""
    match = df
    for column, wanted in where.items():
        match = match[match[column] == wanted]
    return match.iloc[0] if len(match) else None


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


def head_words(df: pd.DataFrame, gpu: str, budget_gib: float = 2.0) -> str:
    """The fused head and loss against the compiled and eager unfused ones: time, and memory above the inputs (the
    two gradients any head returns and the workspace) against ``budget_gib``, gradients included as in the unfused
    heads' figures."""
    fused, compiled, eager = (row_where(df, variant=v) for v in ("fused", "compiled", "eager"))
    timing = (f"On the {gpu} the fused head takes {value(fused, 'ms', '.4g', ' ms')} "
              f"({value(fused, 'tflops', '.4g', ' TFLOP/s')}), {ratio_words(fused, compiled)} than the unfused one "
              f"under torch.compile ({value(compiled, 'ms', '.4g', ' ms')}; eager: {value(eager, 'ms', '.4g', ' ms')}).")
    if not has(fused, "extra_gib"):
        return timing + " Device memory is measured on a GPU only."
    workspace = fused.extra_gib - fused.gradients_gib
    under = fused.extra_gib < budget_gib
    return (f"{timing} Above its inputs it takes {fused.extra_gib:.3g} GiB: {fused.gradients_gib:.3g} GiB are the two "
            f"gradients every head returns, {workspace:.3g} GiB its workspace. The whole is "
            f"{'below' if under else 'above'} the {budget_gib:g} GiB set as the goal"
            f"{'' if under else ' (the chunk sizes below show what keeps it under)'}. The compiled unfused head takes "
            f"{value(compiled, 'extra_gib', '.3g', ' GiB')}, the eager one {value(eager, 'extra_gib', '.3g', ' GiB')}.")


def chunk_words(chunks: pd.DataFrame, head: pd.DataFrame, budget_gib: float = 2.0) -> str:
    """The fused head's chunk sizes: what the smallest saves against the largest and costs, and the largest chunk
    whose whole footprint (gradients included) stays under ``budget_gib``, against the compiled unfused head."""
    ran = chunks[chunks.status == "ok"].sort_values("chunk_mib")
    if len(ran) < 2:
        return "Fewer than two chunk sizes ran here, so there is no trade-off to read."
    small, large = ran.iloc[0], ran.iloc[-1]
    compiled = row_where(head, variant="compiled")
    said = (f"From a chunk of {large.chunk_mib:g} MiB ({int(large.chunk_tokens)} tokens) down to {small.chunk_mib:g} "
            f"MiB ({int(small.chunk_tokens)} tokens) the head goes from {large.ms:.4g} to {small.ms:.4g} ms, "
            f"{times(small.ms / large.ms)}.")
    if not has(large, "extra_gib"):
        return said + " Device memory is measured on a GPU only."
    said += (f" The memory above its inputs goes from {large.extra_gib:.3g} to {small.extra_gib:.3g} GiB, of which "
             f"the gradients are {head.gradients_gib.iloc[0]:.3g} GiB at every size.")
    under = ran[ran.extra_gib < budget_gib]
    if under.empty:
        return said + f" No chunk size measured here keeps the whole under {budget_gib:g} GiB."
    best = under.iloc[-1]
    return (f"{said} The largest chunk that keeps the whole under {budget_gib:g} GiB is {best.chunk_mib:g} MiB: "
            f"{best.extra_gib:.3g} GiB and {best.ms:.4g} ms, {ratio_words(best, compiled)} than the compiled "
            f"unfused head.")


def adamw_words(df: pd.DataFrame, hbm_bytes_per_s: float) -> str:
    """Ours against PyTorch's fused and for-each AdamW, and the bandwidth ours reaches of the memory's peak."""
    ours, fused, foreach = (row_where(df, variant=v) for v in ("ours", "torch fused", "foreach"))
    share = (f", {ours.tb_per_s * 1e12 / hbm_bytes_per_s:.1%} of the memory's datasheet bandwidth"
             if has(ours, "tb_per_s") else "")
    return (f"Over {ours.params / 1e9:.3g} billion parameters in {int(ours.tensors)} tensors ours takes "
            f"{value(ours, 'ms', '.4g', ' ms')}, {ratio_words(ours, fused)} than PyTorch's fused AdamW "
            f"({value(fused, 'ms', '.4g', ' ms')}) and {ratio_words(ours, foreach)} than its for-each one "
            f"({value(foreach, 'ms', '.4g', ' ms')}). It moves {value(ours, 'tb_per_s', '.3g', ' TB/s')}{share} "
            f"(PyTorch's fused one: {value(fused, 'tb_per_s', '.3g', ' TB/s')}).")


def block_comparison(df: pd.DataFrame, ours: str = "flash_triton", plain: str = "sdpa_cudnn") -> pd.DataFrame:
    """Per recomputation and compilation: the block's time with our attention (``ours``) and with plain PyTorch's
    (``plain``, SDPA cuDNN's), their ratio, and each one's MFU."""
    ok = df[df.status == "ok"]
    pivot = ok.pivot_table(index=["recompute", "compiled"], columns="attention", values=["ms", "mfu"], dropna=False)
    out = pd.DataFrame({"ours ms": pivot["ms"].get(ours), "plain ms": pivot["ms"].get(plain),
                        "ours MFU": pivot["mfu"].get(ours), "plain MFU": pivot["mfu"].get(plain)})
    out["ours / plain"] = out["ours ms"] / out["plain ms"]
    return out.reset_index()


def block_words(comparison: pd.DataFrame, ours: str = "flash_triton", plain: str = "sdpa_cudnn") -> str:
    """Where our block wins and loses against the plain one, and the fastest configuration of each."""
    c = comparison.dropna(subset=["ours / plain"])
    if c.empty:
        return "No configuration ran with both attentions here."
    faster = c[c["ours / plain"] < 1]
    describe = lambda r: f"{'compiled' if r.compiled else 'eager'}, recompute {r.recompute}"  # noqa: E731
    best_ours, best_plain = c.loc[c["ours ms"].idxmin()], c.loc[c["plain ms"].idxmin()]
    mfu = lambda x: "" if math.isnan(x) else f", MFU {x:.0%}"  # noqa: E731
    wins = (f"at {len(faster)} ({'; '.join(describe(r) for r in faster.itertuples())})" if len(faster)
            else "at none of them")
    return (f"Of the {len(c)} configurations measured with both attentions, ours is faster {wins}. The fastest "
            f"block with our attention ({describe(best_ours)}, {best_ours['ours ms']:.4g} ms"
            f"{mfu(best_ours['ours MFU'])}) is {times(best_ours['ours ms'] / best_plain['plain ms'])} than "
            f"the fastest with {plain}'s ({describe(best_plain)}, {best_plain['plain ms']:.4g} ms"
            f"{mfu(best_plain['plain MFU'])}).")


def keeping_words(blocks: pd.DataFrame, attentions: list[str]) -> str:
    """What keeping attention's output through the recomputation changes against recomputing the whole block, per
    attention and mode (time, and memory at the peak), in words: the check that the policy kept each attention."""
    said = []
    for attention in attentions:
        modes = []
        for compiled in (True, False):
            whole, kept = (row_where(blocks, attention=attention, recompute=r, compiled=compiled)
                           for r in ("all", "keep_attention"))
            if not (has(whole, "ms") and has(kept, "ms")):
                continue
            memory = ""
            if has(whole, "extra_gib") and has(kept, "extra_gib"):
                more = kept.extra_gib - whole.extra_gib
                memory = " (the same peak)" if abs(more) < SAME_GIB else f" ({more_or_less(more, 'GiB')} at the peak)"
            modes.append(f"{'compiled' if compiled else 'eager'} "
                         f"{more_or_less(kept.ms - whole.ms, more='slower', less='faster')}{memory}")
        if modes:
            said.append(f"with {attention}, {' and '.join(modes)}")
    if not said:
        return "No block ran both ways here."
    return f"Keeping attention's output instead of recomputing it, a block runs {'; '.join(said)}."


def faster_recompute(blocks: pd.DataFrame, attention: str, compiled: bool) -> str:
    """Of the two ways to recompute a block ("all", "keep_attention"), the one the block table found faster with
    ``attention`` (compiled or not); "all" where neither ran."""
    ran = blocks[(blocks.status == "ok") & (blocks.attention == attention) & (blocks.compiled == compiled)
                 & blocks.recompute.isin(["all", "keep_attention"])]
    return "all" if ran.empty else ran.loc[ran.ms.idxmin()].recompute


def offloading(recipe: Recipe) -> Recipe:
    """The recipe of the model's step: ``recipe`` keeping the feed-forward's products too, in host memory
    (``recompute="offload"``), where it keeps attention's output compiled. One block's table cannot measure that
    choice: a group's tensors cross while the next group runs."""
    if (recipe.recompute == "keep_attention" and recipe.compiled and recipe.kept_groups is None
            and not recipe.stored_groups):
        return replace(recipe, recompute="offload")
    return recipe


def deepest(steps: pd.DataFrame, ours: str, plain: str) -> str:
    """The deepest model both recipes ran, and ours against the plain one there (time, MFU, memory), in words; where
    ours kept attention's output in only some of its blocks there (the rows' ``kept_blocks``), how many, and that
    keeping it in more did not fit."""
    ran = steps[steps.status == "ok"]
    both = set(ran[ran.recipe == ours].layers) & set(ran[ran.recipe == plain].layers)
    if not both:
        return "No depth ran with both recipes here."
    n = max(both)
    mine, theirs = row_where(ran, layers=n, recipe=ours), row_where(ran, layers=n, recipe=plain)
    blocks = lambda k: f"{k} block{'' if k == 1 else 's'}"  # noqa: E731
    deeper = {who: int(ran[ran.recipe == recipe].layers.max())
              for who, recipe in (("ours", ours), ("the plain one", plain))}
    alone = "".join(f" ({who} alone with up to {blocks(k)})" for who, k in deeper.items() if k > n)
    said = f"Both recipes ran with up to {blocks(n)}{alone}. There our step"
    kept = mine.get("kept_blocks", n)
    if mine.get("recompute") == "keep_attention" and kept < n:
        tried = steps[(steps.layers == n) & (steps.recipe == ours) & (steps.status == OOM)]
        more = int(tried.kept_blocks.min()) if len(tried) else n
        said += (f", keeping attention's output in the first {int(kept)} of its {n} blocks (keeping it in "
                 f"{'every block' if more == n else more} ran out of memory),")
    said += f" takes {mine.ms:.4g} ms, {ratio_words(mine, theirs)} than the plain recipe's {theirs.ms:.4g} ms"
    if has(mine, "mfu") and has(theirs, "mfu"):
        said += f", at an MFU of {percent_against(mine.mfu, MFU_MARK)} against {theirs.mfu:.1%}"
    if has(mine, "extra_gib") and has(theirs, "extra_gib"):
        said += f", with {mine.extra_gib:.4g} GiB above what existed before the step against {theirs.extra_gib:.4g} GiB"
    return said + "."


def kernel_group_table(kernels: pd.DataFrame, ours: str, plain: str) -> pd.DataFrame:
    """Per group of kernels, the two recipes' ms a step and percent of the step's kernel time, the larger first."""
    ms = group_times(kernels)
    if not len(ms):
        return pd.DataFrame(columns=["group"])
    table = ms.assign(percent=100 * ms.share).pivot(index="group", columns="recipe", values=["ms", "percent"])
    table = table.fillna(0.0)
    columns = {(q, r): f"{who}, {q}" for r, who in ((ours, "ours"), (plain, "plain")) for q in ("ms", "percent")}
    table = table[[c for c in columns if c in table.columns]]
    table.columns = [columns[c] for c in table.columns]
    return table.sort_values(table.columns[0], ascending=False).reset_index()


def kernel_words(kernels: pd.DataFrame, steps: pd.DataFrame, ours: str, plain: str,
                 mfu_mark: float = MFU_MARK) -> str:
    """What the kernels say of the two steps (the matmuls' and the attention's shares, the attention a block), and
    what ``mfu_mark`` would ask of our deepest step that ran, a block at a time and against its attention's time."""
    ran = kernels[kernels.status == "ok"]
    missing = [f"{who} did not run under the profiler ({row.status})" for who, recipe in
               (("our step", ours), ("plain PyTorch's step", plain))
               if (row := row_where(kernels, recipe=recipe)) is not None and row.status != "ok"]
    if missing or ran.recipe.nunique() < 2:
        said = "; ".join(missing or ["the profile did not run for both recipes here"])
        return said[0].upper() + said[1:] + "."
    n = int(ran.layers.iloc[0])
    by = group_times(ran).set_index(["recipe", "group"])
    ms = lambda recipe, group: by.ms.get((recipe, group), 0.0)  # noqa: E731
    share = lambda recipe, group: by.share.get((recipe, group), 0.0)  # noqa: E731
    said = (f"At {n} block{'' if n == 1 else 's'} the matmuls take {share(ours, 'matmuls'):.0%} of our step's kernel "
            f"time and the attention {share(ours, 'attention'):.0%}; in plain PyTorch's step {share(plain, 'matmuls'):.0%} "
            f"and {share(plain, 'attention'):.0%}. The matmuls are the same kernels in both ({ms(ours, 'matmuls'):.4g} and "
            f"{ms(plain, 'matmuls'):.4g} ms a step); the attention costs our step {ms(ours, 'attention') / n:.4g} ms a "
            f"block and plain PyTorch's {ms(plain, 'attention') / n:.4g}, whose recomputation runs its forward again.")
    deepest_ours = steps[(steps.recipe == ours) & (steps.status == "ok")].sort_values("layers")
    if not len(deepest_ours) or not has(deepest_ours.iloc[-1], "mfu"):
        return said
    last = deepest_ours.iloc[-1]
    if last.mfu >= mfu_mark:
        return said + f" At {int(last.layers)} blocks, the deepest it ran, our step reached {last.mfu:.1%} MFU."
    less = (last.ms - last.ms * last.mfu / mfu_mark) / last.layers
    return said + (f" At {int(last.layers)} blocks, the deepest it ran, our step reached "
                   f"{percent_against(last.mfu, mfu_mark)} MFU; {mfu_mark:.0%} would need {less:.3g} ms less a block, "
                   f"{fmt(100 * less / (ms(ours, 'attention') / n), 2)}% of what its attention takes a block here.")


def ablation_table(steps: pd.DataFrame, full: str, memory: str) -> pd.DataFrame:
    """Each recipe's step against the recipe with every technique on (``full``, a label): time, its ratio, memory
    (the column ``memory``, in GiB) and its difference, to the MiB: the allocator's bytes apart from the same tensors
    are not a difference to print as 1.9e-06 GiB."""
    base = steps.set_index("recipe").loc[full]
    out = steps[["recipe", "status", "ms", "mfu", memory]].copy()
    out["× all on"] = out.ms / base.ms
    out["GiB − all on"] = (out[memory] - base[memory]).round(3) + 0.0  # + 0.0: no -0.0
    return out


def ablation_words(steps: pd.DataFrame, full: str, plain: str) -> str:
    """The ablation in words: the fastest step of those that recompute their blocks (the full model cannot keep
    them), against the recipe with every technique on (``full``) and plain PyTorch's (``plain``), with its MFU; then
    each swap on its own (:func:`technique_words`, with the memory of one GPU's table or the fuller GPU's)."""
    memory = next((column for column in MEMORY_COLUMNS if column in steps), None)
    ran = steps[(steps.status == "ok") & (steps.recompute != "none")]
    fastest = "No recomputing variant ran here." if ran.empty else _fastest_words(steps, ran, full, plain)
    return f"{fastest} {technique_words(steps, full, plain, memory)}".strip()


def _fastest_words(steps: pd.DataFrame, ran: pd.DataFrame, full: str, plain: str) -> str:
    best = ran.loc[ran.ms.idxmin()]
    mfu = f", at an MFU of {percent_against(best.mfu, MFU_MARK, decimals=0)}" if has(best, "mfu") else ""
    if best.recipe == plain:
        return (f"Of the variants that recompute their blocks, plain PyTorch's recipe is the fastest{mfu}, "
                f"{ratio_words(best, row_where(steps, recipe=full))} than ours with every technique on.")
    if best.recipe == full:
        head = f"Of the variants that recompute their blocks, ours with every technique on is the fastest{mfu}"
    else:
        head = (f"Of the variants that recompute their blocks, the fastest is “{best.recipe}”{mfu}: "
                f"{ratio_words(best, row_where(steps, recipe=full))} than ours with every technique on")
    return f"{head}, and {ratio_words(best, row_where(steps, recipe=plain))} than plain PyTorch's recipe."


SWITCHES = ("attention", "fused_loss", "fused_adamw", "recompute", "compiled")
MEMORY_COLUMNS = ("extra_gib", "peak GiB (fuller rank)")  # one GPU's ablation table, then two GPUs'


def _swap(row: pd.Series, full: pd.Series) -> str:
    """What ``row`` changed of the recipe ``full``, in words ("the unfused loss")."""
    words = {"attention": lambda r: f"{r.attention} in place of {full.attention}",
             "fused_loss": lambda r: "the fused loss" if r.fused_loss else "the unfused loss",
             "fused_adamw": lambda r: "our AdamW" if r.fused_adamw else "PyTorch's fused AdamW",
             "recompute": lambda r: f"recomputation “{r.recompute}”",
             "compiled": lambda r: "compiled blocks" if r.compiled else "eager blocks"}
    said = [words[switch](row) for switch in SWITCHES if switch in full.index and row[switch] != full[switch]]
    return " and ".join(said) or "the same recipe"


def technique_words(steps: pd.DataFrame, full: str, plain: str, memory: str | None) -> str:
    """Each variant that swapped techniques of ``full`` (neither ``full`` nor ``plain``) in words: its time against
    ``full``'s and the memory it took more or less (the column ``memory``, GiB; None: not said), or that it did not
    run."""
    base = row_where(steps, recipe=full)
    if base is None:
        return ""
    said = []
    for _, row in steps[~steps.recipe.isin([full, plain])].iterrows():
        if row.status != "ok":
            outcome = "ran out of memory" if row.status == "OOM" else f"did not run ({row.status})"
            said.append(f"with {_swap(row, base)} the step {outcome}")
            continue
        held = ""
        if memory and has(row, memory) and has(base, memory):
            more = row[memory] - base[memory]
            held = ", the same memory" if abs(more) < SAME_GIB else f", {more_or_less(more, unit='GiB')}"
        said.append(f"with {_swap(row, base)} the step is {ratio_words(row, base)}{held}")
    return ("One technique at a time, against ours: " + "; ".join(said) + ".") if said else ""


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


def plan_words(memory: dict[str, dict[str, float]], plan: dict[str, float], gpu_bytes: float,
               link: tuple[float, float]) -> str:
    """Which plans fit a GPU of ``gpu_bytes``, and the predicted step's parts against the class's best."""
    totals = {name: parts["total"] for name, parts in memory.items()}
    if any(math.isnan(t) for t in totals.values()) or math.isnan(plan["step"]):
        return ("The plan needs a block's memory and the parts' times measured on a GPU; this run has "
                "not measured them.")
    fits = [name for name, total in totals.items() if total < gpu_bytes]
    best = totals["fused loss, recomputed blocks"]
    fitting = " and ".join(f"“{name}”" for name in fits)
    return (f"Of the four plans, {f'{len(fits)} fit' if len(fits) != 1 else 'one fits'} in {gpu_bytes / GIB:.3g} GiB"
            f"{': ' + fitting if fits else ''}; "
            f"with the fused loss and every block recomputed a GPU holds {best / GIB:.3g} GiB. The step the parts "
            f"predict, on the link chapter 08 measured between two GPUs (a per-call overhead of {link[0] * 1e6:.3g} µs "
            f"and {link[1] / 1e9:.3g} GB/s): {plan['step']:.3g} s, of which {plan['compute']:.3g} s of forward and "
            f"backward, {plan['exposed']:.3g} s of communication the compute does not hide and "
            f"{plan['optimizer']:.3g} s of optimizer; {plan['step'] * 1e3 / CLASS_BEST_MS:.2f} times the class's "
            f"best of {CLASS_BEST_MS:,} ms on two B200s.")

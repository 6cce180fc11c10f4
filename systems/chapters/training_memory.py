"""What chapter 13 (training memory) says of its measurements: what a norm and a block keep for the backward pass,
by hooks and by an Nsight Systems memory trace, checkpointing on paper and measured, and what recomputation costs."""

from __future__ import annotations

import tempfile
from typing import Any

import pandas as pd
import torch

from systems.memory.checkpointing import best_group, nested_levels, nested_peak, one_level_peak
from systems.memory.saved import SavedTensors, block_residuals
from systems.model import ModelConfig, RMSNorm, TransformerBlock, parameter_count, preset
from systems.profiling import block_memory, nsys

MIB, GIB = 2**20, 2**30
BLOCKS = ("naive attention, 16 heads, compiled", "naive attention, 32 heads (the xl's), eager", "sdpa, 32 heads, eager")


def norm_saved(shape: tuple[int, ...], device: str) -> tuple[SavedTensors, SavedTensors, dict[str, Any]]:
    """What the model's RMSNorm keeps for its backward on a seeded fp32 input of ``shape``, eager and compiled."""
    torch.manual_seed(0)
    with torch.device(device):
        norm, x = RMSNorm(shape[-1]), torch.randn(*shape, requires_grad=True)
    with SavedTensors(norm) as eager:
        norm(x)
    compiled = torch.compile(norm)
    compiled(x)
    with SavedTensors(norm, by_operation=False) as fused:
        compiled(x)
    return eager, fused, {"eager_mib": eager.total_bytes / MIB, "fused_mib": fused.total_bytes / MIB,
                          "eager_n": len(eager.records), "fused_n": len(fused.records)}


def blocks_saved(size: str, context: int, batch: int, cfg: ModelConfig) -> tuple[dict[str, SavedTensors], pd.DataFrame]:
    """What one block keeps, measured by hooks, for each block of :data:`BLOCKS` (the handout's 16 heads compiled, the
    xl's 32 eager, and ``cfg``'s fused attention), and the table of them for all the model's blocks."""
    blocks = dict(zip(BLOCKS, (
        block_residuals(preset(size, context_length=context, num_heads=16, attention="naive"), batch, compiled=True),
        block_residuals(preset(size, context_length=context, attention="naive"), batch),
        block_residuals(cfg, batch))))
    table = pd.DataFrame([{"block": name, "tensors": len(s.records), "MiB saved": s.total_bytes / MIB,
                           f"× {cfg.num_layers} blocks (GiB)": cfg.num_layers * s.total_bytes / GIB}
                          for name, s in blocks.items()])
    return blocks, table


def traced(size: str, context: int, batch: int, cfg: ModelConfig, full: bool) -> tuple[dict, dict, bool]:
    """One block forward and backward in an Nsight Systems memory trace (:mod:`systems.profiling.block_memory`), or,
    where this is no full run or the machine lacks a GPU or nsys, a trace made from the hooks' measurement: the
    record, what the trace says of the block, and whether it is real."""
    try:
        nsys.find_nsys()
        real = full and torch.cuda.is_available()
    except nsys.NsysNotFound:
        real = False
    with tempfile.TemporaryDirectory() as tmp:
        rec = (block_memory.record(size, context, batch, "sdpa", tmp) if real
               else block_memory.synthetic_record(cfg, batch, tmp))
    return rec, block_memory.block_memory(rec["events"], rec["ranges"], rec["info"]), real


def hooks_against_trace(hooks: SavedTensors, trace: dict) -> pd.DataFrame:
    """MiB per module as the hooks count what is saved and as the trace counts what is allocated and kept."""
    by_module = pd.concat([hooks.by_module().set_index("module").MiB.rename("hooks (MiB)"),
                           trace["by_module"].set_index("module").MiB.rename("trace (MiB)")], axis=1)
    return by_module.fillna(0).sort_values("hooks (MiB)", ascending=False).rename_axis("module").reset_index()


def trace_facts(trace: dict, rec: dict, cfg: ModelConfig, block_bytes: float) -> dict[str, Any]:
    """The residuals the trace finds against the hooks' ``block_bytes``, what accounts for the difference (tensors that
    existed before the forward began: the input and the rotary tables), and the gradients the backward leaves."""
    top = trace["by_op"].head(5)
    trace_bytes, input_bytes = trace["residual_bytes"], rec["info"]["input_bytes"]
    with torch.device("meta"):  # the block's buffers (RoPE's cos and sin tables), sized without memory
        table_bytes = sum(b.nbytes for b in TransformerBlock(cfg).buffers())
    gap, existing = block_bytes - trace_bytes, input_bytes + table_bytes
    grad = {k: trace[f"gradient_bytes_{k}"] for k in ("handout", "direct", "expected")}
    existing_words = (f"the block's input ({input_bytes / MIB:.4g} MiB), which the first norm saves, and the RoPE's "
                      f"cos and sin tables ({table_bytes / MIB:.3g} MiB), which the rotation saves: both existed "
                      "before the forward pass began, so no allocation in the trace stands for them")
    return {"mib": trace_bytes / MIB, "gap_mib": gap / MIB, "input_mib": input_bytes / MIB,
            "top5_pct": 100 * top.share.sum(), "top1": top.op.iloc[0], "top1_pct": 100 * top.share.iloc[0],
            "forward_mib": trace["forward_allocated_bytes"] / MIB,
            "backward_change_mib": trace["backward_change_bytes"] / MIB, "grad_handout_mib": grad["handout"] / MIB,
            "grad_direct_mib": grad["direct"] / MIB, "grad_expected_mib": grad["expected"] / MIB,
            "grad_tensors": trace["gradient_tensors"], "block_params_m": rec["info"]["parameters"] / 1e6,
            "gap_words": existing_words if abs(gap - existing) <= 0.001 * block_bytes else
            f"in part ({existing / MIB:.4g} MiB) {existing_words}; the rest, {(gap - existing) / MIB:.4g} MiB, the "
            "two measurements disagree on",
            "grad_words": "which is what the gradients should take" if abs(grad["handout"] - grad["expected"]) <=
            0.01 * grad["expected"] else "which is not what the gradients should take"}


def paper_plans(n: int, groups: list[int], block: float, boundary: float) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Peak activation memory on paper of no checkpointing, one level of each group size and the nested halving,
    with the best group size among the divisors and the continuous optimum k* = √(N · boundary / block)."""
    plans = [("none", one_level_peak(n, 0, block, boundary), 0)]
    plans += [(f"one level, groups of {k}", one_level_peak(n, k, block, boundary), 1) for k in groups if k]
    plans.append((f"nested {nested_levels(n)}", nested_peak(n, nested_levels(n), block, boundary),
                  len(nested_levels(n))))
    table = pd.DataFrame([{"strategy": s, "activation peak (GiB)": b / GIB, "extra forward passes": f}
                          for s, b, f in plans])
    return table, {"best_k": best_group(n, block, boundary), "k_star": (n * boundary / block) ** 0.5}


def checkpointed_steps(steps: pd.DataFrame, cfg: ModelConfig, block: float, boundary: float) -> pd.DataFrame:
    """The training steps per group size with their peaks in GiB (the step's, the backward's, the optimizer's), the
    backward's peak above the model's state, and the activations on paper."""
    steps = steps.copy()
    for phase in ("peak_memory", "backward_peak", "optimizer_peak"):
        steps[phase.replace("_memory", "") + "_gib"] = steps.get(f"{phase}_mb", pd.Series(float("nan"),
                                                                                          index=steps.index)) / 1024
    steps["backward above states (GiB)"] = steps.backward_peak_gib - 16 * parameter_count(cfg) / GIB
    steps["activations on paper (GiB)"] = [one_level_peak(cfg.num_layers, k, block, boundary) / GIB
                                           for k in steps.checkpoint_blocks]
    return steps


def checkpoint_facts(steps: pd.DataFrame, cfg: ModelConfig) -> dict[str, Any]:
    """Whether checkpointing made the step fit, the peaks of each group size, and the phase that sets them."""
    ok = steps[steps.status == "ok"].set_index("checkpoint_blocks")
    unchecked = steps.set_index("checkpoint_blocks").status[0]
    in_adamw = len(ok) > 0 and bool((ok.optimizer_peak_gib > ok.backward_peak_gib).all())
    return {"unchecked": unchecked,
            "fit_words": "runs out of memory without checkpointing and fits with it" if unchecked != "ok" and len(ok)
            else "does not show the difference on this machine",
            "peaks": "; ".join(f"groups of {k}: {g:.3g} GiB" for k, g in ok.peak_gib.items()),
            "bwd_peaks": "; ".join(f"groups of {k}: {g:.3g} GiB" for k, g in ok.backward_peak_gib.items()),
            "peak_phase_words": (
                "Every step peaks in the AdamW update, after the backward pass has freed the activations: PyTorch's "
                "default (multi-tensor) AdamW computes the square roots of all second moments at once, a temporary "
                f"as large as one moment ({4 * parameter_count(cfg) / GIB:.3g} GiB, 4 bytes per parameter), so the "
                "step's peak hardly depends on the checkpointing." if in_adamw else
                "Not every step peaks in the AdamW update: where the backward pass sets the peak, the checkpointing "
                "decides it.")}


def recompute_cost(overhead: pd.DataFrame) -> dict[str, Any]:
    """The step with single-block groups against the step without, and the backward pass's growth, in words where
    one of them did not run."""
    t = overhead.set_index("checkpoint_blocks")
    if not (t.status == "ok").all():
        why = "; ".join(f"{'with' if k else 'without'} checkpointing: {s}" for k, s in t.status.items() if s != "ok")
        return {"words": f"could not be compared here ({why})"}
    return {"words": f"takes {t.step_ms[1] / t.step_ms[0]:.3g} times as long, against about 1.33 by the FLOP count; "
                     f"the backward pass alone grows {t.backward_ms[1] / t.backward_ms[0]:.3g}×, because the "
                     "recomputed forwards run inside it"}

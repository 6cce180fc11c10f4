"""FSDP measured and checked where it runs without GPUs: gloo processes on the CPU (the FSDP chapter).

:func:`trace` records one training step of our FSDP on every rank (each layer's forward, the backward, every
all-gather and reduce-scatter from issue to completion) as timeline intervals; :func:`agreement` trains FSDP
and one process side by side and counts how far apart they end, per compute dtype, together with FSDP against
its own arithmetic replayed in one process and against PyTorch's FSDP2. CPU timings show the schedule's order
and overlap, not GPU speeds.
"""

from __future__ import annotations

import copy
import time

import pandas as pd
import torch

from systems.bench.e2e import AUTOCAST
from systems.dist import launch
from systems.fsdp import FSDP
from systems.model import ModelConfig, TransformerLM
from systems.parallel import TrainStep, wrap

# a training step's phases (systems.parallel.TrainStep) as the trace names them
STEP_PHASES = {"forward": "forward", "backward": "backward", "synchronize": "waiting for reductions"}
# event kind -> (timeline lane, label): the step's phases, each layer's forward, the two collectives
LANES = {"compute": ("layers", "layer forward"), "all-gather": ("communication", "all-gather"),
         "reduce-scatter": ("communication", "reduce-scatter"), "forward": ("step", "forward"),
         "backward": ("step", "backward"), "waiting for reductions": ("step", "waiting for reductions")}


def _batch(cfg: ModelConfig, rows: int, seed: int = 123) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(cfg.vocab_size, (rows, cfg.context_length + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _trace_worker(rank: int, world: int, cfg: ModelConfig, rows: int, steps: int) -> dict:
    torch.manual_seed(0)
    strategy = wrap("fsdp", TransformerLM(cfg), trace=True)
    fsdp = strategy.module
    x, y = _batch(cfg, rows * world)
    mine = slice(rows * rank, rows * (rank + 1))
    phases: list[dict] = []

    def recorded(phase: str, fn):
        start = time.perf_counter()
        out = fn()
        if phase in STEP_PHASES:
            phases.append({"kind": STEP_PHASES[phase], "layer": "", "start": start, "end": time.perf_counter()})
        return out

    step = TrainStep(strategy, strategy.optimizer(torch.optim.AdamW, lr=1e-3), timer=recorded)
    for _ in range(steps):  # the last step is the one shown: the first ones learn the order and warm up
        fsdp.events.clear()
        phases.clear()
        step(x[mine], y[mine])
    shard_bytes = sum(s.param.numel() * 4 for _, _, s in fsdp.units)
    return {"events": phases + fsdp.events, "peak_layers": fsdp.peak_layers,
            "peak_gathered_bytes": fsdp.peak_gathered_bytes, "shard_bytes": shard_bytes,
            "layers": len(fsdp.units), "largest_layer_bytes": max(s.full_numel * 4 for _, _, s in fsdp.units)}


def trace(cfg: ModelConfig, world: int = 2, rows: int = 4, steps: int = 3) -> tuple[pd.DataFrame, list[dict]]:
    """Intervals (run, lane, kind, layer, start_ms, end_ms) of the last of ``steps`` steps, every rank's clock
    starting at its step's first interval; and each rank's accounting (peak layers and bytes gathered)."""
    results = launch(_trace_worker, world, cfg, rows, steps, backend="gloo", timeout_s=300)
    rows_out = []
    for rank, r in enumerate(results):
        t0 = min(e["start"] for e in r["events"])
        for e in r["events"]:
            lane, kind = LANES[e["kind"]]
            rows_out.append({"run": f"rank {rank}", "lane": lane, "kind": kind, "layer": e["layer"],
                             "start_ms": 1e3 * (e["start"] - t0), "end_ms": 1e3 * (e["end"] - t0)})
    accounting = [{k: v for k, v in r.items() if k != "events"} for r in results]
    return pd.DataFrame(rows_out), accounting


def _differences(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    diff = [(got[n] - w).abs().max().item() for n, w in want.items()]
    unequal = sum(int((got[n] != w).sum()) for n, w in want.items())
    return {"max_abs_diff": max(diff), "elements_not_bitwise": unequal,
            "elements": sum(w.numel() for w in want.values())}


def _agreement_worker(rank: int, world: int, cfg: ModelConfig, dtype: str, steps: int, rows: int) -> list[dict]:
    torch.manual_seed(0)
    base = TransformerLM(cfg)
    reference, replay = copy.deepcopy(base), copy.deepcopy(base)
    fsdp = FSDP(copy.deepcopy(base), compute_dtype=AUTOCAST[dtype])
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (reference, replay, fsdp)]
    x, y = _batch(cfg, rows * world)
    out = []
    for step in range(steps):
        for o in opts:
            o.zero_grad(set_to_none=True)
        reference(x, y).backward()  # the whole batch in one process
        fsdp(x[rows * rank:rows * (rank + 1)], y[rows * rank:rows * (rank + 1)]).backward()
        fsdp.finish_gradient_synchronization()
        halves = []  # FSDP's arithmetic in one process: each rank's half, weights in the compute dtype
        for r in range(world):
            half = copy.deepcopy(replay)
            for name, _, _ in fsdp.units:
                target = half.get_submodule(name)
                target.weight.data = target.weight.data.to(AUTOCAST[dtype] or torch.float32)
            half(x[rows * r:rows * (r + 1)], y[rows * r:rows * (r + 1)]).backward()
            halves.append([p.grad.float() for p in half.parameters()])
        for p, *g in zip(replay.parameters(), *halves):
            p.grad = sum(g[1:], g[0]) / world
        for o in opts:
            o.step()
        full = fsdp.gather_full_params()
        want = {n: p.detach() for n, p in reference.named_parameters()}
        replayed = {n: p.detach() for n, p in replay.named_parameters()}
        out.append({"dtype": dtype, "step": step + 1, **_differences(full, want),
                    "bitwise_equal_to_replay": _differences(full, replayed)["elements_not_bitwise"] == 0})
    return out


def agreement(cfg: ModelConfig, world: int = 2, dtypes=("fp32", "bf16", "fp16"), steps: int = 3,
              rows: int = 4) -> pd.DataFrame:
    """FSDP over ``world`` gloo ranks (``rows`` sequences each) against one process on the whole batch, SGD,
    per compute dtype and step, as rank 0 sees it; and whether FSDP equals its replayed arithmetic bitwise."""
    frames = [pd.DataFrame(launch(_agreement_worker, world, cfg, d, steps, rows, backend="gloo", timeout_s=300)[0])
              for d in dtypes]
    return pd.concat(frames, ignore_index=True)


def _fsdp2_worker(rank: int, world: int, cfg: ModelConfig, steps: int, rows: int) -> float:
    torch.manual_seed(0)
    base = TransformerLM(cfg)
    strategies = [wrap(name, copy.deepcopy(base)) for name in ("fsdp", "fsdp2")]  # ours, theirs
    steps_ = [TrainStep(s, s.optimizer(torch.optim.AdamW, lr=1e-3)) for s in strategies]
    x, y = _batch(cfg, rows * world)
    mine = slice(rows * rank, rows * (rank + 1))
    for _ in range(steps):
        for step in steps_:
            step(x[mine], y[mine])
    a, b = (step.strategy.full_state_dict() for step in steps_)
    return max((a[k] - b[k]).abs().max().item() for k in a)


def fsdp2_difference(cfg: ModelConfig, world: int = 2, steps: int = 3, rows: int = 4) -> float:
    """The largest parameter difference between our FSDP and PyTorch's FSDP2 after ``steps`` AdamW steps."""
    return launch(_fsdp2_worker, world, cfg, steps, rows, backend="gloo", timeout_s=300)[0]


def memory_by_construction(cfg: ModelConfig, world: int, gather_bytes: int = 2) -> pd.DataFrame:
    """GiB per rank of weights, gradients and AdamW state (fp32) under DDP, ZeRO-1 (state split evenly) and our
    FSDP (Linear and Embedding weights sharded, norms replicated, plus the two largest layers' full weights
    gathered in a ``gather_bytes``-byte dtype), for ``cfg`` built on the meta device."""
    from systems.fsdp.shard import is_shardable

    with torch.device("meta"):
        model = TransformerLM(cfg)
    sharded = {id(m.weight): m.weight.numel() for m in model.modules() if is_shardable(m)}
    total = sum(p.numel() for p in model.parameters())
    replicated = total - sum(sharded.values())
    gathered = gather_bytes * sum(sorted(sharded.values())[-2:])
    gib = 2**30
    rows = [
        {"wrapper": "DDP", "weights": 4 * total, "gradients": 4 * total, "optimizer state": 8 * total, "gathered": 0},
        {"wrapper": "ZeRO-1", "weights": 4 * total, "gradients": 4 * total, "optimizer state": 8 * total / world,
         "gathered": 0},
        {"wrapper": "FSDP", "weights": 4 * (sum(sharded.values()) / world + replicated),
         "gradients": 4 * (sum(sharded.values()) / world + replicated),
         "optimizer state": 8 * (sum(sharded.values()) / world + replicated), "gathered": gathered},
    ]
    out = pd.DataFrame(rows)
    parts = ["weights", "gradients", "optimizer state", "gathered"]
    out[parts] = out[parts] / gib
    out["total"] = out[parts].sum(axis=1)
    return out.assign(ranks=world)

"""Memory and time of optimizer state sharding (2025 handout §3, 2026 §6, ``optimizer_state_sharding_accounting``).

Each rank trains the model data-parallel (gradients averaged by a :mod:`systems.ddp` wrapper) with one
of these optimizers, one after the other in the same process group:

    adamw        torch.optim.AdamW, every rank holds the full state (the baseline)
    zero1        systems.zero.ShardedOptimizer over AdamW, one async broadcast per parameter
    zero1_flat   the same, parameters flattened into buckets per owner before broadcasting
    torch_zero   torch.distributed.optim.ZeroRedundancyOptimizer over AdamW (PyTorch's own, the anchor)

or, with ``setups``, whole configurations of :data:`SETUPS`: DDP, ZeRO-1 and FSDP, ours and PyTorch's, fp32
and bf16 (the comparison of the 2026 edition's FSDP chapter),

and records allocated memory, and the peak since the previous point, after initialisation, directly
before and directly after the optimizer step (of the first iteration, which creates the optimizer state, and of the second,
the steady state), the bytes the autograd graph saves for backward (activations), and the time per
iteration. Every number is the
maximum over the ranks (the slowest rank, the fullest GPU). On the CPU (gloo, smoke runs) "allocated"
is the bytes of live parameters, gradients and optimizer state, since there is no allocator to ask.

    from systems.dist import launch
    rows = launch(measure, 2, ShardingConfig(preset("xl")))[0]
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

from systems.device import OOM, free_memory, local_device, run_or_oom, synchronize, timed
from systems.model import ModelConfig, TransformerLM, parameter_count, preset
from systems.parallel import SHARDED, TrainStep, wrap
from systems.zero import ShardedOptimizer, assign_owners, state_bytes

OPTIMIZERS = ("adamw", "zero1", "zero1_flat", "torch_zero")
MIB = 2**20
# Whole setups for the comparison of DDP, ZeRO-1 and FSDP (2026 edition, fsdp_accounting): name -> (wrapper,
# optimizer, bf16). With bf16, forward and loss run under autocast and the FSDP wrappers gather weights in bf16.
SETUPS = {
    "DDP": ("torch", "adamw", False), "DDP (ours)": ("bucketed", "adamw", False),
    "ZeRO-1 (ours)": ("bucketed", "zero1", False), "ZeRO-1 (torch)": ("torch", "torch_zero", False),
    "FSDP (ours)": ("fsdp", "adamw", False), "FSDP2": ("fsdp2", "adamw", False),
    "DDP bf16": ("torch", "adamw", True), "ZeRO-1 (ours) bf16": ("bucketed", "zero1", True),
    "FSDP (ours) bf16": ("fsdp", "adamw", True), "FSDP2 bf16": ("fsdp2", "adamw", True),
}


@dataclass
class ShardingConfig:
    model: ModelConfig = field(default_factory=lambda: preset("xl"))  # naive attention: the handout's model
    batch_size: int = 8  # sequences per rank
    wrapper: str = "bucketed"  # gradient averaging; its buffers live only while a bucket is in flight
    bucket_size_mb: float = 100.0
    optimizers: tuple[str, ...] = OPTIMIZERS
    setups: tuple[str, ...] = ()  # names of SETUPS: measured instead of the optimizers under ``wrapper``
    lr: float = 1e-4
    warmup: int = 3
    steps: int = 10


def _make_optimizer(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr)
    if name in ("zero1", "zero1_flat"):
        return ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=lr,
                                broadcast="flat" if name == "zero1_flat" else "param")
    if name == "torch_zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {OPTIMIZERS}")


def _tensor_bytes(tensors) -> int:
    """Bytes this rank holds of ``tensors`` (of a DTensor, FSDP2's kind of parameter, its local shard)."""
    local = (getattr(t, "_local_tensor", t) for t in tensors if t is not None)
    return sum(t.numel() * t.element_size() for t in local)


def _allocated(device: torch.device, model: torch.nn.Module, optimizer) -> int:
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    params = list(model.parameters())
    return _tensor_bytes(params) + _tensor_bytes(p.grad for p in params) + state_bytes(optimizer)


def _peak(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else float("nan")


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def saved_activation_bytes(model: torch.nn.Module, fn) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs, each storage counted once,
    parameters excluded: the activation memory of the forward pass, counted rather than inferred."""
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_storages:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _measure_one(name: str, cfg: ShardingConfig, device: torch.device, rank: int) -> dict[str, Any]:
    """One optimizer under ``cfg.wrapper``, or one of :data:`SETUPS` by name; the row is labelled ``name``."""
    wrapper, optimizer_name, bf16 = SETUPS[name] if name in SETUPS else (cfg.wrapper, name, False)
    model_cfg = cfg.model
    gen = torch.Generator().manual_seed(rank)
    shape = (cfg.batch_size, model_cfg.context_length)
    x = torch.randint(model_cfg.vocab_size, shape, generator=gen).to(device)
    y = torch.randint(model_cfg.vocab_size, shape, generator=gen).to(device)
    _reset_peak(device)
    torch.manual_seed(0)
    with torch.device(device):
        model = TransformerLM(model_cfg)
    sharded = wrapper in SHARDED
    strategy = wrap(wrapper, model, compute_dtype=torch.bfloat16 if bf16 else None, bucket_size_mb=cfg.bucket_size_mb)
    optimizer = _make_optimizer(optimizer_name, model, cfg.lr)  # after sharding: over the shards
    step = TrainStep(strategy, optimizer, autocast=torch.bfloat16 if bf16 else None)
    row: dict[str, Any] = {"optimizer": name, "params": parameter_count(model_cfg)}
    memory = []  # allocated now, and the peak since the previous point (the cumulative peak is their running max)

    def point(label: str, iteration: int) -> None:
        memory.append({"iteration": iteration, "point": label,
                       "allocated_mb": _allocated(device, model, optimizer) / MIB, "peak_mb": _peak(device) / MIB})
        _reset_peak(device)

    def backward() -> None:
        step.forward_backward(x, y)
        step.synchronize()

    point("after init", 0)
    # Iteration 1 creates the optimizer state; iteration 2 is the steady state (the state already exists).
    for iteration in (1, 2):
        if iteration == 1 and not sharded:
            row["activations_mb"] = saved_activation_bytes(model, backward) / MIB
        elif iteration == 1:  # FSDP's own saved-tensor hooks take precedence over the counting ones
            row["activations_mb"] = float("nan")
            backward()
        else:
            backward()
        synchronize(device)
        point("before step", iteration)
        optimizer.step()
        synchronize(device)
        point("after step", iteration)
        optimizer.zero_grad(set_to_none=True)
    row.update(state_mb=state_bytes(optimizer) / MIB, memory=memory)

    step_ms, opt_ms = [], []
    for i in range(cfg.warmup + cfg.steps):
        with timed(device) as whole:
            backward()
            with timed(device) as update:
                step.update()
        if i >= cfg.warmup:
            step_ms.append(whole.ms)
            opt_ms.append(update.ms)
    row.update(step_ms=statistics.fmean(step_ms), step_std_ms=statistics.pstdev(step_ms),
               optimizer_ms=statistics.fmean(opt_ms), optimizer_std_ms=statistics.pstdev(opt_ms))
    del model, strategy, step, optimizer, x, y
    free_memory()
    return row


def measure(rank: int, world_size: int, cfg: ShardingConfig) -> list[dict[str, Any]]:
    """Every optimizer of ``cfg`` on this rank; returns, on every rank, one row per optimizer with each
    number the maximum over ranks and ``state_mb_per_rank`` listing every rank's optimizer state. A setup that ran
    out of memory on any rank is a row with ``status`` "OOM" and no numbers, and the next one runs."""
    device = local_device()
    mine = []
    for name in cfg.setups or cfg.optimizers:
        row = run_or_oom(lambda name=name: _measure_one(name, cfg, device, rank))
        free_memory()
        fits: list[Any] = [None] * world_size
        dist.all_gather_object(fits, row is not OOM)  # the ranks agree before the next setup's first collective
        oom = {"optimizer": name, "params": parameter_count(cfg.model), "status": OOM}
        mine.append({**row, "status": "ok"} if all(fits) else oom)
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, mine)
    rows = []
    for per_rank in zip(*everyone):
        if per_rank[0]["status"] == OOM:
            rows.append({**per_rank[0], "world_size": world_size})
            continue
        row = {k: (max(r[k] for r in per_rank) if isinstance(v, float) else v) for k, v in per_rank[0].items()}
        row["memory"] = [{k: (max(r["memory"][i][k] for r in per_rank) if isinstance(v, float) else v)
                          for k, v in m.items()} for i, m in enumerate(per_rank[0]["memory"])]
        row.update(world_size=world_size, state_mb_per_rank=[r["state_mb"] for r in per_rank])
        rows.append(row)
    return rows


def analytic_mb(n_params: int, world_size: int, owned_max: int | None = None) -> dict[str, float]:
    """Expected fp32 AdamW memory (MiB) of one rank: parameters and gradients 4 bytes per parameter each,
    optimizer state 8 bytes per owned parameter (two moments; the step counters are negligible).
    ``owned_max`` is the most parameters any rank owns (default: all of them, i.e. unsharded)."""
    owned = n_params if owned_max is None else owned_max
    return {"parameters": 4 * n_params / MIB, "gradients": 4 * n_params / MIB, "optimizer state": 8 * owned / MIB}


def communication_bytes(n_params: int, world_size: int, bytes_per_param: int = 4) -> dict[str, float]:
    """Bytes each rank sends per step (bandwidth-optimal ring collectives), by scheme.

    DDP: all-reduce of the gradients, 2(N−1)/N·Ψ. Ours (the handout's ZeRO-1): the same all-reduce, then
    every owner broadcasts its updated parameters, (N−1)/N·Ψ more per rank on average. ZeRO stage 1 of
    the paper (with P_g's reduce-scatter, §7.2.1): reduce-scatter of gradients to their owners plus
    all-gather of the updated parameters, (N−1)/N·Ψ each, the same 2(N−1)/N·Ψ as DDP.
    """
    psi = n_params * bytes_per_param
    f = (world_size - 1) / world_size
    return {"ddp": 2 * f * psi, "zero1 (ours)": 3 * f * psi, "zero1 (paper)": 2 * f * psi}


# ---- what the runs say (chapter 11) ---------------------------------------------------------------------


def ownership(model: ModelConfig, world_size: int) -> pd.DataFrame:
    """How the greedy assignment splits a model's parameters over the ranks (shapes only, the meta device)."""
    with torch.device("meta"):
        sizes = [p.numel() for p in TransformerLM(model).parameters()]
    owners = assign_owners([4 * n for n in sizes], [0] * world_size)
    table = pd.DataFrame({"rank": owners, "parameters": sizes}).groupby("rank").agg(
        tensors=("parameters", "size"), parameters=("parameters", "sum")).reset_index()
    return table.assign(**{"share (%)": 100 * table.parameters / sum(sizes)})



"""Sharded training state as whole tensors: gradient clipping over the global norm, and optimizer states
gathered to (and cut from) the state dict a plain optimizer over the unsharded model would have, so a
checkpoint taken at one world size resumes at any other, or without FSDP at all.

``shards`` maps ``id(parameter)`` to its :class:`~systems.fsdp.shard.ShardedWeight` for the sharded parameters;
every other parameter is replicated (the same on every rank). All functions are collectives.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from systems.fsdp.shard import ShardedWeight


def clip_grad_norm_(params: list[torch.Tensor], shards: dict[int, ShardedWeight], max_norm: float,
                    group: dist.ProcessGroup | None = None) -> float:
    """Scale every gradient so that the norm of the whole model's gradient is at most ``max_norm``; return that
    norm before scaling. Shards add up over the ranks, replicated gradients count once."""
    with_grad = [p for p in params if p.grad is not None]
    zero = torch.zeros((), dtype=torch.float32, device=with_grad[0].grad.device if with_grad else "cpu")
    sharded = sum((p.grad.float().pow(2).sum() for p in with_grad if id(p) in shards), zero)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(sharded, group=group)
    total = (sharded + sum((p.grad.float().pow(2).sum() for p in with_grad if id(p) not in shards), zero)).sqrt()
    norm = float(total)
    if math.isfinite(norm) and norm > max_norm:
        for p in with_grad:
            p.grad.mul_(max_norm / (norm + 1e-6))
    return norm


def _ordered(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def full_optimizer_state(optimizer: torch.optim.Optimizer, shards: dict[int, ShardedWeight]) -> dict[str, Any]:
    """``optimizer.state_dict()`` with the state tensors of sharded parameters gathered to full shape."""
    saved, params = optimizer.state_dict(), _ordered(optimizer)
    state = {}
    for i in sorted(saved["state"]):  # the same order on every rank: the gathers pair up
        shard = shards.get(id(params[i]))
        # copies throughout: the live state must not change under a caller who keeps the dict
        state[i] = {k: shard.full(v) if shard is not None and _per_element(v, params[i].shape) else _copy(v)
                    for k, v in saved["state"][i].items()}
    return {"state": state, "param_groups": saved["param_groups"]}


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, shards: dict[int, ShardedWeight],
                              full: dict[str, Any]) -> None:
    """Load a state dict of the unsharded model's optimizer, keeping this rank's rows of sharded states."""
    params = _ordered(optimizer)
    if len(full["param_groups"]) != len(optimizer.param_groups) or \
            sum(len(g["params"]) for g in full["param_groups"]) != len(params):
        raise ValueError("the optimizer state is of another parameter list than this model's")
    state = {}
    for i, entries in full["state"].items():
        shard = shards.get(id(params[int(i)]))
        # copies: optimizers keep the tensors they are given, and stepping would then change the caller's dict
        state[i] = {k: _copy(shard.local_rows(v)) if shard is not None and _per_element(v, shard.shape)
                    else _copy(v) for k, v in entries.items()}
    optimizer.load_state_dict({"state": state, "param_groups": full["param_groups"]})


def _per_element(value: Any, shape) -> bool:
    """A state tensor of ``shape`` (its parameter's, sharded or full), as AdamW's moments are; a step count is not."""
    return isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) == tuple(shape)


def _copy(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value

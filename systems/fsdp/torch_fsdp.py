"""PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) behind the interface of our FSDP, so the training
entry point and the benchmarks run either.

Each Transformer block becomes one FSDP2 unit, and the root takes what is left (embedding, head, final norm):
one all-gather per block in the forward, one in the backward and one reduce-scatter, as torchtitan wraps its
models. The blocks are the ``units`` given, else :func:`repeated_blocks` (our model's ``layers``; the stack of
any model built as one); a model with no such stack falls back to one unit per Linear and Embedding layer.
Parameters become DTensors sharded along their first dimension. With ``compute_dtype`` the mixed-precision policy
gathers weights in that dtype and reduces gradients in fp32. Checkpoints go through ``torch.distributed.checkpoint.state_dict`` as full state
dicts, re-keyed to the positions a plain optimizer's state dict uses, so they load into our FSDP, into DDP or
into a single process alike.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn as nn

from systems.fsdp.shard import is_shardable


def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The blocks of a model built as a stack: the members of its largest ``nn.ModuleList`` whose members are all of
    one class (our ``TransformerLM.layers``; GPT-2's ``h``, Llama's ``layers``); empty if it has none."""
    stacks = [list(m) for m in module.modules()
              if isinstance(m, nn.ModuleList) and len(m) and len({type(b) for b in m}) == 1]
    return max(stacks, key=len, default=[])


class TorchFSDP(nn.Module):
    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None,
                 units: list[nn.Module] | None = None):
        super().__init__()
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        if units is None:
            units = repeated_blocks(module) or [m for m in module.modules() if is_shardable(m)]
        inside = {id(m) for m in module.modules()}
        if any(id(u) not in inside or u is module for u in units):
            raise ValueError("units must be submodules of the wrapped module (the root is wrapped anyway)")
        for unit in units:
            fully_shard(unit, mp_policy=policy)
        fully_shard(module, mp_policy=policy)
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        """Nothing to wait for: FSDP2 finishes its reduce-scatters before ``backward()`` returns."""

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Micro-batches accumulate unsharded gradients locally; the next backward outside reduces them."""
        self.module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)

    def clip_grad_norm_(self, max_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def _options(self):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=False)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.module, options=self._options())

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.module, state, options=self._options())

    def _names(self) -> list[str]:
        return [name for name, _ in self.module.named_parameters()]

    def full_optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Full state, keyed by parameter position as a plain optimizer's is (FSDP2 keys it by name)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        by_name = get_optimizer_state_dict(self.module, optimizer, options=self._options())
        index = {name: i for i, name in enumerate(self._names())}
        return {"state": {index[n]: s for n, s in by_name["state"].items()},
                "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in by_name["param_groups"]]}

    def load_full_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, full: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        names = self._names()
        by_name = {"state": {names[int(i)]: s for i, s in full["state"].items()},
                   "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in full["param_groups"]]}
        set_optimizer_state_dict(self.module, optimizer, by_name, options=self._options())

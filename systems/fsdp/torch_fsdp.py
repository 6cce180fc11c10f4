"""PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) behind the interface of our FSDP, so the training
entry point and the benchmarks run either.

Each Transformer block (or, in a model without ``blocks``, each Linear and Embedding layer) becomes one FSDP2
unit, and the root takes what is left (embedding, head, final norm); parameters become DTensors sharded along
their first dimension. With ``compute_dtype`` the mixed-precision policy gathers weights in that dtype and
reduces gradients in fp32. Checkpoints go through ``torch.distributed.checkpoint.state_dict`` as full state
dicts, re-keyed to the positions a plain optimizer's state dict uses, so they load into our FSDP, into DDP or
into a single process alike.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn as nn

from systems.fsdp.shard import is_shardable


class TorchFSDP(nn.Module):
    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None):
        super().__init__()
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        units = list(module.blocks) if hasattr(module, "blocks") else [m for m in module.modules() if is_shardable(m)]
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

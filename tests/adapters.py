"""The CS336 Assignment 2 test interface, wired to `systems`.

The course's tests call these functions; each returns the project's implementation. Imports are local
so that one piece (say Triton) being unavailable does not break the others.
"""

from __future__ import annotations

from typing import Type

import torch


def get_flashattention_autograd_function_pytorch() -> Type:
    from systems.attention.flash_pytorch import FlashAttentionPytorch

    return FlashAttentionPytorch


def get_flashattention_autograd_function_triton() -> Type:
    from systems.attention.flash_triton import FlashAttentionTriton

    return FlashAttentionTriton


def get_ddp_individual_parameters(module: torch.nn.Module) -> torch.nn.Module:
    from systems.ddp import cs336

    return cs336.get_ddp_individual_parameters(module)


def ddp_individual_parameters_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    from systems.ddp import cs336

    return cs336.ddp_individual_parameters_on_after_backward(ddp_model, optimizer)


def get_ddp_bucketed(module: torch.nn.Module, bucket_size_mb: float) -> torch.nn.Module:
    from systems.ddp import cs336

    return cs336.get_ddp_bucketed(module, bucket_size_mb)


def ddp_bucketed_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    from systems.ddp import cs336

    return cs336.ddp_bucketed_on_after_backward(ddp_model, optimizer)


def ddp_bucketed_on_train_batch_start(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    from systems.ddp import cs336

    return cs336.ddp_bucketed_on_train_batch_start(ddp_model, optimizer)


def get_sharded_optimizer(params, optimizer_cls: Type[torch.optim.Optimizer], **kwargs) -> torch.optim.Optimizer:
    from systems.zero import get_sharded_optimizer as make

    return make(params, optimizer_cls, **kwargs)

"""The CS336 Assignment 2 test interface of both editions, wired to `systems`.

The course's tests call these functions; each returns the project's implementation. The 2025 edition's names
come first; the 2026 edition renames the per-parameter DDP adapters (``get_ddp``, ``ddp_on_after_backward``),
drops the bucketed ones and adds FSDP (``get_fsdp``, ``fsdp_on_after_backward``, ``fsdp_gather_full_params``).
Imports are local so that one piece (say Triton) being unavailable does not break the others.
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


def get_flashattention_autograd_function_cuda() -> Type:
    """Not a CS336 name: the CUDA C++ kernels behind the same interface, so the course's attention tests can run
    against them (``tests/test_flash_cuda.py`` does, on a GPU)."""
    from systems.attention.flash_cpp import FlashAttentionCuda

    return FlashAttentionCuda


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


# ---- the 2026 edition ----------------------------------------------------------------------------------


def get_ddp(module: torch.nn.Module) -> torch.nn.Module:
    from systems.ddp import cs336

    return cs336.get_ddp(module)


def ddp_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    from systems.ddp import cs336

    return cs336.ddp_on_after_backward(ddp_model, optimizer)


def get_fsdp(module: torch.nn.Module, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Our FSDP: Linear and Embedding weights sharded, gathered in ``compute_dtype`` (fp32 masters)."""
    from systems.fsdp import FSDP

    return FSDP(module, compute_dtype=compute_dtype)


def fsdp_on_after_backward(fsdp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    fsdp_model.finish_gradient_synchronization()


def fsdp_gather_full_params(fsdp_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter by its name in the wrapped module, full-shape fp32 (a collective: every rank calls it)."""
    return fsdp_model.gather_full_params()

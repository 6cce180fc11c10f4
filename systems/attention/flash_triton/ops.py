"""The two custom ops ``torch.compile`` sees, :data:`flash_fwd` and :data:`flash_bwd` (configuration encoded as a
list of ints): on a GPU ``torch.library.triton_op``s, whose bodies the compiler traces with stand-in tensors, their
launches wrapped (``wrap_triton``) so that the compiler emits them in its own code with the tiles chosen for the
shape key; in Triton's interpreter opaque custom ops.
"""

from __future__ import annotations

from typing import Callable

import torch

from systems.triton_interpreter import INTERPRET
from systems.attention.flash_triton.launch import backward, forward
from systems.attention.flash_triton.layouts import gradients, outputs
from systems.attention.flash_triton.tiles import FlashConfig


def _op(fn: Callable, fake: Callable):
    """``fn`` registered as the custom op ``systems::<its name>``. On a GPU a ``torch.library.triton_op``: the
    compiler traces its body (``traced=True``) and launches the kernels from its own generated code, so a compiled
    model runs no Python of ours per call and CUDA graphs capture the launches. Triton's interpreter has no compiled
    kernels for the compiler to launch: there the op is opaque, with ``fake`` giving its outputs' shapes."""
    name = f"systems::{fn.__name__}"
    if INTERPRET:
        op = torch.library.custom_op(name, mutates_args=())(fn)
        op.register_fake(fake)
        return op
    return torch.library.triton_op(name, mutates_args=())(fn)


def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, config: list[int]
              ) -> tuple[torch.Tensor, torch.Tensor]:
    return forward(q, k, v, is_causal, FlashConfig.decode(config), traced=not INTERPRET)


def flash_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, L: torch.Tensor,
              is_causal: bool, config: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward(q, k, v, o, do, L, is_causal, FlashConfig.decode(config), traced=not INTERPRET)


flash_fwd = _op(flash_fwd, lambda q, k, v, is_causal, config: outputs(q))
flash_bwd = _op(flash_bwd, lambda q, k, v, o, do, L, is_causal, config: gradients(q, k, v))

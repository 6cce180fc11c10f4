"""Activation checkpointing as the model runs it (2026 handout §3.2): blocks in groups whose forward runs again in the
backward pass, nested where asked, and a selective policy that keeps attention's outputs through the recomputation.

``run_blocks(blocks, x, levels)`` runs the blocks in order; with ``levels`` (decreasing group sizes) each group of
``levels[0]`` blocks keeps only its input for the backward (``torch.utils.checkpoint``, non-reentrant), and inside
a recomputed group the next level does the same. ``recompute="keep_attention"`` keeps the outputs of the ops in
:data:`ATTENTION_OPS` (``torch.utils.checkpoint.create_selective_checkpoint_contexts``): the recomputation then
runs every operation of the group but attention; :func:`check_recompute` refuses it for an attention none of whose
operations the policy can tell apart (:data:`KEEPS_NOTHING`). :mod:`systems.memory.checkpointing` says what each
choice keeps and costs on paper; :class:`systems.model.TransformerLM` takes the same arguments.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

RECOMPUTE = ("all", "keep_attention")
# the ops whose outputs "keep_attention" keeps: SDPA's back ends, our Triton attention's forward (the custom op a
# compiled model runs) and the forward op each of our C++ autograd nodes calls (their `Ops::forward`: flash_cpp and
# flash_cuda, the Triton kernels' host path, flash_hopper), which a test reads from the C++ sources.
# The Triton attention launched from Python (flash_triton_python) runs no op the policy can see.
ATTENTION_OPS = frozenset({"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_cudnn_attention",
                           "aten::_scaled_dot_product_efficient_attention",
                           "aten::_scaled_dot_product_flash_attention_for_cpu", "systems::flash_fwd",
                           "systems_flash::triton_forward", "systems_flash::forward",
                           "systems_flash::hopper_attention_forward"})


# the attentions whose forward runs as ordinary PyTorch operations (naive, flash_pytorch) or launches its kernels from
# a Python autograd function (flash_triton_python): the policy cannot tell their attention from the rest of the block
KEEPS_NOTHING = frozenset({"naive", "flash_pytorch", "flash_triton_python"})


def check_recompute(recompute: str, attention: str | None = None) -> None:
    """A ValueError naming the problem where ``recompute`` is not one of :data:`RECOMPUTE`, or, given the
    ``attention`` the recomputed blocks run, asks to keep the output of one the policy cannot see (every block would
    be recomputed whole, as under "all", without a word)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if recompute == "keep_attention" and attention in KEEPS_NOTHING:
        raise ValueError(f"recompute='keep_attention' cannot keep the output of attention {attention!r}: it runs no "
                         f"operator the policy can tell from the rest of the block, so every block would be recomputed "
                         f"whole; use recompute='all', or an attention that runs as one operator (sdpa, flash_triton, "
                         f"flash_cpp, flash_cuda, flash_hopper)")


def _keep_attention(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    name = op.name() if hasattr(op, "name") else ""
    return CheckpointPolicy.MUST_SAVE if name in ATTENTION_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, levels: tuple[int, ...], recompute: str = "all"
               ) -> torch.Tensor:
    """The blocks in order; with ``levels``, each group of ``levels[0]`` blocks checkpointed, nesting the rest."""
    if not levels:
        for block in blocks:
            x = block(x)
        return x
    k, inner = levels[0], levels[1:]
    options = {} if recompute == "all" else {
        "context_fn": functools.partial(create_selective_checkpoint_contexts, _keep_attention)}
    for start in range(0, len(blocks), k):
        x = checkpoint(run_blocks, blocks[start:start + k], x, inner, recompute, use_reentrant=False, **options)
    return x

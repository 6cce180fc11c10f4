"""Activation checkpointing as the model runs it (2026 handout §3.2): blocks in groups whose forward runs again in the
backward pass, nested where asked, and a selective policy that keeps attention's outputs through the recomputation.

``run_blocks(blocks, x, levels)`` runs the blocks in order; with ``levels`` (decreasing group sizes) each group of
``levels[0]`` blocks keeps only its input for the backward (``torch.utils.checkpoint``, non-reentrant), and inside
a recomputed group the next level does the same. ``recompute="keep_attention"`` keeps the outputs of the ops in
:data:`ATTENTION_OPS` (``torch.utils.checkpoint.create_selective_checkpoint_contexts``): the recomputation then
runs every operation of the group but attention; :func:`check_recompute` refuses it for an attention none of whose
operations the policy can tell apart (:data:`KEEPS_NOTHING`). Kept outputs cost memory in every group at once, so
``kept_groups=n`` keeps them in the first n outer groups only and recomputes the others whole: a model too deep to
keep attention everywhere keeps it where it fits. ``stored_groups=n`` runs the last n outer groups without
checkpointing, every activation stored for the backward, for memory left over: the last rather than the first,
because the backward reaches them first and frees what they stored before any other group's recomputation adds its
own. :mod:`systems.memory.checkpointing` says what each choice keeps and costs on paper;
:class:`systems.model.TransformerLM` takes the same arguments.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

RECOMPUTE = ("all", "keep_attention")  # the ways run_blocks recomputes
# the ways systems.offload runs the groups, each compiled by itself, keeping what keep_attention_and_ffn keeps: on the
# GPU, or in host memory; the trainer offers them, the several-GPU command does not
FFN_KEPT = ("keep_attention_and_ffn", "offload")
MODEL_RECOMPUTE = (*RECOMPUTE, *FFN_KEPT)  # the ways TransformerLM recomputes
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
    """A ValueError naming the problem where ``recompute`` is not one of :data:`MODEL_RECOMPUTE`, or, given the
    ``attention`` the recomputed blocks run, asks to keep the output of one the policy cannot see (every block would
    be recomputed whole, as under "all", without a word)."""
    if recompute not in MODEL_RECOMPUTE:
        raise ValueError(f"recompute must be one of {MODEL_RECOMPUTE}, got {recompute!r}")
    if recompute != "all" and attention in KEEPS_NOTHING:
        raise ValueError(f"recompute={recompute!r} cannot keep the output of attention {attention!r}: it runs no "
                         f"operator the policy can tell from the rest of the block, so every block would be recomputed "
                         f"whole; use recompute='all', or an attention that runs as one operator (sdpa, flash, "
                         f"flash_triton, flash_cpp, flash_cuda, flash_hopper)")


def _keep_attention(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    name = op.name() if hasattr(op, "name") else ""
    return CheckpointPolicy.MUST_SAVE if name in ATTENTION_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def keep_attention_and_ffn(ffn_shape: tuple[int, int], ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """The policy of :data:`FFN_KEPT`: attention's outputs kept, and the products of the feed-forward's W1
    and W3 (matrix products by a ``ffn_shape`` = (d_model, d_ff) matrix, the weight transposed), so that only the
    projections to q, k, v and attention's output are recomputed."""
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default) and tuple(args[-1].shape) == ffn_shape:
        return CheckpointPolicy.MUST_SAVE
    return _keep_attention(ctx, op, *args, **kwargs)


def check_kept_groups(kept_groups: int | None, recompute: str, groups: int) -> None:
    """A ValueError naming the problem where ``kept_groups`` is not None and is not a count of the ``groups``
    outer checkpointed groups that keep attention's output under ``recompute="keep_attention"``."""
    if kept_groups is None:
        return
    if groups == 0:
        raise ValueError(f"kept_groups={kept_groups!r} counts checkpointed groups, and no block is checkpointed "
                         f"(checkpoint_blocks=0)")
    if isinstance(kept_groups, bool) or not isinstance(kept_groups, int) or not 0 <= kept_groups <= groups:
        raise ValueError(f"kept_groups must be a count of checkpointed groups in [0, {groups}], got {kept_groups!r}")
    if recompute != "keep_attention":
        raise ValueError(f"kept_groups={kept_groups} says how many groups keep attention's output, which only "
                         f"recompute='keep_attention' keeps; got recompute={recompute!r}")


def check_stored_groups(stored_groups: int, groups: int, kept_groups: int | None = None) -> None:
    """A ValueError naming the problem where ``stored_groups`` is not a count of the ``groups`` outer checkpointed
    groups, or where those last groups would overlap the first ``kept_groups``."""
    if isinstance(stored_groups, bool) or not isinstance(stored_groups, int) or stored_groups < 0:
        raise ValueError(f"stored_groups must be a count of checkpointed groups >= 0, got {stored_groups!r}")
    if stored_groups and groups == 0:
        raise ValueError(f"stored_groups={stored_groups} counts checkpointed groups to run without checkpointing, and "
                         f"no block is checkpointed (checkpoint_blocks=0)")
    if stored_groups > groups:
        raise ValueError(f"stored_groups must be a count of checkpointed groups in [0, {groups}], got {stored_groups}")
    if kept_groups is not None and kept_groups + stored_groups > groups:
        raise ValueError(f"kept_groups={kept_groups} first and stored_groups={stored_groups} last groups overlap: "
                         f"there are {groups}")


def check_ffn_kept(levels: tuple[int, ...], kept_groups: int | None, stored_groups: int, recompute: str) -> None:
    """A ValueError naming the problem where ``recompute`` (one of :data:`FFN_KEPT`) is asked with checkpointing
    it does not run: none, nested groups, some groups kept whole or stored."""
    if len(levels) != 1:
        raise ValueError(f"recompute={recompute!r} checkpoints groups of one size, nothing nested: give "
                         f"checkpoint_blocks as one block count > 0, got the levels {levels}")
    if kept_groups is not None or stored_groups:
        raise ValueError(f"recompute={recompute!r} keeps the same tensors of every group; kept_groups "
                         f"({kept_groups}) and stored_groups ({stored_groups}) belong to the other ways to recompute")


def check_checkpointing(levels: tuple[int, ...], recompute: str, kept_groups: int | None, stored_groups: int,
                        num_layers: int, attention: str | None = None) -> None:
    """A ValueError naming the problem where ``num_layers`` blocks cannot be checkpointed in groups of ``levels``
    (decreasing sizes; none: no checkpointing) the way ``recompute`` says, with ``kept_groups`` and
    ``stored_groups``; given the ``attention``, one whose output the policy cannot keep (:func:`check_recompute`)."""
    check_recompute(recompute, attention)
    groups = checkpointed_groups(num_layers, levels[0] if levels else 0)
    check_kept_groups(kept_groups, recompute, groups)
    check_stored_groups(stored_groups, groups, kept_groups)
    if recompute in FFN_KEPT:
        check_ffn_kept(levels, kept_groups, stored_groups, recompute)


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, levels: tuple[int, ...], recompute: str = "all",
               kept_groups: int | None = None, stored_groups: int = 0) -> torch.Tensor:
    """The blocks in order; with ``levels``, each group of ``levels[0]`` blocks checkpointed, nesting the rest,
    but the last ``stored_groups`` groups, which run as they are; with ``recompute="keep_attention"``, the first
    ``kept_groups`` groups (all where None) keep attention's output, the others are recomputed whole."""
    if not levels:
        for block in blocks:
            x = block(x)
        return x
    k, inner = levels[0], levels[1:]
    keep = {"context_fn": functools.partial(create_selective_checkpoint_contexts, _keep_attention)}
    first_stored = checkpointed_groups(len(blocks), k) - stored_groups
    for group, start in enumerate(range(0, len(blocks), k)):
        if group >= first_stored:
            x = run_blocks(blocks[start:start + k], x, ())
            continue
        kept = recompute == "keep_attention" and (kept_groups is None or group < kept_groups)
        x = checkpoint(run_blocks, blocks[start:start + k], x, inner, "keep_attention" if kept else "all",
                       use_reentrant=False, **(keep if kept else {}))
    return x


def checkpointed_groups(num_blocks: int, group_blocks: int) -> int:
    """How many outer groups of ``group_blocks`` blocks ``run_blocks`` checkpoints ``num_blocks`` blocks in (0 where
    ``group_blocks`` is 0: nothing checkpointed)."""
    return -(-num_blocks // group_blocks) if group_blocks else 0

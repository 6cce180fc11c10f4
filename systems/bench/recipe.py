"""How a training step of the 2026 leaderboard's model is made: :class:`Recipe`, each technique switchable (the
attention, the fused head and loss, the fused AdamW, how each block is recomputed, compiled or not), the
plain-PyTorch recipe :data:`PLAIN` beside ours, the ablation between them, and the model and optimizer a recipe
builds. Measured by :mod:`systems.bench.leaderboard_2026` (one GPU) and :mod:`systems.bench.leaderboard_step`
(several).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from systems.model import ModelConfig, TransformerLM
from systems.recompute import FFN_KEPT, check_ffn_kept, check_kept_groups, check_stored_groups
from systems.triton_interpreter import triton_unavailable


@dataclass(frozen=True)
class Recipe:
    """How the step is made: each technique switchable (the plain-PyTorch recipe: SDPA's cuDNN attention, the
    unfused head compiled with the model, PyTorch's fused AdamW, the same recomputation)."""

    attention: str = "flash_triton"
    fused_loss: bool = True
    fused_adamw: bool = True
    recompute: str = "all"  # of every block: "none", "all", "keep_attention", "keep_attention_and_ffn", "offload"
    compiled: bool = True
    kept_groups: int | None = None  # with keep_attention, the first blocks that keep attention's output (None: all)
    stored_groups: int = 0  # the last blocks, not checkpointed: every activation stored

    def check(self, layers: int) -> None:
        """A ValueError naming the problem where this recipe cannot build a model of ``layers`` blocks: kept or
        stored blocks that are not counts of its checkpointed blocks (under ``recompute="none"`` there are none),
        that overlap, or that the ways of :data:`systems.recompute.FFN_KEPT` do not run."""
        check_kept_groups(self.kept_groups, self.recompute, layers)
        check_stored_groups(self.stored_groups, 0 if self.recompute == "none" else layers, self.kept_groups)
        if self.recompute in FFN_KEPT:
            check_ffn_kept((1,), self.kept_groups, self.stored_groups, self.recompute)
            if not self.compiled:
                raise ValueError(f"recompute={self.recompute!r} runs each group compiled (offloading needs it: a "
                                 f"group's saved tensors reach the hooks only from a compiled region): an eager "
                                 f"recipe cannot; use keep_attention")

    def model(self, cfg: ModelConfig) -> TransformerLM:
        """The model of ``cfg`` as this recipe runs it (its attention and loss, each block recomputed or not), built
        on the default device (the meta device, to give it memory later)."""
        self.check(cfg.num_layers)  # before "none" is built as blocks that are not checkpointed
        kept = self.recompute == "none"
        return TransformerLM(replace(cfg, attention=self.attention, fused_loss=self.fused_loss),
                             checkpoint_blocks=0 if kept else 1, recompute="all" if kept else self.recompute,
                             kept_groups=self.kept_groups, stored_groups=self.stored_groups)

    def kept_blocks(self, layers: int) -> int:
        """How many of ``layers`` blocks keep attention's output through the backward (the stored ones too)."""
        if self.recompute == "keep_attention" and self.kept_groups is not None:
            return self.kept_groups + self.stored_groups
        return self.stored_groups if self.recompute == "all" else layers  # kept in every block, or none recomputed

    @property
    def label(self) -> str:
        n, s = self.kept_groups, self.stored_groups
        kept = ("" if n is None else f" in {n} block{'' if n == 1 else 's'}") + (f", the last {s} stored" if s else "")
        return (f"{self.attention}, loss {'fused' if self.fused_loss else 'unfused'}, "
                f"AdamW {'ours' if self.fused_adamw else 'torch fused'}, recompute {self.recompute}{kept}, "
                f"{'compiled' if self.compiled else 'eager'}")


PLAIN = Recipe(attention="sdpa_cudnn", fused_loss=False, fused_adamw=False)


def ablation_recipes(ours: Recipe, plain: Recipe) -> list[Recipe]:
    """``ours``, then ours with one technique at a time swapped for plain PyTorch's (the attention, the loss, AdamW,
    the other way to recompute, no recomputation, compiled or not), then ``plain``. A recipe keeping the
    feed-forward's products, on the GPU or in host memory, has keeping attention alone as its other way, and its
    eager one keeps attention alone too, which is all an eager recipe can."""
    other = "all" if ours.recompute == "keep_attention" else "keep_attention"
    other_mode = replace(ours, compiled=not ours.compiled)
    if ours.recompute in FFN_KEPT:
        other_mode = replace(other_mode, recompute="keep_attention")
    return [ours, replace(ours, attention=plain.attention), replace(ours, fused_loss=False),
            replace(ours, fused_adamw=False), replace(ours, recompute=other, kept_groups=None),
            replace(ours, recompute="none", kept_groups=None, stored_groups=0), other_mode, plain]


def our_kernels_unavailable(device: torch.device) -> str | None:
    """Why our recipe's Triton kernels (attention, fused loss, AdamW) cannot run on ``device``, as a command says it
    before any work, or None where they can."""
    why = triton_unavailable(device, torch.float32)
    return None if why is None else f"our recipe's Triton kernels (attention, fused loss, AdamW) cannot run here: {why}"


def build_model(cfg: ModelConfig, recipe: Recipe, where: torch.device, dtype: torch.dtype = torch.bfloat16
                ) -> TransformerLM:
    """The model of ``cfg`` for ``recipe``, built on the meta device and given memory on ``where`` in ``dtype``."""
    with torch.device("meta"):
        model = recipe.model(cfg)
    model.to_empty(device=where)
    model.init_weights()
    return model.to(dtype)


def adamw_for(recipe: Recipe) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The optimizer class and options of the recipe: ours, or PyTorch's fused AdamW (its for-each one on a CPU)."""
    options = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if recipe.fused_adamw:
        from systems.fused import FusedAdamW

        return FusedAdamW, options
    return torch.optim.AdamW, {**options, "fused": torch.cuda.is_available()}

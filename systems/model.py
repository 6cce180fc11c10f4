"""The CS336 "basics" Transformer language model, written here.

Pre-norm decoder-only Transformer: token embedding, ``num_layers`` blocks of
(RMSNorm -> causal multi-head self-attention with RoPE -> residual,
RMSNorm -> SwiGLU feed-forward -> residual), a final RMSNorm and an untied LM head.
No biases anywhere. The attention kernel is looked up by name in
:mod:`systems.attention`, so FlashAttention plugs in without touching this file.

The sizes of both editions of the CS336 handout are the presets in :data:`PRESETS`, under one name
each: the 2025 table (small, medium, large, xl, 2.7B) and the 2026 edition's 10B (:data:`SIZES`). The 2026
edition calls our ``2.7B`` "xl" (3.4 B parameters with SwiGLU) and drops the 2025 xl; ``preset("xl", edition=2026)``
reads the names that way. ``leaderboard-2026`` is the model its leaderboard times (8.1 B parameters, a vocabulary
of 151,936, context 32,768); build it on the meta device and give it memory where it is sharded
(:meth:`TransformerLM.init_weights`). ``tiny`` is the same code at toy size, for CPU smoke runs and tests::

    from systems.model import TransformerLM, preset
    model = TransformerLM(preset("small", context_length=256, attention="sdpa"))
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from itertools import product

import torch
import torch.nn as nn
import torch.nn.functional as F

from systems.attention import available, get_attention
from systems.nvtx import annotate
from systems.offload import ActivationOffload, run_groups_keeping_ffn
from systems.recompute import FFN_KEPT, check_checkpointing, check_recompute, run_blocks


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 10_000
    context_length: int = 128
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    rope_theta: float = 10_000.0
    attention: str = "naive"
    fused_loss: bool = False  # the head and the loss in one (systems.fused): the logits never exist whole
    name: str = "custom"  # the preset it came from, for tables

    def __post_init__(self) -> None:
        for field_ in ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff"):
            if not isinstance(getattr(self, field_), int) or getattr(self, field_) < 1:
                raise ValueError(f"{field_} must be a positive integer, got {getattr(self, field_)!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        if (self.d_model // self.num_heads) % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {self.d_model // self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


def _sizes(**table: tuple[int, int, int, int]) -> dict[str, ModelConfig]:
    return {name: ModelConfig(d_model=d, d_ff=ff, num_layers=layers, num_heads=heads, name=name)
            for name, (d, ff, layers, heads) in table.items()}


# d_model, d_ff, num_layers, num_heads: the 2025 handout's Table 1 (§1.1.2) and the 2026 edition's 10B
SIZES = _sizes(small=(768, 3072, 12, 12), medium=(1024, 4096, 24, 16), large=(1280, 5120, 36, 20),
               xl=(1600, 6400, 48, 25), **{"2.7B": (2560, 10240, 32, 32), "10B": (4608, 12288, 50, 36)})
# The model of the 2026 edition's leaderboard (§9): 8.1 B parameters, its own vocabulary and context.
LEADERBOARD_2026 = ModelConfig(vocab_size=151_936, context_length=32_768, d_model=4096, d_ff=11_008, num_layers=34,
                               num_heads=32, name="leaderboard-2026")
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab_size=512, name="tiny"),
    **SIZES, "leaderboard-2026": LEADERBOARD_2026,
}
# The 2026 edition's names for our presets where they differ: its "xl" is our 2.7B; its table has no 2025 xl.
EDITION_2026 = {"xl": "2.7B"}
EDITIONS = (2025, 2026)


def preset(name: str, edition: int = 2025, **overrides) -> ModelConfig:
    """A named size, with any field overridden (``context_length``, ``attention``, ...); ``edition=2026`` reads
    "xl" as that edition's xl (our 2.7B)."""
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    ours = EDITION_2026.get(name, name) if edition == 2026 else name
    if ours not in PRESETS:
        raise ValueError(f"unknown model size {name!r}; choose one of {sorted(PRESETS)}")
    return replace(PRESETS[ours], **overrides)


def preset_rows(names=None) -> list[dict]:
    """The size table (the handouts' sizes, :data:`SIZES`, unless ``names``): each preset's name in both editions,
    its shape and its parameter count."""
    names = names or list(SIZES)
    in_2026 = {ours: theirs for theirs, ours in EDITION_2026.items()}
    return [{"size": n, "2026 name": in_2026.get(n, "—" if n == "xl" else n), "d_model": c.d_model, "d_ff": c.d_ff,
             "num_layers": c.num_layers, "num_heads": c.num_heads, "params (M)": parameter_count(c) / 1e6}
            for n, c in ((n, PRESETS[n]) for n in names)]


def resize(cfg: ModelConfig, size: str, edition: int = 2025) -> ModelConfig:
    """Preset ``size`` with ``cfg``'s run choices (context length, attention kernel)."""
    return preset(size, edition, context_length=cfg.context_length, attention=cfg.attention)


def parameter_count(cfg: ModelConfig) -> int:
    """Trainable parameters, from the architecture: V·d (embedding) + L·(4d² + 3·d·d_ff + 2d) + d + d·V (head)."""
    d, V = cfg.d_model, cfg.vocab_size
    per_block = 4 * d * d + 3 * d * cfg.d_ff + 2 * d
    return V * d + cfg.num_layers * per_block + d + d * V


def _linear(d_in: int, d_out: int, kind: type[nn.Linear] = nn.Linear) -> nn.Linear:
    layer = kind(d_in, d_out, bias=False)
    init_module(layer)
    return layer


def init_module(module: nn.Module) -> None:
    """Draw ``module``'s own parameters (and recompute its tables) as the model's constructors do: what
    :meth:`TransformerLM.init_weights` runs over a model built on the meta device."""
    if isinstance(module, nn.Linear):
        # Truncated normal with variance 2/(d_in + d_out), clipped at 3 std, as in CS336 assignment 1.
        std = math.sqrt(2.0 / (module.in_features + module.out_features))
        nn.init.trunc_normal_(module.weight, std=std, a=-3 * std, b=3 * std)
    elif isinstance(module, nn.Embedding):
        nn.init.trunc_normal_(module.weight, std=1.0, a=-3.0, b=3.0)
    elif isinstance(module, RMSNorm):
        nn.init.ones_(module.weight)
    elif isinstance(module, RotaryEmbedding):
        module.reset()


class LMHead(nn.Linear):
    """The output projection. Given the targets too, it returns the loss straight from the hidden states
    (:func:`systems.fused.linear_cross_entropy`): the (tokens, vocabulary) logits never exist whole, and data-parallel
    wrappers that gather this layer's weight around its forward still see it used there."""

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if targets is None:
            return super().forward(x)
        from systems.fused.cross_entropy import linear_cross_entropy  # Triton, imported where it is used

        return linear_cross_entropy(x, self.weight, targets)


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: the mean of squares overflows or loses precision in half types.
        in_dtype = x.dtype
        x = x.float()
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * rms * self.weight).to(in_dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = _linear(d_model, d_ff)
        self.w2 = _linear(d_ff, d_model)
        self.w3 = _linear(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al., 2021) on interleaved pairs of the head dimension."""

    def __init__(self, head_dim: int, max_len: int, theta: float):
        super().__init__()
        self.head_dim, self.max_len, self.theta = head_dim, max_len, theta
        self.register_buffer("cos", torch.empty(max_len, head_dim // 2), persistent=False)
        self.register_buffer("sin", torch.empty(max_len, head_dim // 2), persistent=False)
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
        """Compute the tables, on the device (and in the dtype) the buffers are on."""
        device = self.cos.device
        inv_freq = self.theta ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device) / self.head_dim)
        angles = torch.outer(torch.arange(self.max_len, dtype=torch.float32, device=device), inv_freq)  # (T, dh/2)
        self.cos.copy_(angles.cos())
        self.sin.copy_(angles.sin())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, H, T, dh)
        T = x.shape[-2]
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, T, dh/2) each
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, dh/2, 2)
        return out.flatten(-2)


class CausalSelfAttention(nn.Module):
    """``rope``: a rotary table to share (the model gives every block the same one); None builds this block's own."""

    def __init__(self, cfg: ModelConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.q_proj = _linear(cfg.d_model, cfg.d_model)
        self.k_proj = _linear(cfg.d_model, cfg.d_model)
        self.v_proj = _linear(cfg.d_model, cfg.d_model)
        self.output_proj = _linear(cfg.d_model, cfg.d_model)
        self.rope = rope or RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_theta)
        self.attend = get_attention(cfg.attention)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, -1).transpose(1, 2)  # (B, H, T, dh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q = self.rope(self._heads(self.q_proj(x)))
        k = self.rope(self._heads(self.k_proj(x)))
        v = self._heads(self.v_proj(x))
        o = self.attend(q, k, v, True)  # (B, H, T, dh)
        return self.output_proj(o.transpose(1, 2).reshape(B, T, D))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, rope)
        self.ln2 = RMSNorm(cfg.d_model)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with annotate("attention"):
            x = x + self.attn(self.ln1(x))
        with annotate("feed_forward"):
            return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    """``checkpoint_blocks=k`` recomputes activations in the backward pass: each group of k consecutive blocks
    keeps only its input for the backward and runs its forward again there (``torch.utils.checkpoint``,
    non-reentrant). Gradients are the same; activation memory falls to the groups' inputs plus one group's
    residuals. A tuple of decreasing sizes nests the groups (``(16, 4, 1)``: groups of 16 blocks, inside each
    recomputed group groups of 4, inside those single blocks); :mod:`systems.memory.checkpointing` says which.
    ``recompute="keep_attention"`` keeps attention's outputs through the recomputation (selective checkpointing:
    the ops of :data:`systems.recompute.ATTENTION_OPS`, SDPA's back ends, our C++ operators' forwards and, under
    ``torch.compile``, our Triton attention's), so the backward recomputes everything but the attention: more
    memory, less arithmetic. An attention the policy cannot see (:data:`systems.recompute.KEEPS_NOTHING`) is refused
    with a ValueError when the checkpointed blocks run. ``kept_groups=n`` keeps attention's outputs in the first n
    checkpointed groups only and recomputes the others whole, for a model too deep to keep them everywhere;
    ``stored_groups=n`` runs the last n groups without checkpointing, for memory left over
    (:func:`systems.recompute.run_blocks` says why the last). ``recompute="keep_attention_and_ffn"`` keeps the
    feed-forward's products W1 x and W3 x too and compiles each group by itself; ``"offload"`` keeps the same in
    host memory (:mod:`systems.offload`)."""

    def __init__(self, cfg: ModelConfig, checkpoint_blocks: int | tuple[int, ...] = 0, recompute: str = "all",
                 kept_groups: int | None = None, stored_groups: int = 0):
        super().__init__()
        levels = (checkpoint_blocks,) if isinstance(checkpoint_blocks, int) else tuple(checkpoint_blocks)
        levels = tuple(k for k in levels if k != 0)
        if any(not isinstance(k, int) or k < 0 for k in levels) or list(levels) != sorted(levels, reverse=True):
            raise ValueError(f"checkpoint_blocks must be a block count >= 0 or decreasing counts, got {checkpoint_blocks!r}")
        check_checkpointing(levels, recompute, kept_groups, stored_groups, cfg.num_layers)
        self.offload = ActivationOffload()
        self.cfg = cfg
        self.checkpoint_levels = levels
        self.recompute = recompute
        self.kept_groups = kept_groups
        self.stored_groups = stored_groups
        self.token_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        init_module(self.token_embeddings)
        # one rotary table for every block (the same positions everywhere): a table per block would cost
        # num_layers × context × head_dim × 4 bytes, 0.6 GB at the 2026 leaderboard's 34 layers and 32K context
        rope = RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_theta)
        self.layers = nn.ModuleList(TransformerBlock(cfg, rope) for _ in range(cfg.num_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.lm_head = _linear(cfg.d_model, cfg.vocab_size, LMHead)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab_size); with ``targets`` (B, T), the loss
        (:func:`token_loss`, or with ``cfg.fused_loss`` the same loss without the logits) instead, so that every
        wrapper around the model computes the same one."""
        check_tokens(tokens, self.cfg)
        if targets is not None:
            if targets.shape != tokens.shape:
                raise ValueError(f"targets must be shaped like the tokens {tuple(tokens.shape)}, got "
                                 f"{tuple(targets.shape)}")
            check_tokens(targets, self.cfg)
        x = self.token_embeddings(tokens)  # (B, T, d)
        levels = self.checkpoint_levels if torch.is_grad_enabled() else ()
        if levels:  # the attention is known now: set_attention may have changed it since the constructor
            check_recompute(self.recompute, self.cfg.attention)
        if levels and self.recompute in FFN_KEPT:
            offload = self.offload if self.recompute == "offload" else None
            hidden = run_groups_keeping_ffn(self.layers, x, levels[0], offload)
        else:
            hidden = run_blocks(self.layers, x, levels, self.recompute, self.kept_groups, self.stored_groups)
        hidden = self.ln_final(hidden)  # (B, T, d)
        if targets is None:
            return self.lm_head(hidden)
        if self.cfg.fused_loss:
            return self.lm_head(hidden, targets)
        return token_loss(self.lm_head(hidden), targets)

    @torch.no_grad()
    def init_weights(self) -> None:
        """Every parameter drawn again, in the order and the way the constructor draws them (the same seed gives
        the same weights), and the rotary table recomputed: for a model built on the meta device and then given
        memory (``model.to_empty(device=...)``), where nothing was drawn."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.reset_parameters()  # PyTorch's own draw in their constructors, which ours then replaces
            init_module(module)

    def set_fused_loss(self, fused: bool) -> None:
        """The loss computed with or without the logits (:class:`LMHead`), the weights kept."""
        self.cfg = replace(self.cfg, fused_loss=fused)

    def set_attention(self, name: str) -> None:
        """Every block's attention switched to implementation ``name`` (a :mod:`systems.attention` name), the
        weights kept: one model can time two attentions side by side."""
        attend = get_attention(name)  # refuses an unknown name, listing the choices
        for block in self.layers:
            block.attn.attend = attend
        self.cfg = replace(self.cfg, attention=name)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position, in fp32 whatever the logits' dtype: a bf16 log-softmax
    over a large vocabulary loses the loss's low digits. logits (B, T, V), targets (B, T) -> scalar."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def check_tokens(tokens: torch.Tensor, cfg: ModelConfig) -> None:
    """Shape, length, dtype and (on the host, where it costs no device synchronisation) the id range of a batch."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (batch, seq), got shape {tuple(tokens.shape)}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must hold at least one sequence of at least one token, got shape {tuple(tokens.shape)}")
    if tokens.shape[1] > cfg.context_length:
        raise ValueError(f"sequence length {tokens.shape[1]} exceeds context_length {cfg.context_length}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be integer ids (int64 or int32), got {tokens.dtype}")
    if tokens.device.type == "cpu":
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}) (the vocabulary), got ids from {low} to {high}")


# ---- the model on the command line (every CLI that builds one) -------------------------------------------

OVERRIDABLE = ("vocab_size", "d_model", "num_layers", "num_heads", "d_ff")


def add_model_arguments(parser: argparse.ArgumentParser, *, sweep: bool = False, size: str = "small",
                        context_length: int = 128, attention: str = "naive") -> None:
    """``--size``, ``--edition``, ``--context-length``, ``--attention`` and overrides of the preset's fields;
    with ``sweep``, size, context length and attention take several values."""
    many = "+" if sweep else None
    listed = (lambda v: [v]) if sweep else (lambda v: v)
    g = parser.add_argument_group("model")
    g.add_argument("--size", nargs=many, default=listed(size), choices=list(PRESETS), help="model preset")
    g.add_argument("--edition", type=int, default=2025, choices=EDITIONS,
                   help="the handout whose size names --size uses: 2026 reads xl as our 2.7B")
    g.add_argument("--context-length", type=int, nargs=many, default=listed(context_length), help="tokens per sequence")
    g.add_argument("--attention", nargs=many, default=listed(attention), choices=available(),
                   help="attention implementation (systems.attention; flash: our fastest on the device, "
                        "flash_hopper on an H100 or H200, flash_triton on other GPUs)")
    g.add_argument("--fused-loss", action="store_true",
                   help="compute the loss with the LM head, without the logits (systems.fused)")
    for name in OVERRIDABLE:
        g.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"override the preset's {name}")


def models_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[ModelConfig]:
    """Every model the arguments of :func:`add_model_arguments` name; a bad combination is a usage error."""
    as_list = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
    overrides = {k: getattr(args, k) for k in OVERRIDABLE if getattr(args, k) is not None}
    try:
        models = [preset(s, args.edition, context_length=c, attention=a, fused_loss=args.fused_loss, **overrides)
                  for s, c, a in product(as_list(args.size), as_list(args.context_length), as_list(args.attention))]
    except ValueError as exc:
        parser.error(str(exc))
    # with its fields overridden a model is no longer the preset it started from
    return [replace(m, name="custom") for m in models] if overrides else models

"""The CS336 "basics" Transformer language model, written here.

Pre-norm decoder-only Transformer: token embedding, ``num_layers`` blocks of
(RMSNorm -> causal multi-head self-attention with RoPE -> residual,
RMSNorm -> SwiGLU feed-forward -> residual), a final RMSNorm and an untied LM head.
No biases anywhere. The attention kernel is looked up by name in
:mod:`systems.attention`, so FlashAttention plugs in without touching this file.

The five sizes of the CS336 handout (§1.1.2) are the presets in :data:`PRESETS`::

    from systems.model import TransformerLM, preset
    model = TransformerLM(preset("small", context_length=256, attention="sdpa"))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from systems.attention import get_attention
from systems.nvtx import annotate


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

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        if (self.d_model // self.num_heads) % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {self.d_model // self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


PRESETS: dict[str, ModelConfig] = {
    "small": ModelConfig(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": ModelConfig(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large": ModelConfig(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl": ModelConfig(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B": ModelConfig(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named size of §1.1.2, with any field overridden (``context_length``, ``attention``, ...)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model size {name!r}; choose one of {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


def parameter_count(cfg: ModelConfig) -> int:
    """Trainable parameters, from the architecture: V·d (embedding) + L·(4d² + 3·d·d_ff + 2d) + d + d·V (head)."""
    d, V = cfg.d_model, cfg.vocab_size
    per_block = 4 * d * d + 3 * d * cfg.d_ff + 2 * d
    return V * d + cfg.num_layers * per_block + d + d * V


def _linear(d_in: int, d_out: int) -> nn.Linear:
    # Truncated normal with variance 2/(d_in + d_out), clipped at 3 std, as in CS336 assignment 1.
    layer = nn.Linear(d_in, d_out, bias=False)
    std = math.sqrt(2.0 / (d_in + d_out))
    nn.init.trunc_normal_(layer.weight, std=std, a=-3 * std, b=3 * std)
    return layer


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
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # (T, dh/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, H, T, dh)
        T = x.shape[-2]
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, T, dh/2) each
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, dh/2, 2)
        return out.flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.q_proj = _linear(cfg.d_model, cfg.d_model)
        self.k_proj = _linear(cfg.d_model, cfg.d_model)
        self.v_proj = _linear(cfg.d_model, cfg.d_model)
        self.output_proj = _linear(cfg.d_model, cfg.d_model)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_theta)
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
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = RMSNorm(cfg.d_model)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with annotate("attention"):
            x = x + self.attn(self.ln1(x))
        with annotate("feed_forward"):
            return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.trunc_normal_(self.token_embeddings.weight, std=1.0, a=-3.0, b=3.0)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.num_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.lm_head = _linear(cfg.d_model, cfg.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab_size)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq), got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.cfg.context_length:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds context_length {self.cfg.context_length}"
            )
        x = self.token_embeddings(tokens)  # (B, T, d)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))

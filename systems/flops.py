"""FLOP counts of the model and of attention, and MFU: the one count that the trainer's MFU, every benchmark's
TFLOP/s and the scaling simulation's division of a step among layers use.

Conventions, stated once and used by every table that reports TFLOP/s or MFU:

* A matrix product (m, k) @ (k, n) costs 2·m·k·n FLOPs; element-wise work is not counted.
* Attention, causal: only the visible half of the score matrix counts, 2·N²·d per head for the forward
  (half of 4·N²·d); for Nq ≠ Nk the visible area with top-left alignment. The backward costs 2.5× the
  forward (five products instead of two).
* The model: every weight matrix costs 2 FLOPs per parameter per token in the forward, and attention
  2·2·T·d per token and layer over all T positions (the PaLM convention nanoGPT's ``estimate_mfu`` uses,
  which counts causal attention's masked half too). The backward costs 2× the forward, a training step 3×.
* MFU is model FLOPs per second over the accelerator's dense peak for the dtype the matrix products run
  in (:mod:`systems.hardware`): fp32 is the CUDA cores' peak, bf16 and fp16 the tensor cores'.
* :func:`step_flops` counts a training step as the attention tables count attention: only the visible half of
  a causal score matrix, its backward 2.5× its forward (matrix products as above). At long contexts the two
  conventions part: the 2026 leaderboard's step is 5.04 PFLOP this way, 6.6 PFLOP the PaLM way. The leaderboard
  chapters use this one, the convention the handout's figures for that step use, and say so.
"""

from __future__ import annotations

from systems.hardware import accelerator
from systems.model import ModelConfig

BWD_FACTOR = 2.5  # attention backward over forward
PASSES = {"forward": 1, "forward_backward": 3, "train": 3}  # model passes as multiples of the forward


def visible_pairs(n_q: int, n_k: int, causal: bool) -> float:
    """Query-key pairs that contribute, as the continuous area (the convention: N²/2 when causal, square)."""
    if not causal:
        return n_q * n_k
    if n_q <= n_k:  # top-left aligned: query i sees keys 0..i
        return n_q * n_q / 2
    return n_k * n_k / 2 + (n_q - n_k) * n_k


def attention_flops(n_q: int, n_k: int, d: int, batch_heads: int, causal: bool, mode: str) -> float:
    """FLOPs of one attention call: forward 4·d per visible pair (QKᵀ and PV), backward 2.5x that, fwd_bwd 3.5x."""
    fwd = 4 * d * visible_pairs(n_q, n_k, causal) * batch_heads
    return {"fwd": fwd, "bwd": BWD_FACTOR * fwd, "fwd_bwd": (1 + BWD_FACTOR) * fwd}[mode]


def block_flops(cfg: ModelConfig, context_length: int | None = None) -> float:
    """Forward FLOPs per token of one Transformer block: its weight matrices (4d² attention, 3·d·d_ff SwiGLU) and
    attention's scores and weighted sum over the whole context (2·2·T·d)."""
    T = context_length or cfg.context_length
    d = cfg.d_model
    return 2 * (4 * d * d + 3 * d * cfg.d_ff) + 2 * 2 * T * d


def head_flops(cfg: ModelConfig) -> float:
    """Forward FLOPs per token of the output head (the embedding is a lookup and costs none)."""
    return 2 * cfg.d_model * cfg.vocab_size


def model_flops(cfg: ModelConfig, batch: int, mode: str = "train", context_length: int | None = None) -> float:
    """FLOPs of one forward (``forward``), forward and backward, or training step of ``batch`` sequences."""
    T = context_length or cfg.context_length
    per_token = cfg.num_layers * block_flops(cfg, T) + head_flops(cfg)
    return PASSES[mode] * per_token * batch * T


def peak_flops(device_name: str, dtype: str) -> float | None:
    """The accelerator's dense peak for matrix products in ``dtype`` (fp32, tf32, bf16, fp16), if known."""
    acc = accelerator(device_name)
    return acc.peak_flops.get(dtype) if acc else None


def mfu(flops: float, seconds: float, device_name: str, dtype: str) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the peak (None where the accelerator is not known)."""
    peak = peak_flops(device_name, dtype)
    return flops / seconds / peak if peak else None


def step_flops(cfg: ModelConfig, batch: int, context_length: int | None = None) -> dict[str, float]:
    """FLOPs of one training step of ``batch`` sequences, by part: the matrix products of the blocks and of the head
    (6 per weight per token: forward 2, backward 4) and causal attention's visible half (forward and backward,
    :func:`attention_flops`); ``total`` is their sum."""
    T = context_length or cfg.context_length
    tokens = batch * T
    blocks = 6 * tokens * cfg.num_layers * (4 * cfg.d_model**2 + 3 * cfg.d_model * cfg.d_ff)
    head = 6 * tokens * cfg.d_model * cfg.vocab_size
    attention = cfg.num_layers * attention_flops(T, T, cfg.head_dim, batch * cfg.num_heads, True, "fwd_bwd")
    return {"blocks": blocks, "head": head, "attention": attention, "total": blocks + head + attention}

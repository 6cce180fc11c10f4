"""The 2026 leaderboard's step on several GPUs, planned from what one GPU measured (handout §9): what each GPU holds
under fully sharded data parallelism, and the step time that the measured parts and the simulated communication
predict. Arithmetic only: the parts' times and one block's activations are measurements handed in (chapter 18 makes
them), the link is a :class:`~systems.scaling.simulate.Cluster` (chapter 08's all-reduce fit).

What a GPU holds during the step (:func:`memory_per_gpu`), as FSDP2 runs it here: fp32 master weights, their
gradients and AdamW's two moments sharded over the N GPUs; weights gathered in bf16 a block at a time, two blocks in
flight; the root (the embedding, the head and the last norm) gathered for the whole forward and backward; each
gradient reduced in fp32 from its full size:

    state       16 bytes per parameter / N                 (weights 4, gradients 4, moments 8)
    gathered     2 bytes per parameter of the root and of two blocks
    reducing     4 bytes per parameter of the root and of one block (gradients before their reduce-scatter)
    boundaries   2 bytes per value of every block's input  (recomputed blocks keep only their input)
    blocks       one block's saved activations (recomputed) or every block's (not), as measured
    loss         2 + 4 + 4 bytes per logit unfused (bf16 logits, their fp32 copy, its gradient), or one chunk fused

The step (:func:`predicted_step`): :func:`~systems.scaling.simulate.simulate_step`'s FSDP schedule over the
embedding, the blocks (each with its measured time, shared between forward and backward as ``forward_share`` says)
and the head, then the optimizer step over each GPU's shard at the measured AdamW rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from systems.model import ModelConfig, parameter_count
from systems.scaling.simulate import Cluster, Layer, simulate_step

GIB = 2**30
CHUNK_BYTES = 1 << 30  # the fused loss's logits of one chunk (systems.fused.cross_entropy.CHUNK_BYTES)


def block_parameters(cfg: ModelConfig) -> int:
    """One block's parameters: attention's four d × d, the SwiGLU's three d × d_ff, two norms."""
    return 4 * cfg.d_model**2 + 3 * cfg.d_model * cfg.d_ff + 2 * cfg.d_model


def root_parameters(cfg: ModelConfig) -> int:
    """What is not in a block: the embedding, the head and the last norm."""
    return parameter_count(cfg) - cfg.num_layers * block_parameters(cfg)


def memory_per_gpu(cfg: ModelConfig, gpus: int, batch: int, *, recompute: bool, fused_loss: bool,
                   block_bytes: float, chunk_bytes: float = CHUNK_BYTES) -> dict[str, float]:
    """Bytes per GPU of each part of the step (see the module doc) and their ``total``: ``batch`` sequences over
    ``gpus`` GPUs, ``block_bytes`` what one block saves for its backward at this GPU's share of the batch."""
    if gpus < 1 or batch % gpus:
        raise ValueError(f"a batch of {batch} sequences does not split over {gpus} GPUs")
    tokens = batch // gpus * cfg.context_length
    root, block = root_parameters(cfg), block_parameters(cfg)
    out = {
        "state": 16 * parameter_count(cfg) / gpus,
        "gathered": 2 * (root + 2 * block),
        "reducing": 4 * (root + block),
        "boundaries": 2 * tokens * cfg.d_model * cfg.num_layers if recompute else 0.0,
        "blocks": block_bytes * (1 if recompute else cfg.num_layers),
        "loss": chunk_bytes if fused_loss else 10 * tokens * cfg.vocab_size,
    }
    out["total"] = sum(out.values())
    return out


@dataclass(frozen=True)
class MeasuredParts:
    """One GPU's measurements at its share of the batch: a block's forward and backward (ms, with whatever
    recomputation the plan uses) and the forward's share of it, the head and the loss forward and backward (ms),
    and AdamW's time per parameter (ms)."""

    block_ms: float
    forward_share: float
    head_ms: float
    adamw_ms_per_param: float


def predicted_step(cfg: ModelConfig, gpus: int, parts: MeasuredParts, cluster: Cluster) -> dict[str, float]:
    """Seconds of the step on each of ``gpus`` GPUs: ``step`` (forward, backward and their exposed communication,
    then the optimizer), with ``compute``, ``communication``, ``exposed`` and ``optimizer`` apart."""
    block_s, head_s = parts.block_ms / 1e3, parts.head_ms / 1e3
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    shapes = (d, d * d, d * d, d * d, d * d, d, d * f, d * f, f * d)
    layers = [Layer("embedding", 0.0, 0.0, (v * d,))]
    layers += [Layer(f"block {i}", block_s * parts.forward_share, block_s * (1 - parts.forward_share), shapes)
               for i in range(cfg.num_layers)]
    layers.append(Layer("head", head_s, 0.0, (d, d * v)))  # the fused loss computes its gradients in the forward
    passes = simulate_step(layers, gpus, cluster, "fsdp", grad_bytes=4, gather_bytes=2)
    optimizer = parts.adamw_ms_per_param / 1e3 * parameter_count(cfg) / gpus
    return {**passes, "optimizer": optimizer, "step": passes["step"] + optimizer}

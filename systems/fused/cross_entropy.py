"""The LM head and the cross-entropy loss in one: from the final hidden states ``h`` (N, d) and the output weight
``W`` (V, d) to the loss and its gradients with respect to both, without the (N, V) logits (2026 handout §9's
suggestion; the same plan as Liger-Kernel's fused linear cross-entropy).

The logits are a language model's largest tensor: at the 2026 leaderboard's shape (65,536 tokens, a vocabulary of
151,936) 18.5 GiB in bf16, twice that once the loss upcasts them to fp32. Here the tokens go a chunk at a time, at
most :data:`CHUNK_BYTES` of logits each; for a chunk c

1. ``logits = h_c Wᵀ``, a matrix product in the compute dtype;
2. one Triton program per token walks its row of logits in blocks of the vocabulary twice
   (:func:`_loss_and_grad_kernel`): first the log-sum-exp, in fp32 with a running maximum as in FlashAttention's
   softmax, and the loss ``lse − logits[target]``; then it overwrites the row, in place, with the loss's gradient
   with respect to it, ``(softmax − one_hot(target)) · scale`` (scale: 1 / the tokens not ignored for the mean,
   1 for the sum);
3. ``dh_c = dlogits W`` and ``dW += dlogitsᵀ h_c``, two more products.

So the gradients are computed in the forward pass, with the loss: the loss is the last thing a training step
computes and its backward follows at once, which then only scales them by the incoming gradient. The whole is one
custom op, ``systems::linear_cross_entropy``, which ``torch.compile`` calls as it is. The products are
the three an unfused head runs (6·N·V·d FLOPs); what changes is memory: one chunk of logits instead of all of them,
which the row kernel reads twice and writes once.

Targets equal to ``ignore_index`` count for nothing. A target outside the vocabulary that is not ignored makes the
loss NaN, which stops a training run, rather than reading another row. ``reduction`` is "mean" or "sum", as in
:func:`torch.nn.functional.cross_entropy`; the mean over no tokens at all is NaN there and here. Under autocast the
products run in the autocast dtype; the gradients come back in the dtypes of ``hidden`` and ``weight``, the
weight's accumulated over the chunks in its own dtype (with fp32 master weights, in fp32).

    loss = linear_cross_entropy(hidden, weight, targets)   # F.cross_entropy(hidden @ weight.T, targets), fp32
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from systems.triton_interpreter import INTERPRET, patch_interpreter

CHUNK_BYTES = 1 << 30  # logits of one chunk of tokens, at most
VOCAB_SLICE = 1 << 15  # rows of W's gradient accumulated at a time where its dtype is not the products'
REDUCTIONS = ("mean", "sum")


@triton.jit
def _loss_and_grad_kernel(logits_ptr, row_stride, targets_ptr, loss_ptr, scale_ptr, vocab, ignore_index,
                          BLOCK_V: tl.constexpr, GRAD: tl.constexpr):
    """One token: its row of logits -> its loss (fp32), and with ``GRAD`` the row replaced by d loss / d logits."""
    row = tl.program_id(0).to(tl.int64)
    logits = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row)
    cols = tl.arange(0, BLOCK_V)

    # the log-sum-exp: a running maximum m and the sum s of exp(x - m) over the blocks of the row
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, vocab, BLOCK_V):
        x = tl.load(logits + start + cols, mask=start + cols < vocab, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)

    ignored = target == ignore_index
    inside = (target >= 0) & (target < vocab)
    picked = tl.load(logits + target, mask=inside & ~ignored, other=0.0).to(tl.float32)
    loss = tl.where(ignored, 0.0, tl.where(inside, lse - picked, float("nan")))
    tl.store(loss_ptr + row, loss)

    if GRAD:
        scale = tl.where(ignored, 0.0, tl.load(scale_ptr))
        for start in range(0, vocab, BLOCK_V):
            at = start + cols
            x = tl.load(logits + at, mask=at < vocab, other=0.0).to(tl.float32)
            grad = (tl.exp(x - lse) - tl.where(at == target, 1.0, 0.0)) * scale
            tl.store(logits + at, grad.to(logits_ptr.dtype.element_ty), mask=at < vocab)


def _rows_to_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor, scale: torch.Tensor, ignore_index: int,
                           grad: bool) -> torch.Tensor:
    """The kernel over a chunk: (c, V) logits (row-contiguous) -> (c,) fp32 losses; with ``grad`` the logits
    become their gradient."""
    if INTERPRET:
        patch_interpreter()
    losses = torch.empty(logits.shape[0], device=logits.device, dtype=torch.float32)
    block = min(4096 if logits.element_size() == 2 else 2048, triton.next_power_of_2(logits.shape[1]))
    _loss_and_grad_kernel[(logits.shape[0],)](logits, logits.stride(0), targets, losses, scale, logits.shape[1],
                                             ignore_index, BLOCK_V=block, GRAD=grad, num_warps=8)
    return losses


def _accumulate(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out += a @ b``: in place where ``out`` has the products' dtype, else a slice of rows at a time (so the
    product in the compute dtype never takes a whole copy of ``out``'s size)."""
    if out.dtype == a.dtype:
        out.addmm_(a, b)
        return
    for start in range(0, out.shape[0], VOCAB_SLICE):
        rows = slice(start, start + VOCAB_SLICE)
        out[rows] += a[rows] @ b


@torch.library.custom_op("systems::linear_cross_entropy", mutates_args=())
def _loss_and_grads(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int, mean: bool,
                    compute: torch.dtype, chunk_tokens: int, grad_hidden: bool, grad_weight: bool
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss and, where asked, the gradients of ``hidden`` (N, d) and ``weight`` (V, d) (else empty tensors). An
    op of its own: the compiler calls it whole, as it calls cuBLAS, instead of tracing into the chunks."""
    h, w = hidden.to(compute), weight.to(compute)  # (N, d), (V, d)
    n = h.shape[0]
    counted = (targets != ignore_index).sum()
    # the gradient's scale as a device scalar: the mean's divisor is not known on the host without a sync
    scale = (1.0 / counted.float() if mean else torch.ones((), device=h.device)).reshape(1)
    losses = torch.empty(n, device=h.device, dtype=torch.float32)
    d_hidden = torch.empty_like(hidden) if grad_hidden else hidden.new_empty(0)
    d_weight = torch.zeros_like(weight) if grad_weight else weight.new_empty(0)
    # every chunk's logits go into one buffer: a fresh tensor per chunk would hold two chunks at once while the
    # product that makes the next one runs
    chunk_logits = h.new_empty(min(n, chunk_tokens), w.shape[0])
    for start in range(0, n, chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        logits = torch.mm(h[rows], w.T, out=chunk_logits[:min(chunk_tokens, n - start)])  # (c, V)
        losses[rows] = _rows_to_loss_and_grad(logits, targets[rows], scale, ignore_index, grad_hidden or grad_weight)
        if grad_hidden:
            d_hidden[rows] = logits @ w  # (c, d)
        if grad_weight:
            _accumulate(d_weight, logits.T, h[rows])  # (V, d)
    total = losses.sum()
    return (total * scale[0] if mean else total), d_hidden, d_weight


@_loss_and_grads.register_fake
def _(hidden, weight, targets, ignore_index, mean, compute, chunk_tokens, grad_hidden, grad_weight):
    return (hidden.new_empty((), dtype=torch.float32), torch.empty_like(hidden) if grad_hidden else hidden.new_empty(0),
            torch.empty_like(weight) if grad_weight else weight.new_empty(0))


def _keep_gradients(ctx, inputs, output) -> None:
    ctx.wanted = inputs[7:9]
    ctx.save_for_backward(*output[1:])
    # the gradients are outputs too, and nothing flows back into them: left to autograd, their incoming gradients
    # would be materialised as zeros, a second tensor the size of each during the backward
    ctx.set_materialize_grads(False)


def _scaled_gradients(ctx, grad_loss, _d_hidden, _d_weight):
    # the gradients are scaled where they lie: no second copy of the weight's gradient. The saved tensors then differ
    # from what was saved, so autograd refuses a second backward through the same loss (as it should: they are used)
    d_hidden, d_weight = ctx.saved_tensors
    scaled = [g.mul_(grad_loss.to(g.dtype)) if wanted else None for g, wanted in zip((d_hidden, d_weight), ctx.wanted)]
    return (*scaled, None, None, None, None, None, None, None)


_loss_and_grads.register_autograd(_scaled_gradients, setup_context=_keep_gradients)


def chunk_tokens_for(vocab: int, element_bytes: int, budget: int = CHUNK_BYTES) -> int:
    """Tokens per chunk: as many as keep a chunk's logits within ``budget`` bytes, a multiple of 128 where that
    leaves at least 128 (whole tiles for the products)."""
    tokens = max(1, budget // (vocab * element_bytes))
    return tokens // 128 * 128 if tokens >= 128 else tokens


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                         ignore_index: int = -100, reduction: str = "mean",
                         chunk_tokens: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T, targets)`` in fp32 without the logits: ``hidden`` (..., d), ``weight``
    (V, d), ``targets`` (...) integer ids; a scalar. ``chunk_tokens``: tokens per chunk (default: a chunk's logits
    within :data:`CHUNK_BYTES`)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden (..., d) and weight (V, d) disagree: {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"targets must be shaped like hidden without its last dimension, "
                         f"{tuple(hidden.shape[:-1])}, got {tuple(targets.shape)}")
    if targets.dtype not in (torch.int64, torch.int32) or not (hidden.device == weight.device == targets.device):
        raise ValueError(f"targets must be integer ids on the device of hidden and weight, got {targets.dtype} on "
                         f"{targets.device} ({hidden.device}, {weight.device})")
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    device_type = hidden.device.type
    compute = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weight.dtype
    chunk = chunk_tokens or chunk_tokens_for(weight.shape[0], torch.finfo(compute).bits // 8)
    grads = torch.is_grad_enabled() and hidden.requires_grad, torch.is_grad_enabled() and weight.requires_grad
    with torch.autocast(device_type, enabled=False):
        loss, _, _ = _loss_and_grads(hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1).contiguous(),
                                     ignore_index, reduction == "mean", compute, chunk, *grads)
    return loss

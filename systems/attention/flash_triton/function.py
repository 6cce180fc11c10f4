"""The autograd function and the public functions: what a user and the model call.

An eager call on a GPU goes to the C++ operator of :mod:`.host`, which launches the compiled kernels with no Python
per call. The autograd function is the Python path: in eager mode it calls the launcher directly, sparing the custom
ops' dispatch; while ``torch.compile`` traces it calls the custom ops, which on a GPU the compiler traces through to
launch the kernels from its own code (:mod:`.launch`). Double backward is refused with a message: L is
saved as a constant of the forward, so a second derivative through it would be wrong, not merely slow.
"""

from __future__ import annotations

import torch

from systems.attention._checks import (as_4d, check_attention_inputs, check_is_causal, refuse_double_backward,
                                       shaped_as)
from systems.attention.flash_triton import host, launch, ops
from systems.triton_interpreter import INTERPRET
from systems.attention.flash_triton.tiles import DEFAULT, DEFAULT_CODE, FlashConfig


def _checked(q, k, v, is_causal) -> None:
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    if INTERPRET:
        if q.dtype == torch.bfloat16:
            raise ValueError("Triton's CPU interpreter cannot compute bf16 (its dot products multiply the raw bits): "
                             "use float32 or float16 on the CPU, or bf16 on a GPU")
    elif q.device.type != "cuda":
        raise ValueError(f"Triton kernels need CUDA tensors (or TRITON_INTERPRET=1), got device {q.device}")


class FlashAttentionTriton(torch.autograd.Function):
    """FlashAttention-2 with Triton kernels for the forward and both backward passes."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, config=None):
        _checked(q, k, v, is_causal)
        if torch.compiler.is_compiling():
            code = DEFAULT_CODE if config is None else config.encode()  # a constant list when config is None
            o, L = ops.flash_fwd(as_4d(q), as_4d(k), as_4d(v), is_causal, code)
        else:
            code = config or DEFAULT
            o, L = launch.forward(as_4d(q), as_4d(k), as_4d(v), is_causal, code)
        o, L = o.view(q.shape), L.view(q.shape[:-1])  # (B, [H,] Nq, d), (B, [H,] Nq)
        ctx.is_causal, ctx.config = is_causal, code
        # L is the only saved tensor shaped q.shape[:-1] (the CS336 tests find it that way)
        ctx.save_for_backward(L, q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        refuse_double_backward("FlashAttentionTriton")
        L, q, k, v, o = ctx.saved_tensors
        args = (as_4d(q), as_4d(k), as_4d(v), as_4d(o), as_4d(do), L, ctx.is_causal, ctx.config)
        dq, dk, dv = ops.flash_bwd(*args) if isinstance(ctx.config, list) else launch.backward(*args)
        return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape), None, None


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, config: FlashConfig | None = None
) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> (B, [H,] Nq, d); causal masking is top-left aligned.

    An eager call on a GPU without ``config`` launches the kernels from C++ (:mod:`.host`), where that path builds;
    with a ``config`` (whose switches the Python launcher reads), under ``torch.compile`` and elsewhere, through
    :class:`FlashAttentionTriton`."""
    if config is None and q.is_cuda and not torch.compiler.is_compiling() and (host.READY or not host.unavailable()):
        _checked(q, k, v, is_causal)
        return shaped_as(torch.ops.systems_flash.triton_attention(as_4d(q), as_4d(k), as_4d(v), is_causal), q)
    return FlashAttentionTriton.apply(q, k, v, is_causal, config)


def flash_attention_triton_python(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
                                  ) -> torch.Tensor:
    """The same kernels, every call launched from Python (:class:`FlashAttentionTriton` and Triton's launcher): the
    host path before the C++ one, which the benchmarks time beside it."""
    return FlashAttentionTriton.apply(q, k, v, is_causal, None)


def flash_forward_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, config: FlashConfig | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass alone, no autograd: O like q and the log-sum-exp L (B, [H,] Nq) in fp32."""
    _checked(q, k, v, is_causal)
    o, L = launch.forward(as_4d(q.detach()), as_4d(k.detach()), as_4d(v.detach()), is_causal, config or DEFAULT)
    return o.view(q.shape), L.view(q.shape[:-1])

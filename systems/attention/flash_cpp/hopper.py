"""FlashAttention's forward written for Hopper in CUDA C++ (``flash_hopper_forward.cu``): the copy engine feeding a
ring of shared-memory stages, two consumer warpgroups multiplying with asynchronous wgmma, registers moved from the
producer to the consumers, the consumers taking turns at the tensor cores, and a persistent grid whose blocks start
their next query tile while they finish the last (FlashAttention-3's design). A backward in the forward's shape (``flash_hopper_backward.cu``: one pass, a
persistent grid of dK/dV blocks with dQ added up by the copy engine as it goes; dK/dV then dQ under deterministic
algorithms) is here too, :func:`backward_hopper_cuda`. Registered as ``flash_hopper``: under one C++ autograd node
(``torch.ops.systems_flash.hopper_attention``), this forward with its variant chosen for the shape (two consumer
warpgroups where causal queries see fewer than 2,048 keys, three elsewhere at head dim 64: ``fastest`` in
``flash_hopper.h``; with two and the mask below 8,192 keys, a consumer's last key tile halved where its queries see
only its first half), and this backward, the faster of it and the Triton kernels' at every shape the log's runs
timed (chapter 20 times both, ``book/log.md`` has every version's numbers). Its output is laid out as the Triton
kernels' is, (B, N, H, d) in memory, so the model's reshape of it is a view.

It runs on sm_90 GPUs (H100, H200), bf16 and fp16, head dims 64 and 128, and 72 and 80 (the 2.7B preset's) in the
kernels of head dim 128, whose columns past the head dim the copy engine reads as zeros, with the products over the
head dim cut to its first 80 columns; other inputs go to the portable Triton kernel. The kernel is built on first use
for ``sm_90a`` (nvcc), beside the operators' schemas (``flash.cpp``).

    from systems.attention.flash_cpp.hopper import flash_attention_hopper, forward_hopper_cuda
    o = flash_attention_hopper(q, k, v, is_causal=True)                           # with autograd
    o, L = forward_hopper_cuda(q, k, v, True, stages=2, pingpong=False, consumers=2)  # one variant's forward
"""

from __future__ import annotations

import functools

import torch

from systems.attention._checks import as_4d, check_attention_inputs, check_is_causal, shaped_as
from systems.attention.flash_cpp import (HERE, build_extension, cuda_machine_unavailable, cuda_unsupported,
                                         why_it_cannot_run)

SOURCES = (HERE / "flash_hopper_ops.cpp", HERE / "flash_hopper_forward.cu", HERE / "flash_hopper_backward.cu")
# wgmma and setmaxnreg need the architecture-specific target; naming it keeps PyTorch from adding its own
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
HOPPER = (9, 0)
HEAD_DIMS = (64, 72, 80, 128)  # the kernels' (flash_hopper.h: takes_head_dim)
_READY = False  # set once built: a call then checks nothing more


@functools.cache
def _build() -> str | None:
    """The operator's schemas and these kernels, once per process; None, or why they could not be built."""
    global _READY
    from systems.attention import flash_cpp

    why = flash_cpp._build() or build_extension(
        "systems_flash_hopper", SOURCES, "the Hopper FlashAttention kernels", extra_cuda_cflags=["-O3", *ARCH_FLAGS])
    _READY = why is None
    return why


@torch.compiler.assume_constant_result  # as flash_cpp's checks: traced, the build would break the graph
def unavailable(device: torch.device) -> str | None:
    """Why the Hopper kernel cannot run on ``device``, or None (building it if it is not built yet)."""
    why = cuda_machine_unavailable(device, "Hopper GPUs (its kernel is CUDA C++ for sm_90a)")
    if why:
        return why
    capability = torch.cuda.get_device_capability(device)
    if capability != HOPPER:
        return (f"needs a Hopper GPU (compute capability 9.0: H100, H200); {torch.cuda.get_device_name(device)} is "
                f"{capability[0]}.{capability[1]}")
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None:
        return "needs nvcc (the CUDA toolkit) to build its kernel, and none was found (set CUDA_HOME)"
    return _build()


def _check_kernel_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> None:
    """For the kernels called alone: inputs they do not take are a ValueError, a machine they cannot run on a
    RuntimeError."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    why = cuda_unsupported(q.dtype, q.shape[-1], HEAD_DIMS)
    if why:
        raise ValueError(f"flash_hopper {why}")
    why = unavailable(q.device)
    if why:
        raise RuntimeError(f"flash_hopper {why}")


def flash_attention_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
                           ) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) on an sm_90 GPU -> (B, [H,] Nq, d); causal masking is top-left
    aligned. Inputs the kernel does not take (dtypes other than bf16 and fp16, head dims other than 64, 72, 80 and
    128) go to the portable Triton kernel."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    if cuda_unsupported(q.dtype, q.shape[-1], HEAD_DIMS):
        from systems.attention.flash_triton import flash_attention_triton

        return flash_attention_triton(q, k, v, is_causal)
    why = why_it_cannot_run(unavailable, _READY, q.device, "cuda")
    if why:
        raise RuntimeError(f"flash_hopper {why}")
    return shaped_as(torch.ops.systems_flash.hopper_attention(as_4d(q), as_4d(k), as_4d(v), is_causal), q)


def backward_hopper_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
                         L: torch.Tensor, is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward alone: dQ, dK, dV from the forward's q, k, v, O, its L (B, [H,] Nq) and dO."""
    _check_kernel_inputs(q, k, v, is_causal)
    q4, k4, v4 = as_4d(q), as_4d(k), as_4d(v)
    dq, dk, dv = torch.ops.systems_flash.hopper_backward(q4, k4, v4, as_4d(o), as_4d(do), L.reshape(q4.shape[:-1]),
                                                         is_causal)
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


def forward_hopper_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                        stages: int | None = None, pingpong: bool | None = None,
                        consumers: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward alone, no autograd: O like q and the log-sum-exp L (B, [H,] Nq) in fp32, natural log. Without a
    variant it runs as ``flash_hopper`` runs it for the shape; the ablation names all three of the ring depth (2 or
    3), the ping-pong and the consumer warpgroups (2, or 3 at head dim 64; at head dims 72 and 80 the ring of 3 and
    two consumers alone)."""
    variant = (stages, pingpong, consumers)
    if None in variant and variant != (None, None, None):
        raise ValueError(f"forward_hopper_cuda: name all of stages, pingpong and consumers or none, not {variant}")
    _check_kernel_inputs(q, k, v, is_causal)
    if variant == (None, None, None):
        o, L = torch.ops.systems_flash.hopper_forward(as_4d(q), as_4d(k), as_4d(v), is_causal)
    else:
        o, L = torch.ops.systems_flash.hopper_forward_variant(as_4d(q), as_4d(k), as_4d(v), is_causal, *variant)
    return o.view(q.shape), L.view(q.shape[:-1])

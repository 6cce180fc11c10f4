"""Attention implementations chosen by name: ours and the peers we compare them with, under one set of names.

Every entry takes ``(q, k, v, is_causal)`` with tensors shaped (batch, heads, seq, head_dim) and returns
the output in the same layout. The model asks for one by name (``ModelConfig.attention``) and every
benchmark reports under the same names, so a new kernel is one line here. Entries are imported lazily:
the Triton one needs Triton, the others do not.

Ours (:data:`OURS`):

    naive          the textbook formula, materialises the score matrix (reference.py)
    flash_pytorch  FlashAttention-2 tiled in plain PyTorch (flash_pytorch.py)
    flash_triton   FlashAttention-2 forward and backward in Triton (the package flash_triton/); an eager call on a
                   GPU launches the kernels from C++ (its host module, host.cpp)
    flash_triton_python  the same kernels launched from Python on every call: the host path before the C++ one
    flash_cpp      FlashAttention-2 as a C++ operator with a C++ autograd node, CPU kernels (flash_cpp/)
    flash_cuda     the same operator with its CUDA C++ kernels: tensor-core products, fp16/bf16, head dims 64 and 128
    flash_hopper   FlashAttention written for Hopper in CUDA C++ (sm_90a: copy engine, asynchronous wgmma, ping-pong),
                   forward and backward under one C++ autograd node (attention/flash_cpp/hopper.py); fp16/bf16,
                   head dims 64, 72, 80 and 128
    flash          the fastest of ours for the inputs' device: flash_hopper on an H100 or H200 where its kernels build,
                   flash_triton elsewhere (fastest.py); the one to train with

PyTorch's, the anchors (:data:`PEERS`, peers.py):

    sdpa           torch.nn.functional.scaled_dot_product_attention, PyTorch picks the back end
    sdpa_flash     the same, restricted to its FlashAttention-2 back end
    sdpa_cudnn     the same, restricted to cuDNN's fused attention
    flex           FlexAttention (torch.nn.attention.flex_attention) with a causal block mask, compiled
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch

from systems.triton_interpreter import triton_unavailable

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]

OURS = ("naive", "flash_pytorch", "flash_triton", "flash_triton_python", "flash_cpp", "flash_cuda", "flash_hopper",
        "flash")
PEERS = ("sdpa", "sdpa_flash", "sdpa_cudnn", "flex")

# name -> "module:attribute", imported on first use
_REGISTRY: dict[str, str] = {
    "naive": "systems.attention.reference:naive_attention",
    "flash_pytorch": "systems.attention.flash_pytorch:flash_attention_pytorch",
    "flash_triton": "systems.attention.flash_triton:flash_attention_triton",
    "flash_triton_python": "systems.attention.flash_triton:flash_attention_triton_python",
    "flash_cpp": "systems.attention.flash_cpp:flash_attention_cpp",
    "flash_cuda": "systems.attention.flash_cpp:flash_attention_cuda",
    "flash_hopper": "systems.attention.flash_cpp.hopper:flash_attention_hopper",
    "flash": "systems.attention.fastest:flash_attention",
    "sdpa": "systems.attention.peers:sdpa",
    "sdpa_flash": "systems.attention.peers:sdpa_flash",
    "sdpa_cudnn": "systems.attention.peers:sdpa_cudnn",
    "flex": "systems.attention.peers:flex",
}


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_attention(name: str) -> AttentionFn:
    if name not in _REGISTRY:
        raise ValueError(f"unknown attention implementation {name!r}; choose one of {available()}")
    module, attr = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)


def runs_as(name: str, device: torch.device) -> str:
    """The implementation attention ``name`` runs on ``device``: ``flash`` as the one it takes there (asking builds
    the Hopper kernels on an H100 or H200), every other name as itself."""
    if name != "flash":
        return name
    from systems.attention.fastest import fastest_flash

    return fastest_flash(device)


def unavailable(name: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why attention ``name`` cannot run on ``device`` for inputs of ``dtype`` and ``head_dim``, or None: what a run
    asks before it builds a model. Ours by their documented limits (the FlashAttention kernels take head dims 16..128;
    the Triton one needs a GPU or Triton's interpreter, which cannot compute bf16; the C++ operator runs on the CPU and
    is built on first use, which needs a compiler; its CUDA kernels need a GPU of compute capability 8.0, nvcc, fp16 or
    bf16 and head dim 64 or 128; the Hopper one an sm_90 GPU and nvcc; ``flash`` those of the one it takes on
    ``device``); PyTorch's SDPA back ends by
    asking them to run once on a tiny input, so their own rules (dtypes, head dims, devices) answer."""
    get_attention(name)  # an unknown name is refused with the choices
    name = runs_as(name, device)
    if name in ("flash_pytorch", "flash_triton", "flash_triton_python", "flash_cpp", "flash_cuda", "flash_hopper"):
        from systems.attention._checks import MAX_HEAD_DIM, MIN_HEAD_DIM

        if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
            return f"takes head dims {MIN_HEAD_DIM}..{MAX_HEAD_DIM}, the model's is {head_dim}"
    if name in ("flash_triton", "flash_triton_python"):
        why = triton_unavailable(device, dtype)
        if why:
            return why
    if name == "flash_cpp":
        from systems.attention.flash_cpp import unavailable as cpp_unavailable

        why = cpp_unavailable(device)
        if why:
            return why
    if name == "flash_cuda":
        from systems.attention.flash_cpp import cuda_unavailable, cuda_unsupported

        why = cuda_unavailable(device) or cuda_unsupported(dtype, head_dim)
        if why:
            return why
    if name == "flash_hopper":
        from systems.attention.flash_cpp.hopper import unavailable as hopper_unavailable

        why = hopper_unavailable(device)
        if why:
            return why
    if name in ("sdpa_flash", "sdpa_cudnn"):
        q = torch.zeros(1, 1, 2, head_dim, device=device, dtype=dtype).normal_()
        try:
            with torch.no_grad():
                get_attention(name)(q, q, q, True)
        except RuntimeError as exc:
            return f"refused by PyTorch on {device} for {str(dtype).removeprefix('torch.')} inputs: " \
                   f"{str(exc).strip().splitlines()[0][:200]}"
    return None

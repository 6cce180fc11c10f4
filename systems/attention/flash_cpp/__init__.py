"""FlashAttention-2 as a PyTorch operator written in C++, with its autograd node in C++ too (``flash.cpp`` beside
this file: the ops ``torch.ops.systems_flash.forward``, ``.backward`` and ``.attention``).

The same algorithm at a third level of abstraction, after the PyTorch version (:mod:`..flash_pytorch`) and the
Triton kernels (:mod:`..flash_triton`), with the same tile names and steps; and the shape of the operator path a
fast eager call needs: the op is registered with ``TORCH_LIBRARY``, its backward is a ``torch::autograd::Function``,
its shapes for ``torch.compile`` are Meta kernels, so a call runs no Python of ours after the dispatcher. The kernels
here run on the CPU.

The extension is built on first use with ``torch.utils.cpp_extension`` (a C++ compiler and ninja; a minute the first
time, then from the cache in ``TORCH_EXTENSIONS_DIR``). Where it cannot be built, :func:`unavailable` says why and
``get_attention("flash_cpp")`` still imports.

    from systems.attention.flash_cpp import flash_attention_cpp
    o = flash_attention_cpp(q, k, v, is_causal=True)       # (B, [H,] N, d) on the CPU, fp32 or fp64 (16-bit widened)
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

import torch

from systems.attention._checks import as_4d, check_attention_inputs, check_is_causal

SOURCE = Path(__file__).with_name("flash.cpp")
NAME = "systems_flash_cpp"


def _ninja_on_path() -> bool:
    """Whether ninja runs: from the PATH, or from the ``ninja`` package's own folder (then put on the PATH)."""
    if shutil.which("ninja"):
        return True
    try:
        import ninja
    except ImportError:
        return False
    os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    return shutil.which("ninja") is not None


_LOADED = False  # set once the extension is in: calls then check nothing more than the device


@functools.cache
def _build() -> str | None:
    """Build and load the extension once per process; None, or why it could not be built."""
    global _LOADED
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        return "needs a C++ compiler (c++, g++ or clang++) to build its extension"
    if not _ninja_on_path():
        return "needs ninja to build its extension (pip install ninja)"
    from torch.utils.cpp_extension import load

    print(f"[systems] building the C++ FlashAttention operator ({SOURCE.name}; the first time takes a minute)",
          file=sys.stderr, flush=True)
    try:
        load(name=NAME, sources=[str(SOURCE)], extra_cflags=["-O3"], is_python_module=False, verbose=False)
    except (RuntimeError, OSError, ImportError) as exc:
        return f"could not build its extension: {str(exc).strip().splitlines()[-1][:300]}"
    _LOADED = True
    return None


def unavailable(device: torch.device) -> str | None:
    """Why the C++ operator cannot run on ``device``, or None (building it if it is not built yet)."""
    if device.type != "cpu":
        return f"runs on the CPU (its kernels are C++ for the CPU), not on {device}"
    return _build()


def flash_attention_cpp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) on the CPU -> (B, [H,] Nq, d); causal masking is top-left aligned."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    # (once loaded, the check is one constant: torch.compile traces through it without a break)
    why = unavailable(q.device) if not _LOADED or q.device.type != "cpu" else None
    if why:
        raise RuntimeError(f"flash_cpp {why}")
    return torch.ops.systems_flash.attention(as_4d(q), as_4d(k), as_4d(v), is_causal).view(q.shape)

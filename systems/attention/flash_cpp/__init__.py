"""FlashAttention-2 as a PyTorch operator written in C++, with its autograd node in C++ too, and its kernels for the
CPU in C++ and for NVIDIA GPUs in CUDA C++.

The same algorithm at a third level of abstraction, after the PyTorch version (:mod:`..flash_pytorch`) and the
Triton kernels (:mod:`..flash_triton`), with the same tile names and steps; and the shape of the operator path a
fast eager call needs: the ops ``torch.ops.systems_flash.forward``, ``.backward`` and ``.attention`` are registered
with ``TORCH_LIBRARY`` (``flash.cpp``), the backward is a ``torch::autograd::Function``, the shapes for
``torch.compile`` are Meta kernels, so a call runs no Python of ours after the dispatcher. Each op has two kernels:

    CPU    flash.cpp: one (batch, head) per thread, fp32 or fp64 (16-bit inputs widened)
    CUDA   flash_cuda_forward.cu, flash_cuda_backward.cu: tensor-core products (mma.sync, compute capability 8.0 or
           newer), fp16 and bf16, head dims 64 and 128, any sequence lengths; flash_cuda_ops.cpp registers them.
           The backward adds dQ up in its dK/dV pass, in any order, so dQ's last bits can differ from run to run
           (as in FlashAttention-2); under ``torch.use_deterministic_algorithms(True)`` it takes two passes.

and the kernels written for Hopper (flash_hopper_forward.cu, flash_hopper_backward.cu, their ops in
flash_hopper_ops.cpp) are a third extension, built for sm_90a only: :mod:`.hopper`.

Each extension is built on first use with ``torch.utils.cpp_extension`` (a C++ compiler and ninja; for the CUDA one,
nvcc and a GPU too): a minute the first time, then from the cache in ``TORCH_EXTENSIONS_DIR``. Processes that start
together build it once, the others waiting; a build stopped half-way (Ctrl-C, a job killed) holds up none that
follows. Where one cannot be built, :func:`unavailable` says why and ``get_attention("flash_cpp")`` or
``get_attention("flash_cuda")`` still imports.

    from systems.attention.flash_cpp import flash_attention_cpp, flash_attention_cuda
    o = flash_attention_cpp(q, k, v, is_causal=True)    # (B, [H,] N, d) on the CPU
    o = flash_attention_cuda(q, k, v, is_causal=True)   # (B, [H,] N, d) on a GPU, fp16 or bf16, d 64 or 128
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Callable

import torch

from systems.attention._checks import (as_4d, check_attention_inputs, check_is_causal, refuse_double_backward,
                                       shaped_as)

HERE = Path(__file__).parent
SOURCES = (HERE / "flash.cpp",)
CUDA_SOURCES = tuple(HERE / name for name in ("flash_cuda_ops.cpp", "flash_cuda_forward.cu", "flash_cuda_backward.cu"))
CUDA_DTYPES = (torch.float16, torch.bfloat16)
CUDA_HEAD_DIMS = (64, 128)
MIN_CAPABILITY = (8, 0)  # mma.sync on bf16
BUILDING_AFTER_S = 3.0  # loading an extension already built takes about a second


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


@contextlib.contextmanager
def _sole_builder(build_directory: Path, what: str):
    """Held while this process builds into ``build_directory``: a lock the operating system lets go of however the
    process ends. Under it, the lock file ``torch.utils.cpp_extension`` keeps there while it builds can only be left
    by a build that was stopped half-way, which torch would wait on forever; it is removed."""
    try:
        import fcntl
    except ImportError:  # Windows: torch's lock file alone
        yield
        return
    with open(build_directory / "systems.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[systems] waiting for another process that is building {what} in {build_directory}",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        (build_directory / "lock").unlink(missing_ok=True)
        yield


def _load(name: str, sources: tuple[Path, ...], what: str, **flags) -> str | None:
    """Build and load one extension; None, or why it could not be built (the compiler's whole output on stderr)."""
    from torch.utils.cpp_extension import _get_build_directory, load

    # said only when the load outlasts loading a build already made, so a process that finds it built stays quiet
    building = threading.Timer(BUILDING_AFTER_S, print, (
        f"[systems] building {what} ({', '.join(s.name for s in sources)}; the first time takes a minute)",),
        {"file": sys.stderr, "flush": True})
    building.daemon = True
    building.start()
    try:
        with _sole_builder(Path(_get_build_directory(name, verbose=False)), what):
            load(name=name, sources=[str(s) for s in sources], extra_cflags=["-O3"], is_python_module=False,
                 verbose=False, **flags)
    except (RuntimeError, OSError, ImportError) as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return f"could not build its extension: {str(exc).strip().splitlines()[-1][:300]}"
    finally:
        building.cancel()
    return None


_LOADED = False  # set once the CPU extension is in: calls then check nothing more than the device
_CUDA_LOADED = False  # likewise for the CUDA kernels


def build_extension(name: str, sources: tuple[Path, ...], what: str, **flags) -> str | None:
    """Build and load one extension of the ``systems_flash`` ops (its headers, ``flash_autograd.h`` among them, on
    the include path); None, or why it could not be built."""
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        return "needs a C++ compiler (c++, g++ or clang++) to build its extension"
    if not _ninja_on_path():
        return "needs ninja to build its extension (pip install ninja)"
    return _load(name, sources, what, extra_include_paths=[str(HERE)], **flags)


@functools.cache
def _build() -> str | None:
    """Build and load the operator with its CPU kernels once per process; None, or why it could not be built."""
    global _LOADED
    why = build_extension("systems_flash_cpp", SOURCES, "the C++ FlashAttention operator")
    _LOADED = why is None
    return why


@functools.cache
def _build_cuda() -> str | None:
    """The operator first, then its CUDA kernels, once per process; None, or why they could not be built."""
    global _CUDA_LOADED
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None:
        return "needs nvcc (the CUDA toolkit) to build its kernels, and none was found (set CUDA_HOME)"
    why = _build() or _load("systems_flash_cuda", CUDA_SOURCES, "the CUDA FlashAttention kernels",
                            extra_cuda_cflags=["-O3", "-lineinfo"])
    _CUDA_LOADED = why is None
    return why


# The checks that build on first use are constants to torch.compile (assume_constant_result): it calls them once while
# tracing instead of tracing the build's file-system calls, which would break the model's graph around attention in
# every layer when the first call of the process is a compiled one.
@torch.compiler.assume_constant_result
def unavailable(device: torch.device) -> str | None:
    """Why the operator's CPU kernels cannot run on ``device``, or None (building them if they are not built yet)."""
    if device.type != "cpu":
        return f"runs on the CPU (its kernels are C++ for the CPU), not on {device}; flash_cuda runs on GPUs"
    return _build()


def cuda_machine_unavailable(device: torch.device, runs_on: str) -> str | None:
    """Why no CUDA kernel can run on ``device`` here (its type, PyTorch's build, the GPUs visible), or None;
    ``runs_on`` says what the kernels run on ("NVIDIA GPUs (its kernels are CUDA C++)")."""
    if device.type != "cuda":
        return f"runs on {runs_on}, not on {device}"
    if torch.version.cuda is None:
        return "needs a PyTorch built with CUDA; this one is built for the CPU only"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU, and none is visible"
    return None


@torch.compiler.assume_constant_result
def cuda_unavailable(device: torch.device) -> str | None:
    """Why the operator's CUDA kernels cannot run on ``device``, or None (building them if they are not built yet)."""
    why = cuda_machine_unavailable(device, "NVIDIA GPUs (its kernels are CUDA C++)")
    if why:
        return why
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        return (f"needs a GPU of compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (bf16 tensor-core "
                f"products); {torch.cuda.get_device_name(device)} is {capability[0]}.{capability[1]}")
    return _build_cuda()


def cuda_unsupported(dtype: torch.dtype, head_dim: int, head_dims: tuple[int, ...] = CUDA_HEAD_DIMS) -> str | None:
    """Why inputs of ``dtype`` and ``head_dim`` are not for the CUDA kernels (which take ``head_dims``), or None."""
    if dtype not in CUDA_DTYPES:
        return (f"computes in float16 or bfloat16, as FlashAttention-2 does, not {str(dtype).removeprefix('torch.')} "
                "(cast the inputs, or run under torch.autocast)")
    if head_dim not in head_dims:
        named = ", ".join(map(str, head_dims[:-1])) + f" and {head_dims[-1]}"
        return f"takes head dims {named}, not {head_dim}"
    return None


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    return shaped_as(torch.ops.systems_flash.attention(as_4d(q), as_4d(k), as_4d(v), is_causal), q)


def why_it_cannot_run(check: Callable[[torch.device], str | None], built: bool, device: torch.device, kind: str
                      ) -> str | None:
    """``check(device)``: why a kernel cannot run on ``device``, or None. Eager, a kernel already ``built`` skips the
    check on a device of its ``kind``; traced, the check is always asked (a constant of the graph): reading the flag,
    which the first trace's check sets when it builds, would send a trace that a graph break restarts down another
    path than the first one took."""
    if not torch.compiler.is_compiling() and built and device.type == kind:  # traced: the same path every time
        return None
    return check(device)


def flash_attention_cpp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) on the CPU -> (B, [H,] Nq, d); causal masking is top-left aligned."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    why = why_it_cannot_run(unavailable, _LOADED, q.device, "cpu")
    if why:
        raise RuntimeError(f"flash_cpp {why}")
    return _attention(q, k, v, is_causal)


def flash_attention_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) on a GPU, fp16 or bf16, d 64 or 128 -> (B, [H,] Nq, d); causal masking
    is top-left aligned. The output is laid out as q is (``torch.empty_like``)."""
    check_attention_inputs(q, k, v)
    check_is_causal(is_causal)
    why = why_it_cannot_run(cuda_unavailable, _CUDA_LOADED, q.device, "cuda")
    if why:
        raise RuntimeError(f"flash_cuda {why}")
    why = cuda_unsupported(q.dtype, q.shape[-1])
    if why:
        raise ValueError(f"flash_cuda {why}")
    return _attention(q, k, v, is_causal)


FP16_MAX = torch.finfo(torch.float16).max


class FlashAttentionCuda(torch.autograd.Function):
    """The CUDA kernels behind a Python autograd node: the interface the CS336 tests call (``apply(q, k, v,
    is_causal)``, the log-sum-exp among the saved tensors, shaped like q without its last dim). Model code calls
    :func:`flash_attention_cuda`, whose autograd node is C++ and runs no Python.

    fp32 inputs, which the kernels do not take, are computed in fp16 and come back in fp32: the 10-bit mantissa that
    TF32 tensor cores give fp32 products (Triton's default, cuBLAS's with TF32 on), within fp16's range, which is
    checked (a value beyond it is refused, not turned into inf)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        check_attention_inputs(q, k, v)
        check_is_causal(is_causal)
        compute = torch.float16 if q.dtype == torch.float32 else q.dtype
        why = cuda_unavailable(q.device)  # the machine: as flash_attention_cuda says it
        if why:
            raise RuntimeError(f"flash_cuda {why}")
        why = cuda_unsupported(compute, q.shape[-1])  # the inputs
        if why:
            raise ValueError(f"flash_cuda {why}")
        if q.dtype == torch.float32:
            largest = max(t.detach().abs().amax().item() for t in (q, k, v))
            if not largest <= FP16_MAX:
                raise ValueError(f"flash_cuda computes fp32 inputs in fp16, whose largest value is {FP16_MAX:g}; "
                                 f"these inputs reach {largest:g}")
        q4, k4, v4 = (as_4d(t).to(compute) for t in (q, k, v))
        o, L = torch.ops.systems_flash.forward(q4, k4, v4, is_causal)
        ctx.save_for_backward(q4, k4, v4, o, L.view(q.shape[:-1]))
        ctx.is_causal, ctx.dtype = is_causal, q.dtype
        return o.view(q.shape).to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        refuse_double_backward("flash_cuda")
        q4, k4, v4, o, L = ctx.saved_tensors
        # (dO may arrive expanded from a scalar, every stride 0: the op copies what its kernels cannot read)
        do4 = do.to(q4.dtype).reshape(q4.shape)
        dq, dk, dv = torch.ops.systems_flash.backward(q4, k4, v4, o, do4, L.view(q4.shape[:-1]), ctx.is_causal)
        shape_q, shape_k = L.shape + q4.shape[-1:], L.shape[:-1] + k4.shape[-2:]
        return dq.view(shape_q).to(ctx.dtype), dk.view(shape_k).to(ctx.dtype), dv.view(shape_k).to(ctx.dtype), None

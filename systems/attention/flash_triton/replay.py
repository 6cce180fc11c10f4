"""Launches remembered per layout: the first call of a layout (shapes, strides, dtype, device, 16-byte alignment of
each tensor, causality and switches) launches through Triton's JIT and keeps each compiled kernel with its grid and
its non-tensor arguments (:class:`Launch`, in :data:`PLANS`); every later call of that layout hands its tensors
straight to the compiled kernels' launcher. Triton's per-call argument binding, specialisation and cache look-up
(most of a launch's host time) happen once per layout. The layout key holds every value Triton specialises a kernel
on, so a remembered launch is the one Triton itself would have chosen. A launch also keeps its kernel's parameters
as the C++ host path passes them (:func:`host_params`; :mod:`.host`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

import torch
import triton
from triton import knobs
from triton.runtime import driver

from systems.triton_interpreter import INTERPRET
from systems.attention.flash_triton.tuning import JIT

PLANS: dict[tuple, tuple[Launch, ...]] = {}  # layout key -> the launches of a call, in order
# Layouts differ by exact lengths: a run with ever-new sequence lengths would keep adding entries. Past this many
# the remembered launches are dropped and remembered again as calls come (each entry is small; Triton keeps the
# compiled kernels).
MAX_PLANS = 4096


def descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global memory in which the kernels build their tensor descriptors (Triton asks for it at launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


@dataclass(frozen=True)
class Launch:
    """A compiled kernel with its grid and the arguments after its tensors, all fixed by the layout key: calling it
    with a later call's tensors launches the kernel through the compiled launcher alone."""

    kind: str  # which kernel: "fwd", "pre", "dkdv" or "dq"
    run: Callable
    function: Any
    packed_metadata: Any
    grid: tuple[int, int]
    tail: tuple
    scratch_bytes: int  # per program: the kernel builds TMA descriptors in global scratch memory (Triton's allocator)
    num_warps: int
    host_params: tuple[tuple[int, int], ...] | None  # see :func:`host_params`
    registers: int  # per thread, as compiled (ptxas)
    spills: int  # registers spilled to local memory
    shared_bytes: int  # shared memory per program

    def __call__(self, stream: int, *tensors: torch.Tensor) -> None:
        if self.scratch_bytes:
            triton.set_allocator(descriptor_scratch)  # per thread: the backward runs on autograd's device thread
        self.run(self.grid[0], self.grid[1], 1, stream, self.function, self.packed_metadata, None, None, None,
                 *tensors, *self.tail)


def as_launch(kind: str, kernel, grid: tuple[int, int], args: tuple, kwargs: dict) -> Launch | None:
    """The launch Triton just made, kept for replay (None in the interpreter, which compiles nothing)."""
    if INTERPRET or kernel is None:
        return None
    jit = JIT[kind]
    n_tensors = next(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
    named = dict(zip(jit.arg_names, args)) | kwargs
    return Launch(kind, kernel.run, kernel.function, kernel.packed_metadata, grid,
                  tuple(named[name] for name in jit.arg_names[n_tensors:]),
                  kernel.metadata.global_scratch_size, kernel.metadata.num_warps,
                  host_params(kernel, jit.arg_names, named, n_tensors), kernel.n_regs, kernel.n_spills,
                  kernel.metadata.shared)


# how the C++ host path (host.cpp) passes a parameter: the kernel's i-th tensor argument, or a scalar's bits
HOST_TENSOR, HOST_SCALARS = 0, {"i32": 1, "i64": 2, "fp32": 3}


def host_params(kernel, arg_names, named: dict, n_tensors: int) -> tuple[tuple[int, int], ...] | None:
    """The compiled kernel's parameters in order, as the C++ host path passes them: ``(HOST_TENSOR, i)`` for its
    i-th tensor argument, ``(kind, bits)`` for an i32, i64 or fp32 scalar (constexprs, values Triton specialised
    away included, are not parameters). None where that path could not launch it as Triton does: another
    parameter type, or a launch that needs more than ``cuLaunchKernel`` (clusters, a cooperative grid,
    programmatic dependent launch, profiling scratch)."""
    md = kernel.metadata
    if md.num_ctas != 1 or md.launch_cooperative_grid or md.launch_pdl or md.profile_scratch_size:
        return None
    params = []
    for i, name in enumerate(arg_names):
        kind = kernel.src.signature[name]
        if kind == "constexpr":
            continue
        if i < n_tensors:
            params.append((HOST_TENSOR, i))
        elif kind == "fp32":
            params.append((HOST_SCALARS[kind], struct.unpack("<I", struct.pack("<f", named[name]))[0]))
        elif kind in HOST_SCALARS:
            params.append((HOST_SCALARS[kind], int(named[name])))
        else:
            return None
    return tuple(params)


def remember(key: tuple, launches: tuple[Launch, ...]) -> None:
    if len(PLANS) >= MAX_PLANS:
        PLANS.clear()
    PLANS[key] = launches


def current_stream(device: torch.device) -> int:
    return driver.active.get_current_stream(device.index)


def replaying() -> bool:
    """Remembered launches skip Triton's launch hooks (a profiler such as Proton registers them): with hooks, every
    launch goes through the JIT."""
    return not INTERPRET and not knobs.runtime.launch_enter_hook.calls

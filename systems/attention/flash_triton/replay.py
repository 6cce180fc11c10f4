"""Launches remembered per layout: the first call of a layout (shapes, strides, dtype, device, 16-byte alignment of
each tensor, causality and switches) launches through Triton's JIT and keeps each compiled kernel with its grid and
its non-tensor arguments (:class:`Launch`, in :data:`PLANS`); every later call of that layout hands its tensors
straight to the compiled kernels' launcher. Triton's per-call argument binding, specialisation and cache look-up
(most of a launch's host time) happen once per layout. The layout key holds every value Triton specialises a kernel
on, so a remembered launch is the one Triton itself would have chosen.
"""

from __future__ import annotations

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

    run: Callable
    function: Any
    packed_metadata: Any
    grid: tuple[int, int]
    tail: tuple
    scratch: bool  # the kernel builds TMA descriptors in global scratch memory, which Triton's allocator provides
    registers: int  # per thread, as compiled (ptxas)
    spills: int  # registers spilled to local memory
    shared_bytes: int  # shared memory per program

    def __call__(self, stream: int, *tensors: torch.Tensor) -> None:
        if self.scratch:
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
    return Launch(kernel.run, kernel.function, kernel.packed_metadata, grid,
                  tuple(named[name] for name in jit.arg_names[n_tensors:]), kernel.metadata.global_scratch_size > 0,
                  kernel.n_regs, kernel.n_spills, kernel.metadata.shared)


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

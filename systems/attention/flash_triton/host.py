"""The eager host path in C++: the Triton kernels launched from a C++ operator with a C++ autograd node, so an eager
call runs no Python per launch (``host.cpp``; the issue it answers: a short call's host time, which host-bound
training steps pay in every layer).

``torch.ops.systems_flash.triton_attention(q, k, v, is_causal)`` takes 4-d tensors as the Python launcher does. Its
forward and backward look up a plan by the call's layout; the first call of a layout comes back here, to the
functions :func:`forward_first` and :func:`backward_first` (the CUDA kernels of the ops
``systems_flash::triton_forward_first`` and ``::triton_backward_first``), which launch through the Python launcher
(:mod:`.launch`: tiles tuned or remembered, one pass or two, TMA or not) and hand back what the C++ side needs to
launch the same compiled kernels itself: :func:`encode_plan`. So a later call costs a map look-up, the
allocations and one ``cuLaunchKernel`` per kernel.

The extension is built on first use (a C++ compiler, ninja and the CUDA toolkit's headers; a minute the first
time, then from the cache in ``TORCH_EXTENSIONS_DIR``). Where it cannot be, :func:`unavailable` says why, and
``flash_attention_triton`` launches from Python as before. A launch hook set on Triton (a profiler such as Proton)
sees only the first call of each layout; with one set, no new plans are kept.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from systems.attention.flash_triton import launch, replay
from systems.attention.flash_triton.layouts import outputs
from systems.attention.flash_triton.tiles import DEFAULT
from systems.triton_interpreter import INTERPRET

SOURCE = Path(__file__).with_name("host.cpp")
# The tensors of a call as host.cpp numbers them (a plan's tensor parameters are indices into these).
FORWARD_TENSORS = ("q", "k", "v", "o", "L")
BACKWARD_TENSORS = ("q", "k", "v", "o", "do", "L", "delta", "dq_acc", "dq", "dk", "dv")

_LIBRARY: list[torch.library.Library] = []  # the first-call kernels' registration, kept alive
READY = False  # set once built: a call then checks nothing more


def forward_first(q, k, v, is_causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first forward of a layout, launched from Python: O, L and the plan for the calls after it."""
    o, L = outputs(q)
    launched = launch.launch_forward(q, k, v, o, L, is_causal, DEFAULT)
    return o, L, encode_plan((launched,), FORWARD_TENSORS)


def backward_first(q, k, v, o, do, L, is_causal: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first backward of a layout, launched from Python: dQ, dK, dV and the plan for the calls after it."""
    (dq, dk, dv), launched, buffers, one_pass = launch.first_backward(q, k, v, o, do, L, is_causal, DEFAULT)
    return dq, dk, dv, encode_plan(launched, BACKWARD_TENSORS, one_pass, buffers["dq_acc"].shape[-1])


def encode_plan(launches, order: tuple[str, ...], one_pass: bool = False, block_d: int = 0) -> torch.Tensor:
    """The plan host.cpp's ``decode`` reads, as int64s: ``one_pass, block_d`` (the dQ accumulator's row width),
    ``len(launches)``, then per launch its
    CUfunction, grid (x, y, z), warps, shared bytes, global scratch bytes per program, the number of parameters and
    (kind, value) for each, a tensor's value being its index in ``order``. Empty, so that nothing is remembered,
    where a launch tuned tiles instead (the next call launches the chosen ones), a launch hook is set, or a kernel
    takes a parameter the C++ side does not pass (:func:`replay.host_params`)."""
    if not replay.replaying() or any(lc is None or lc.host_params is None for lc in launches):
        return torch.empty(0, dtype=torch.int64)
    ints = [int(one_pass), block_d, len(launches)]
    for lc in launches:
        names = launch.KERNEL_TENSORS[lc.kind]
        ints += [lc.function, *lc.grid, 1, lc.num_warps, lc.shared_bytes, lc.scratch_bytes, len(lc.host_params)]
        for kind, value in lc.host_params:
            ints += [kind, order.index(names[value]) if kind == replay.HOST_TENSOR else value]
    return torch.tensor(ints, dtype=torch.int64)


@functools.cache
def unavailable() -> str | None:
    """Why the C++ host path cannot run here, or None (building it, once per process, if it is not built yet)."""
    global READY
    if INTERPRET:
        return "launches compiled kernels, and Triton's interpreter compiles none"
    if torch.version.cuda is None or not torch.cuda.is_available():
        return "needs a CUDA GPU and a PyTorch built with CUDA"
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None:
        return "needs the CUDA toolkit's headers (cuda.h) to build, and none were found (set CUDA_HOME)"
    from systems.attention.flash_cpp import build_extension

    why = build_extension("systems_flash_triton_host", (SOURCE,), "the C++ host path of the Triton kernels",
                          with_cuda=True)
    if why is None:
        library = torch.library.Library("systems_flash", "IMPL")
        library.impl("triton_forward_first", forward_first, "CUDA")
        library.impl("triton_backward_first", backward_first, "CUDA")
        _LIBRARY.append(library)
        READY = True
    return why


def plan_count() -> int:
    """How many layouts the C++ side has plans for."""
    return _ops().triton_plan_count()


def forget_plans() -> None:
    """Drop the C++ side's plans (the next call of each layout comes back to Python)."""
    _ops().triton_forget_plans()


def _ops():
    """The extension's ops, loading it first (building it if need be); RuntimeError where it cannot be."""
    why = unavailable()
    if why:
        raise RuntimeError(f"the C++ host path of the Triton kernels {why}")
    return torch.ops.systems_flash

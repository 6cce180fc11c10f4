"""Facts about the device a process computes on: which one, waiting for it, and running out of its memory.

The bottom layer, with :mod:`systems.provenance`: everything may import it, it imports nothing of ours.

* :func:`local_device` is this process's device: its GPU under NCCL (one GPU per rank), the CPU under
  gloo or without a GPU.
* :func:`synchronize` waits for the queued work of a CUDA device (CUDA calls return as soon as the work
  is queued, so a clock read without it measures the queueing).
* :func:`timed` measures the wall time of device work: synchronised before and after, so the clock
  sees the work and not its queueing. Every timing loop of the project goes through it.
* :func:`record_memory` writes a CUDA memory snapshot of a block (what pytorch.org/memory_viz shows).
* :func:`run_or_oom` turns running out of memory into a value, :data:`OOM`, so sweeps record it and go on.
* :func:`use_expandable_segments` has the CUDA allocator grow its segments in place, so a step that fills the GPU
  is not refused for the memory the allocator's own fragments hold.
"""

from __future__ import annotations

import contextlib
import gc
import os
import timeit
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

OOM = "OOM"
ALLOCATOR_SETTINGS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # PyTorch reads either
EXPANDABLE_SEGMENTS = "expandable_segments:True"


def local_device() -> torch.device:
    """This rank's device: ``cuda:<current>`` in an NCCL group, the CPU in a gloo group, else the GPU if any."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")  # gloo ranks compute on the CPU, also on a GPU machine
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def requested_device(spec: str) -> torch.device:
    """The device ``spec`` names ("cpu", "cuda", "cuda:1", "mps"), checked against this machine: a ValueError that
    names what the machine has for a spec it cannot parse or a device it lacks, not a failure at the first tensor."""
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"device {spec!r} is not a device name ({str(exc).splitlines()[0][:120]}); e.g. cpu, cuda, "
                         "cuda:0") from None
    if device.type == "cpu":
        return device
    if device.type == "meta":
        raise ValueError("device 'meta' holds no values: nothing can be trained or timed on it")
    backend = getattr(torch, device.type, None)
    count = backend.device_count() if backend is not None and hasattr(backend, "device_count") else 0
    if device.type == "cuda" and not torch.cuda.is_available():
        count = 0
    if not count:
        raise ValueError(f"device {spec!r}: this machine has no {device.type} device (it has: "
                         f"{', '.join(['cpu'] + [f'cuda:{i}' for i in range(torch.cuda.device_count())])})")
    if device.index is not None and device.index >= count:
        raise ValueError(f"device {spec!r}: this machine has {count} {device.type} device(s), numbered from 0")
    return device


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for the work queued on a CUDA device (all of this process's, without an argument); CPU: nothing."""
    device = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        torch.cuda.synchronize(device)


class Elapsed:
    """What :func:`timed` measured: milliseconds, filled in when the block ends."""

    ms: float = float("nan")


@contextlib.contextmanager
def timed(device: torch.device | str | None = None, *, sync_start: bool = True, sync_end: bool = True
          ) -> Iterator[Elapsed]:
    """``with timed(device) as t: work()`` leaves the wall time of ``work`` and its device work in ``t.ms``.

    The device is synchronised before the clock starts (earlier work is not charged) and before it stops.
    ``sync_start=False`` is for a caller that waited for exactly what it must (one stream, say), and
    ``sync_end=False`` times only what the host spends issuing the work. ``timeit.default_timer`` is the
    clock, as the handout asks.
    """
    elapsed = Elapsed()
    if sync_start:
        synchronize(device)
    start = timeit.default_timer()
    yield elapsed
    if sync_end:
        synchronize(device)
    elapsed.ms = (timeit.default_timer() - start) * 1e3


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def free_memory() -> None:
    """Return cached blocks (after an OOM, between the points of a sweep) so the next one starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def allocatable_bytes() -> int:
    """What this process's allocator could hold on the current GPU: the device's free memory and what the allocator
    holds already (0 without a GPU)."""
    if not torch.cuda.is_available():
        return 0
    free, _ = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved()


def use_expandable_segments() -> str | None:
    """Have PyTorch's CUDA allocator map more memory onto a segment as it grows (expandable segments), instead of
    reserving a segment of each new size and splitting it; returns the settings in force (None: the allocator's own).

    A deep training step frees and allocates blocks of many sizes, and the memory held by split segments that no
    later request fits can refuse a step whose live tensors would fit. Settings the user gave in the environment
    are kept as they are. The allocator reads its settings once, when CUDA starts in the process, so a process
    calls this before its first CUDA work; called later it changes nothing and warns."""
    for name in ALLOCATOR_SETTINGS:
        if os.environ.get(name):
            return os.environ[name]
    if torch.cuda.is_initialized():
        warnings.warn("use_expandable_segments() came after this process started CUDA, whose allocator has read its "
                      f"settings already: set PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE_SEGMENTS} before starting Python",
                      stacklevel=2)
        return None
    os.environ[ALLOCATOR_SETTINGS[0]] = EXPANDABLE_SEGMENTS
    return EXPANDABLE_SEGMENTS


def run_or_oom(fn: Callable[[], Any]) -> Any:
    """``fn()``, or :data:`OOM` if it ran out of memory (any other error propagates)."""
    try:
        return fn()
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_oom(exc):
            raise
        del exc
        free_memory()
        return OOM


@contextlib.contextmanager
def record_memory(path: str | Path, max_entries: int = 1_000_000) -> Iterator[None]:
    """Record every CUDA allocation and free inside the block and dump the snapshot to ``path``.

    Python stacks only: they name the line of model code behind each allocation, which is what §1.1.6(e)
    asks for, while C++ stacks would multiply the pickle's size and take minutes to symbolise. On a
    machine without CUDA the block runs unrecorded and no file is written.
    """
    if not torch.cuda.is_available():
        warnings.warn("record_memory: no CUDA device, so there is no CUDA memory to record; no snapshot written")
        yield
        return
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    try:
        yield
    finally:
        torch.cuda.memory._dump_snapshot(str(path))
        torch.cuda.memory._record_memory_history(enabled=None)

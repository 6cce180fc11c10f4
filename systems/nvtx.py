"""NVTX ranges that cost nothing unless profiling asks for them.

The model and the harness mark their phases with ``annotate("name")``. Ranges are emitted only after
``enable()`` and only on a CUDA build, so CPU runs and timed benchmarks carry no profiling overhead.
Nsight Systems shows them on its NVTX row; ``nsys stats --report nvtx_sum`` totals them.
"""

from __future__ import annotations

import contextlib

import torch

_enabled = False


def enable(on: bool = True) -> None:
    global _enabled
    _enabled = on and torch.cuda.is_available()


def annotate(name: str) -> contextlib.AbstractContextManager:
    return torch.cuda.nvtx.range(name) if _enabled else contextlib.nullcontext()

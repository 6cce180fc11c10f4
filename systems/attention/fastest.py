"""``flash``: our fastest FlashAttention for the device the inputs are on, the name to give the model when the point
is to train rather than to compare kernels.

On an sm_90 GPU (H100, H200) on which the kernels written for Hopper can be built, it is ``flash_hopper``, which
itself sends the dtypes and head dims its kernels do not take to the Triton kernel; everywhere else it is the portable
Triton kernel, ``flash_triton``. The choice is by device alone, not by shape: the Hopper forward and backward took less
time than the Triton ones at every shape chapter 20 and the experiment log timed, and a choice by length would guard
a compiled graph on it. Only a call too small to keep the GPU busy is issued faster by the Triton kernels' C++ host
path than by the Hopper node (the log has both floors). A Hopper GPU on which the Hopper kernels cannot be built (no
nvcc, a failed build) says why in one warning and runs the Triton kernel.
"""

from __future__ import annotations

import warnings

import torch

from systems.attention.flash_cpp import hopper
from systems.attention.flash_triton import flash_attention_triton

# device -> whether the Hopper kernels run on it: asked once (the first asking builds them), then read
_HOPPER_RUNS: dict[torch.device, bool] = {}


@torch.compiler.assume_constant_result  # traced, a constant of the graph: the build must not break it
def hopper_runs(device: torch.device) -> bool:
    """Whether ``flash`` takes the kernels written for Hopper on ``device``."""
    if device not in _HOPPER_RUNS:
        why = hopper.unavailable(device)
        on_hopper = device.type == "cuda" and torch.cuda.is_available() and \
            torch.cuda.get_device_capability(device) == hopper.HOPPER
        if why and on_hopper:
            warnings.warn(f"attention 'flash' takes the Triton kernel on {device}, since flash_hopper {why}",
                          stacklevel=2)
        _HOPPER_RUNS[device] = why is None
    return _HOPPER_RUNS[device]


def fastest_flash(device: torch.device) -> str:
    """The name of the implementation ``flash`` runs on ``device``."""
    return "flash_hopper" if hopper_runs(device) else "flash_triton"


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """q (B, [H,] Nq, d), k, v (B, [H,] Nk, d) -> (B, [H,] Nq, d), causal masking top-left aligned, by
    :func:`fastest_flash`'s implementation for q's device; the output is laid out as both lay it out, (B, N, H, d) in
    memory."""
    if hopper_runs(q.device):
        return hopper.flash_attention_hopper(q, k, v, is_causal)
    return flash_attention_triton(q, k, v, is_causal)

"""Whether Triton kernels run in Triton's CPU interpreter, and two fixes to it: the tests and CPU smoke runs execute
every kernel of the package there (FlashAttention's, the fused loss's and AdamW's). :func:`triton_unavailable` says
why a Triton kernel cannot run on a device, for every kernel alike.

Triton 3.6's interpreter holds scalars as 1-element arrays and converts them with ``int(array)`` when they bound a
``range``; numpy 2.4 refuses that conversion for arrays with ndim > 0, so every loop with a run-time bound fails.
``.item()`` converts either. And its ``tl.fma`` multiplies and adds in the operands' type, rounding twice where a GPU
rounds once; AdamW's moments (``systems.fused.adamw``) are written as PyTorch's CUDA kernel writes them, with fused
multiply-adds, so the interpreter's fp32 ``fma`` here multiplies in fp64 (exact for fp32 operands) and rounds the
sum. Applied by the launchers before each interpreted launch (a second time finds them applied), never on a GPU.
"""

from __future__ import annotations

import importlib.util
import os

# the kernels run in Triton's CPU interpreter (set before triton is imported)
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def patch_interpreter() -> None:
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "patched_by_systems", False):
        return
    original_fma = interpreter.InterpreterBuilder.create_fma

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    def fma(self, x, y, z):
        if z.data.dtype != np.float32:
            return original_fma(self, x, y, z)
        exact = x.data.astype(np.float64) * y.data.astype(np.float64) + z.data.astype(np.float64)
        return interpreter.TensorHandle(exact.astype(np.float32), z.dtype.scalar)

    patched.patched_by_systems = True
    interpreter._patch_lang_tensor = patched
    interpreter.InterpreterBuilder.create_fma = fma


def triton_unavailable(device, dtype) -> str | None:
    """Why the package's Triton kernels cannot run on ``device`` (a ``torch.device``) for ``dtype``, or None: Triton
    missing, a CPU without the interpreter, or bf16 in the interpreter (it has no bf16 arithmetic)."""
    import torch

    if importlib.util.find_spec("triton") is None:
        return "needs Triton (pip install triton)"
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpreted:
        return f"needs a CUDA GPU (or TRITON_INTERPRET=1 to run in Triton's interpreter), not {device}"
    if device.type == "cpu" and dtype == torch.bfloat16:
        return "cannot compute bf16 in Triton's CPU interpreter (use fp32 on the CPU, or a GPU)"
    return None

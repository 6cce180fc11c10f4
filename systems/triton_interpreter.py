"""Whether Triton kernels run in Triton's CPU interpreter, and one fix to it: the tests and CPU smoke runs execute
every kernel of the package there (FlashAttention's, the fused loss's and AdamW's). :func:`triton_unavailable` says
why a Triton kernel cannot run on a device, for every kernel alike.

Triton 3.6's interpreter holds scalars as 1-element arrays and converts them with ``int(array)`` when they bound a
``range``; numpy 2.4 refuses that conversion for arrays with ndim > 0, so every loop with a run-time bound fails.
``.item()`` converts either. Applied by the launcher before each interpreted launch (a second time finds it
applied), never on a GPU.
"""

from __future__ import annotations

import importlib.util
import os

# the kernels run in Triton's CPU interpreter (set before triton is imported)
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def patch_index() -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "patched_index", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patched.patched_index = True
    interpreter._patch_lang_tensor = patched


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

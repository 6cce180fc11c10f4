"""Whether Triton kernels run in Triton's CPU interpreter, and one fix to it: the tests and CPU smoke runs execute
every kernel of the package there (FlashAttention's, the fused loss's and AdamW's).

Triton 3.6's interpreter holds scalars as 1-element arrays and converts them with ``int(array)`` when they bound a
``range``; numpy 2.4 refuses that conversion for arrays with ndim > 0, so every loop with a run-time bound fails.
``.item()`` converts either. Applied by the launcher before each interpreted launch (a second time finds it
applied), never on a GPU.
"""

from __future__ import annotations

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

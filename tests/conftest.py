import os

import torch

# Without a GPU, Triton kernels run in Triton's CPU interpreter. The variable must be set before
# triton (or any module defining kernels) is imported, so it is set here, before any test module loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

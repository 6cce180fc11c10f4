"""What a kernel's name says it does: the families of kernels a step's profile is sorted into (the matmuls, the
attention, the kernels the compiler fused, the loss, the optimizer), read from names alone, with no GPU and no
torch, so that both a profile taken in the process (:mod:`systems.bench.kernel_groups`) and an Nsight Systems
report read later (:mod:`systems.profiling.nsys`) sort by the same patterns."""

from __future__ import annotations

import re

# The names of cuBLAS's and CUTLASS's matmul kernels and of the optimizers' kernels, lower case (chapter 2's Nsight
# Systems reading sorts by them too, among its own categories: systems.profiling.nsys.CATEGORIES).
MATMUL_KERNELS = r"gemm|cutlass|xmma|nvjet|wgmma|cublas|ampere_|sm80_|sm90_|sm100_|splitk|matmul"
OPTIMIZER_KERNELS = r"multi_tensor_apply|adam|_foreach"

# an offloading step's copies (systems.offload), which run beside the kernels on streams of their own
HOST_COPIES = "copies to and from host memory"

# Tried in order on the lower-case name; the first match names the group. Inductor's kernels come first: some are
# named after the attention whose layout changes they fuse; then the attention, whose cuDNN kernels' names hold
# "sm90_" and "wgmma" as matmuls' do. On a CPU, the matmul operators stand for the matmuls.
KERNEL_GROUPS: list[tuple[str, str]] = [
    ("fused by the compiler", r"^triton_"),
    ("attention", r"flash|fmha|sdpa|attn|attention|cudnn"),
    ("matmuls", MATMUL_KERNELS + r"|^aten::(mm|addmm|bmm|baddbmm)$"),
    ("loss", r"loss|cross_entropy|nll"),
    ("optimizer", OPTIMIZER_KERNELS),
    (HOST_COPIES, r"^memcpy (dtoh|htod)"),
]


def kernel_group(name: str) -> str:
    """The group of :data:`KERNEL_GROUPS` a kernel's (or, on a CPU, an operator's) name falls in, else "other"."""
    lower = name.lower()
    return next((group for group, pattern in KERNEL_GROUPS if re.search(pattern, lower)), "other")

"""FlashAttention-2 forward and backward in Triton (2025 handout §1.3.2 (b, c), §1.3.3, §1.3.4; 2026 §4.2; Dao,
"FlashAttention-2", 2023, Algorithms 1 and 2).

The package reads in the order of a call, bottom-up:

1. :mod:`.kernels`, the ``@triton.jit`` kernels: the forward, the backward's preprocessing, the dK/dV pass (which
   can add dQ up too: the one-pass backward) and the dQ pass.
2. :mod:`.tiles` (tile candidates and :class:`FlashConfig`, the switches that measure what each optimisation
   buys), :mod:`.layouts` (how outputs and gradients are laid out, the layout key, TMA readiness), :mod:`.keys`
   (the shape keys), :mod:`.tuning` (tiles chosen once per shape key), :mod:`.replay` (launches remembered per
   layout), :mod:`.launch` (the per-call choices and the launches) and :mod:`.ops` (the custom ops
   ``torch.compile`` sees).
3. :mod:`.function`: :class:`FlashAttentionTriton`, the ``torch.autograd.Function``, and the public functions;
   :mod:`.host` and ``host.cpp``, the eager host path in C++ that an eager call on a GPU takes where it builds.

Any sequence lengths (tiles are masked at the ends), head dims 16..128 (a power of two is one column block; the sum
of two, the smaller at least 16, two blocks, as 80 = 64 + 16; any other the next power of two, padded with zeros),
fp32/fp16/bf16 (bf16 on a GPU only: the CPU interpreter cannot compute it), (B, N, d) or
(B, H, N, d) with any strides; O is laid out as (B, N, H, d) memory, like SDPA's flash back end's, dQ as q and
dK, dV as v. On a GPU, fp32 inputs use TF32 tensor-core products (Triton's default), as cuBLAS
does with TF32 enabled. The backward adds dQ up in the dK/dV pass for 16-bit inputs with head dims up to 64 on a
GPU, with dQ's additions done by the copy engine's bulk reductions; those land in any order, so dQ's last bits can
differ from run to run (as in FlashAttention-2 and cuDNN); under ``torch.use_deterministic_algorithms(True)``, and
elsewhere, the backward takes two passes.

    from systems.attention.flash_triton import flash_attention_triton, FlashConfig
    o = flash_attention_triton(q, k, v, is_causal=True)
"""

from systems.attention.flash_triton.function import FlashAttentionTriton, flash_attention_triton, \
    flash_attention_triton_python, flash_forward_triton
from systems.attention.flash_triton.tuning import autotune_report
from systems.attention.flash_triton.tiles import FlashConfig, Tiles

__all__ = ["FlashAttentionTriton", "FlashConfig", "Tiles", "autotune_report", "flash_attention_triton",
           "flash_attention_triton_python", "flash_forward_triton"]

# One backward of each, not causal, 1x16x8192x64 bf16 (B, H, N, d contiguous), inside the profiler's range for ncu:
# flash_hopper's Hopper backward (delta, dK/dV one pass, dQ from the accumulator) and cuDNN's through SDPA.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
causal = False
q, k, v, do = (torch.randn(1, 16, 8192, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, L = flash_forward_triton(q, k, v, causal)
qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(2):
        backward_hopper_cuda(q, k, v, o, do, L, causal)
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        out.backward(do)
    torch.cuda.synchronize()
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    backward_hopper_cuda(q, k, v, o, do, L, causal)
    out.backward(do)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()

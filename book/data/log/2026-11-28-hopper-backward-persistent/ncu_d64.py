# One Hopper backward at 4x16x2048x64 (bf16, causal), for ncu.
import torch
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
q, k, v, do = (torch.randn(4, 16, 2048, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, L = flash_forward_triton(q, k, v, True)
for _ in range(2):
    backward_hopper_cuda(q, k, v, o, do, L, True)
torch.cuda.synchronize()

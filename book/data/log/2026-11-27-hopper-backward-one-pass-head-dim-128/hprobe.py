# One backward of the Hopper one-pass kernel and one of cuDNN's, model layout, bf16, causal, for ncu.
import sys, torch
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn
B, H, n, d = (int(x) for x in sys.argv[1].split("x"))
def layout():
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
q, k, v, do = (layout() for _ in range(4))
o, L = flash_forward_triton(q, k, v, True)
backward_hopper_cuda(q, k, v, o, do, L, True)
qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
torch.autograd.grad(sdpa_cudnn(*qkv, True), qkv, do)
torch.cuda.synchronize()

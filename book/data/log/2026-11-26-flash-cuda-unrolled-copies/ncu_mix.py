# One forward+backward of flash_cuda, then of SDPA's FlashAttention-2, at 1x16x16384x64 (bf16, causal), for ncu.
import torch
from systems.attention import get_attention
q, k, v, do = (torch.randn(1, 16, 16384, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
qkv = tuple(t.requires_grad_() for t in (q, k, v))
for name in ("flash_cuda", "sdpa_flash"):
    f = get_attention(name)
    torch.autograd.grad(f(*qkv, True), qkv, do)
    torch.cuda.synchronize()

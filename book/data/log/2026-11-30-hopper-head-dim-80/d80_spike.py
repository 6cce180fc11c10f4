"""Attention at head dims 64, 80, 96, 128 with cuDNN's and FlashAttention-2's SDPA back ends and the portable Triton
kernel (launched from Python): forward and forward+backward, causal, bf16, do_bench's median of the faster of two."""
import json, sys
import torch
import triton
from systems.attention import get_attention

torch.manual_seed(0)
names = ["sdpa_cudnn", "sdpa_flash", "flash_triton_python"]
shapes = [(4, 32, 2048), (8, 32, 1024), (1, 32, 8192)]
for (b, h, n) in shapes:
    for d in (64, 80, 96, 128):
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
                   for _ in range(3))
        do = torch.randn_like(q)
        row = {"b": b, "h": h, "n": n, "d": d}
        for name in names:
            fn = get_attention(name)
            def fwd():
                with torch.no_grad():
                    fn(q, k, v, True)
            def fb():
                fn(q, k, v, True).backward(do)
            try:
                row[name] = [min(triton.testing.do_bench(f, warmup=25, rep=100) for _ in range(2)) for f in (fwd, fb)]
            except Exception as e:
                row[name] = repr(e)[:200]
            q.grad = k.grad = v.grad = None
        print(json.dumps(row), flush=True)

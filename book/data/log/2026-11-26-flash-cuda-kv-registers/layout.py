# The Triton attention at 2x32x32768x128 (bf16, causal): q, k, v contiguous as (B, H, N, d) against the model's
# layout ((B, N, H, d) in memory, viewed as (B, H, N, d)); forward, backward and both, do_bench medians in ms.
import json, torch, triton
from systems.attention import get_attention
B, H, N, d = 2, 32, 32768, 128
f = get_attention("flash_triton")
def inputs(layout):
    if layout == "contiguous":
        t = [torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    else:
        t = [torch.randn(B, N, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4)]
    return [x.requires_grad_() for x in t[:3]], t[3]
for rnd in range(2):
    for layout in ("contiguous", "model"):
        qkv, do = inputs(layout)
        o = f(*qkv, True)
        res = dict(layout=layout, round=rnd,
                   fwd=triton.testing.do_bench(lambda: f(*qkv, True), warmup=50, rep=500),
                   bwd=triton.testing.do_bench(lambda: torch.autograd.grad(o, qkv, do, retain_graph=True), warmup=50, rep=800),
                   fwd_bwd=triton.testing.do_bench(lambda: torch.autograd.grad(f(*qkv, True), qkv, do), warmup=50, rep=800))
        print(json.dumps(res), flush=True)
        del qkv, do, o

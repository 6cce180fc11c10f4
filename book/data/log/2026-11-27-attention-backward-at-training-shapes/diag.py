# Why flash_cuda is slower in the model's step than alone: (A) the model's attention call as the block makes it
# (q, k from RoPE contiguous, v a transposed view, the output reshaped to (B, N, D), dO contiguous (B, N, D)) against
# the same with every tensor contiguous (B, H, N, d), per attention, at the six step points of large and xl;
# (B) GPU kernel time per kernel name in one xl step at context 2048, flash_cuda against sdpa.
import json, sys, torch, triton
from dataclasses import replace
from systems.attention import get_attention
dt = torch.bfloat16
def call(name, B, H, N, d, layout):
    f = get_attention(name)
    D = H * d
    if layout == "model":
        q, k = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(2))
        v = torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2)
        do = torch.randn(B, N, D, device="cuda", dtype=dt)
        post = lambda o: o.transpose(1, 2).reshape(B, N, D)
    else:
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(4))
        post = lambda o: o
    qkv = [t.requires_grad_() for t in (q, k, v)]
    fb = triton.testing.do_bench(lambda: torch.autograd.grad(post(f(*qkv, True)), qkv, do), warmup=30, rep=300)
    fw = triton.testing.do_bench(lambda: post(f(*qkv, True)), warmup=30, rep=200)
    return fw, fb
for rnd in range(2):
    for size, H in (("large", 20), ("xl", 25)):
        for N, B in ((512, 16), (1024, 8), (2048, 4)):
            for layout in ("model", "contiguous"):
                for name in ("sdpa", "flash_cuda", "flash_triton"):
                    fw, fb = call(name, B, H, N, 64, layout)
                    print(json.dumps(dict(round=rnd, size=size, N=N, B=B, H=H, layout=layout, attention=name,
                                          fwd=fw, fwd_bwd=fb)), flush=True)
from systems.bench.attention_steps import device_busy
from systems.bench.flash_sweep import _step_config
for name in ("sdpa", "flash_cuda"):
    cfg = _step_config("xl", 2048, 8192, "bf16", 3, 5)
    cfg = replace(cfg, model=replace(cfg.model, attention=name))
    r = device_busy(cfg)
    top = sorted(r["kernels"].items(), key=lambda kv: -kv[1])[:25]
    print(json.dumps(dict(attention=name, step_ms=r["step_ms"], kernel_ms=r["kernel_ms"], top=top)), flush=True)

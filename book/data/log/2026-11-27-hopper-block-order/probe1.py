# (A) Per call in the model's layout at the eager steps' attention shapes (large: 20 heads, xl: 25; 8,192 tokens a
# batch) and at two longer d64 shapes: forward alone, backward alone (the Hopper backward in one pass, the Triton
# backward launched from C++, cuDNN's), forward+backward of each registered attention. do_bench medians, ms, two
# rounds. (B) Eager training steps of large and xl at contexts 512/1024/2048 with sdpa, flash_triton and
# flash_hopper interleaved on one model (3 warm-up, 20 timed steps each).
import json, sys, time, torch, triton
from systems.attention import get_attention
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
dt = torch.bfloat16
t0 = time.time()
SHAPES = [(16, 20, 512), (8, 20, 1024), (4, 20, 2048), (16, 25, 512), (8, 25, 1024), (4, 25, 2048), (2, 16, 4096),
          (1, 16, 8192)]
def bench(f, rep=200):
    return triton.testing.do_bench(f, warmup=30, rep=rep, return_mode="median")
for rnd in range(2):
    for B, H, N in SHAPES:
        d, D = 64, H * 64
        q, k = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(2))
        v = torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2)
        do4 = torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2)
        do = torch.randn(B, N, D, device="cuda", dtype=dt)
        row = dict(round=rnd, shape=f"{B}x{H}x{N}x{d}")
        o, L = forward_hopper_cuda(q, k, v, True)
        qkv = [t.detach().requires_grad_() for t in (q, k, v)]
        cud = sdpa_cudnn(*qkv, True)
        row["bwd_hopper"] = bench(lambda: backward_hopper_cuda(q, k, v, o, do4, L, True))
        row["bwd_triton"] = bench(lambda: torch.ops.systems_flash.triton_backward(q, k, v, o, do4, L, True))
        row["bwd_cudnn"] = bench(lambda: torch.autograd.grad(cud, qkv, do4, retain_graph=True))
        post = lambda o: o.transpose(1, 2).reshape(B, N, D)
        for name in ("sdpa", "flash_triton", "flash_hopper"):
            f = get_attention(name)
            row[f"fwd_{name}"] = bench(lambda: post(f(*qkv, True)))
            row[f"fb_{name}"] = bench(lambda: torch.autograd.grad(post(f(*qkv, True)), qkv, do), rep=300)
        print(json.dumps(row), flush=True)
        del q, k, v, do, do4, o, L, qkv, cud
        torch.cuda.empty_cache()
print(f"per call done after {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
from systems.bench.attention_steps import interleaved
from systems.bench.flash_sweep import _step_config
for size in ("large", "xl"):
    for context in (512, 1024, 2048):
        rows = interleaved(_step_config(size, context, 8192, "bf16", 3, 20), ("sdpa", "flash_triton", "flash_hopper"))
        for r in rows.to_dict(orient="records"):
            print(json.dumps(r), flush=True)
        print(f"{size} {context} done after {time.time() - t0:.0f} s", file=sys.stderr, flush=True)

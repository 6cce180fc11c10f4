# flash_cuda forward+backward of the tree on PYTHONPATH (tag argv[1]) beside SDPA's FA2 and cuDNN, bf16, do_bench medians.
import json, sys, torch, triton
from systems.attention import get_attention
tag, rnd = sys.argv[1], int(sys.argv[2])
shapes = [((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True), ((4, 16, 2048, 64), True),
          ((1, 16, 8192, 64), False), ((2, 32, 32768, 128), True)]
for (B, H, n, d), causal in shapes:
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qkv = tuple(t.requires_grad_() for t in (q, k, v))
    for name in ("flash_cuda", "sdpa_flash", "sdpa_cudnn"):
        f = get_attention(name)
        ms = triton.testing.do_bench(lambda: torch.autograd.grad(f(*qkv, causal), qkv, do), warmup=50,
                                     rep=300 if n < 30000 else 800)
        row = dict(tree=tag, round=rnd, shape=f"{B}x{H}x{n}x{d}" + ("" if causal else " nc"), impl=name, ms=ms)
        print(json.dumps(row), flush=True)
        if name != "sdpa_cudnn":
            ms = triton.testing.do_bench(lambda: f(*qkv, causal), warmup=50, rep=200 if n < 30000 else 500)
            print(json.dumps(row | dict(impl=name + " fwd", ms=ms)), flush=True)
    del q, k, v, do, qkv

# flash_cuda forward+backward with dQ added up in the dK/dV pass (the default) and in two passes (deterministic mode),
# beside SDPA's FlashAttention-2 and cuDNN, interleaved rounds, bf16, do_bench medians in ms.
import json, os, sys, torch, triton
from systems.attention import get_attention
shapes = [((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True), ((4, 16, 2048, 64), True),
          ((1, 16, 8192, 64), False), ((2, 32, 32768, 128), True)]
rows = []
for (B, H, n, d), causal in shapes:
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qkv = tuple(t.requires_grad_() for t in (q, k, v))
    def step(name):
        f = get_attention(name)
        return lambda: torch.autograd.grad(f(*qkv, causal), qkv, do)
    calls = {"one pass": (step("flash_cuda"), False), "two passes": (step("flash_cuda"), True),
             "sdpa_flash": (step("sdpa_flash"), False), "sdpa_cudnn": (step("sdpa_cudnn"), False)}
    for rnd in range(2):
        for name, (call, det) in calls.items():
            torch.use_deterministic_algorithms(det)
            ms = triton.testing.do_bench(call, warmup=50, rep=300 if n < 30000 else 1500)
            torch.use_deterministic_algorithms(False)
            rows.append(dict(shape=f"{B}x{H}x{n}x{d}" + ("" if causal else " nc"), impl=name, round=rnd, ms=ms))
            print(rows[-1], flush=True)
    del q, k, v, do, qkv
json.dump(rows, open(os.environ.get("OUT", ".") + "/det.json", "w"))

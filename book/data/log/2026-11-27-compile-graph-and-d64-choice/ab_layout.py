# The backward alone (hopper one pass, Triton, cuDNN) per input layout: "bnhd" all four (B, N, H, d) memory; "model":
# q, k contiguous (B, H, N, d) as the model's RoPE leaves them, v and dO (B, N, H, d); "bhnd" all contiguous.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_attention_triton, flash_forward_triton
from systems.attention.peers import sdpa_cudnn
rnd = int(sys.argv[1])
SHAPES = [(2, 32, 32768, 128), (1, 16, 16384, 128), (1, 16, 16384, 64), (32, 12, 2048, 64), (8, 25, 2048, 64),
          (16, 16, 2048, 64)]
def make(B, H, n, d, rows):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) if rows else \
        torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16)
LAYOUTS = {"bnhd": (1, 1, 1, 1), "model": (0, 0, 1, 1), "bhnd": (0, 0, 0, 0)}
for B, H, n, d in SHAPES:
    for name, rows in (LAYOUTS.items() if rnd % 2 == 0 else list(LAYOUTS.items())[::-1]):
        q, k, v, do = (make(B, H, n, d, r) for r in rows)
        qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
        rep = 150 if n < 30000 else 500
        o, L = flash_forward_triton(q, k, v, True)
        o = o.transpose(1, 2).contiguous().transpose(1, 2) if rows[3] else o.contiguous()
        cud = sdpa_cudnn(*qkv, True)
        tri = flash_attention_triton(*qkv, True)
        calls = {"hopper": lambda: backward_hopper_cuda(q, k, v, o, do, L, True),
                 "cudnn": lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True),
                 "triton": lambda: torch.autograd.grad(tri, qkv, do, retain_graph=True)}
        for impl, call in calls.items():
            ms = triton.testing.do_bench(call, rep=rep)
            print(json.dumps(dict(round=rnd, shape=f"{B}x{H}x{n}x{d}", layout=name, impl=impl, ms=ms)), flush=True)
        del q, k, v, do, qkv, o, L, cud, tri, calls
        torch.cuda.empty_cache()

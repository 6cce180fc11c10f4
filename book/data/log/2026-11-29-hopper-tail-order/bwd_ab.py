# The Hopper backward alone, one pass (backward_hopper_cuda), of the tree on PYTHONPATH (tag argv[1], round argv[2])
# beside cuDNN's backward in the same process; bf16, the model's layout ((B, N, H, d) memory viewed as (B, H, N, d)),
# causal, do_bench medians, ms; err = largest |ours - cuDNN's| over cuDNN's largest, of dQ, dK, dV.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(8, 32, 1024, 128), (4, 16, 2048, 128), (2, 16, 4096, 128), (1, 16, 16384, 128), (16, 16, 1024, 64),
          (4, 16, 2048, 64), (2, 16, 4096, 64), (1, 16, 16384, 64)]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
torch.manual_seed(rnd)
for B, H, n, d in SHAPES:
    q, k, v, do = (layout(B, H, n, d) for _ in range(4))
    qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
    o, L = forward_hopper_cuda(q, k, v, True)[:2]
    cud = sdpa_cudnn(*qkv, True)
    want = torch.autograd.grad(cud, qkv, do, retain_graph=True)
    got = backward_hopper_cuda(q, k, v, o, do, L, True)
    err = [((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want)]
    row = dict(tree=tag, round=rnd, shape=f"{B}x{H}x{n}x{d}", err=err,
               ms=triton.testing.do_bench(lambda: backward_hopper_cuda(q, k, v, o, do, L, True), rep=200),
               cudnn_ms=triton.testing.do_bench(lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True), rep=200))
    print(json.dumps(row), flush=True)
    del q, k, v, do, qkv, o, L, cud, want, got
    torch.cuda.empty_cache()

# The Hopper backward (one pass) of the tree on PYTHONPATH (tag argv[1], round argv[2]) beside cuDNN's in the same
# process, and flash_hopper's and cuDNN's forward+backward; bf16, the model's layout ((B, N, H, d) memory viewed as
# (B, H, N, d)), do_bench medians, ms; err = largest |ours - cuDNN's| over cuDNN's largest, of dQ, dK, dV.
import json, sys, torch, triton
from systems.attention import get_attention
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(1, 16, 16384, 64, True), (4, 16, 2048, 64, True), (4, 25, 2048, 64, True), (2, 16, 4096, 64, True),
          (1, 16, 8192, 64, False), (32, 12, 2048, 64, True), (16, 16, 2048, 64, True), (8, 12, 1024, 64, True),
          (1, 16, 16384, 128, True)]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
def emit(**row):
    print(json.dumps(dict(tree=tag, round=rnd) | row), flush=True)
torch.manual_seed(rnd)
for B, H, n, d, causal in SHAPES:
    q, k, v, do = (layout(B, H, n, d) for _ in range(4))
    qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
    o, L = flash_forward_triton(q, k, v, causal)
    cud = sdpa_cudnn(*qkv, causal)
    want = torch.autograd.grad(cud, qkv, do, retain_graph=True)
    got = backward_hopper_cuda(q, k, v, o, do, L, causal)
    err = [((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want)]
    shape = f"{B}x{H}x{n}x{d}" + ("" if causal else " not causal")
    emit(shape=shape, impl="hopper backward", err=err,
         ms=triton.testing.do_bench(lambda: backward_hopper_cuda(q, k, v, o, do, L, causal), rep=200))
    emit(shape=shape, impl="cudnn backward",
         ms=triton.testing.do_bench(lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True), rep=200))
    del cud, want, got
    for name in ("flash_hopper", "sdpa_cudnn"):
        f = get_attention(name)
        emit(shape=shape, impl=name + " fwd+bwd",
             ms=triton.testing.do_bench(lambda: torch.autograd.grad(f(*qkv, causal), qkv, do), rep=200))
    del q, k, v, do, qkv, o, L
    torch.cuda.empty_cache()

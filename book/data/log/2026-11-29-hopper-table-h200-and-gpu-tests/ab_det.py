# The Hopper backward's two passes (what torch.use_deterministic_algorithms takes) of the tree on PYTHONPATH (tag
# argv[1], round argv[2]) beside cuDNN's backward in the same process; bf16, the model's layout ((B, N, H, d) memory
# viewed as (B, H, N, d)), do_bench medians, ms; err = largest |ours - cuDNN's| over cuDNN's largest, of dQ, dK, dV.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(1, 16, 8192, 64, False), (2, 16, 4096, 64, False), (4, 16, 2048, 64, False), (1, 16, 8192, 128, False),
          (1, 16, 16384, 64, True), (1, 16, 16384, 128, True)]
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
    torch.use_deterministic_algorithms(True)
    got = backward_hopper_cuda(q, k, v, o, do, L, causal)
    again = backward_hopper_cuda(q, k, v, o, do, L, causal)
    same = all(torch.equal(a, b) for a, b in zip(got, again))
    err = [((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want)]
    shape = f"{B}x{H}x{n}x{d}" + ("" if causal else " not causal")
    emit(shape=shape, impl="hopper backward, two passes", ms=triton.testing.do_bench(
        lambda: backward_hopper_cuda(q, k, v, o, do, L, causal), rep=120), err=err, repeats_equal=same)
    torch.use_deterministic_algorithms(False)
    emit(shape=shape, impl="cudnn backward", ms=triton.testing.do_bench(
        lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True), rep=120))
    del cud, want, got, again, q, k, v, do, qkv, o, L
    torch.cuda.empty_cache()

# The Hopper backward of the tree on PYTHONPATH (tag argv[1], round argv[2]): one pass alone, and flash_hopper's and
# flash_cuda's forward+backward, beside cuDNN's in the same process; bf16, the model's layout, do_bench medians, ms.
# Then torch.profiler's device time per kernel of one Hopper backward at two shapes.
import json, sys, torch, triton
from systems.attention import get_attention
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(1, 16, 16384, 64), (1, 16, 16384, 128), (4, 16, 2048, 64), (8, 32, 1024, 128), (2, 16, 4096, 128),
          (2, 32, 32768, 128)]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
def emit(**row):
    print(json.dumps(dict(tree=tag, round=rnd) | row), flush=True)
for B, H, n, d in SHAPES:
    q, k, v, do = (layout(B, H, n, d) for _ in range(4))
    qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
    rep = 200 if n < 30000 else 600
    o, L = flash_forward_triton(q, k, v, True)
    cud = sdpa_cudnn(*qkv, True)
    want = torch.autograd.grad(cud, qkv, do, retain_graph=True)
    got = backward_hopper_cuda(q, k, v, o, do, L, True)
    err = max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want))
    shape = f"{B}x{H}x{n}x{d}"
    emit(shape=shape, impl="hopper backward", err=err,
         ms=triton.testing.do_bench(lambda: backward_hopper_cuda(q, k, v, o, do, L, True), rep=rep))
    emit(shape=shape, impl="cudnn backward",
         ms=triton.testing.do_bench(lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True), rep=rep))
    del cud, want, got
    for name in ("flash_hopper", "sdpa_cudnn") + (("flash_cuda",) if n == 16384 and d == 64 or n == 2048 else ()):
        f = get_attention(name)
        emit(shape=shape, impl=name + " fwd+bwd",
             ms=triton.testing.do_bench(lambda: torch.autograd.grad(f(*qkv, True), qkv, do), rep=rep))
    del q, k, v, do, qkv, o, L
    torch.cuda.empty_cache()
if rnd == 0:
    from torch.profiler import profile, ProfilerActivity
    for B, H, n, d in [(1, 16, 16384, 64), (4, 16, 2048, 64)]:
        q, k, v, do = (layout(B, H, n, d) for _ in range(4))
        o, L = flash_forward_triton(q, k, v, True)
        for _ in range(3):
            backward_hopper_cuda(q, k, v, o, do, L, True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                backward_hopper_cuda(q, k, v, o, do, L, True)
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" and e.count >= 10:
                emit(shape=f"{B}x{H}x{n}x{d}", impl="kernel", name=e.key[:90], us=e.device_time_total / e.count)

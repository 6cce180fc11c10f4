# The Hopper backward of the tree on PYTHONPATH (tag argv[1], round argv[2]; argv[3] "one" for its one pass, "two"
# for the two passes torch.use_deterministic_algorithms takes) beside cuDNN's backward in the same process; bf16, the
# model's layout ((B, N, H, d) memory viewed as (B, H, N, d)), do_bench medians, ms; err = largest |ours - cuDNN's|
# over cuDNN's largest, of dQ, dK, dV.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn
tag, rnd, passes = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SHAPES = {"one": [(8, 12, 1024, 64, True), (16, 16, 512, 64, True), (4, 16, 2048, 64, True), (1, 16, 16384, 64, True),
                  (8, 32, 1024, 128, True), (1, 16, 16384, 128, True), (2, 32, 32768, 128, True),
                  (1, 16, 8192, 64, False)],
          "two": [(4, 16, 2048, 64, True), (1, 16, 16384, 64, True), (1, 16, 16384, 128, True),
                  (1, 16, 8192, 64, False), (1, 16, 8192, 128, False)]}[passes]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
def emit(**row):
    print(json.dumps(dict(tree=tag, round=rnd, passes=passes) | row), flush=True)
torch.manual_seed(rnd)
for B, H, n, d, causal in SHAPES:
    q, k, v, do = (layout(B, H, n, d) for _ in range(4))
    qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
    o, L = flash_forward_triton(q, k, v, causal)
    cud = sdpa_cudnn(*qkv, causal)
    want = torch.autograd.grad(cud, qkv, do, retain_graph=True)
    torch.use_deterministic_algorithms(passes == "two")
    got = backward_hopper_cuda(q, k, v, o, do, L, causal)
    torch.use_deterministic_algorithms(False)
    err = [((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want)]
    shape = f"{B}x{H}x{n}x{d}" + ("" if causal else " not causal")
    calls = [("hopper backward", lambda: backward_hopper_cuda(q, k, v, o, do, L, causal)),
             ("cudnn backward", lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True))]
    for impl, call in calls if rnd % 2 == 0 else calls[::-1]:
        torch.use_deterministic_algorithms(passes == "two" and "hopper" in impl)
        emit(shape=shape, impl=impl, ms=triton.testing.do_bench(call, rep=120), **({"err": err} if "hopper" in impl else {}))
    torch.use_deterministic_algorithms(False)
    del cud, want, got, q, k, v, do, qkv, o, L
    torch.cuda.empty_cache()

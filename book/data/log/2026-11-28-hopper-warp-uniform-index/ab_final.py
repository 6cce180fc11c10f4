# flash_hopper (forward + backward through its autograd node, whichever kernels its rules pick) beside cuDNN's, of the
# tree on PYTHONPATH (tag argv[1], round argv[2]); bf16, the model's layout, do_bench medians, ms; err = largest
# |ours - cuDNN's| over cuDNN's largest, of dQ, dK, dV.
import json, sys, torch, triton
from systems.attention import get_attention
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(1, 16, 16384, 64, True), (4, 16, 2048, 64, True), (4, 25, 2048, 64, True), (8, 12, 1024, 64, True),
          (16, 16, 1024, 64, True), (4, 16, 1024, 64, True), (32, 12, 2048, 64, True), (1, 16, 16384, 128, True)]
torch.manual_seed(rnd)
ours, cudnn = get_attention("flash_hopper"), get_attention("sdpa_cudnn")
for B, H, n, d, causal in SHAPES:
    q, k, v, do = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
    qkv = tuple(t.requires_grad_() for t in (q, k, v))
    got = torch.autograd.grad(ours(*qkv, causal), qkv, do)
    want = torch.autograd.grad(cudnn(*qkv, causal), qkv, do)
    err = [((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want)]
    row = dict(tree=tag, round=rnd, shape=f"{B}x{H}x{n}x{d}", err=err)
    for name, f in (("flash_hopper", ours), ("sdpa_cudnn", cudnn)):
        row[name] = triton.testing.do_bench(lambda: torch.autograd.grad(f(*qkv, causal), qkv, do), rep=200)
    print(json.dumps(row), flush=True)
    del q, k, v, do, qkv, got, want
    torch.cuda.empty_cache()

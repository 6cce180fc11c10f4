# The registered Hopper forward (torch.ops.systems_flash.hopper_attention_forward: the variant flash_hopper chooses
# for the shape) beside SDPA's cuDNN back end, bf16, inputs (B, N, H, d) in memory as the model hands them over,
# do_bench medians (ms), in the tree on PYTHONPATH (tag argv[1], round argv[2]). Causal shapes with two consumers
# (head dim 128 at every length, 64 below 2,048 keys), where h halves a consumer's last key tile, from 512 to 32,768
# keys; shapes whose kernels h leaves unhalved (three consumers at head dim 64, no mask). err = largest
# |ours - cuDNN's| over cuDNN's largest; L_err = largest |L - float64 log-sum-exp|.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import unavailable
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
torch.manual_seed(rnd)
SHAPES = [(16, 32, 512, 128, True), (8, 32, 1024, 128, True), (4, 32, 2048, 128, True), (2, 32, 4096, 128, True),
          (1, 32, 8192, 128, True), (1, 16, 16384, 128, True), (2, 32, 32768, 128, True),
          (16, 16, 512, 64, True), (8, 16, 1024, 64, True), (8, 12, 1024, 64, True), (16, 12, 1000, 64, True),
          (4, 16, 2048, 64, True), (1, 16, 16384, 64, True), (8, 32, 1024, 128, False), (1, 16, 8192, 64, False)]
assert unavailable(torch.device("cuda")) is None  # built and loaded: the operators exist from here on
op = torch.ops.systems_flash.hopper_attention_forward
x = torch.randn(1, 128, 1, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
op(x, x, x, True)
for B, H, n, d, causal in SHAPES:
    q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    out = dict(tree=tag, round=rnd, shape=f"{B}x{H}x{n}x{d}", causal=causal)
    with torch.no_grad():
        want = sdpa_cudnn(q, k, v, causal).float()
        got, L = op(q, k, v, causal)
        out["err"] = ((got.float() - want).abs().max() / want.abs().max()).item()
        if n <= 2048:
            s = (q.double() @ k.double().transpose(-1, -2)) * d ** -0.5
            if causal:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            out["L_err"] = (L.double() - s.logsumexp(-1)).abs().max().item()
            del s
        out["cudnn_ms"] = triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=150)
        out["ours_ms"] = triton.testing.do_bench(lambda: op(q, k, v, causal), rep=150)
    print(json.dumps(out), flush=True)

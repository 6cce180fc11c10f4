# The registered Hopper forward (torch.ops.systems_flash.hopper_attention_forward, the variant flash_hopper chooses
# for the shape) beside SDPA's cuDNN back end, bf16, inputs (B, N, H, d) in memory as the model hands them over,
# do_bench medians (ms), in the tree on PYTHONPATH (tag argv[1], round argv[2]). Shapes where the change of this
# entry halves a consumer's last key tile (causal at head dim 128 and at 64 below 2,048 keys; not causal where the
# keys end in a tile's first half) and shapes it leaves alone (three consumers at head dim 64). err = largest
# |ours - cuDNN's| over cuDNN's largest; L_err = largest |L - float64 log-sum-exp|.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
torch.manual_seed(rnd)
SHAPES = [(8, 32, 1024, 128, True), (16, 32, 512, 128, True), (4, 32, 2048, 128, True), (1, 16, 16384, 128, True),
          (2, 32, 32768, 128, True), (8, 32, 960, 128, False), (8, 32, 1024, 128, False),
          (8, 16, 1024, 64, True), (16, 16, 512, 64, True), (4, 16, 2048, 64, True), (1, 16, 16384, 64, True)]
forward_hopper_cuda(*(torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)))
for B, H, n, d, causal in SHAPES:
    q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    out = dict(tree=tag, round=rnd, shape=f"{B}x{H}x{n}x{d}", causal=causal)
    with torch.no_grad():
        want = sdpa_cudnn(q, k, v, causal).float()
        got, L = torch.ops.systems_flash.hopper_attention_forward(q, k, v, causal)
        out["err"] = ((got.float() - want).abs().max() / want.abs().max()).item()
        if n <= 2048:
            s = (q.double() @ k.double().transpose(-1, -2)) * d ** -0.5
            if causal:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            out["L_err"] = (L.double() - s.logsumexp(-1)).abs().max().item()
            del s
        out["cudnn_ms"] = triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=150)
        out["ours_ms"] = triton.testing.do_bench(lambda: torch.ops.systems_flash.hopper_attention_forward(q, k, v, causal),
                                                 rep=150)
    print(json.dumps(out), flush=True)

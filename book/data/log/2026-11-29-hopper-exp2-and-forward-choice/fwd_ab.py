# 2026-11-29-hopper-forward-persistent/fwd_ab.py with seven shapes added. The Hopper forward alone
# (forward_hopper_cuda: its default ring, ping-pong and consumers) of the tree on PYTHONPATH (tag argv[1], round
# argv[2]) beside cuDNN's forward and, at head dim 64, the Triton kernels' forward launched from C++, in the same
# process; bf16, the model's layout, do_bench medians, ms; err = largest |ours - cuDNN's| over cuDNN's largest.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
tag, rnd = sys.argv[1], int(sys.argv[2])
SHAPES = [(8, 32, 1024, 128, True), (4, 16, 2048, 128, True), (2, 16, 4096, 128, True), (1, 16, 16384, 128, True),
          (2, 32, 32768, 128, True), (8, 32, 1024, 128, False), (8, 12, 1024, 64, True), (16, 16, 1024, 64, True),
          (4, 16, 2048, 64, True), (32, 12, 2048, 64, True), (2, 16, 4096, 64, True), (1, 16, 8192, 64, True),
          (1, 16, 16384, 64, True), (4, 16, 2048, 64, False), (1, 16, 8192, 64, False),
          # the presets' heads (small 12, medium 16, large 20, xl 25) at short lengths, and one head of 128 tokens
          (16, 12, 512, 64, True), (8, 16, 512, 64, True), (8, 20, 1024, 64, True), (4, 25, 1024, 64, True),
          (4, 25, 2048, 64, True), (1, 1, 128, 64, True), (1, 16, 16384, 64, False)]
torch.manual_seed(rnd)
for B, H, n, d, causal in SHAPES:
    q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    want = sdpa_cudnn(q, k, v, causal).float()
    got = forward_hopper_cuda(q, k, v, causal)[0].float()
    shape = f"{B}x{H}x{n}x{d}" + ("" if causal else " not causal")
    with torch.no_grad():
        row = dict(tree=tag, round=rnd, shape=shape, err=((got - want).abs().max() / want.abs().max()).item(),
                   ms=triton.testing.do_bench(lambda: forward_hopper_cuda(q, k, v, causal), rep=200),
                   cudnn_ms=triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=200))
        if d == 64:
            row["triton_ms"] = triton.testing.do_bench(
                lambda: torch.ops.systems_flash.triton_forward(q, k, v, causal), rep=200)
    print(json.dumps(row), flush=True)
    del q, k, v, want, got
    torch.cuda.empty_cache()
# against the float64 reference: the largest error of ours and of cuDNN's over the reference's largest
for n, d, causal in [(1000, 64, True), (1000, 64, False), (1000, 128, True), (4096, 64, True)]:
    q, k, v = (torch.randn(2, n, 4, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    outputs = {"ours": forward_hopper_cuda(q, k, v, causal)[0], "cudnn": sdpa_cudnn(q, k, v, causal)}
    errors = {name: ((got.double() - want).abs().max() / want.abs().max()).item() for name, got in outputs.items()}
    print(json.dumps(dict(tree=tag, round=rnd, oracle=f"2x4x{n}x{d}" + ("" if causal else " not causal"), **errors)),
          flush=True)

# At head dim 64, where flash_hopper took the Triton backward before 8615f3d: the registered Hopper forward and
# forward+backward beside SDPA's cuDNN back end, bf16, (B, N, H, d) layout; do_bench medians (ms), two rounds. Without
# the mask at 16,384 tokens a batch and 32 heads (512 to 4,096 keys); causal at 1x16x4096 and 4x25x1024 (the xl
# preset's heads at context 1,024, batch 4).
import json, torch, triton
from systems.attention.flash_cpp.hopper import unavailable, flash_attention_hopper
from systems.attention.peers import sdpa_cudnn
assert unavailable(torch.device("cuda")) is None
op = torch.ops.systems_flash.hopper_attention_forward
shapes = [(16384 // n, 32, n, False) for n in (512, 1024, 2048, 4096)] + [(1, 16, 4096, True), (4, 25, 1024, True)]
for rnd in range(2):
    for B, H, n, causal in shapes:
        q, k, v = (torch.randn(B, n, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        out = dict(round=rnd, shape=f"{B}x{H}x{n}x64", causal=causal)
        with torch.no_grad():
            out["ours_fwd"] = triton.testing.do_bench(lambda: op(q, k, v, causal), rep=100)
            out["cudnn_fwd"] = triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=100)
        for t in (q, k, v):
            t.requires_grad_(True)
        do = torch.randn_like(q)
        grads = []
        for f in (flash_attention_hopper, sdpa_cudnn):
            o = f(q, k, v, causal)
            o.backward(do)
            grads.append([o.detach().float()] + [t.grad.float() for t in (q, k, v)])
            for t in (q, k, v):
                t.grad = None
        out["err"] = [((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads)]
        del grads
        for name, f in (("ours", flash_attention_hopper), ("cudnn", sdpa_cudnn)):
            out[name + "_fwd_bwd"] = triton.testing.do_bench(lambda: f(q, k, v, causal).backward(do),
                                                             grad_to_none=[q, k, v], rep=100)
        print(json.dumps(out), flush=True)

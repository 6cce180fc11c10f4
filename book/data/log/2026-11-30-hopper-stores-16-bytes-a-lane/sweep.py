# The registered Hopper forward and forward+backward beside SDPA's cuDNN back end over lengths at 16,384 tokens a
# batch (B x N), 32 heads, causal and not, head dims 64 and 128; do_bench medians (ms), bf16, (B, N, H, d) layout.
import json, sys, torch, triton
from systems.attention.flash_cpp.hopper import unavailable, flash_attention_hopper
from systems.attention.peers import sdpa_cudnn
assert unavailable(torch.device("cuda")) is None
tag = sys.argv[1]
op = torch.ops.systems_flash.hopper_attention_forward
for d in (128, 64):
    for causal in (False, True):
        for n in (512, 1024, 2048, 4096, 8192, 16384):
            B, H = 16384 // n, 32
            q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
            out = dict(tree=tag, shape=f"{B}x{H}x{n}x{d}", causal=causal)
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

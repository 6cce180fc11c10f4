# Head dim 80 (the 2.7B preset's) in the Hopper kernels of head dim 128 with the products over the head dim cut to 80
# columns, beside SDPA's cuDNN back end and the portable Triton kernels, causal unless noted, bf16, (B, N, H, d)
# layout; do_bench medians (ms): the forward, forward+backward, the backward alone (the Hopper one and the Triton
# kernels', from the same O and L), and flash_hopper at head dim 128 at the same shape; largest difference from
# cuDNN's O, dQ, dK, dV over cuDNN's largest.
import json, torch, triton
from systems.attention.flash_cpp.hopper import unavailable, flash_attention_hopper, backward_hopper_cuda
from systems.attention.flash_triton import flash_attention_triton
from systems.attention.peers import sdpa_cudnn
assert unavailable(torch.device("cuda")) is None
fwd_op = torch.ops.systems_flash.hopper_attention_forward
bench = lambda f: triton.testing.do_bench(f, rep=100)
for (B, H, n, causal) in [(4, 32, 2048, True), (8, 32, 1024, True), (16, 32, 512, True), (1, 32, 8192, True),
                          (2, 32, 4096, False)]:
    for d in (80, 72):
        if d == 72 and (B, n) != (4, 2048):
            continue
        q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        do = torch.randn_like(q)
        out = dict(shape=f"{B}x{H}x{n}x{d}", causal=causal)
        with torch.no_grad():
            out["ours_fwd"] = bench(lambda: fwd_op(q, k, v, causal))
            out["cudnn_fwd"] = bench(lambda: sdpa_cudnn(q, k, v, causal))
            out["triton_fwd"] = bench(lambda: flash_attention_triton(q, k, v, causal))
            o, L = fwd_op(q, k, v, causal)
            out["ours_bwd"] = bench(lambda: backward_hopper_cuda(q, k, v, o, do, L, causal))
            out["triton_bwd"] = bench(lambda: torch.ops.systems_flash.triton_backward(q, k, v, o, do, L, causal))
        for t in (q, k, v):
            t.requires_grad_(True)
        grads = []
        for f in (flash_attention_hopper, sdpa_cudnn):
            o = f(q, k, v, causal)
            o.backward(do)
            grads.append([o.detach().float()] + [t.grad.float() for t in (q, k, v)])
            for t in (q, k, v):
                t.grad = None
        out["err"] = [((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads)]
        del grads
        for name, f in (("ours", flash_attention_hopper), ("cudnn", sdpa_cudnn), ("triton", flash_attention_triton)):
            out[name + "_fwd_bwd"] = triton.testing.do_bench(lambda: f(q, k, v, causal).backward(do),
                                                             grad_to_none=[q, k, v], rep=100)
        if d == 80:
            q, k, v = (torch.randn(B, n, H, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
                       for _ in range(3))
            do = torch.randn_like(q)
            out["ours_fwd_bwd_d128"] = triton.testing.do_bench(lambda: flash_attention_hopper(q, k, v, causal).backward(do),
                                                               grad_to_none=[q, k, v], rep=100)
        print(json.dumps(out), flush=True)

# Head dim 64, the model's layout as sweep_bwd64.py of 2026-11-28 has it (q, k contiguous; v, dO (B, N, H, d)
# memory): the Hopper backward against the Triton backward through their C++ operators, causal and not, at the
# lengths and batch x heads where flash_hopper's choice between them (hopper_backward_is_faster) changes; do_bench
# medians, ms; two rounds, the order of the two alternating by round. A JSON line a timing.
import json, torch, triton
import systems.attention.flash_cpp.hopper as hp
assert hp.unavailable(torch.device("cuda")) is None
ops = torch.ops.systems_flash
BH = [(1, 16), (4, 16), (4, 25), (8, 20), (16, 16), (32, 12), (32, 16)]
for rnd in range(2):
    for causal in (True, False):
        for n in (512, 1024, 2048, 4096):
            for B, H in BH:
                q, k = (torch.randn(B, H, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                v, do = (torch.randn(B, n, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
                o, L = ops.triton_forward(q, k, v, causal)
                calls = {"hopper": lambda: ops.hopper_backward(q, k, v, o, do, L, causal),
                         "triton": lambda: ops.triton_backward(q, k, v, o, do, L, causal)}
                items = list(calls.items()) if rnd % 2 == 0 else list(calls.items())[::-1]
                for impl, call in items:
                    ms = triton.testing.do_bench(call, rep=40)
                    print(json.dumps(dict(round=rnd, causal=causal, n=n, B=B, H=H, impl=impl, ms=ms)), flush=True)
                del q, k, v, do, o, L

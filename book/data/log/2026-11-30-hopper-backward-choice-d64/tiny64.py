# choice64.py below 512 keys: the Hopper and Triton backwards through their C++ operators at head dim 64, the model's
# layout, 77, 128 and 256 keys, causal and not; do_bench medians, ms; two rounds, the order alternating.
import json, torch, triton
import systems.attention.flash_cpp.hopper as hp
assert hp.unavailable(torch.device("cuda")) is None
ops = torch.ops.systems_flash
for rnd in range(2):
    for causal in (True, False):
        for n in (77, 128, 256):
            for B, H in [(1, 1), (1, 16), (8, 20), (32, 16)]:
                q, k = (torch.randn(B, H, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                v, do = (torch.randn(B, n, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
                o, L = ops.triton_forward(q, k, v, causal)
                calls = {"hopper": lambda: ops.hopper_backward(q, k, v, o, do, L, causal),
                         "triton": lambda: ops.triton_backward(q, k, v, o, do, L, causal)}
                items = list(calls.items()) if rnd % 2 == 0 else list(calls.items())[::-1]
                for impl, call in items:
                    ms = triton.testing.do_bench(call, rep=25)
                    print(json.dumps(dict(round=rnd, causal=causal, n=n, B=B, H=H, impl=impl, ms=ms)), flush=True)
                del q, k, v, do, o, L

# Head dim 64, causal, the model's layout (q, k contiguous; v, dO (B, N, H, d) memory): the Hopper backward against
# the Triton backward through their C++ operators, at the lengths where flash_hopper's choice between them changes;
# do_bench medians, ms; the order of the two alternates by round.
import json, sys, torch, triton
import systems.attention.flash_cpp.hopper as hp
rnd = int(sys.argv[1])
assert hp.unavailable(torch.device("cuda")) is None
ops = torch.ops.systems_flash
BH = [(1, 16), (4, 16), (4, 25), (8, 20), (16, 16), (32, 12), (32, 16)]
for n in (1024, 2048, 4096):
    for B, H in BH:
        q, k = (torch.randn(B, H, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v, do = (torch.randn(B, n, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        o, L = ops.triton_forward(q, k, v, True)
        calls = {"bwd hopper": lambda: ops.hopper_backward(q, k, v, o, do, L, True),
                 "bwd triton": lambda: ops.triton_backward(q, k, v, o, do, L, True)}
        items = list(calls.items()) if rnd % 2 == 0 else list(calls.items())[::-1]
        for impl, call in items:
            ms = triton.testing.do_bench(call, rep=60)
            print(json.dumps(dict(round=rnd, n=n, B=B, H=H, impl=impl, ms=ms)), flush=True)
        del q, k, v, do, o, L

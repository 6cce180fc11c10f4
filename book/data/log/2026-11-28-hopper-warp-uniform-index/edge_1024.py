# Head dim 64, causal, 1,024 keys, the model's layout: the Hopper backward against the Triton backward through their
# C++ operators at batch x heads around the rule's 768 key blocks, five rounds, the order alternating by round;
# do_bench medians, ms.
import json, torch, triton
import systems.attention.flash_cpp.hopper as hp
assert hp.unavailable(torch.device("cuda")) is None
ops = torch.ops.systems_flash
for rnd in range(5):
    for B, H in [(4, 16), (5, 16), (8, 10), (8, 12), (4, 25), (6, 16)]:
        q, k = (torch.randn(B, H, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v, do = (torch.randn(B, 1024, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        o, L = ops.triton_forward(q, k, v, True)
        calls = [("bwd hopper", lambda: ops.hopper_backward(q, k, v, o, do, L, True)),
                 ("bwd triton", lambda: ops.triton_backward(q, k, v, o, do, L, True))]
        for impl, call in calls if rnd % 2 == 0 else calls[::-1]:
            print(json.dumps(dict(round=rnd, B=B, H=H, impl=impl, ms=triton.testing.do_bench(call, rep=60))), flush=True)

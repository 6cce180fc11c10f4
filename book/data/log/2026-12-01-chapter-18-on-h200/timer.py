"""The sweeps' timer on a GPU: forward+backward of flash_hopper and cuDNN timed in rounds in turn, each round by
do_bench alone (its median over 100 ms of repetitions, as chapter 20 timed before d745814) and by
systems.bench.timing.make_timer (the same, then a call that got fewer than ten repetitions timed again over ten
calls' time). One JSON line per round."""
import json

import torch
import triton.testing

from systems.bench.flash_sweep import attention
from systems.bench.timing import make_timer

SHAPES = [((2, 32, 32768, 128), True), ((1, 16, 16384, 64), True)]
ROUNDS, REP_MS, WARMUP_MS = 4, 100, 25
timer = make_timer(REP_MS, WARMUP_MS)
for shape, causal in SHAPES:
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    do = torch.randn_like(q)
    for round_, impl in ((r, i) for r in range(ROUNDS) for i in ("flash_hopper", "sdpa_cudnn")):
        fn = attention(impl)
        step = lambda: fn(q, k, v, causal).backward(do)  # noqa: E731
        step()
        alone = triton.testing.do_bench(step, warmup=WARMUP_MS, rep=REP_MS, grad_to_none=[q, k, v],
                                        return_mode="median")
        timed = timer(step, [q, k, v])
        print(json.dumps({"shape": "×".join(map(str, shape)), "causal": causal, "impl": impl, "round": round_,
                          "do_bench_ms": alone, "make_timer_ms": timed}), flush=True)

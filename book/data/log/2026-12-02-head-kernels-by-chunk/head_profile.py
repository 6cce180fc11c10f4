"""Where the fused head's time goes at each chunk size (kernel sums by torch.profiler), beside the compiled head."""
import math, sys, json, collections
import torch, triton
from torch.profiler import profile, ProfilerActivity
from systems.fused import linear_cross_entropy
from systems.model import token_loss
N, V, D = 65536, 151936, 4096
dev = "cuda"
h = torch.randn(N, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
w = (torch.randn(V, D, device=dev) / math.sqrt(D)).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, V, (N,), device=dev)
out = {}
def step(fn):
    def run():
        h.grad = w.grad = None
        fn().backward()
    return run
def measure(name, run):
    run(); torch.cuda.synchronize()
    h.grad = w.grad = None
    torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    run(); torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 2**30
    ms = [triton.testing.do_bench(run, warmup=200, rep=1500) for _ in range(3)]
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            run()
        torch.cuda.synchronize()
    sums = collections.Counter(); counts = collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            sums[e.name[:90]] += e.device_time_total / 1e3 / 3; counts[e.name[:90]] += 1
    top = {k: (round(v, 2), counts[k] // 3) for k, v in sums.most_common(8)}
    out[name] = dict(ms=ms, extra_gib=extra, kernel_ms=round(sum(sums.values()), 2), top=top)
    print(name, json.dumps(out[name], indent=1), flush=True)
for chunk in [int(c) for c in sys.argv[1:]]:
    measure(f"fused {chunk}", step(lambda: linear_cross_entropy(h, w, t, chunk_tokens=chunk)))
comp = torch.compile(lambda h, w, t: token_loss((h @ w.T)[None], t[None]))
measure("compiled", step(lambda: comp(h, w, t)))
import os
json.dump(out, open(os.environ["OUT"] + "/head_profile.json", "w"), indent=1)

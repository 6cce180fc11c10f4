# The per-call floor, interleaved: rounds of each implementation in turn, and the aten ops one eager call runs.
import collections, statistics, torch
from systems.bench.call_overhead import per_call_us
from systems.bench.flash_sweep import attention
impls = ["flash_triton", "flash_cuda", "sdpa_flash"]
q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
steps = {}
for impl in impls:
    att = attention(impl)
    steps[impl] = (lambda att=att: torch.autograd.grad(att(q, k, v, True).sum(), (q, k, v)))
    for _ in range(5): steps[impl]()
walls = collections.defaultdict(list)
for r in range(7):
    for impl in impls:
        walls[impl].append(per_call_us(steps[impl], 300, torch.device("cuda"), repeats=3)[1])
for impl in impls:
    print(f"{impl}: median wall {statistics.median(walls[impl]):.1f} us, rounds {[round(w,1) for w in walls[impl]]}")
print("paired ratio flash_triton/sdpa_flash:", [round(a/b, 3) for a, b in zip(walls['flash_triton'], walls['sdpa_flash'])])
for impl in ("flash_triton", "sdpa_flash"):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10): steps[impl]()
        torch.cuda.synchronize()
    print(f"== {impl}")
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=28, max_name_column_width=60))

# Forward+backward (autograd) of flash_hopper and sdpa_cudnn timed three ways in one process, tree tag argv[1]:
# "table": flash_sweep.measure with chapter 20's timer (do_bench, 100 ms, L2 flushed before every call);
# "no_flush": the same do_bench with its flush made a no-op; "loop": 30 back-to-back calls between two events.
# Then each call's kernels under torch.profiler with the flush before every call, as do_bench runs them.
# bf16, inputs (B, H, N, d) contiguous as chapter 20's table makes them; ms.
import json, statistics, sys, torch, triton
from torch.profiler import ProfilerActivity, profile
from triton import runtime
from systems.bench import flash_sweep as fs
from systems.attention import get_attention
tag = sys.argv[1]
SHAPES = [(8, 32, 1024, 128, True), (1, 16, 16384, 64, True), (4, 16, 2048, 64, True)]
driver = runtime.driver.active
clear = driver.clear_cache
cache = driver.get_empty_cache_for_benchmark()
for B, H, n, d, causal in SHAPES:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    shape = f"{B}x{H}x{n}x{d}"
    for rnd in range(2):
        for impl in ("flash_hopper", "sdpa_cudnn"):
            fn = get_attention(impl)
            row = dict(tree=tag, round=rnd, shape=shape, impl=impl)
            row["table"] = fs.measure(fn, q, k, v, causal, ("fwd_bwd",), fs.make_timer(100, 25))["fwd_bwd"]
            driver.clear_cache = lambda c: None
            try:
                row["no_flush"] = fs.measure(fn, q, k, v, causal, ("fwd_bwd",), fs.make_timer(100, 25))["fwd_bwd"]
            finally:
                driver.clear_cache = clear
            do = torch.randn_like(fn(q, k, v, causal))
            def step():
                fn(q, k, v, causal).backward(do)
                q.grad = k.grad = v.grad = None
            for _ in range(5):
                step()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(30):
                step()
            end.record()
            torch.cuda.synchronize()
            row["loop"] = start.elapsed_time(end) / 30
            if rnd == 0:
                events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for s, e in events:
                        clear(cache)
                        s.record()
                        step()
                        e.record()
                    torch.cuda.synchronize()
                row["flushed_calls_median"] = statistics.median(s.elapsed_time(e) for s, e in events)
                kernels = {}
                for ev in prof.events():
                    if ev.device_type == torch.autograd.DeviceType.CUDA:
                        us, c = kernels.get(ev.name[:80], (0.0, 0))
                        kernels[ev.name[:80]] = (us + ev.device_time_total / 20, c + 1)
                row["flushed_kernels_us"] = sorted(([k, round(us, 2), c // 20] for k, (us, c) in kernels.items()),
                                                   key=lambda r: -r[1])
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    del q, k, v
    torch.cuda.empty_cache()

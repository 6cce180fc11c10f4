"""Profile one compiled block (leaderboard shape) and one compiled small-model step per attention: kernel table."""
import csv, os, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from systems.bench import leaderboard_2026 as lb
from systems.bench.e2e import BenchConfig, Step, vary
from systems.model import LEADERBOARD_2026, preset

out = os.environ.get("OUT", "/tmp")
which = sys.argv[1:] or ["block", "small"]

def kernels(prof):
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        if t > 0:
            rows.append((e.key, e.count, t))
    return sorted(rows, key=lambda r: -r[2])

def run_profile(tag, fn, warm=3, n=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    rows = kernels(prof)
    total = sum(r[2] for r in rows if not r[0].startswith("aten::") and not r[0].startswith("cuda"))
    print(f"== {tag}: event ms {sorted(ts)}; kernels per step {total / n / 1e3:.2f} ms", flush=True)
    with open(f"{out}/{tag}.csv", "w", newline="") as f:
        w = csv.writer(f); w.writerow(["name", "count", "self_us_per_step"])
        for name, c, t in rows:
            w.writerow([name, c / n, t / n])
    prof.export_chrome_trace(f"{out}/{tag}.json")

if "block" in which:
    for i, attn in enumerate(os.environ.get("ATTNS", "sdpa_cudnn,flash_hopper").split(",")):
        torch._dynamo.reset()
        t0 = time.time()
        step = lb._block(attn, "none", True, 2, LEADERBOARD_2026, torch.bfloat16)
        step.run(); torch.cuda.synchronize()
        print(f"{attn} block first call {time.time() - t0:.1f} s", flush=True)
        run_profile(f"block_{attn}_{i}", step.run)
        del step; torch.cuda.empty_cache()

if "small" in which:
    base = BenchConfig(model=preset("small", context_length=2048), batch_size=32, mode="train", dtype="bf16",
                       compile=True)
    for attn in ["sdpa", "flash_hopper"]:
        cfg = vary(base, attention=attn)
        step = Step(cfg, torch.device("cuda"), per_phase=False)
        t0 = time.time(); step(); torch.cuda.synchronize()
        print(f"{attn} small first step {time.time() - t0:.1f} s", flush=True)
        run_profile(f"small_{attn}", step)
        del step; torch.cuda.empty_cache()

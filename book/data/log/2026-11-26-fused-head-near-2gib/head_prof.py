import os, torch
from torch.profiler import profile, ProfilerActivity
from systems.bench.leaderboard_2026 import _head_step
from systems.model import LEADERBOARD_2026 as cfg
import triton
for chunk in (1152,):
    step = _head_step("fused", 65536, cfg, torch.bfloat16, chunk)
    for _ in range(3): step.run()
    torch.cuda.synchronize()
    print("do_bench ms", triton.testing.do_bench(step.run, warmup=300, rep=2500))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step.run(); torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))

"""Where the host's time goes in the eager step of SIZE at CONTEXT (8,192 tokens a batch, bf16) with ATTENTION: torch
.profiler's CPU activity over 5 steps after 3 of warm-up, in this process alone. One JSON line per op: its self and
total CPU µs per step and its calls per step, the 40 ops of most self time first."""
import json
import sys

from torch.profiler import ProfilerActivity, profile

from systems.bench.e2e import Step, bench_device, timed_steps
from systems.bench.flash_sweep import _step_config
from systems.bench.e2e import vary

size, context, attention = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = vary(_step_config(size, context, 8192, "bf16", 3, 5), attention=attention)
device = bench_device(cfg)
step = Step(cfg, device, per_phase=False)
timed_steps(step, cfg.warmup, device)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    timed_steps(step, cfg.steps, device)
events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
for e in events[:40]:
    print(json.dumps({"attention": attention, "op": e.key, "self_us": e.self_cpu_time_total / cfg.steps,
                      "total_us": e.cpu_time_total / cfg.steps, "calls": e.count / cfg.steps}), flush=True)
print(json.dumps({"attention": attention, "op": "(all ops, self)",
                  "self_us": sum(e.self_cpu_time_total for e in events) / cfg.steps}), flush=True)

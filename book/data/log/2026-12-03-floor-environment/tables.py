"""Every number of the log entry of 2026-12-03 on the floor's environment and the profiler, from this folder's
records: python tables.py"""
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def lines(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


print("run 1, floor_env.py: eager wall µs per call (median of 7 rounds; flash_cuda and flash over sdpa_flash)")
rows = lines("run1_floor_env.jsonl")
for phase in dict.fromkeys(r["phase"] for r in rows):
    got = {(r["impl"], r["mode"]): r["wall_us"] for r in rows if r["phase"] == phase}
    sdpa = got["sdpa_flash", "eager"]
    print(f"  {phase:45s}", "  ".join(f"{i} {got[i, 'eager']:6.1f} ({got[i, 'eager'] / sdpa:.3f})"
                                      for i in ("flash", "flash_triton", "flash_cuda", "sdpa_flash")))
    if ("flash", "CUDA graph") in got:
        print(f"  {'':45s} CUDA graph:", "  ".join(f"{i} {got[i, 'CUDA graph']:.1f}"
                                                 for i in ("flash", "flash_triton", "flash_cuda", "sdpa_flash")))
print("  rounds' spread (min to max over the 7 rounds), eager flash:",
      {r["phase"][:20]: (round(min(r["rounds_wall_us"]), 1), round(max(r["rounds_wall_us"]), 1))
       for r in rows if r["impl"] == "flash" and r["mode"] == "eager"})

print("\nrun 1, steps_busy.py (step_kernel_time as it was: sdpa's step timed and profiled, then flash's), ms")
busy = [r for r in lines("run1_steps_busy.jsonl") if not r.get("own")]
for sdpa, flash in zip(busy[::2], busy[1::2]):
    print(f"  {sdpa['size']} {sdpa['context']}: flash's step over sdpa's {flash['step_ms'] / sdpa['step_ms']:.3f}")
for r in lines("run1_steps_busy.jsonl"):
    if not r.get("own"):
        print(f"  {r['size']:6s} {r['context']:5d} {r['attention']:5s} step {r['step_ms']:6.2f} kernels "
              f"{r['kernel_ms']:6.2f} host wait {r['host_wait_ms']:5.2f} own kernels {r['own_kernel_ms']:.2f}")

print("\nrun 2, compile_control.py: eager wall µs per call (median of 7 rounds)")
for r in lines("run2_compile_control.jsonl"):
    print(f"  {r['phase']:34s} {r['impl']:12s} {r['wall_us']:6.1f}  rounds {min(r['rounds_wall_us']):6.1f} to "
          f"{max(r['rounds_wall_us']):6.1f}  threads {r['threads']} child processes {r['children']}")

print("\nrun 2, after_profiler.py small 1024: median step ms (20 steps each, interleaved)")
for order in ("sdpa_first", "flash_first"):
    print(f"  {order}")
    steps = {}
    for r in lines(f"run2_after_profiler_{order}.jsonl"):
        steps[r["phase"], r["attention"]] = r["step_ms"]
        extra = f" kernels {r['kernel_ms']:.2f}" if "kernel_ms" in r else ""
        print(f"    {r['phase']:28s} {r['attention']:5s} {r['step_ms']:6.2f}{extra}")
    before = np.mean([steps["before any profiler", a] for a in ("sdpa", "flash")])
    after = np.mean([steps["after profiling", a] for a in ("sdpa", "flash")])
    again = np.mean([steps["again, before any profiler", a] for a in ("sdpa", "flash")])
    first, second = [r["step_ms"] for r in lines(f"run2_after_profiler_{order}.jsonl")
                     if r["phase"].startswith("device_busy")]
    ratio = steps["before any profiler", "flash"] / steps["before any profiler", "sdpa"]
    print(f"    flash over sdpa before any profiler: {ratio:.3f}")
    print(f"    device_busy: the second attention's step over the first's {second / first:.3f}")
    print(f"    again before over before (no profiler yet): {again / before:.3f}")
    print(f"    after profiling over before, both attentions' mean: {after / before:.3f}")

print("\nrun 2, call_floor eager first (µs per call; over sdpa_flash eager):")
text = (HERE / "run2_floor.txt").read_text().splitlines()
print("\n".join("  " + t for t in text))
vals = {t.split()[0]: [float(x) for x in t.split()[1:]] for t in text[1:]}
for impl, (eager, compiled, graph) in vals.items():
    print(f"  {impl:20s} eager/sdpa_flash {eager / vals['sdpa_flash'][0]:.3f}")
print(f"  flash - flash_triton eager: {vals['flash'][0] - vals['flash_triton'][0]:.1f} µs;"
      f" flash_cuda - flash_triton: {vals['flash_cuda'][0] - vals['flash_triton'][0]:.1f} µs")

print("\nrun 3, steps_busy.py with step_kernel_time as changed (walls interleaved, kernels profiled apart), ms")
busy = [r for r in lines("run3_steps_busy.jsonl") if not r.get("own")]
for r in busy:
    print(f"  {r['size']:6s} {r['context']:5d} {r['attention']:5s} step {r['step_ms']:6.2f} kernels "
          f"{r['kernel_ms']:6.2f} host wait {r['host_wait_ms']:5.2f} own kernels {r['own_kernel_ms']:.2f}")
for sdpa, flash in zip(busy[::2], busy[1::2]):
    print(f"  {sdpa['size']} {sdpa['context']}: flash's step over sdpa's {flash['step_ms'] / sdpa['step_ms']:.3f}")

print("\nrun 4, small at 2,048 eager, 40 steps each interleaved, two processes: flash over sdpa, paired")
for i in (1, 2):
    r = json.loads((HERE / f"run4_steps_small_2048_{i}.json").read_text())
    print(f"  process {i}: sdpa {r['sdpa_ms']:.2f} ms, flash {r['flash_ms']:.2f} ms, ratio {r['ratio']:.3f} "
          f"({r['interval'][0]:.3f} to {r['interval'][1]:.3f})")
print("run 4, host time by op, small at 2,048, each attention in a process of its own (µs a step)")
for attention in ("sdpa", "flash"):
    ops = {r["op"]: r for r in lines(f"run4_host_ops_{attention}.jsonl")}
    launches = sum(ops[k]["calls"] for k in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemsetAsync") if k in ops)
    mine = {k: v for k, v in ops.items() if "attention" in k and "::" in k}
    print(f"  {attention}: all ops' self time {ops['(all ops, self)']['self_us']:.0f}, aten::mm self "
          f"{ops['aten::mm']['self_us']:.0f}; launches and memsets {launches:.0f};",
          "; ".join(f"{k} {v['total_us'] / v['calls']:.0f} a call" for k, v in mine.items()))

"""What activation offloading could use on this machine: host memory, pinned allocation, and the bandwidth of
copies between the GPU and pinned host memory, alone and beside a stream of bf16 matmuls."""
import json, os, resource, sys, time
import torch
import torch._functorch.config as fconf
from torch.utils.checkpoint import CheckpointPolicy

def emit(**row):
    print(json.dumps(row), flush=True)

mem = {l.split(":")[0]: l.split(":")[1].strip() for l in open("/proc/meminfo") if l.split(":")[0] in ("MemTotal", "MemAvailable")}
emit(what="versions", torch=torch.__version__, gpu=torch.cuda.get_device_name(), offload_config=hasattr(fconf, "enable_activation_offloading"),
     policies=[p.name for p in CheckpointPolicy], memlock=resource.getrlimit(resource.RLIMIT_MEMLOCK), cpus=os.cpu_count(), **mem)

GiB = 1 << 30
dev = torch.device("cuda")
side = torch.cuda.Stream()

def timed_copy(dst, src, stream, reps=5):
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            a.record(); dst.copy_(src, non_blocking=True); b.record()
        b.synchronize(); times.append(a.elapsed_time(b))
    return min(times), sorted(times)[len(times) // 2]

gpu = torch.empty(3 * GiB // 2, dtype=torch.bfloat16, device=dev).normal_()
t0 = time.perf_counter(); host = torch.empty(gpu.shape, dtype=gpu.dtype, pin_memory=True); pin_s = time.perf_counter() - t0
pageable = torch.empty(gpu.shape, dtype=gpu.dtype)
for name, dst, src in (("d2h_pinned", host, gpu), ("h2d_pinned", gpu, host), ("d2h_pageable", pageable, gpu)):
    best, med = timed_copy(dst, src, side)
    emit(what=name, gib=3, best_ms=best, median_ms=med, gb_s=3 * GiB / best / 1e6, pin_s=pin_s)

# both directions at once
gpu2 = torch.empty_like(gpu); host2 = torch.empty_like(host, pin_memory=True); other = torch.cuda.Stream()
torch.cuda.synchronize(); a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True); c = torch.cuda.Event(enable_timing=True)
a.record(torch.cuda.current_stream())
for s in (side, other): s.wait_event(a)
with torch.cuda.stream(side): host.copy_(gpu, non_blocking=True); b.record()
with torch.cuda.stream(other): gpu2.copy_(host2, non_blocking=True); c.record()
torch.cuda.synchronize()
emit(what="both_directions", d2h_ms=a.elapsed_time(b), h2d_ms=a.elapsed_time(c))

# D2H beside matmuls
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev); w = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
def matmuls(n):
    for _ in range(n): torch.mm(x, w)
for _ in range(3): matmuls(10)
torch.cuda.synchronize()
for copying in (False, True, False, True):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ca, cb = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    if copying:
        side.wait_event(a)
        with torch.cuda.stream(side): ca.record(); host.copy_(gpu, non_blocking=True); cb.record()
    matmuls(120); b.record(); torch.cuda.synchronize()
    ms = a.elapsed_time(b)
    emit(what="matmuls_beside_d2h", copying=copying, matmul_ms=ms, tflops=120 * 2 * 8192**3 / ms / 1e9,
         copy_ms=ca.elapsed_time(cb) if copying else None)

# how much can be pinned, 3 GiB at a time, up to 60 GiB
del host2, pageable
held = []; t0 = time.perf_counter()
try:
    for i in range(20):
        held.append(torch.empty(3 * GiB // 2, dtype=torch.bfloat16, pin_memory=True))
        emit(what="pinned_total", gib=3 * (len(held) + 1), seconds=time.perf_counter() - t0)
except Exception as e:
    emit(what="pinned_failed", gib=3 * (len(held) + 1), error=str(e)[:300])

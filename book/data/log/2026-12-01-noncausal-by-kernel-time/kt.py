"""Chapter 20's table by device time: for every row (and 1x16x8448x64 without the mask, whose 1,056 key blocks of 128
fill eight rounds of 132 multiprocessors exactly), flash_hopper and sdpa_cudnn, three ways in one process:
do_bench as the chapter times (rep 100 ms, fastest of three rounds taken in turn); CUDA events around the forward and
the backward with the host ahead of the GPU (a sleep queued first); and torch.profiler's kernel time of ten
iterations, forward kernels and the rest apart. One JSON line per shape and implementation.
"""
import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench.flash_sweep import TABLE_SHAPES, attention, fastest_of, make_timer, measure

SHAPES = list(TABLE_SHAPES) + [((1, 16, 8448, 64), False)]
IMPLS = ("flash_hopper", "sdpa_cudnn")
FORWARD_KERNELS = ("hopper_fwd", "fprop")  # ours, cuDNN's
ITERS = 10
flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def sequence(fn, q, k, v, causal, do, events=None):
    flush_buf.zero_()
    torch.cuda._sleep(2_000_000)
    if events: events[0].record()
    o = fn(q, k, v, causal)
    if events: events[1].record()
    o.backward(do)
    if events: events[2].record()
    q.grad = k.grad = v.grad = None


timer = make_timer(rep_ms=100, warmup_ms=25)
for shape, causal in SHAPES:
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    rounds = {impl: [] for impl in IMPLS}
    for _ in range(3):
        for impl in IMPLS:
            rounds[impl].append(measure(attention(impl), q, k, v, causal, ("fwd", "bwd", "fwd_bwd"), timer))
    for impl in IMPLS:
        fn = attention(impl)
        for _ in range(3):
            sequence(fn, q, k, v, causal, do)
        parts = []
        for _ in range(ITERS):
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            sequence(fn, q, k, v, causal, do, ev)
            torch.cuda.synchronize()
            parts.append((ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(ITERS):
                sequence(fn, q, k, v, causal, do)
            torch.cuda.synchronize()
        kernels = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
                if "FillFunctor" in e.name or "spin_kernel" in e.name:
                    continue
                kernels[e.name] = kernels.get(e.name, 0.0) + e.time_range.elapsed_us() / ITERS / 1e3
        fwd_kernels = sum(t for n, t in kernels.items() if any(f in n for f in FORWARD_KERNELS))
        print(json.dumps({"shape": shape, "causal": causal, "impl": impl, "do_bench": fastest_of(rounds[impl]),
                          "do_bench_rounds": rounds[impl],
                          "events_fwd_ms": statistics.median(p[0] for p in parts),
                          "events_bwd_ms": statistics.median(p[1] for p in parts),
                          "kernel_fwd_ms": fwd_kernels, "kernel_bwd_ms": sum(kernels.values()) - fwd_kernels,
                          "kernels_ms": kernels}), flush=True)
    del q, k, v, do
    torch.cuda.empty_cache()
    print(f"done {shape} {causal}", file=sys.stderr, flush=True)

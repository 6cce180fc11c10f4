"""Why cuDNN's forward+backward without the mask beats the sum of its parts and ours does not.

For flash_hopper and sdpa_cudnn at three shapes: do_bench of fwd, bwd and fwd_bwd (three rounds in turn, as chapter 20
times them), then torch.profiler's kernel times over ten iterations of two sequences, each after a 256 MiB write that
flushes the L2 as do_bench does: A = forward, backward; B = forward, a second flush, backward. A kernel of the
backward faster in A than in B reads what the forward left in the L2. CUDA events around the forward and the backward
(after a sleep that lets the host run ahead) give each part's stream time in A and B. One JSON line per result.
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench.flash_sweep import attention, make_timer, measure

SHAPES = [((1, 16, 8192, 64), False), ((1, 16, 16384, 64), True), ((2, 32, 32768, 128), True)]
IMPLS = ("flash_hopper", "sdpa_cudnn")
ITERS = 10
flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def emit(**row):
    print(json.dumps(row), flush=True)


def inputs(shape):
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return q, k, v


def sequence(fn, q, k, v, causal, do, second_flush, events=None):
    flush_buf.zero_()
    torch.cuda._sleep(2_000_000)  # ~1 ms: the host queues what follows before the GPU reaches it
    if events: events[0].record()
    o = fn(q, k, v, causal)
    if events: events[1].record()
    if second_flush:
        flush_buf.zero_()
    if events: events[2].record()
    o.backward(do)
    if events: events[3].record()
    q.grad = k.grad = v.grad = None


timer = make_timer(rep_ms=100, warmup_ms=25)
for shape, causal in SHAPES:
    q, k, v = inputs(shape)
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    for rnd in range(3):
        for impl in IMPLS:
            r = measure(attention(impl), q, k, v, causal, ("fwd", "bwd", "fwd_bwd"), timer)
            emit(kind="do_bench", shape=shape, causal=causal, impl=impl, round=rnd, **r)
    for impl in IMPLS:
        fn = attention(impl)
        for second_flush in (False, True):
            name = "B" if second_flush else "A"
            for _ in range(3):
                sequence(fn, q, k, v, causal, do, second_flush)
            torch.cuda.synchronize()
            parts = []
            for _ in range(ITERS):
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                sequence(fn, q, k, v, causal, do, second_flush, ev)
                torch.cuda.synchronize()
                parts.append((ev[0].elapsed_time(ev[1]), ev[2].elapsed_time(ev[3])))
            parts.sort(key=lambda p: p[0] + p[1])
            emit(kind="events", shape=shape, causal=causal, impl=impl, seq=name,
                 fwd_ms=[p[0] for p in parts], bwd_ms=[p[1] for p in parts])
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(ITERS):
                    sequence(fn, q, k, v, causal, do, second_flush)
                torch.cuda.synchronize()
            kernels = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
                    c = kernels.setdefault(e.name, [0, 0.0])
                    c[0] += 1
                    c[1] += e.time_range.elapsed_us()
            emit(kind="kernels", shape=shape, causal=causal, impl=impl, seq=name,
                 kernels={n: {"count": c[0], "us_per_iter": c[1] / ITERS} for n, c in kernels.items()})
    del q, k, v, do
    torch.cuda.empty_cache()
    print(f"done {shape}", file=sys.stderr, flush=True)

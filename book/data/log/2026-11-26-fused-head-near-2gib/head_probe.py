"""Probe: the fused head at the 2026 leaderboard's shape, chunk sizes near the 2 GiB budget, one stream against dh
and dW on two streams; the compiled unfused head beside it; a kernel breakdown of one call."""
import json, math, os, sys, time
import torch, triton
from systems.fused import cross_entropy as ce
from systems.bench.leaderboard_2026 import _head_step, measure
from systems.model import LEADERBOARD_2026 as cfg

out = os.environ.get("OUT", "/tmp")
N, d, V = 65536, cfg.d_model, cfg.vocab_size
torch.manual_seed(0)
h = torch.randn(N, d, device="cuda", dtype=torch.bfloat16)
w = (torch.randn(V, d, device="cuda") / math.sqrt(d)).to(torch.bfloat16)
t = torch.randint(0, V, (N,), device="cuda")
side = torch.cuda.Stream()

def op(chunk):  # the library's op as it is: loss and both gradients in one call
    return lambda: ce._loss_and_grads(h, w, t, -100, True, torch.bfloat16, chunk, True, True)

def two_streams(chunk):
    def run():
        n = N
        scale = (1.0 / (t != -100).sum().float()).reshape(1)
        losses = torch.empty(n, device="cuda", dtype=torch.float32)
        dh = torch.empty_like(h); dw = torch.zeros_like(w)
        buf = h.new_empty(min(n, chunk), V)
        main = torch.cuda.current_stream()
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            logits = torch.mm(h[rows], w.T, out=buf[:min(chunk, n - start)])
            losses[rows] = ce._rows_to_loss_and_grad(logits, t[rows], scale, -100, True)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                torch.mm(logits, w, out=dh[rows])
            dw.addmm_(logits.T, h[rows])
            main.wait_stream(side)
        return losses.sum() * scale[0], dh, dw
    return run

def timed(fn):
    torch.cuda.empty_cache(); torch.cuda.synchronize()
    fn(); torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
    r = fn(); torch.cuda.synchronize(); extra = (torch.cuda.max_memory_allocated() - before) / 2**30
    del r
    ms = triton.testing.do_bench(fn, warmup=300, rep=2500)
    return ms, extra

rows = []
a = ce._loss_and_grads(h, w, t, -100, True, torch.bfloat16, 1024, True, True)
b = two_streams(1024)()
rows.append({"check": "two streams vs op, max |dh| diff", "value": (a[1].float() - b[1].float()).abs().max().item(),
             "dw diff": (a[2].float() - b[2].float()).abs().max().item(), "loss diff": (a[0] - b[0]).abs().item()})
del a, b
for chunk in (768, 1024, 1152, 1280, 3456):
    for name, make in (("one stream", op), ("two streams", two_streams)):
        ms, extra = timed(make(chunk))
        rows.append({"variant": name, "chunk_tokens": chunk, "chunk_mib": chunk * V * 2 / 2**20, "ms": ms, "extra_gib": extra})
        print(rows[-1], flush=True)
for v in ("compiled", "fused"):
    p = measure(lambda: _head_step(v, N, cfg, torch.bfloat16), rep=300, warmup=50)
    rows.append({"variant": v + " (chapter 18's step, with backward)", **p}); print(rows[-1], flush=True)
for chunk in (768, 1152):
    p = measure(lambda: _head_step("fused", N, cfg, torch.bfloat16, chunk), rep=300, warmup=50)
    rows.append({"variant": f"fused (chapter 18's step) chunk {chunk}", **p}); print(rows[-1], flush=True)

from torch.profiler import profile, ProfilerActivity
for chunk in (768, 1152):
    for name, make in (("one stream", op), ("two streams", two_streams)):
        fn = make(chunk); fn(); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(); torch.cuda.synchronize()
        agg = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = e.name[:60]; agg[k] = agg.get(k, 0) + e.device_time_total / 1e3
        rows.append({"breakdown": f"{name} chunk {chunk}", "kernels_ms": dict(sorted(agg.items(), key=lambda x: -x[1])[:8])})
        print(rows[-1], flush=True)
json.dump(rows, open(f"{out}/head_probe.json", "w"), indent=1, default=str)

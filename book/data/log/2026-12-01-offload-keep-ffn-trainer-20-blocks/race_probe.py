"""Where does the stopped backward's copy stand when the graph is freed? (diagnostic, old and new offload)"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from systems.offload import ActivationOffload
off, entries, streams = ActivationOffload(), [], []
load = off._load
def recording(e):
    streams.append(torch.cuda.current_stream().stream_id)
    load(e); entries.append(e)
off._load = recording
x = torch.randn(2**27, device="cuda", requires_grad=True)
if len(sys.argv) > 2:  # the allocator's cache warmed: no cudaMalloc (which waits for the device) in the backward
    warm = [torch.empty_like(x) for _ in range(8)]
    del warm
with off.group(0, 1):
    y = x.sin()
with off.group(1, float("inf")):
    z = y.cos()
def stop(g):
    raise RuntimeError("stop")
y.register_hook(stop)
torch.cuda._sleep(2 * 10**8)
t0 = time.perf_counter()
try:
    z.sum().backward()
except RuntimeError as exc:
    print("caught", exc)
t1 = time.perf_counter()
e = entries[0]
ev = torch.cuda.Event(); ev.record()
print("ms", round((t1 - t0) * 1e3, 2), "copy done:", e.loaded.query(), "default idle:", ev.query(),
      "alloc stream", streams, "main stream", torch.cuda.current_stream().stream_id, flush=True)
ptr = e.on_device.data_ptr(); del e, entries[:]
del y, z
t2 = time.perf_counter()
fresh = []
while not any(t.data_ptr() <= ptr < t.data_ptr() + 2**29 for t in fresh) and len(fresh) < 8:
    fresh.append(torch.empty_like(x).fill_(7.0))
ev2 = torch.cuda.Event(); ev2.record()
print("after del ms", round((time.perf_counter() - t2) * 1e3, 2), "fresh", len(fresh), "default idle:", ev2.query())
torch.cuda.synchronize()
print("sevens:", [round((t == 7).float().mean().item(), 4) for t in fresh])

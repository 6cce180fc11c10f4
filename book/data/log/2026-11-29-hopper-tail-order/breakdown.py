# Device time per kernel of one forward+backward (autograd, as chapter 20's table times it: inputs (B, H, N, d)
# contiguous, or the model's layout, (B, N, H, d) memory viewed as (B, H, N, d)), bf16, of the registered attentions
# flash_hopper and sdpa_cudnn, from torch.profiler over 20 steps after 5 of warm-up; tree tag argv[1].
import json, sys, torch
from torch.profiler import ProfilerActivity, profile
from systems.attention import get_attention
tag = sys.argv[1]
SHAPES = [(8, 32, 1024, 128, True), (1, 16, 16384, 64, True), (1, 16, 8192, 64, False), (4, 16, 2048, 64, True),
          (1, 16, 16384, 128, True)]
STEPS = 20
for B, H, n, d, causal in SHAPES:
    for layout in ("bhnd", "model") if n == 1024 else ("bhnd",):
        def tensor():
            if layout == "bhnd":
                return torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        q, k, v = tensor(), tensor(), tensor()
        for impl in ("flash_hopper", "sdpa_cudnn"):
            fn = get_attention(impl)
            do = torch.randn_like(fn(q, k, v, causal))
            def step():
                fn(q, k, v, causal).backward(do)
                q.grad = k.grad = v.grad = None
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(STEPS):
                step()
            end.record()
            torch.cuda.synchronize()
            wall_us = start.elapsed_time(end) * 1e3 / STEPS
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(STEPS):
                    step()
                torch.cuda.synchronize()
            kernels = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    name = e.name[:90]
                    us, count = kernels.get(name, (0.0, 0))
                    kernels[name] = (us + e.device_time_total / STEPS, count + 1)
            total = sum(us for us, _ in kernels.values())
            print(json.dumps(dict(tree=tag, shape=f"{B}x{H}x{n}x{d}" + ("" if causal else " not causal"),
                                  layout=layout, impl=impl, wall_us=wall_us, device_us=total,
                                  kernels=sorted(([k, round(us, 2), c // STEPS] for k, (us, c) in kernels.items()),
                                                 key=lambda r: -r[1]))), flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()

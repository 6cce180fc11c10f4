# The Triton backward (two passes, its tuned tiles at this shape) against cuDNN's at the xl model's attention,
# 4x25x2048x64 bf16 causal in the block's layout. "profile": device time per kernel (torch.profiler, 20 backwards
# each); "ncu": one backward each, for Nsight Compute; "ncu1": the Triton backward in one pass (dQ added up by the
# copy engine's bulk reductions in the dK/dV pass).
import json, sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from systems.attention.flash_triton import launch, FlashConfig, Tiles
dt = torch.bfloat16
def probe(B, H, N, d, mode):
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(2))
    v, do = (torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2) for _ in range(2))
    cfg = FlashConfig(dkdv=Tiles(64, 64, 4, 3), dq=Tiles(64, 64, 4, 3), autotune=False, atomic_dq=mode == "ncu1")
    o, L = launch.forward(q, k, v, True, cfg)
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        os_ = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
    runs = {"triton": lambda: launch.backward(q, k, v, o, do, L, True, cfg),
            "cudnn": lambda: torch.autograd.grad(os_, (qs, ks, vs), do, retain_graph=True)}
    for f in runs.values():
        f(); f()
    torch.cuda.synchronize()
    if mode.startswith("ncu"):
        for f in list(runs.values())[:1 if mode == "ncu1" else 2]:
            f()
        torch.cuda.synchronize()
        return
    from torch.profiler import ProfilerActivity, profile
    for name, f in runs.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                f()
            torch.cuda.synchronize()
        kernels = {e.key[:90]: round(e.self_device_time_total / 1e3 / 20, 4) for e in prof.key_averages()
                   if e.self_device_time_total > 0}
        print(json.dumps(dict(shape=f"{B}x{H}x{N}x{d}", impl=name, total=round(sum(kernels.values()), 4),
                              kernels=kernels)), flush=True)
mode = sys.argv[1]
probe(4, 25, 2048, 64, mode)
if mode == "profile":
    probe(1, 16, 16384, 64, mode)

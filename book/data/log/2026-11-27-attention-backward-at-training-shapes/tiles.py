# The Triton backward at the model's mid-length shapes (d 64, bf16, causal; q, k contiguous, v and dO (B, N, H, d)
# viewed as (B, H, N, d), as the block hands them over): autotuned default, then fixed dK/dV tiles with one pass
# and two, then head groups; SDPA's backward (cuDNN, the back end sdpa picks here) in the same process.
import json, sys, torch, triton
from systems.attention.flash_triton import launch, FlashConfig, Tiles, autotune_report
from systems.attention.flash_triton.launch import PASSES
dt = torch.bfloat16
def bench(f):
    return triton.testing.do_bench(f, warmup=25, rep=150, return_mode="median")
def emit(**kw):
    print(json.dumps(kw), flush=True)
DKDV = [Tiles(64, 64, 4, 3), Tiles(32, 64, 4, 4), Tiles(64, 128, 8, 3), Tiles(32, 128, 4, 3), Tiles(32, 64, 4, 2),
        Tiles(64, 128, 8, 2), Tiles(64, 128, 4, 3), Tiles(64, 128, 8, 4), Tiles(32, 128, 8, 3), Tiles(64, 64, 4, 2),
        Tiles(64, 64, 8, 3), Tiles(128, 128, 8, 2), Tiles(128, 64, 8, 3), Tiles(16, 64, 4, 4), Tiles(16, 128, 8, 4)]
for B, H, N in ((4, 25, 2048), (4, 20, 2048), (8, 25, 1024), (16, 25, 512)):
    d = 64
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(2))
    v, do = (torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2) for _ in range(2))
    o, L = launch.forward(q, k, v, True, FlashConfig())
    shape = f"{B}x{H}x{N}x{d}"
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    os_ = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
    emit(shape=shape, what="sdpa", ms=bench(lambda: torch.autograd.grad(os_, (qs, ks, vs), do, retain_graph=True)))
    emit(shape=shape, what="default", ms=bench(lambda: launch.backward(q, k, v, o, do, L, True, FlashConfig())),
         passes={str(kk): vv for kk, vv in PASSES.items()}, tuned=autotune_report())
    for one in (True, False):
        for t in DKDV:
            cfg = FlashConfig(dkdv=t, autotune=False, atomic_dq=one)
            try:
                ms = bench(lambda: launch.backward(q, k, v, o, do, L, True, cfg))
            except Exception as e:
                ms = repr(e)[:120]
            emit(shape=shape, what="tiles", one_pass=one, dkdv=str(t), ms=ms)
    for g in (1, 2, 4, 8, 16, 32, 100):
        cfg = FlashConfig(head_group=g)
        emit(shape=shape, what="head_group", group=g, ms=bench(lambda: launch.backward(q, k, v, o, do, L, True, cfg)))
    print(f"{shape} done", file=sys.stderr, flush=True)

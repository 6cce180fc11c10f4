"""The Hopper backward, pipelined (libnew.so) against main's (libold.so): gradients against float64 at held-out
shapes, then time against the Triton backward and cuDNN's at the table's shapes, interleaved, one process."""
import ctypes, json, math, os, sys, time
import torch, triton
from systems.attention.flash_triton import flash_attention_triton, flash_forward_triton
from systems.attention.peers import sdpa_cudnn
from systems.attention.oracle import reference_forward_backward, TOLERANCE

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp")
libs = {name: ctypes.CDLL(f"{HERE}/lib{name}.so") for name in ("old", "new")}
for lib in libs.values():
    lib.hopper_bwd.restype = ctypes.c_int
rows = []

def say(**row):
    rows.append(row); print(row, flush=True)
    json.dump(rows, open(f"{OUT}/bwd_probe.json", "w"), indent=1)

def hopper(lib, q, k, v, o, do, L, causal):
    B, H, N, d = q.shape
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    delta = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    ts = [q, k, v, o, do, dq, dk, dv]
    ptrs = (ctypes.c_void_p * 8)(*[t.data_ptr() for t in ts])
    strides = (ctypes.c_longlong * 24)(*[s for t in ts for s in t.stride()[:3]])
    rc = lib.hopper_bwd(B, H, N, k.shape[2], d, int(causal), ctypes.c_float(1 / math.sqrt(d)),
                        int(q.dtype == torch.bfloat16), ptrs, strides, ctypes.c_void_p(L.data_ptr()),
                        ctypes.c_void_p(delta.data_ptr()), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    assert rc == 0, rc
    return dq, dk, dv

# correctness: float64 oracle, held-out kinds of shapes
CASES = [(1, 2, 1000, 1000, 64, torch.bfloat16), (1, 2, 1000, 1000, 128, torch.bfloat16), (2, 3, 300, 700, 64, torch.float16),
         (2, 3, 700, 300, 128, torch.bfloat16), (1, 2, 1, 257, 128, torch.float16),
         (8, 64, 65, 65, 64, torch.bfloat16)]
for B, H, nq, nk, d, dtype in CASES:
    for causal in (False, True):
        q = torch.randn(B, nq, H, d, device="cuda", dtype=dtype).transpose(1, 2)
        k, v = (torch.randn(B, nk, H, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in "kv")
        do = torch.randn(B, H, nq, d, device="cuda", dtype=dtype)
        _, _, *want = reference_forward_backward(q, k, v, do, causal)
        o, L = flash_forward_triton(q, k, v, causal)
        for name, lib in libs.items():
            got = hopper(lib, q, k, v, o, do, L, causal)
            errs = [((g.double() - w).abs().max() / w.abs().max()).item() for g, w in zip(got, want)]
            say(check=f"{B}x{H}x{nq}x{nk}x{d} {str(dtype)[6:]} causal={causal}", lib=name,
                err_dq=errs[0], err_dk=errs[1], err_dv=errs[2], finite=all(bool(torch.isfinite(g).all()) for g in got))
torch.cuda.empty_cache()

SHAPES = [((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True),
          ((4, 16, 2048, 64), True), ((1, 16, 8192, 64), False), ((2, 32, 32768, 128), True)]
for (B, H, n, d), causal in SHAPES:
    q, k, v, do = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
    qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
    graphs = {"cudnn": sdpa_cudnn(*qkv, causal), "triton": flash_attention_triton(*qkv, causal)}
    calls = {impl: (lambda o=o: torch.autograd.grad(o, qkv, do, retain_graph=True)) for impl, o in graphs.items()}
    o, L = flash_forward_triton(q, k, v, causal)
    for name, lib in libs.items():
        calls[f"hopper {name}"] = (lambda lib=lib: hopper(lib, q, k, v, o, do, L, causal))
    want = calls["cudnn"]()
    for rnd in range(2):
        for impl, call in calls.items():
            got = call()
            err = max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want))
            ms = triton.testing.do_bench(call, rep=300 if n < 32768 else 1500, return_mode="median")
            say(shape=f"{B}x{H}x{n}x{d}", causal=causal, impl=impl, round=rnd, ms=ms, err_vs_cudnn=err)
    del graphs, calls, want, q, k, v, do, o, L, qkv
    torch.cuda.empty_cache()

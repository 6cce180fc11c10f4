# Block order of the Hopper kernels: heads interleaved in groups of G (rank 0 of every head of a group first), G = 1
# being the order before (head after head), 0 all heads, "auto" the rule of heads_per_group. Per shape: the Hopper
# forward and backward alone at each G; the Triton forward and backward and cuDNN's for reference. bf16; do_bench
# medians (ms), two rounds. Also: outputs at each G against G = 1 (forward, dK, dV bit for bit).
import json, os, sys, time, torch, triton
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
dt = torch.bfloat16
t0 = time.time()
SHAPES = [("c", 1, 16, 16384, 64, True), ("c", 1, 16, 16384, 128, True), ("c", 8, 32, 1024, 128, True),
          ("c", 4, 16, 2048, 64, True), ("c", 1, 16, 8192, 64, False), ("c", 1, 16, 8192, 64, True),
          ("m", 16, 20, 512, 64, True), ("m", 8, 25, 1024, 64, True), ("m", 4, 25, 2048, 64, True),
          ("m", 4, 20, 2048, 64, True), ("m", 2, 16, 4096, 64, True), ("c", 2, 32, 32768, 128, True)]
GROUPS = ["1", "4", "16", "0", "auto"]
def setg(g):
    if g == "auto":
        os.environ.pop("SYSTEMS_HOPPER_GROUP", None)
    else:
        os.environ["SYSTEMS_HOPPER_GROUP"] = g
def bench(f):
    return triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
def tensor(layout, B, H, N, d):
    if layout == "m":
        return torch.randn(B, N, H, d, device="cuda", dtype=dt).transpose(1, 2)
    return torch.randn(B, H, N, d, device="cuda", dtype=dt)
for rnd in range(2):
    for layout, B, H, N, d, causal in SHAPES:
        q, k, v, do = (tensor(layout, B, H, N, d) for _ in range(4))
        row = dict(round=rnd, shape=f"{B}x{H}x{N}x{d}", layout=layout, causal=causal)
        if rnd == 0:  # the order changes nothing in what is computed
            setg("1"); o1, L1 = forward_hopper_cuda(q, k, v, causal); g1 = backward_hopper_cuda(q, k, v, o1, do, L1, causal)
            for g in GROUPS[1:]:
                setg(g); o, L = forward_hopper_cuda(q, k, v, causal); gr = backward_hopper_cuda(q, k, v, o, do, L, causal)
                row[f"same_{g}"] = bool(torch.equal(o, o1) and torch.equal(L, L1) and torch.equal(gr[1], g1[1])
                                        and torch.equal(gr[2], g1[2]) and (gr[0] - g1[0]).abs().max().item() < 0.05)
            del o1, L1, g1, o, L, gr
        setg("auto")
        o, L = forward_hopper_cuda(q, k, v, causal)
        for g in GROUPS:
            setg(g)
            row[f"fwd_{g}"] = bench(lambda: forward_hopper_cuda(q, k, v, causal))
            row[f"bwd_{g}"] = bench(lambda: backward_hopper_cuda(q, k, v, o, do, L, causal))
        setg("auto")
        row["fwd_triton"] = bench(lambda: torch.ops.systems_flash.triton_forward(q, k, v, causal))
        row["bwd_triton"] = bench(lambda: torch.ops.systems_flash.triton_backward(q, k, v, o, do, L, causal))
        qkv = [t.detach().requires_grad_() for t in (q, k, v)]
        row["fwd_cudnn"] = bench(lambda: sdpa_cudnn(*qkv, causal))
        cud = sdpa_cudnn(*qkv, causal)
        row["bwd_cudnn"] = bench(lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True))
        print(json.dumps(row), flush=True)
        print(f"{row['shape']} {layout} round {rnd} after {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        del q, k, v, do, o, L, qkv, cud
        torch.cuda.empty_cache()

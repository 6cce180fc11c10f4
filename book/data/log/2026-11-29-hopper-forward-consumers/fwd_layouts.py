# The two forwards of flash_hopper at head dim 64 beside cuDNN's, bf16, do_bench medians (ms), in the tree on
# PYTHONPATH (tag argv[1], round argv[2]). Part "layout", causal: each shape with q, k, v all (B, N, H, d) in memory
# ("bnhd") and as the model's eager attention hands them over ("model": q and k (B, H, N, d) contiguous after RoPE,
# v a view of (B, N, H, d)). Part "nc", not causal: every variant of the Hopper forward (ring, ping-pong, consumers)
# with bnhd inputs. err = largest |ours - cuDNN's| over cuDNN's largest.
import itertools, json, sys, torch, triton
from systems.attention.flash_cpp.hopper import forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
tag, rnd, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
torch.manual_seed(rnd)


def inputs(B, H, n, layout):
    bnhd = lambda: torch.randn(B, n, H, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    if layout == "bnhd":
        return bnhd(), bnhd(), bnhd()
    return (torch.randn(B, H, n, 64, device="cuda", dtype=torch.bfloat16),
            torch.randn(B, H, n, 64, device="cuda", dtype=torch.bfloat16), bnhd())


def row(shape, causal, runs, q, k, v, **extra):
    want = sdpa_cudnn(q, k, v, causal).float()
    out = dict(tree=tag, round=rnd, shape=shape, causal=causal, **extra)
    with torch.no_grad():
        out["cudnn_ms"] = triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=150)
        for name, f in runs.items():
            got = f()
            got = (got[0] if isinstance(got, tuple) else got).float()
            out[name + "_err"] = ((got - want).abs().max() / want.abs().max()).item()
            out[name + "_ms"] = triton.testing.do_bench(f, rep=150)
    print(json.dumps(out), flush=True)


if "layout" in parts:
    for (B, H, n), layout in itertools.product([(16, 12, 512), (16, 16, 512), (16, 25, 512), (8, 12, 1024),
                                                (8, 16, 1024), (8, 20, 1024), (8, 25, 1024), (4, 16, 2048),
                                                (4, 25, 2048)], ["bnhd", "model"]):
        q, k, v = inputs(B, H, n, layout)
        row(f"{B}x{H}x{n}x64", True, {"hopper": lambda: forward_hopper_cuda(q, k, v, True),
                                      "triton": lambda: torch.ops.systems_flash.triton_forward(q, k, v, True)},
            q, k, v, layout=layout)
if "nc" in parts:
    for B, H, n in [(8, 16, 1024), (4, 16, 2048), (1, 16, 8192), (1, 16, 16384)]:
        q, k, v = inputs(B, H, n, "bnhd")
        runs = {"triton": lambda: torch.ops.systems_flash.triton_forward(q, k, v, False)}
        for stages, pingpong, consumers in itertools.product([3, 2], [True, False], [3, 2]):
            runs[f"s{stages}{'p' if pingpong else ''}c{consumers}"] = (
                lambda s=stages, p=pingpong, c=consumers: forward_hopper_cuda(q, k, v, False, s, p, c))
        row(f"{B}x{H}x{n}x64", False, runs, q, k, v, layout="bnhd")

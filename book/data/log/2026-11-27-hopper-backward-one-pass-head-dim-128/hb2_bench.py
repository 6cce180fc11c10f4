# The Hopper backward at head dims 128 and 64: one pass (dQ added up by the copy engine) against its two passes (under
# deterministic algorithms), the Triton backward and cuDNN's, in the model's layout, bf16; do_bench medians, ms, two
# rounds; the largest difference from cuDNN's gradients relative to their largest value.
import json, torch, triton
import torch.utils.deterministic
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_attention_triton, flash_forward_triton
from systems.attention.peers import sdpa_cudnn
SHAPES = [((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True), ((4, 16, 2048, 128), True), ((2, 16, 4096, 128), True),
          ((1, 16, 8192, 128), False), ((1, 16, 16384, 64), True), ((2, 32, 32768, 128), True)]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
def err(got, want):
    return max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want))
def two_pass(call):
    def run():
        torch.use_deterministic_algorithms(True)
        try:
            return call()
        finally:
            torch.use_deterministic_algorithms(False)
    return run
torch.utils.deterministic.fill_uninitialized_memory = False
for rnd in range(2):
    for (B, H, n, d), causal in SHAPES:
        q, k, v, do = (layout(B, H, n, d) for _ in range(4))
        qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
        graphs = {"cudnn": sdpa_cudnn(*qkv, causal), "triton": flash_attention_triton(*qkv, causal)}
        calls = {name: (lambda o=o: torch.autograd.grad(o, qkv, do, retain_graph=True)) for name, o in graphs.items()}
        o, L = flash_forward_triton(q, k, v, causal)
        calls["hopper_one_pass"] = lambda: backward_hopper_cuda(q, k, v, o, do, L, causal)
        calls["hopper_two_pass"] = two_pass(lambda: backward_hopper_cuda(q, k, v, o, do, L, causal))
        want = calls["cudnn"]()
        for name, call in calls.items():
            e = err(call(), want)
            ms = triton.testing.do_bench(call, rep=200, return_mode="median")
            print(json.dumps(dict(round=rnd, shape=f"{B}x{H}x{n}x{d}", causal=causal, impl=name, ms=ms, err=e)),
                  flush=True)
        del graphs, calls, want
        torch.cuda.empty_cache()

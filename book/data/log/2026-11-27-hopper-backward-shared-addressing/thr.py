# Where the Hopper backward overtakes the Triton backward (the choice flash_hopper's autograd node makes), after the
# shared-memory addressing change: per shape, bf16, causal, the model's layout, the backward alone on the Hopper
# forward's O and L; one pass where dq_accumulator_size asks for it, two under deterministic algorithms; the Triton
# backward launched from C++; cuDNN's through SDPA. do_bench medians, ms, two rounds in one process.
import json, torch, triton
import torch.utils.deterministic
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.peers import sdpa_cudnn
SHAPES = [(8, 12, 1024, 64), (4, 16, 2048, 64), (4, 25, 2048, 64), (2, 16, 4096, 64), (1, 16, 8192, 64),
          (1, 16, 16384, 64), (8, 32, 1024, 128), (4, 16, 2048, 128), (2, 16, 4096, 128), (1, 16, 8192, 128),
          (1, 16, 16384, 128)]
def layout(B, H, n, d):
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
def deterministic(call):
    def run():
        torch.use_deterministic_algorithms(True)
        try:
            return call()
        finally:
            torch.use_deterministic_algorithms(False)
    return run
torch.utils.deterministic.fill_uninitialized_memory = False
for rnd in range(2):
    for B, H, n, d in SHAPES:
        q, k, v, do = (layout(B, H, n, d) for _ in range(4))
        qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
        o, L = forward_hopper_cuda(q, k, v, True)
        cud = sdpa_cudnn(*qkv, True)
        calls = {"hopper": lambda: backward_hopper_cuda(q, k, v, o, do, L, True),
                 "hopper_two_pass": deterministic(lambda: backward_hopper_cuda(q, k, v, o, do, L, True)),
                 "triton": lambda: torch.ops.systems_flash.triton_backward(q, k, v, o, do, L, True),
                 "cudnn": lambda: torch.autograd.grad(cud, qkv, do, retain_graph=True)}
        for name, call in calls.items():
            ms = triton.testing.do_bench(call, rep=200, return_mode="median")
            print(json.dumps(dict(round=rnd, shape=f"{B}x{H}x{n}x{d}", impl=name, ms=ms)), flush=True)
        del q, k, v, do, qkv, o, L, cud, calls
        torch.cuda.empty_cache()

# The one-pass Hopper backward against the float64 oracle at shapes with one to a dozen key blocks a multiprocessor.
import torch
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.oracle import max_relative_error, reference_forward_backward
torch.manual_seed(0)
for B, H, nq, nk, d, causal in [(1, 2, 300, 300, 64, True), (6, 50, 333, 777, 64, True), (6, 50, 333, 777, 128, True),
                                (4, 16, 2048, 2048, 64, True), (2, 8, 1000, 700, 128, False), (8, 64, 65, 65, 64, True),
                                (3, 11, 1024, 1024, 64, False), (2, 4, 2048, 2048, 128, True)]:
    q = torch.randn(B, H, nq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, H, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, L = forward_hopper_cuda(q, k, v, causal)
    got = backward_hopper_cuda(q, k, v, o, do, L, causal)
    want = reference_forward_backward(q, k, v, do, causal)[-3:]
    errs = [max_relative_error(g, w) for g, w in zip(got, want)]
    print(f"{B}x{H}x{nq}x{nk}x{d} causal={causal}: dQ dK dV errors " + " ".join(f"{e:.2e}" for e in errs), flush=True)

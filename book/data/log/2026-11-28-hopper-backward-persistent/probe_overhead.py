# The Hopper backward's kernels timed by torch.profiler (device time per call, us): non-causal shapes whose blocks
# fill whole waves of 132 multiprocessors (33 heads' worth of blocks), to fit time = waves x (tiles x t + o), and
# the causal training shapes; bf16, contiguous.
import json, sys, torch
from torch.profiler import profile, ProfilerActivity
from systems.attention.flash_cpp.hopper import backward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
SHAPES = [(b, h, n, d, False) for d in (64, 128) for (b, h, n) in
          [(1, 33, 1024), (3, 11, 1024), (3, 11, 2048), (3, 11, 4096), (3, 11, 8192)]]
SHAPES += [(4, 16, 2048, 64, True), (8, 12, 1024, 64, True), (2, 16, 4096, 64, True), (1, 16, 16384, 64, True),
           (16, 16, 2048, 64, True), (4, 16, 2048, 128, True), (1, 16, 16384, 128, True)]
torch.manual_seed(0)
for B, H, n, d, causal in SHAPES:
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, L = flash_forward_triton(q, k, v, causal)
    for _ in range(3):
        backward_hopper_cuda(q, k, v, o, do, L, causal)
    torch.cuda.synchronize()
    calls = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            backward_hopper_cuda(q, k, v, o, do, L, causal)
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.key[:60]] = e.device_time_total / calls
    print(json.dumps(dict(shape=[B, H, n, d], causal=causal, us=kernels)), flush=True)
    del q, k, v, do, o, L

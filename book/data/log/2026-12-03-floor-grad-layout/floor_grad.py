"""The eager per-call floor (1x1x128x64 bf16 causal, forward+backward) two ways: differentiating o.sum(), whose
gradient reaches the attention expanded from a scalar (every stride 0), as call_floor does, and with a gradient of
o's own shape, as in a model; each implementation timed side by side in rounds (call_floor's method). Also the
copy an operator makes of the expanded gradient, alone. One JSON line per (impl, gradient) on stdout."""
import json
import sys

import numpy as np
import torch
from tqdm.auto import tqdm

from systems.bench.call_overhead import per_call_us
from systems.bench.flash_sweep import attention

IMPLS = ("flash", "flash_triton", "flash_cuda", "sdpa_flash", "sdpa_cudnn")
device = torch.device("cuda")
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 128, 64, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
do = torch.randn(1, 1, 128, 64, device=device, dtype=torch.bfloat16)
expanded = torch.ones((), device=device, dtype=torch.bfloat16).expand(1, 1, 128, 64)
steps = {}
for impl in IMPLS:
    attend = attention(impl)
    steps[impl, "o.sum()"] = lambda a=attend: torch.autograd.grad(a(q, k, v, True).sum(), (q, k, v))
    steps[impl, "dO of o's shape"] = lambda a=attend: torch.autograd.grad(a(q, k, v, True), (q, k, v), do)
steps["copy of the expanded dO", "alone"] = lambda: expanded.contiguous()
for fn in steps.values():
    for _ in range(3):
        fn()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
blocks = {key: [] for key in steps}
for _ in tqdm(range(rounds), desc="rounds", file=sys.stderr):
    for key, fn in steps.items():
        blocks[key].append(per_call_us(fn, 300, device, repeats=1)[1])
for (impl, grad), times in blocks.items():
    print(json.dumps({"impl": impl, "grad": grad, "median_us": float(np.median(times)), "rounds_us": times}))

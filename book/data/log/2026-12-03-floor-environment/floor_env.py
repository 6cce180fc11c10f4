"""What call_floor's preparations do to the eager calls timed after them. The eager per-call floor (1x1x128x64 bf16
causal, forward+backward with a gradient of O's shape, as call_floor takes it) of four implementations, timed side by
side in rounds in one process, in phases: fresh; after SDPA's and the Triton kernels' calls are compiled; after ours
from CUDA C++ (flash_cuda, flash) are compiled too; after every step is captured in a CUDA graph; with the compiled
and captured calls timed in the same rounds (call_floor's way); eager alone again. One JSON line per (phase, impl)
with the host and wall µs per call of every round."""
import json
import sys

import numpy as np
import torch
from tqdm.auto import tqdm

from systems.bench.call_overhead import graphed, per_call_us
from systems.bench.flash_sweep import attention

IMPLS = ("flash", "flash_triton", "flash_cuda", "sdpa_flash")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
device = torch.device("cuda")
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 128, 64, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
do = torch.randn_like(q)


def step_of(attend):
    return lambda: torch.autograd.grad(attend(q, k, v, True), (q, k, v), do)


eager = {(impl, "eager"): step_of(attention(impl)) for impl in IMPLS}
for fn in eager.values():
    for _ in range(3):
        fn()


def phase(name: str, steps: dict) -> None:
    blocks = {key: [] for key in steps}
    for _ in tqdm(range(ROUNDS), desc=name, file=sys.stderr):
        for key, fn in steps.items():
            blocks[key].append(per_call_us(fn, 300, device, repeats=1))
    for (impl, mode), times in blocks.items():
        host, wall = zip(*times)
        print(json.dumps({"phase": name, "impl": impl, "mode": mode, "host_us": float(np.median(host)),
                          "wall_us": float(np.median(wall)), "rounds_host_us": host, "rounds_wall_us": wall}),
              flush=True)


def prepared(impls, mode: str) -> dict:
    out = {}
    for impl in impls:
        fn = graphed(step_of(attention(impl))) if mode == "CUDA graph" else step_of(torch.compile(attention(impl)))
        for _ in range(3):
            fn()
        out[impl, mode] = fn
    return out


phase("fresh", eager)
compiled = prepared(("sdpa_flash", "flash_triton"), "compiled")
phase("after compiling sdpa_flash, flash_triton", eager)
compiled |= prepared(("flash_cuda", "flash"), "compiled")
phase("after compiling flash_cuda, flash too", eager)
captured = prepared(IMPLS, "CUDA graph")
phase("after capturing every step", eager)
phase("every mode in the rounds", eager | compiled | captured)
phase("eager alone again", eager)

"""Whether compiling anything slows the eager per-call floor after it, or the floor drifts with time alone: the eager
floor (1x1x128x64 bf16 causal, forward+backward with a gradient of O's shape) of three implementations in rounds, in
phases: fresh, twice more without compiling, after compiling an unrelated elementwise function on the GPU, then again
after gc.freeze(). One JSON line per (phase, impl) with the host and wall µs per call of every round, and the process's
threads and child processes per phase."""
import gc
import json
import os
import sys
import threading

import numpy as np
import torch
from tqdm.auto import tqdm

from systems.bench.call_overhead import per_call_us
from systems.bench.flash_sweep import attention

IMPLS = ("flash", "flash_triton", "sdpa_flash")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
device = torch.device("cuda")
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 128, 64, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
do = torch.randn_like(q)
steps = {impl: (lambda a=attention(impl): torch.autograd.grad(a(q, k, v, True), (q, k, v), do)) for impl in IMPLS}
for fn in steps.values():
    for _ in range(3):
        fn()


def children() -> int:
    try:
        return len(open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split())
    except OSError:
        return -1


def phase(name: str) -> None:
    blocks = {impl: [] for impl in steps}
    for _ in tqdm(range(ROUNDS), desc=name, file=sys.stderr):
        for impl, fn in steps.items():
            blocks[impl].append(per_call_us(fn, 300, device, repeats=1))
    for impl, times in blocks.items():
        host, wall = zip(*times)
        print(json.dumps({"phase": name, "impl": impl, "host_us": float(np.median(host)),
                          "wall_us": float(np.median(wall)), "rounds_wall_us": wall,
                          "threads": threading.active_count(), "children": children(),
                          "gc_objects": len(gc.get_objects())}), flush=True)


phase("fresh")
phase("fresh, again")
phase("fresh, a third time")
x = torch.randn(1024, device=device)
twice = torch.compile(lambda t: t * 2 + 1)
for _ in range(3):
    twice(x)
phase("after compiling x * 2 + 1")
phase("after compiling x * 2 + 1, again")
gc.collect()
gc.freeze()
phase("after gc.freeze()")

"""The eager step of a preset at a context (8,192 tokens a batch, bf16, as chapter 17 times it) with attention="flash"
and attention="sdpa": wall ms, GPU kernel ms and each attention's own kernels (flash_sweep.step_kernel_time), for
each SIZE:CONTEXT named. One JSON line per point and attention, then one per own kernel."""
import json
import sys

from systems.bench.flash_sweep import step_kernel_time

for spec in sys.argv[1:]:
    size, context = spec.split(":")
    table, own = step_kernel_time(size, int(context), 8192, "bf16", attentions=("sdpa", "flash"), steps=20)
    for row in table.to_dict(orient="records"):
        print(json.dumps({"size": size, "context": int(context), **row}), flush=True)
    for row in own.to_dict(orient="records"):
        print(json.dumps({"size": size, "context": int(context), "own": True, **row}), flush=True)

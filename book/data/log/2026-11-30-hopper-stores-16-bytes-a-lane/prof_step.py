# One preset's compiled training step (argv[1], batch argv[2], context 2048, bf16 autocast, AdamW) with each
# attention, its kernels under torch.profiler (systems.bench.attention_steps.device_busy: 3 warm-up steps, 5 timed,
# 5 profiled): wall ms, kernel ms, and ms per kernel name a step; a JSON line per attention.
import json, sys
from systems.bench import flash_sweep as fs
from systems.bench.attention_steps import device_busy
from systems.bench.e2e import vary
size, batch = sys.argv[1], int(sys.argv[2])
for attention in ("sdpa", "flash_hopper"):
    cfg = vary(fs._step_config(size, 2048, 2048 * batch, "bf16", 3, 5, compiled=True), attention=attention)
    print(json.dumps(dict(size=size, batch=batch, attention=attention, **device_busy(cfg))), flush=True)

# Eager training steps of the large and xl presets with sdpa, flash_triton and flash_cuda interleaved on one model
# (bf16 autocast, 8192 tokens a batch), one JSON row per attention and point, written as each point finishes.
import json, sys, time
from systems.bench.attention_steps import interleaved
from systems.bench.flash_sweep import _step_config
t0 = time.time()
for size in ("large", "xl"):
    for context in (512, 1024, 2048):
        rows = interleaved(_step_config(size, context, 8192, "bf16", 3, 20), ("sdpa", "flash_triton", "flash_cuda"))
        for row in rows.to_dict(orient="records"):
            print(json.dumps(row), flush=True)
        print(f"{size} {context} done after {time.time() - t0:.0f} s", file=sys.stderr, flush=True)

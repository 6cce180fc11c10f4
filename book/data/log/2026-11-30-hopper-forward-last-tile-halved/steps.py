# The training step of each preset named in argv[1] at context 2048 (bf16 autocast, AdamW), the whole model under
# torch.compile, sdpa and flash_hopper interleaved on one model, at the largest batch up to 64 whose eager step fits:
# chapter 20's call (flash_sweep.compiled_steps_at_largest_batch, 10 timed steps each), a JSON line a row.
import json, sys
from systems.bench import flash_sweep as fs
for size in sys.argv[1].split(","):
    rows = fs.compiled_steps_at_largest_batch([size], 2048, "bf16", max_batch=64, steps=10)
    for r in rows.to_dict(orient="records"):
        print(json.dumps(r), flush=True)

# A preset's training step (argv[1], context argv[2], batch argv[3], compiled if argv[4] == "compiled"; bf16, AdamW)
# with sdpa and flash_hopper on one model, interleaved (systems.bench.attention_steps.interleaved, as chapter 20
# times them): a JSON line a row.
import sys
from systems.bench import flash_sweep as fs
from systems.bench.attention_steps import interleaved
from systems.bench.e2e import vary
size, context, batch, compiled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "compiled"
cfg = fs._step_config(size, context, context * batch, "bf16", 3, 10, compiled=compiled)
rows = interleaved(vary(cfg, attention="sdpa"), ("sdpa", "flash_hopper"))
print(rows.to_json(orient="records", lines=True), flush=True)

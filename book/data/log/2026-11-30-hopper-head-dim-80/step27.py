# The 2.7B preset's compiled training step (context 2048, batch argv[1], bf16, AdamW) with sdpa and flash_hopper on
# one model, interleaved (systems.bench.attention_steps.interleaved, as chapter 20 times them): a JSON line a row.
import sys
from systems.bench import flash_sweep as fs
from systems.bench.attention_steps import interleaved
from systems.bench.e2e import vary
batch = int(sys.argv[1])
cfg = fs._step_config("2.7B", 2048, 2048 * batch, "bf16", 3, 10, compiled=True)
rows = interleaved(vary(cfg, attention="sdpa"), ("sdpa", "flash_hopper"))
print(rows.to_json(orient="records", lines=True), flush=True)

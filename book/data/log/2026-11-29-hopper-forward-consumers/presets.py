"""Eager training steps of the presets named in argv[1] at contexts 512 and 1024 (8192 tokens per batch), sdpa and
flash_hopper interleaved on one model (chapter 17's harness), a JSON line per point as it finishes."""
import json, os, sys, time
import torch, triton
from systems.bench.flash_sweep import _step_config
from systems.bench.attention_steps import interleaved

out = open(os.path.join(os.environ["OUT"], "preset_steps.jsonl"), "a")
sizes = sys.argv[1].split(",")
attentions = ("sdpa", "flash_hopper")
t0 = time.time()
print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
for size in sizes:
    for context in (512, 1024):  # where the forward changed
        tokens = 8192
        rows = interleaved(_step_config(size, context, tokens, "bf16", 3, 20), attentions)
        while (rows.status != "ok").any() and tokens > context:  # the largest batch that fits, as a user would
            tokens //= 2
            rows = interleaved(_step_config(size, context, tokens, "bf16", 3, 20), attentions)
        for r in rows.to_dict(orient="records"):
            out.write(json.dumps(r) + "\n")
        out.flush()
        print(size, context, {r["attention"]: round(r["step_ms"], 2) for r in rows.to_dict(orient="records")},
              tokens, f"{time.time() - t0:.0f} s", flush=True)

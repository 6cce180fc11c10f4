"""The 2.7B preset's training steps (head dim 80): eager at contexts 512/1024/2048 with sdpa, flash_triton and
flash_hopper, then compiled at 2048 with sdpa and flash_hopper, interleaved on one model (chapter 17's harness),
8192 tokens a batch or the largest power-of-two share that fits; a JSON line per point into $OUT/steps80.jsonl."""
import json, os, sys, time
import torch, triton
from systems.bench.flash_sweep import _step_config
from systems.bench.attention_steps import interleaved

out = open(os.path.join(os.environ["OUT"], "steps80.jsonl"), "a")
t0 = time.time()
print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
points = [(512, False, ("sdpa", "flash_triton", "flash_hopper")), (1024, False, ("sdpa", "flash_triton", "flash_hopper")),
          (2048, False, ("sdpa", "flash_triton", "flash_hopper")), (2048, True, ("sdpa", "flash_hopper"))]
for context, compiled, attentions in points[slice(*map(int, (sys.argv[1] if len(sys.argv) > 1 else "0:4").split(":")))]:
    tokens = 8192
    rows = interleaved(_step_config("2.7B", context, tokens, "bf16", 3, 20 if not compiled else 10, compiled), attentions)
    while (rows.status != "ok").any() and tokens > context:
        tokens //= 2
        rows = interleaved(_step_config("2.7B", context, tokens, "bf16", 3, 20 if not compiled else 10, compiled),
                           attentions)
    for r in rows.to_dict(orient="records"):
        out.write(json.dumps(r) + "\n")
    out.flush()
    print(context, compiled, {r["attention"]: round(r["step_ms"], 2) for r in rows.to_dict(orient="records")}, tokens,
          f"{time.time() - t0:.0f} s", flush=True)

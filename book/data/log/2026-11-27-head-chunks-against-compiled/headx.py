"""The LM head + loss at the 2026 leaderboard's shape: the compiled unfused head against the fused one at chunks of
1024, 2048 and the default tokens, in four alternating rounds (do_bench, mean over 3 s of calls each), and each one's
memory above its inputs: is the fused head under 2 GiB also no slower than the compiled one?"""
import json, os, time
import torch, triton
from systems.bench.leaderboard_2026 import _head_step, _extra_bytes, LEADERBOARD_2026
from systems.bench.timing import handout_ms

out = open(os.path.join(os.environ["OUT"], "head.jsonl"), "a")
cfg, tokens, dtype = LEADERBOARD_2026, 2 * LEADERBOARD_2026.context_length, torch.bfloat16
print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
variants = {"compiled": ("compiled", None), "fused 1024": ("fused", 1024), "fused 2048": ("fused", 2048),
            "fused default": ("fused", None)}
t0 = time.time()
for rnd in range(4):
    for name, (variant, chunk) in (variants.items() if rnd % 2 == 0 else reversed(variants.items())):
        torch._dynamo.reset()
        step = _head_step(variant, tokens, cfg, dtype, chunk)
        ms = handout_ms(step.run, rep=3000, warmup=500)
        gib = _extra_bytes(step) / 2**30
        row = {"round": rnd, "variant": name, "chunk_tokens": chunk, "ms": ms, "extra_gib": gib}
        out.write(json.dumps(row) + "\n"); out.flush()
        print(row, f"{time.time() - t0:.0f} s", flush=True)
        del step
        torch.cuda.empty_cache()

"""Where the time of chapter 18's step goes: the leaderboard model at LAYERS blocks (argv[1]), batch 2, context
32,768, ours (flash_hopper, fused loss, our AdamW, keep_attention, compiled) and plain PyTorch's (cuDNN attention,
unfused loss compiled with the model, PyTorch's fused AdamW, every block recomputed); three steps of warm-up, then
two under torch.profiler (CUDA activity only). Every kernel's name, calls and device time per step into
$OUT/kernels.jsonl; the steps' times, by CUDA events, into $OUT/steps.jsonl."""
import json, os, sys, time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench import leaderboard_2026 as lb
from systems.device import use_expandable_segments

use_expandable_segments()
layers = int(sys.argv[1])
cfg = replace(lb.LEADERBOARD_2026, num_layers=layers)
where = torch.device("cuda")
recipes = {"ours": replace(lb.Recipe(), attention=lb.our_attention(cfg, where), recompute="keep_attention"),
           "plain": lb.PLAIN}
out = os.environ["OUT"]
for name, recipe in recipes.items():
    t0 = time.time()
    step = lb._model(cfg, recipe, 2, torch.bfloat16)
    for _ in range(3):
        step.run()
    torch.cuda.synchronize()
    times = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step.run()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
    kernels = [e for e in prof.key_averages() if e.device_time_total > 0]
    with open(os.path.join(out, "kernels.jsonl"), "a") as f:
        for e in kernels:
            f.write(json.dumps({"recipe": name, "layers": layers, "name": e.key, "calls": e.count / 2,
                                "us_per_step": e.device_time_total / 2}) + "\n")
    with open(os.path.join(out, "steps.jsonl"), "a") as f:
        f.write(json.dumps({"recipe": name, "label": recipe.label, "layers": layers, "ms": times,
                            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "wall_s": time.time() - t0,
                            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}) + "\n")
    total = sum(e.device_time_total for e in kernels) / 2e3
    print(name, [round(t, 1) for t in times], "kernel ms per step", round(total, 1), f"{time.time() - t0:.0f} s",
          flush=True)
    del step
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

"""The matmuls of chapter 18's step by shape: the leaderboard model at LAYERS blocks (argv[1]), ours (as in
profile_step.py), three steps of warm-up, two under torch.profiler with shapes recorded; per (op, input shapes):
calls, device ms and TFLOP/s per step into $OUT/matmuls.jsonl."""
import json, os, sys
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench import leaderboard_2026 as lb
from systems.device import use_expandable_segments

use_expandable_segments()
layers = int(sys.argv[1])
cfg = replace(lb.LEADERBOARD_2026, num_layers=layers)
recipe = replace(lb.Recipe(), attention=lb.our_attention(cfg, torch.device("cuda")), recompute="keep_attention")
step = lb._model(cfg, recipe, 2, torch.bfloat16)
for _ in range(3):
    step.run()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
    for _ in range(2):
        step.run()
    torch.cuda.synchronize()
with open(os.path.join(os.environ["OUT"], "matmuls.jsonl"), "a") as f:
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key not in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm") or e.device_time_total == 0:
            continue
        shapes = [s for s in e.input_shapes if s]
        a, b = shapes[-2], shapes[-1]  # addmm: (bias, a, b)
        flop = 2 * a[-2] * a[-1] * b[-1] * (a[0] if len(a) == 3 else 1)
        ms = e.device_time_total / 2e3
        row = {"layers": layers, "op": e.key, "shapes": shapes, "calls": e.count / 2, "ms_per_step": ms,
               "tflops": flop * e.count / 2 / (ms * 1e-3) / 1e12}
        f.write(json.dumps(row) + "\n")
        print(row, flush=True)

"""Which matmuls a compiled step runs again when it recomputes its blocks, counted on a CPU: the leaderboard model
at a toy size whose shapes tell the projections apart (d_model 96, d_ff 352, 2 x 40 tokens, vocabulary 512), SDPA's
attention, fp32, compiled, two steps of warm-up, then one under torch.profiler with shapes recorded. argv: RECOMPUTE
(none|keep_attention|all) LAYERS. Prints each matmul's and attention op's shapes and count, then the matmuls."""
import sys
from collections import Counter
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from systems.bench.recipe import Recipe, build_model
from systems.model import LEADERBOARD_2026

recompute, layers = sys.argv[1], int(sys.argv[2])
cfg = replace(LEADERBOARD_2026, num_layers=layers, d_model=96, num_heads=4, d_ff=352, context_length=40,
              vocab_size=512)
recipe = Recipe(attention="sdpa", fused_loss=False, fused_adamw=False, recompute=recompute, compiled=True)
model = build_model(cfg, recipe, torch.device("cpu"), torch.float32)
step = torch.compile(model)
tokens, targets = torch.randint(0, 512, (2, 2, 40))
for _ in range(2):
    step(tokens, targets).backward()
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    step(tokens, targets).backward()
ops = ("aten::mm", "aten::addmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
       "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
count = Counter((e.name, str(e.input_shapes[:2])) for e in prof.events() if e.name in ops)
for (name, shapes), n in sorted(count.items()):
    print(n, name, shapes)
print("matmuls", sum(n for (name, _), n in count.items() if name in ("aten::mm", "aten::addmm")))

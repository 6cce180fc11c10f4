"""The 16-block leaderboard model's step: ours keeping attention in the first k blocks, and plain PyTorch's, one
point at a time, each row written as it comes."""
import os, sys, time
import torch, triton
from systems.bench.leaderboard_2026 import PLAIN, Recipe, model_step

print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
t0 = time.time()
ours = Recipe(attention="flash_hopper", recompute="keep_attention")
for i, recipe in enumerate([Recipe(**{**vars(ours), "kept_groups": 10}), PLAIN, Recipe(**{**vars(ours), "kept_groups": 6})]):
    df = model_step([16], [recipe], rep=3000, warmup=1000)
    df.to_csv(os.path.join(os.environ["OUT"], f"kept_{i}.csv"), index=False)
    print(df[["layers", "recipe", "status", "ms", "extra_gib", "mfu"]].to_string(index=False), f"{time.time() - t0:.0f} s",
          flush=True)

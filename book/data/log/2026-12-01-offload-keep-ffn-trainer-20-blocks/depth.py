"""One recipe's leaderboard step at the depths given, in whatever memory the GPU shows (the command's harness:
systems.bench.leaderboard_2026.model_step, expandable segments):
python depth.py ours|plain LAYERS... > rows.json, or ours:RECOMPUTE for ours recomputing otherwise than offload"""
import sys
from dataclasses import replace
from systems.device import use_expandable_segments

use_expandable_segments()
from systems.bench.leaderboard_2026 import model_step  # noqa: E402
from systems.bench.recipe import PLAIN, Recipe  # noqa: E402

who, _, recompute = sys.argv[1].partition(":")
recipe = Recipe(attention="flash_hopper", recompute=recompute or "offload") if who == "ours" else PLAIN
df = model_step([int(n) for n in sys.argv[2:]], [recipe], rep=1000, warmup=200)
print(df.to_json(orient="records", indent=1))

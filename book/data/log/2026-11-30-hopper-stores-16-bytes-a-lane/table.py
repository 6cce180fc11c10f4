# flash_hopper beside SDPA's cuDNN back end at chapter 20's table shapes (flash_sweep.TABLE_SHAPES, bf16) and the
# 2025 leaderboard's shape in fp16, inputs (B, H, N, d), do_bench with 100 ms of repetitions, the fastest of three
# calls in turn, as chapter 20 times them; the tree on PYTHONPATH (tag argv[1]), modes argv[2:]; one JSON line a row.
import json, sys
from systems.bench import flash_sweep as fs
points = [("bf16", d, n, n, b, h, causal) for (b, h, n, d), causal in fs.TABLE_SHAPES] + [("fp16", 64, 16384, 16384, 1, 16, True)]
rows = fs.run(points, ("flash_hopper", "sdpa_cudnn"), tuple(sys.argv[2:]), rep_ms=100, rounds=3, desc="table")
for r in rows.to_dict(orient="records"):
    print(json.dumps(dict(tree=sys.argv[1], **r)), flush=True)

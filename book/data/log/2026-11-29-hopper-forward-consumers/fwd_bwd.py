# The registered flash_hopper beside SDPA's cuDNN back end, forward and forward+backward with autograd, as chapter
# 20's table times them (systems.bench.flash_sweep.run, the fastest of 3 calls in turn), at head-dim-64 shapes below
# 2,048 causal keys and without the mask, in the tree on PYTHONPATH (tag argv[1]); one JSON line per row.
import json, sys
from systems.bench.flash_sweep import run
points = [("bf16", 64, n, n, b, h, True) for b, h, n in ((16, 12, 512), (16, 25, 512), (8, 12, 1024), (8, 25, 1024),
                                                           (16, 16, 1024))]
points += [("bf16", 64, n, n, b, h, False) for b, h, n in ((8, 16, 1024), (4, 16, 2048), (1, 16, 8192))]
rows = run(points, impls=("flash_hopper", "sdpa_cudnn"), modes=("fwd", "fwd_bwd"), rounds=3)
for r in rows.to_dict(orient="records"):
    print(json.dumps(dict(tree=sys.argv[1], **r)), flush=True)

# The registered flash_hopper beside SDPA's cuDNN back end, forward and forward+backward with autograd, as chapter
# 20's table times them (systems.bench.flash_sweep.run, the fastest of 3 calls in turn), at causal head-dim-64
# shapes below 8,192 keys, in the tree on PYTHONPATH (tag argv[1]); one JSON line per row.
import json, sys
from systems.bench.flash_sweep import run
points = [("bf16", 64, n, n, b, h, True) for b, h, n in ((4, 16, 2048), (16, 16, 1024), (8, 25, 1024), (2, 16, 4096),
                                                           (16, 12, 512), (4, 25, 2048))]
rows = run(points, impls=("flash_hopper", "sdpa_cudnn"), modes=("fwd", "fwd_bwd"), rounds=3)
for r in rows.to_dict(orient="records"):
    print(json.dumps(dict(tree=sys.argv[1], **r)), flush=True)

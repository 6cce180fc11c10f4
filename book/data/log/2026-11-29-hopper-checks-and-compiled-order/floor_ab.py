# The per-call floor (call_overhead.call_floor: forward + backward, wall µs a call, the median of 5 rounds of 300
# calls) at a head-dim-128 shape too small to keep the GPU busy, of the tree on PYTHONPATH (tag argv[1], round
# argv[2]): flash_hopper beside SDPA's two back ends in the same process, eager, compiled and from a CUDA graph.
import json, sys
from systems.bench.call_overhead import call_floor
tag, rnd = sys.argv[1], int(sys.argv[2])
for shape in ((1, 1, 128, 128), (1, 16, 1024, 128)):
    table = call_floor(shape=shape, impls=("flash_hopper", "sdpa_cudnn", "sdpa_flash"))
    for row in table.to_dict("records"):
        print(json.dumps({"tree": tag, "round": rnd, "shape": "x".join(map(str, shape)), **row}), flush=True)

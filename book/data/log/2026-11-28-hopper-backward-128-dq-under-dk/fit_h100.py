"""Chapter 18's step at 16 blocks in an H100 80GB's memory, emulated on a larger GPU: before the model exists, the
driver hands this process everything above what an H100 80GB HBM3 has (81,559 MiB in all, as nvidia-smi reports it,
less what this device already uses), outside PyTorch's allocator, so the allocator sees the free memory an H100 would
give. argv: CAP(h100|none) RECIPE(ours|plain) KEPT... ; tries each kept count in turn until one fits. The
allocator's settings come from PYTORCH_CUDA_ALLOC_CONF, set by the caller. A row per try appended to
$OUT/fit_h100.jsonl."""
import ctypes, json, os, sys, time
from dataclasses import replace

import pandas as pd
import torch

from systems.bench import leaderboard_2026 as lb
from systems.device import allocatable_bytes

H100_TOTAL = 81559 * 2**20
cap, recipe_name, kept_counts = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]] or [None]
torch.cuda.init()
torch.empty(1, device="cuda")  # the primary context exists and is current
free, total = torch.cuda.mem_get_info()
held = ctypes.c_uint64(0)
if cap == "h100":
    grab = total - H100_TOTAL
    rc = ctypes.CDLL("libcuda.so.1").cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(grab))
    assert rc == 0, f"cuMemAlloc_v2 returned {rc}"
conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
print(torch.cuda.get_device_name(), "cap", cap, "conf", conf or "default", "allocatable GiB",
      round(allocatable_bytes() / 2**30, 2), flush=True)
cfg = lb.LEADERBOARD_2026
base = (replace(lb.Recipe(), attention=lb.our_attention(cfg, torch.device("cuda")), recompute="keep_attention")
        if recipe_name == "ours" else lb.PLAIN)
for kept in kept_counts:
    t0 = time.time()
    recipe = base if recipe_name == "plain" else replace(base, kept_groups=None if kept in (None, 16) else kept)
    rows = lb.step_at((16, recipe), pd.DataFrame(), rep=1000, warmup=300, tries=0)
    for row in rows.to_dict("records"):
        row.update(cap=cap, alloc_conf=conf or "default", allocatable_gib=allocatable_bytes() / 2**30,
                   wall_s=time.time() - t0, attention=str(row.get("attention")))
        with open(os.path.join(os.environ["OUT"], "fit_h100.jsonl"), "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print({k: row[k] for k in ("recipe", "kept_blocks", "status", "ms", "mfu", "peak_gib", "reserved_gib")
               if k in row}, f"{row['wall_s']:.0f} s", flush=True)
    if rows.status.iloc[-1] != "OOM":
        break

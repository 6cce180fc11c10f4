"""The eager training step (bf16, 8,192 tokens a batch, AdamW) of the presets, with attention "flash" (our fastest
for the device), "flash_triton" and "sdpa", the three interleaved on one model (chapter 17's harness,
flash_sweep.model_step_at): one JSON row per point and attention, written as each point finishes."""
import sys

from systems.attention.fastest import fastest_flash
from systems.bench.flash_sweep import model_step_at
from systems.device import local_device

print("flash takes:", fastest_flash(local_device()), file=sys.stderr)
# run 1: the points chapter 17 found bound by the GPU, then two host-bound ones; run 2 (arguments "size:context ..."):
# the host-bound rest
points = [(p.split(":")[0], int(p.split(":")[1])) for p in sys.argv[1:]] or [
    ("large", 2048), ("xl", 2048), ("2.7B", 2048), ("xl", 1024), ("2.7B", 1024), ("large", 1024), ("xl", 512),
    ("2.7B", 512), ("large", 512), ("medium", 2048), ("small", 2048)]
for size, context in points:
    rows = model_step_at((size, context, False), tokens=8192, dtype="bf16",
                         attentions=("sdpa", "flash", "flash_triton"), steps=20)
    print(rows.to_json(orient="records", lines=True), flush=True)
    print(f"done {size} {context}", file=sys.stderr, flush=True)

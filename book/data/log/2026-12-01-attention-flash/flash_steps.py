"""The small preset's training step (bf16, context 1024, 8 sequences) eager and compiled, with attention "flash" beside
"flash_hopper" (the kernels it takes on this GPU) and "sdpa", the three interleaved on one model: one JSON row per step
point and attention."""
import sys

from systems.attention.fastest import fastest_flash
from systems.bench.flash_sweep import model_steps
from systems.device import local_device

print("flash takes:", fastest_flash(local_device()), file=sys.stderr)
rows = model_steps(["small"], [1024], compiled_sizes=["small"], tokens=8192,
                   attentions=("sdpa", "flash", "flash_hopper"), steps=20)
print(rows.to_json(orient="records", lines=True))

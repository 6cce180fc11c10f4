"""The small preset's eager training step (bf16, 8,192 tokens a step) at short contexts, where a step is host-bound:
the Triton kernels and the Hopper kernels (what flash takes here) beside sdpa, interleaved on one model."""
from systems.bench.flash_sweep import model_steps

rows = model_steps(["small"], [256, 512], tokens=8192, attentions=("flash_triton", "flash_hopper", "sdpa"), steps=30)
print(rows.to_json(orient="records", lines=True))

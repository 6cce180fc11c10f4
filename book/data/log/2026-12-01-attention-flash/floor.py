"""The per-call floor (forward and backward, bf16, causal, wall µs a call) of attention "flash" beside the kernels it
takes on this GPU and SDPA's back ends, eager and compiled, nine interleaved rounds of 300 calls, at head dims 64
and 128: one JSON row per shape, implementation and way of calling."""
import pandas as pd

from systems.bench.call_overhead import call_floor

tables = []
for shape in ((1, 1, 128, 64), (1, 1, 128, 128)):
    t = call_floor(shape, rounds=9, impls=("flash", "flash_hopper", "flash_triton", "sdpa_flash", "sdpa_cudnn"),
                   modes=("eager", "compiled"))
    tables.append(t.assign(shape="x".join(map(str, shape))))
print(pd.concat(tables).to_json(orient="records", lines=True))

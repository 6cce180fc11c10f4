"""Why the split head dim's backward was slower at 8x32x512x80: tiles chosen by tuning, and the untuned defaults."""
import json, os, sys
import torch, triton, triton.testing
from systems.attention.flash_triton import FlashConfig, flash_attention_triton, tuning

out = open(os.path.join(os.environ["OUT"], "diag512.jsonl"), "a")
for shape in sys.argv[1].split(","):
    B, H, N, d = map(int, shape.split("x"))
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16)
    for name, cfg in [("split", FlashConfig()), ("padded", FlashConfig(split_head_dim=False)),
                      ("split_untuned", FlashConfig(autotune=False)),
                      ("padded_untuned", FlashConfig(autotune=False, split_head_dim=False))]:
        before = set(tuning.CHOSEN)
        def fb():
            flash_attention_triton(q, k, v, True, cfg).backward(do)
            q.grad = k.grad = v.grad = None
        def f():
            with torch.no_grad():
                flash_attention_triton(q, k, v, True, cfg)
        fb()
        row = dict(shape=shape, config=name, fwd=min(triton.testing.do_bench(f, return_mode="median") for _ in range(3)),
                   fwdbwd=min(triton.testing.do_bench(fb, return_mode="median") for _ in range(3)),
                   chosen={str(key[0]): str(tuning.CHOSEN[key]) for key in set(tuning.CHOSEN) - before})
        out.write(json.dumps(row) + "\n"); out.flush(); print(row, flush=True)

# What the selective-checkpoint policy sees under torch.compile, and how many attention forwards a block's
# fwd+bwd runs, per attention and recompute policy.
import collections, sys
from dataclasses import replace
import torch
import systems.recompute as rc
from systems.model import LEADERBOARD_2026, TransformerBlock
from systems.recompute import run_blocks

seen = collections.Counter()
orig = rc._keep_attention
def spy(ctx, op, *a, **k):
    name = op.name() if hasattr(op, "name") else repr(op)
    seen[(type(op).__name__, name)] += 1
    return orig(ctx, op, *a, **k)
rc._keep_attention = spy

cfg = replace(LEADERBOARD_2026, d_model=1024, num_heads=8, d_ff=2816, context_length=4096)
for attention in sys.argv[1].split(","):
    for recompute in ("all", "keep_attention"):
        torch._dynamo.reset(); seen.clear()
        block = TransformerBlock(replace(cfg, attention=attention)).cuda().bfloat16()
        blocks = torch.nn.ModuleList([block])
        x = torch.randn(2, 4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        f = lambda x: run_blocks(blocks, x, (1,), recompute)
        if sys.argv[2] == "compiled": f = torch.compile(f)
        for _ in range(3):
            f(x).sum().backward()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            f(x).sum().backward(); torch.cuda.synchronize()
        kern = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        att = {n[:90]: c for n, c in kern.items() if any(s in n.lower() for s in ("attn", "attention", "flash", "fmha", "sdpa", "cudnn", "_fwd", "forward"))}
        print(f"== {attention} {recompute} {sys.argv[2]}: attention-like kernels {att}")
        if recompute == "keep_attention":
            print("   policy saw:", {f"{t}:{n}": c for (t, n), c in seen.items() if not n.startswith("aten::")} or "only aten ops",
                  "| aten ops:", len([1 for (t, n) in seen if n.startswith("aten::")]))

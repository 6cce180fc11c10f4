"""Head dim 80 (the 2.7B preset's): our Triton attention with the head dim as 64 + 16 columns (the default now)
against the same kernels padded to 128 (split_head_dim=False) and SDPA's cuDNN and flash back ends, forward and
forward+backward, causal, bf16, (B, H, N, d) contiguous; do_bench medians in ms, the faster of two rounds.
A JSON line per shape into $OUT/d80_attention.jsonl."""
import json, os, sys, time
import torch, triton, triton.testing
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from systems.attention.flash_triton import FlashConfig, flash_attention_triton

out = open(os.path.join(os.environ["OUT"], "d80_attention.jsonl"), "a")
print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
SPLIT, PADDED = FlashConfig(), FlashConfig(split_head_dim=False)
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[1].split(",")]


def sdpa(backend):
    def f(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return f


impls = {"split": lambda q, k, v: flash_attention_triton(q, k, v, True, SPLIT),
         "padded": lambda q, k, v: flash_attention_triton(q, k, v, True, PADDED),
         "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "flash": sdpa(SDPBackend.FLASH_ATTENTION)}
t0 = time.time()
for B, H, N, d in shapes:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16)
    ref = None
    row = {"shape": f"{B}x{H}x{N}x{d}"}
    for name, f in impls.items():
        o = f(q, k, v)
        o.backward(do)
        grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        if ref is None:
            ref = (o.detach().float(), [g.float() for g in grads])
        else:  # largest difference from the split kernel's over its largest value
            row[f"{name}_err"] = max(((a.float() - b).abs().max() / b.abs().max()).item()
                                     for a, b in zip([o.detach(), *grads], [ref[0], *ref[1]]))

        def fwd():
            with torch.no_grad():
                f(q, k, v)

        def fwd_bwd():
            f(q, k, v).backward(do)
            for t in (q, k, v):
                t.grad = None

        row[f"{name}_fwd"] = min(triton.testing.do_bench(fwd, return_mode="median") for _ in range(2))
        row[f"{name}_fwdbwd"] = min(triton.testing.do_bench(fwd_bwd, return_mode="median") for _ in range(2))
    out.write(json.dumps(row) + "\n"); out.flush()
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, f"{time.time() - t0:.0f} s",
          flush=True)

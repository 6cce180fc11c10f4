"""Head dim 80 as 64 + 16: the backward in one pass (dQ added up in the dK/dV pass) against two, and the split's
forward+backward against cuDNN's, at GPU-bound shapes; do_bench medians (ms), the faster of three rounds."""
import json, os, sys
import torch, triton, triton.testing
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from systems.attention.flash_triton import FlashConfig, flash_attention_triton, launch

out = open(os.path.join(os.environ["OUT"], "onepass80.jsonl"), "a")
print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
for shape in sys.argv[1].split(","):
    B, H, N, d = map(int, shape.split("x"))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16)

    def cudnn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    row = {"shape": shape}
    for name, f in [("one_pass", lambda q, k, v: flash_attention_triton(q, k, v, True, FlashConfig(atomic_dq=True))),
                    ("two_passes", lambda q, k, v: flash_attention_triton(q, k, v, True, FlashConfig(atomic_dq=False))),
                    ("default", lambda q, k, v: flash_attention_triton(q, k, v, True)), ("cudnn", cudnn)]:
        def fb():
            f(q, k, v).backward(do)
            q.grad = k.grad = v.grad = None
        fb()
        row[name] = min(triton.testing.do_bench(fb, return_mode="median") for _ in range(3))
    row["passes_chosen"] = {str(key): v for key, v in launch.PASSES.items()}
    out.write(json.dumps(row) + "\n"); out.flush(); print(row, flush=True)

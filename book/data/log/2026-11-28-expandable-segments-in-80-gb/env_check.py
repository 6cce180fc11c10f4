"""Does PYTORCH_CUDA_ALLOC_CONF set after `import torch` (and torch.cuda.is_available()) reach the allocator?"""
import os
import torch

torch.cuda.is_available()
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
x = torch.empty(64 << 20, device="cuda")
print("after import:", [s.get("is_expandable") for s in torch.cuda.memory._snapshot()["segments"]], flush=True)

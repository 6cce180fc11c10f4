"""Does recompute="offload" (groups of one block, compiled) give the unsharded model's gradients under FSDP2 on
gloo, and does it move what it moves without sharding?"""
import os, sys
from dataclasses import replace
import torch, torch.distributed as dist
from torch._dynamo.utils import counters

from systems.model import LEADERBOARD_2026, TransformerLM
from systems.fsdp.torch_fsdp import TorchFSDP

TOY = replace(LEADERBOARD_2026, num_layers=3, vocab_size=256, context_length=32, d_model=64, d_ff=176, num_heads=4,
              attention="sdpa")
recompute = sys.argv[1] if len(sys.argv) > 1 else "offload"
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
plain = TransformerLM(TOY).double()
state = plain.state_dict()
moving = TransformerLM(TOY, checkpoint_blocks=1, recompute=recompute).double()
moving.load_state_dict(state)
wrapped = TorchFSDP(moving)
tokens = torch.randint(0, TOY.vocab_size, (2, TOY.context_length), generator=torch.Generator().manual_seed(1))
counters.clear()
loss = wrapped(tokens, tokens.roll(1, dims=1))
loss.backward()
expected = plain(tokens, tokens.roll(1, dims=1)); expected.backward()
worst = 0.0
for (name, p), (_, q) in zip(moving.named_parameters(), plain.named_parameters()):
    g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
    worst = max(worst, ((g - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-30)).item())
print(rank, recompute, "loss", loss.item(), expected.item(), "worst relative grad error", worst,
      "moved", getattr(moving.offload, "moved_bytes", None) if hasattr(moving, "offload") else None,
      "graphs", counters["stats"]["unique_graphs"], "breaks", dict(counters["graph_break"]), flush=True)
dist.destroy_process_group()

"""recompute keeping the feed-forward's products under FSDP2, as systems.offload runs it since this entry (each block
a group of its own, through its hooks), in two processes on gloo: rank 0 prints, per step, whether the loss is the
unsharded model's, the largest gradient difference over the gradient's largest element, what each group moved,
Dynamo's graphs and graph breaks; then what our FSDP gets. argv: the recompute, then "compile" to compile each block
as the trainer's --compile does."""
import sys
from dataclasses import replace

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters

from systems.fsdp import FSDP
from systems.fsdp.torch_fsdp import TorchFSDP
from systems.model import LEADERBOARD_2026, TransformerLM

TOY = replace(LEADERBOARD_2026, num_layers=3, vocab_size=256, context_length=32, d_model=64, d_ff=176, num_heads=4,
              attention="sdpa")
recompute, compile_blocks = sys.argv[1], sys.argv[2] == "compile"
dist.init_process_group("gloo")
rank = dist.get_rank()
say = print if rank == 0 else (lambda *a, **k: None)
torch.manual_seed(0)
plain = TransformerLM(TOY).double()
moving = TransformerLM(TOY, checkpoint_blocks=1, recompute=recompute).double()
moving.load_state_dict(plain.state_dict())
wrapped = TorchFSDP(moving)
if compile_blocks:
    for b in moving.layers:
        b.compile()
counters.clear()
for step in range(2):
    tokens = torch.randint(0, TOY.vocab_size, (2, TOY.context_length), generator=torch.Generator().manual_seed(step))
    wrapped.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    loss = wrapped(tokens, tokens.roll(1, dims=1))
    loss.backward()
    expected = plain(tokens, tokens.roll(1, dims=1))
    expected.backward()
    worst = max(((p.grad.full_tensor() - q.grad).abs().max() / q.grad.abs().max()).item()
                for p, q in zip(moving.parameters(), plain.parameters()))
    say(recompute, "compiled blocks" if compile_blocks else "", "step", step, "same loss", loss.item() == expected.item(),
        "worst", worst, "moved", moving.offload.moved_bytes if recompute == "offload" else "-",
        "graphs", counters["stats"]["unique_graphs"], "breaks", sum(counters["graph_break"].values()), flush=True)
ours = TransformerLM(TOY, checkpoint_blocks=1, recompute=recompute).double()
f = FSDP(ours)
try:
    f(tokens, tokens.roll(1, dims=1))
    say("our FSDP ran")
except ValueError as e:
    say("our FSDP refused:", e)
dist.destroy_process_group()

"""Does data-parallel training equal single-process training? The check behind §2.2.2's deliverable.

A toy model with everything that breaks hand-written DDP: a frozen parameter, an embedding tied to the
output head, a float64 parameter among float32 ones, a buffer, a layer that is never used, and a branch
whose use depends on the data, so that in some steps one rank uses it and another does not (and in some
steps no rank does). :func:`train` runs either the single-process reference on the whole batch or one
rank of a data-parallel run on its shard, with AdamW (whose weight decay would betray a gradient of
zeros where single-process training has none). :func:`compare` runs both and reports the largest
difference per variant. ``tests/test_ddp.py`` and the DDP chapter use them.
"""

from __future__ import annotations

import io

import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

from systems.ddp import wrap
from systems.dist import launch
from systems.model import token_loss

VOCAB, BATCH, SEQ, STEPS, MICRO = 16, 12, 5, 4, 3  # BATCH divides by 2 and 3 ranks


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 12)
        self.up = nn.Linear(12, 24)
        self.down = nn.Linear(24, 12)
        self.branch = nn.Linear(12, 12)  # used only for samples whose first token is 0
        self.unused = nn.Linear(12, 12)  # never used: its gradient stays None
        self.norm = nn.LayerNorm(12)
        self.gain64 = nn.Parameter(1 + 0.1 * torch.randn(12, dtype=torch.float64))
        self.frozen = nn.Parameter(torch.randn(12), requires_grad=False)
        self.register_buffer("shift", torch.randn(12))

    def forward(self, x):  # (B, T) -> (B, T, VOCAB)
        h = self.emb(x) + self.frozen + self.shift  # (B, T, 12)
        h = h + self.down(F.gelu(self.up(h)))
        need = x[:, 0] == 0  # (B,)
        if need.any():  # data-dependent: a rank whose shard has no such sample never touches `branch`
            delta = torch.zeros_like(h)
            delta[need] = self.branch(h[need])
            h = h + delta
        h = h * self.gain64.to(h.dtype)
        return self.norm(h) @ self.emb.weight.T  # the head is the embedding, tied


def batch(step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens; the branch is wanted by samples of shard 0 only (step 0), shard 1 only (1), none (2), all (3)."""
    g = torch.Generator().manual_seed(100 * step + micro)
    x = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    rows = {0: [0], 1: [BATCH - 1], 2: [], 3: list(range(BATCH))}[step % 4]
    if micro == MICRO - 1 and step % 4 != 3:
        rows = []  # under accumulation the branch is used in earlier micro-batches only
    x[rows, 0] = 0
    return x, y


def loss_of(model, x, y):
    return token_loss(model(x), y)


def shard(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.shape[0] // world
    return t[rank * n:(rank + 1) * n]


def train(rank: int, world: int, variant: str | None, accumulate: bool = False, options: dict | None = None) -> dict:
    """Train the toy model; ``variant=None`` is the single-process reference on the whole batch."""
    torch.manual_seed(rank)  # replicas start different: the wrapper must broadcast rank 0's state
    model = Toy()
    if variant is not None:
        model = wrap(variant, model, **(options or {}))
    start = {k: v.clone() for k, v in (model.module if variant else model).state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        for micro in range(MICRO if accumulate else 1):
            x, y = batch(step, micro) if accumulate else batch(step)
            if variant is not None:
                x, y = shard(x, rank, world), shard(y, rank, world)
            last = micro == (MICRO if accumulate else 1) - 1
            scale = MICRO if accumulate else 1
            if variant is not None and not last:
                with model.no_sync():
                    (loss_of(model, x, y) / scale).backward()
            else:
                (loss_of(model, x, y) / scale).backward()
        if variant is not None:
            model.finish_gradient_synchronization()
            model.finish_gradient_synchronization()  # a repeated call must change nothing
        opt.step()
    final = model.module if variant else model
    out = {"start": start, "final": {k: v.detach().clone() for k, v in final.state_dict().items()}}
    if hasattr(model, "units"):
        out["units"] = len(model.units)
    return out


def _train_bytes(rank: int, world: int, runs: dict) -> bytes:
    # Serialised: tensors sent through launch's queue would be shared through file descriptors that
    # close when this process exits.
    buffer = io.BytesIO()
    torch.save({name: train(rank, world, *args) for name, args in runs.items()}, buffer)
    return buffer.getvalue()


def run_ranks(world: int, runs: dict[str, tuple], timeout_s: float = 150) -> list[dict]:
    """``train(rank, world, *args)`` for every named run, on ``world`` gloo processes; results by rank."""
    results = launch(_train_bytes, world, runs, backend="gloo", timeout_s=timeout_s)
    return [torch.load(io.BytesIO(r), weights_only=False) for r in results]


def compare(variants: list[str], world: int = 2, accumulate: bool = False) -> pd.DataFrame:
    """Largest absolute difference from single-process training, per variant, over every rank and weight."""
    want = train(0, 1, None, accumulate)["final"]
    got = run_ranks(world, {v: (v, accumulate, {"find_unused_parameters": True}) for v in variants})
    rows = []
    for v in variants:
        diff = max((r[v]["final"][k].double() - want[k].double()).abs().max().item() for r in got for k in want)
        rows.append({"variant": v, "ranks": world, "steps": STEPS, "max_abs_diff": diff, "equal_at_1e-6": diff <= 1e-6})
    return pd.DataFrame(rows)

"""Training data: seeded random tokens or a local text file read as bytes, with a world-size-free sampler.

The batch of step ``s`` is a pure function of (source, seed, s): the sampler draws the *global* batch
from a generator seeded by the step, and rank ``r`` of ``W`` takes rows ``[r·B/W, (r+1)·B/W)``. So one
process and eight processes see the same global batch at every step (loss curves match across world
sizes), and resuming at step ``s`` needs only ``s``: the data position is the step.

    from systems.data import TokenData
    data = TokenData.from_text("corpus.txt", vocab_size=10_000)   # or TokenData.random(10_000, seed=0)
    x, y = data.local_batch(step, batch_size=32, context_length=256, rank=0, world_size=2)   # (16, 256) each

Bytes are tokens 0..255 (vocabulary 256); a model with a larger vocabulary uses the first 256 ids, a
smaller one folds bytes onto its ids modulo its size (lossy, but any tiny test model can still train).
"""

from __future__ import annotations

from pathlib import Path

import torch

BYTE_VOCAB = 256


class TokenData:
    def __init__(self, vocab_size: int, seed: int = 0, tokens: torch.Tensor | None = None):
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
        self.vocab_size, self.seed, self.tokens = vocab_size, seed, tokens

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0) -> "TokenData":
        """Uniform random tokens: the handout's benchmarking data, no file needed."""
        return cls(vocab_size, seed)

    @classmethod
    def from_text(cls, path: str | Path, vocab_size: int, seed: int = 0) -> "TokenData":
        """A text (any) file tokenised at the byte level, mapped into ``vocab_size`` ids."""
        raw = Path(path).read_bytes()
        if len(raw) < 2:
            raise ValueError(f"{path} has {len(raw)} bytes; need at least 2 to form one (input, target) pair")
        tokens = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        if vocab_size < BYTE_VOCAB:
            tokens = tokens % vocab_size
        return cls(vocab_size, seed, tokens)

    @classmethod
    def from_spec(cls, spec: str, vocab_size: int, seed: int = 0) -> "TokenData":
        """``"random"`` or a path to a text file (what ``--data`` takes)."""
        return cls.random(vocab_size, seed) if spec == "random" else cls.from_text(spec, vocab_size, seed)

    def global_batch(self, step: int, batch_size: int, context_length: int) -> torch.Tensor:
        """The (batch_size, context_length + 1) token windows of ``step``, the same on every rank."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if self.tokens is None:
            return torch.randint(self.vocab_size, (batch_size, context_length + 1), generator=g)
        n = len(self.tokens) - context_length - 1
        if n < 1:
            raise ValueError(f"the text has {len(self.tokens)} tokens; context {context_length} needs more")
        starts = torch.randint(n, (batch_size,), generator=g)
        offsets = torch.arange(context_length + 1)
        return self.tokens[starts[:, None] + offsets]  # (B, T+1)

    def local_batch(
        self, step: int, batch_size: int, context_length: int, rank: int = 0, world_size: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of the global batch as (inputs, next-token targets), each (B/W, T)."""
        if batch_size % world_size:
            raise ValueError(f"global batch {batch_size} does not split over {world_size} ranks")
        per = batch_size // world_size
        rows = self.global_batch(step, batch_size, context_length)[rank * per:(rank + 1) * per]
        return rows[:, :-1], rows[:, 1:]

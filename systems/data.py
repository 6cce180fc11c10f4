"""Training data: seeded random tokens or a local text file read as bytes, with a world-size-free sampler.

The batch of step ``s`` is a pure function of (data, seed, s): the sampler draws the *global* batch
from a generator seeded by the step, and rank ``r`` of ``W`` takes rows ``[r·B/W, (r+1)·B/W)``. So one
process and eight processes see the same global batch at every step (loss curves match across world
sizes), and resuming at step ``s`` needs only ``s``: the data position is the step.

    from systems.data import TokenData
    data = TokenData.from_text("corpus.txt", vocab_size=10_000)   # or TokenData.random(10_000, seed=0)
    data.check_context(256)                                       # refused here if too short for one window
    x, y = data.local_batch(step, batch_size=32, context_length=256, rank=0, world_size=2)   # (16, 256) each

Bytes are tokens 0..255 (vocabulary 256); a model with a larger vocabulary uses the first 256 ids, a
smaller one folds bytes onto its ids modulo its size (lossy, but any tiny test model can still train).
The file is memory-mapped as bytes (one byte per token, the smallest type that holds a byte vocabulary):
a run holds only its batches in memory, whatever the file's size, and the operating system pages in what
the batches touch. Only a regular file can be mapped; a device, a pipe or a folder is refused, as is a file
too short for one window of ``context_length + 1`` tokens (inputs and their next-token targets).

:meth:`TokenData.identity` is what a checkpoint records of the data: for a file, its size and the SHA-256 of its
contents (not its path), so a run resumes on the same text wherever it now lies, and refuses a file whose
contents changed under the same name.
"""

from __future__ import annotations

import hashlib
import stat
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

BYTE_VOCAB = 256
_CHUNK = 1 << 24  # bytes hashed at a time


class TokenData:
    def __init__(self, vocab_size: int, seed: int = 0, tokens: np.ndarray | None = None, source: str = "random"):
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
        self.vocab_size, self.seed, self.tokens, self.source = vocab_size, seed, tokens, source

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0) -> "TokenData":
        """Uniform random tokens: the handout's benchmarking data, no file needed."""
        return cls(vocab_size, seed)

    @classmethod
    def from_text(cls, path: str | Path, vocab_size: int, seed: int = 0) -> "TokenData":
        """A text (any) file tokenised at the byte level, memory-mapped, mapped into ``vocab_size`` ids."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise ValueError(f"data file {path} does not exist") from None
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
            raise ValueError(f"data file {path} is {kind}; --data takes a regular file of text, read as bytes")
        size = path.stat().st_size
        if size < 2:
            raise ValueError(f"data file {path} has {size} bytes; need at least 2 to form one (input, target) pair")
        return cls(vocab_size, seed, np.memmap(path, dtype=np.uint8, mode="r"), str(path))

    @classmethod
    def from_spec(cls, spec: str, vocab_size: int, seed: int = 0) -> "TokenData":
        """``"random"`` or a path to a text file (what ``--data`` takes)."""
        return cls.random(vocab_size, seed) if spec == "random" else cls.from_text(spec, vocab_size, seed)

    def windows(self, context_length: int) -> int | None:
        """How many distinct windows of ``context_length + 1`` tokens the file holds (None: random data)."""
        return None if self.tokens is None else len(self.tokens) - context_length

    def check_context(self, context_length: int) -> None:
        """Refuse, with the rule, a file too short for one window of inputs and next-token targets."""
        n = self.windows(context_length)
        if n is not None and n < 1:
            raise ValueError(f"data file {self.source} has {len(self.tokens)} tokens (bytes); context length "
                             f"{context_length} needs at least {context_length + 1} (a window of inputs and its "
                             "next-token targets)")

    @cached_property
    def identity(self) -> dict[str, object]:
        """What makes the batches what they are: for a file its size and content hash, for random data the seed
        alone (the vocabulary belongs to the model). The path is recorded too, but only to name it."""
        if self.tokens is None:
            return {"kind": "random"}
        digest = hashlib.sha256()
        for start in range(0, len(self.tokens), _CHUNK):
            digest.update(memoryview(self.tokens[start:start + _CHUNK]))
        return {"kind": "bytes", "bytes": int(len(self.tokens)), "sha256": digest.hexdigest()}

    def global_batch(self, step: int, batch_size: int, context_length: int) -> torch.Tensor:
        """The (batch_size, context_length + 1) token windows of ``step``, the same on every rank."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if self.tokens is None:
            return torch.randint(self.vocab_size, (batch_size, context_length + 1), generator=g)
        self.check_context(context_length)
        starts = torch.randint(self.windows(context_length), (batch_size,), generator=g).numpy()
        rows = self.tokens[starts[:, None] + np.arange(context_length + 1)]  # (B, T+1) uint8, only these bytes read
        tokens = torch.from_numpy(rows).long()
        return tokens % self.vocab_size if self.vocab_size < BYTE_VOCAB else tokens

    def local_batch(
        self, step: int, batch_size: int, context_length: int, rank: int = 0, world_size: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of the global batch as (inputs, next-token targets), each (B/W, T)."""
        if batch_size % world_size:
            raise ValueError(f"global batch {batch_size} does not split over {world_size} ranks")
        per = batch_size // world_size
        rows = self.global_batch(step, batch_size, context_length)[rank * per:(rank + 1) * per]
        return rows[:, :-1], rows[:, 1:]

"""Training data: seeded random tokens, a local text file read as bytes, or a file of token ids, with a
world-size-free sampler.

The batch of step ``s`` is a pure function of (data, seed, s): the sampler draws the *global* batch
from a generator seeded by the step, and rank ``r`` of ``W`` takes rows ``[r·B/W, (r+1)·B/W)``. So one
process and eight processes see the same global batch at every step (loss curves match across world
sizes), and resuming at step ``s`` needs only ``s``: the data position is the step.

    from systems.data import TokenData
    data = TokenData.from_file("corpus.txt", vocab_size=10_000)    # or a .npy of token ids; TokenData.random(...)
    data.check_context(256)                                       # refused here if too short for one window
    x, y = data.local_batch(step, batch_size=32, context_length=256, rank=0, world_size=2)   # (16, 256) each

Two kinds of file, told apart by their first bytes:

* **Token ids**, as a tokenizer writes them: a NumPy ``.npy`` file holding a 1-D array of integers
  (``np.save("train.npy", ids.astype(np.uint16))``; CS336's first assignment writes its tokenized corpora so). The
  array is memory-mapped as it is stored, so a file costs what its type costs per token: store ids in the
  smallest integer type that holds the vocabulary (uint16 below 65,536). Every id must lie in
  ``[0, vocab_size)``: the file is scanned once when opened, and one outside is refused with its value.
  Arrays of objects are refused unread (``allow_pickle=False``): loading data runs no code.
* **Anything else is text**, read as bytes: tokens 0..255 (vocabulary 256), memory-mapped one byte per token; a
  model with a larger vocabulary uses the first 256 ids, a smaller one folds bytes onto its ids modulo its size
  (lossy, but any tiny test model can still train).

Either way a run holds only its batches in memory, whatever the file's size, and the operating system pages in what
the batches touch. Only a regular file can be mapped; a device, a pipe or a folder is refused, as is a file
too short for one window of ``context_length + 1`` tokens (inputs and their next-token targets).

:meth:`TokenData.identity` is what a checkpoint records of the data: for a file, its length and the SHA-256 of its
tokens (not its path), so a run resumes on the same tokens wherever they now lie, and refuses a file whose
contents changed under the same name. Reading a large file through (the hash, the id check) shows its progress.
"""

from __future__ import annotations

import hashlib
import stat
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

BYTE_VOCAB = 256
_CHUNK = 1 << 24  # tokens read at a time when a file is read through
_SHOW_PROGRESS = 1 << 30  # bytes: reading through a file this large shows a progress bar
NPY_MAGIC = b"\x93NUMPY"


def _chunks(tokens: np.ndarray, what: str):
    """``tokens`` in consecutive pieces, with a progress bar (on stderr) where the file is large."""
    bar = tqdm(total=tokens.nbytes, unit="B", unit_scale=True, desc=what, disable=tokens.nbytes < _SHOW_PROGRESS)
    with bar:
        for start in range(0, len(tokens), _CHUNK):
            piece = tokens[start:start + _CHUNK]
            yield piece
            bar.update(piece.nbytes)


class TokenData:
    def __init__(self, vocab_size: int, seed: int = 0, tokens: np.ndarray | None = None, source: str = "random",
                 kind: str = "random"):
        """``kind``: "random" (no ``tokens``), "bytes" (a text file's) or "token ids" (a token file's)."""
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
        self.vocab_size, self.seed, self.tokens, self.source, self.kind = vocab_size, seed, tokens, source, kind

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0) -> "TokenData":
        """Uniform random tokens: the handout's benchmarking data, no file needed."""
        return cls(vocab_size, seed)

    @staticmethod
    def _regular_file(path: Path) -> int:
        """The size of ``path``; ValueError where it is missing or not a regular file."""
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise ValueError(f"data file {path} does not exist") from None
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
            raise ValueError(f"data file {path} is {kind}; --data takes a regular file: text (read as bytes) or a "
                             ".npy array of token ids")
        return path.stat().st_size

    @classmethod
    def from_file(cls, path: str | Path, vocab_size: int, seed: int = 0) -> "TokenData":
        """A ``.npy`` array of token ids (:meth:`from_token_ids`) or, any other file, text (:meth:`from_text`)."""
        path = Path(path)
        cls._regular_file(path)
        with open(path, "rb") as f:
            npy = f.read(len(NPY_MAGIC)) == NPY_MAGIC
        return (cls.from_token_ids if npy else cls.from_text)(path, vocab_size, seed)

    @classmethod
    def from_text(cls, path: str | Path, vocab_size: int, seed: int = 0) -> "TokenData":
        """A text (any) file tokenised at the byte level, memory-mapped, mapped into ``vocab_size`` ids."""
        path = Path(path)
        size = cls._regular_file(path)
        if size < 2:
            raise ValueError(f"data file {path} has {size} bytes; need at least 2 to form one (input, target) pair")
        return cls(vocab_size, seed, np.memmap(path, dtype=np.uint8, mode="r"), str(path), "bytes")

    @classmethod
    def from_token_ids(cls, path: str | Path, vocab_size: int, seed: int = 0) -> "TokenData":
        """A ``.npy`` file of a 1-D integer array, memory-mapped in its stored type, every id in the vocabulary."""
        path = Path(path)
        cls._regular_file(path)
        try:
            tokens = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:  # what NumPy says of an array of objects (it would need pickle) or a bad header
            raise ValueError(f"data file {path} is not an array of token ids: {exc}") from None
        if not isinstance(tokens, np.memmap) or tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise ValueError(f"data file {path} holds a {tokens.dtype} array of shape {tokens.shape}; a token file "
                             "holds one row of integer ids (np.save(path, ids.astype(np.uint16)))")
        if len(tokens) < 2:
            raise ValueError(f"data file {path} has {len(tokens)} tokens; need at least 2 to form one (input, "
                             "target) pair")
        low, high = int(tokens[0]), int(tokens[0])
        for piece in _chunks(tokens, f"checking the ids of {path.name}"):
            low, high = min(low, int(piece.min())), max(high, int(piece.max()))
        if low < 0 or high >= vocab_size:
            raise ValueError(f"data file {path} holds token ids from {low} to {high}; the model's vocabulary takes "
                             f"ids 0..{vocab_size - 1} (--vocab-size)")
        return cls(vocab_size, seed, tokens, str(path), "token ids")

    @classmethod
    def from_spec(cls, spec: str, vocab_size: int, seed: int = 0) -> "TokenData":
        """``"random"`` or a path to a data file (what ``--data`` takes)."""
        return cls.random(vocab_size, seed) if spec == "random" else cls.from_file(spec, vocab_size, seed)

    def windows(self, context_length: int) -> int | None:
        """How many distinct windows of ``context_length + 1`` tokens the file holds (None: random data)."""
        return None if self.tokens is None else len(self.tokens) - context_length

    def check_context(self, context_length: int) -> None:
        """Refuse, with the rule, a file too short for one window of inputs and next-token targets."""
        n = self.windows(context_length)
        if n is not None and n < 1:
            raise ValueError(f"data file {self.source} has {len(self.tokens)} tokens; context length "
                             f"{context_length} needs at least {context_length + 1} (a window of inputs and its "
                             "next-token targets)")

    @cached_property
    def identity(self) -> dict[str, object]:
        """What makes the batches what they are: for a file its size and content hash, for random data the seed
        alone (the vocabulary belongs to the model). The path is recorded too, but only to name it."""
        if self.tokens is None:
            return {"kind": "random"}
        digest = hashlib.sha256()
        for piece in _chunks(self.tokens, f"hashing {Path(self.source).name}"):
            digest.update(memoryview(np.ascontiguousarray(piece)).cast("B"))
        if self.kind == "bytes":
            return {"kind": "bytes", "bytes": int(len(self.tokens)), "sha256": digest.hexdigest()}
        return {"kind": self.kind, "dtype": str(self.tokens.dtype), "tokens": int(len(self.tokens)),
                "sha256": digest.hexdigest()}

    def global_batch(self, step: int, batch_size: int, context_length: int) -> torch.Tensor:
        """The (batch_size, context_length + 1) token windows of ``step``, the same on every rank."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if self.tokens is None:
            return torch.randint(self.vocab_size, (batch_size, context_length + 1), generator=g)
        self.check_context(context_length)
        starts = torch.randint(self.windows(context_length), (batch_size,), generator=g).numpy()
        rows = self.tokens[starts[:, None] + np.arange(context_length + 1)]  # (B, T+1), only these tokens read
        tokens = torch.from_numpy(rows.astype(np.int64))
        return tokens % self.vocab_size if self.kind == "bytes" and self.vocab_size < BYTE_VOCAB else tokens

    def local_batch(
        self, step: int, batch_size: int, context_length: int, rank: int = 0, world_size: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of the global batch as (inputs, next-token targets), each (B/W, T)."""
        if batch_size % world_size:
            raise ValueError(f"global batch {batch_size} does not split over {world_size} ranks")
        per = batch_size // world_size
        rows = self.global_batch(step, batch_size, context_length)[rank * per:(rank + 1) * per]
        return rows[:, :-1], rows[:, 1:]

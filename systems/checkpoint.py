"""Training checkpoints that a crash cannot break, a flipped bit cannot slip through, and a stranger cannot
use to run code.

* Written atomically (:func:`systems.files.replace_atomically`): to a new temporary file of its own in the same
  folder, created without following links, flushed to disk, then renamed over the real name, so a crash mid-write
  leaves the previous checkpoint (or none), never a truncated one; a full disk is a :class:`~systems.files.DiskFull`
  naming the folder.
* Verified on load: a SHA-256 of the contents (every tensor's bytes, dtype and shape, and the plain data,
  walked in a fixed order) is recorded at save and recomputed at load.
* Loaded with ``torch.load(weights_only=True)``: tensors and plain data only. A file that carries pickled
  code (a callable to run at load time) is refused instead of executed.

Any failure to read a checkpoint is one :class:`CheckpointError` naming the file.

    save("ckpt/step_000100.pt", {"model": model.state_dict(), "step": 100})
    state = load("ckpt/step_000100.pt")
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any

import torch

from systems.files import replace_atomically

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, unsafe, or of another run."""


def content_digest(value: Any) -> str:
    """SHA-256 of a tree of dicts, lists, tensors and plain values, independent of how it was serialised."""
    h = hashlib.sha256()

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous().reshape(-1)  # (0-d tensors cannot be viewed as bytes)
            h.update(f"T{v.dtype}{tuple(v.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(v, dict):
            h.update(f"D{len(v)}".encode())
            for k in sorted(v, key=repr):
                h.update(repr(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"L{len(v)}".encode())
            for x in v:
                walk(x)
        else:
            h.update(f"V{v!r}".encode())

    walk(value)
    return h.hexdigest()


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (tensors and plain data) to ``path`` atomically, with its content digest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replace_atomically(path, "checkpoint") as f:
        torch.save({"format": FORMAT, "sha256": content_digest(state), "state": state}, f)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """The state saved at ``path``, verified; :class:`CheckpointError` naming the file if it cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} {'is not a file' if path.exists() else 'does not exist'}")
    try:
        wrapped = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"checkpoint {path} holds objects other than tensors and plain data; refusing to "
                              f"load it ({str(exc).splitlines()[0][:200]})") from None
    except Exception as exc:  # a truncated or garbled file fails in many ways inside torch's reader
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else 'corrupt file'})") from None
    if not (isinstance(wrapped, dict) and wrapped.get("format") == FORMAT and "state" in wrapped):
        raise CheckpointError(f"{path} is not a checkpoint written by systems.checkpoint (format {FORMAT})")
    if content_digest(wrapped["state"]) != wrapped.get("sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the checksum recorded "
                              "when it was written")
    return wrapped["state"]

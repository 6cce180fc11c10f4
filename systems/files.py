"""Writing files so that a failure loses nothing the user already had, and folders that one run uses at a time.

The bottom layer: it imports nothing of ours (and no torch), so the pipeline, the checkpoints and the benchmarks
share it.

* :func:`replace_atomically` writes through a new temporary file beside the target, created with ``O_EXCL`` and
  without following links (``tempfile.mkstemp``: a link planted under the temporary name cannot redirect the
  write, and two writers never share a temporary file), flushed to disk, then renamed over the target, so a reader
  sees the old file or the new one, never half of one. On failure the temporary file is removed and the target is
  untouched.
* :class:`DiskFull` is the one error for a write that found no space: it names the folder, the device's free
  bytes and what was being written, instead of the low-level message (``[enforce fail at inline_container.cc]``)
  a library gives.
* :func:`exclusive_folder` holds an advisory lock (``flock``) on a folder for the length of a run: a second run
  pointed at the same folder is refused at once, naming the process that holds it. The kernel drops the lock when
  the holder exits, killed or not, so no stale lock is ever left to clear by hand.

    with replace_atomically("ckpt/step_000100.pt", "checkpoint") as f:
        torch.save(state, f)
    with exclusive_folder("ckpt", "checkpoint"):
        ...  # train
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

# Files are created with the permissions an ordinary open() would give them (mkstemp alone gives 0600).
_UMASK = os.umask(0)
os.umask(_UMASK)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A write that ran out of space (or quota) on its device."""

    def __str__(self) -> str:
        return self.strerror


class FolderInUse(ValueError):
    """A folder that another run holds (:func:`exclusive_folder`)."""


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def disk_full(path: str | Path, what: str, note: str = "") -> DiskFull:
    """The error for a full disk while writing ``what`` to ``path``, naming the folder and its free space."""
    folder = Path(path).parent
    try:
        usage = shutil.disk_usage(folder)
        room = f"{_size(usage.free)} free of {_size(usage.total)}"
    except OSError:
        room = "free space unknown"
    return DiskFull(errno.ENOSPC, f"no space left on the device holding {folder} ({room}) while writing the "
                                  f"{what} {Path(path).name}{note}")


def _out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the device is full; libraries that write through their own buffers
    (torch's zip writer) raise RuntimeError on top of the OSError."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return True
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)


@contextlib.contextmanager
def replace_atomically(path: str | Path, what: str = "file") -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new contents into; on a clean exit it replaces ``path`` in one rename (see
    the module doc). ``what`` names the file in errors ("checkpoint", "results")."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        full = _out_of_space(exc)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if full:
            raise disk_full(path, what, f"; {'the earlier file is' if path.exists() else 'nothing was'} unchanged") \
                from None
        raise
    _fsync_folder(path.parent)


def write_text_atomically(path: str | Path, text: str, what: str = "file") -> Path:
    """``path`` replaced by ``text`` (UTF-8) through :func:`replace_atomically`."""
    with replace_atomically(path, what) as f:
        f.write(text.encode())
    return Path(path)


def append_line(path: str | Path, line: str, what: str = "log") -> None:
    """Append ``line`` and a newline to ``path``; a full disk is a :class:`DiskFull` naming the file."""
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise disk_full(path, what) from None
        raise


@contextlib.contextmanager
def exclusive_folder(folder: str | Path, what: str) -> Iterator[Path]:
    """Hold ``folder`` (created if needed) for one run; :class:`FolderInUse` at once if another process holds it."""
    folder = Path(folder)
    lock = folder / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FolderInUse(f"{lock} is a symbolic link; refusing to follow it (remove it)") from None
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise FolderInUse(f"the {what} folder {folder} is in use by another run (process {holder}); give each "
                              "run its own folder, or wait for that run to end") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield folder
    finally:
        os.close(fd)  # closing drops the lock

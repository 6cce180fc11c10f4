"""Where a chapter's run executes before it reaches the book, and how a finished run takes the place of the old one.

A run never writes into the book while it runs: it executes in a folder of its own (:func:`staged`), laid out as
its target is, so the links a chapter writes to its data are the same there, and only a run that finished replaces
the chapter and its data (:func:`publish`). A run that fails or times out leaves what the book had untouched, and
its partial notebook in the staging folder to read. Used by :mod:`systems.pipeline`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class Target:
    """Where a run writes: the executed notebook, and the folder of its raw data (None: it keeps none)."""

    notebook: Path
    data_dir: Path | None

    @property
    def data_param(self) -> str | None:
        """``data_dir`` as the chapter sees it: relative to the folder it runs in."""
        if self.data_dir is None:
            return None
        return Path(os.path.relpath(self.data_dir, self.notebook.parent)).as_posix()


def staged(root: Path, out: Target, depends_on: Iterable[str] = (), resume: bool = False) -> Target:
    """Where a run bound for ``out`` executes: under ``root`` (emptied first), with the notebook and its data dir
    placed relative to each other as in ``out`` (so ``data_param`` and every link to the data are the same), and the
    data of the chapters it reads (``depends_on``) linked in. ``resume`` keeps the data dir a stopped run left
    (:mod:`systems.resumable`)."""
    common = Path(os.path.commonpath([out.notebook.parent, out.data_dir])) if out.data_dir else out.notebook.parent
    stage = Target(root / out.notebook.relative_to(common),
                   root / out.data_dir.relative_to(common) if out.data_dir else None)
    kept = root.with_name(f".{root.name}.kept")
    shutil.rmtree(kept, ignore_errors=True)
    if resume and stage.data_dir is not None and stage.data_dir.is_dir():
        os.replace(stage.data_dir, kept)
    shutil.rmtree(root, ignore_errors=True)
    if kept.is_dir():
        stage.data_dir.parent.mkdir(parents=True)
        os.replace(kept, stage.data_dir)
    stage.notebook.parent.mkdir(parents=True, exist_ok=True)
    if stage.data_dir is not None:
        stage.data_dir.parent.mkdir(parents=True, exist_ok=True)
        for dep in depends_on:
            (stage.data_dir.parent / dep).symlink_to((out.data_dir.parent / dep).resolve(), target_is_directory=True)
    return stage


def publish(stage: Target, out: Target) -> None:
    """Move a finished run into place: its data dir replaces the old one whole (a file the run did not write is not
    left behind beside its results), then the notebook replaces the old one in one rename."""
    if stage.data_dir is not None and stage.data_dir.is_dir():
        old = out.data_dir.with_name(f".{out.data_dir.name}.replaced")
        shutil.rmtree(old, ignore_errors=True)
        if out.data_dir.exists():
            os.replace(out.data_dir, old)
        out.data_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(stage.data_dir, out.data_dir)
        shutil.rmtree(old, ignore_errors=True)
    shutil.move(stage.notebook, out.notebook)

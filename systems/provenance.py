"""Where a result came from: the repository, the profile a chapter runs in, and the stamp of a run.

The bottom layer, with :mod:`systems.device`: it imports nothing of ours, and torch only inside the
functions that describe the machine, so the book's light build (``make book``, no torch) can read stamps.

    from systems import provenance
    profile = provenance.resolve_profile("auto")   # "full" on a GPU, "smoke" elsewhere
    stamp = provenance.stamp(profile)              # machine, software, commit, date
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ("smoke", "full")


def resolve_profile(profile: str = "auto") -> str:
    """``smoke`` (tiny, CPU, seconds) or ``full`` (the handout's sizes, GPU); ``auto`` picks by hardware."""
    if profile == "auto":
        import torch

        return "full" if torch.cuda.is_available() else "smoke"
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {PROFILES + ('auto',)}")
    return profile


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def file_at(commit: str, path: str) -> str | None:
    """The text of ``path`` (from the repository's root) at ``commit``; None where there is no such file or commit."""
    try:
        out = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def git_commit() -> str:
    """The commit the code came from; ``SYSTEMS_GIT_COMMIT`` names it where the tree is a copy (no .git, or
    a .git whose HEAD is not what was copied)."""
    named = os.environ.get("SYSTEMS_GIT_COMMIT")
    return short_commit(named) if named else _git("rev-parse", "--short=12", "HEAD") or "unknown"


def short_commit(commit: str) -> str:
    """A full hexadecimal commit hash cut to the 12 digits the stamps and pages use; anything else as it is."""
    return commit[:12] if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit.lower()) else commit


def commit_exists(commit: str) -> bool | None:
    """Whether ``commit`` is in this repository's history (None: no repository to ask)."""
    if _git("rev-parse", "--git-dir") is None:
        return None
    return _git("cat-file", "-e", f"{commit}^{{commit}}") is not None


def commits_touching(since: str, paths: list[str]) -> list[str]:
    """``git log --oneline since..HEAD -- paths``, newest first; empty where git cannot answer."""
    out = _git("log", "--oneline", "--no-decorate", f"{since}..HEAD", "--", *paths)
    return out.splitlines() if out else []


def stamp(profile: str | None = None) -> dict[str, Any]:
    """Machine, software and code that produced a result: stamped on every chapter and JSON file."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    n_gpus = torch.cuda.device_count()
    return {
        "profile": profile,
        "gpu": torch.cuda.get_device_name(0) if n_gpus else "none (CPU)",
        "gpu_count": n_gpus,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }

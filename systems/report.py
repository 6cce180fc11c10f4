"""What every chapter needs around its computation: the profile, the provenance stamp, glued numbers.

A chapter starts with::

    from systems import report
    profile = report.resolve_profile(profile)   # "auto" -> "full" on a GPU, "smoke" elsewhere
    report.show_provenance(profile)

and puts numbers into its prose with ``report.glue("name", value)`` and ``{glue:text}`\\`name\\``` in
markdown, so that the text and the tables come from the same run.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

PROFILES = ("smoke", "full")
ROOT = Path(__file__).resolve().parent.parent


def resolve_profile(profile: str = "auto") -> str:
    """``smoke`` (tiny, CPU, seconds) or ``full`` (the handout's sizes, GPU); ``auto`` picks by hardware."""
    if profile == "auto":
        return "full" if torch.cuda.is_available() else "smoke"
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {PROFILES + ('auto',)}")
    return profile


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def git_commit() -> str:
    """The commit the code came from; ``SYSTEMS_GIT_COMMIT`` names it where the tree has no .git."""
    if os.environ.get("SYSTEMS_GIT_COMMIT"):
        return os.environ["SYSTEMS_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(profile: str | None = None) -> dict[str, Any]:
    """Machine, software and code that produced a result: stamped on every chapter and JSON file."""
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
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def show_provenance(profile: str) -> dict[str, Any]:
    """Display the stamp as a table in the notebook and store it in the notebook's metadata output."""
    from IPython.display import Markdown, display

    stamp = provenance(profile)
    rows = "\n".join(f"| {k} | {v} |" for k, v in stamp.items())
    display(
        Markdown(f"| run | |\n|---|---|\n{rows}"),
        metadata={"systems_provenance": stamp},
    )
    return stamp


def glue(name: str, value: Any, display: bool = False) -> None:
    """Store ``value`` for ``{glue:}`` roles in the book (the myst-nb glue format, without needing myst-nb).

    Same output as ``myst_nb.glue``: a display-data bundle tagged with ``scrapbook`` metadata, so the GPU
    machines can run chapters with only IPython installed.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    bundle, metadata = format_display_data(value)
    prefix = "" if display else "application/papermill.record/"
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def fmt(x: float, digits: int = 3) -> str:
    """A number for prose: significant digits, no trailing noise."""
    return f"{x:.{digits}g}"


def save_table(df, data_dir: str | Path | None, name: str) -> Path | None:
    """Write a result table as ``data_dir/name.csv`` (committed beside the executed chapter); no-op without a dir."""
    if data_dir is None:
        return None
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    df.to_csv(path / f"{name}.csv", index=False)
    return path / f"{name}.csv"


def markdown_table(df, floatfmt: str = ".2f", index: bool = False) -> str:
    """A DataFrame as a Markdown (pipe) table."""
    from tabulate import tabulate

    # tabulate formats column by column, so integer columns stay integers beside floats; a column that
    # mixes numbers with words ("OOM", "unsupported") is formatted cell by cell
    mixed = df.select_dtypes(include="object").columns
    df = df.assign(**{c: df[c].map(lambda x: format(x, floatfmt) if isinstance(x, float) else x) for c in mixed})
    # (tabulate reads a DataFrame through .values, which turns an all-numeric frame into one float array:
    # as objects, every cell keeps its own type)
    return tabulate(df.astype(object), headers="keys", tablefmt="pipe", floatfmt=floatfmt, showindex=index)


# Both display at once rather than return a displayable: a returned object shows only as the last
# expression of a cell, so inside an `if` or before more code it would vanish from the book unnoticed.
def table(df, floatfmt: str = ".2f", index: bool = False) -> None:
    """Show a DataFrame as a Markdown table (renders the same in Jupyter and in the book)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(df, floatfmt, index)))


def md(text: str) -> None:
    """Show prose whose wording depends on the numbers (an f-string) as Markdown."""
    from IPython.display import Markdown, display

    display(Markdown(text))

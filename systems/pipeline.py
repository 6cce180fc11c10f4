"""The literate pipeline: jupytext sources -> papermill execution -> the notebooks the book renders.

    python -m systems.pipeline list                          # the chapters and where they stand
    python -m systems.pipeline run [NAME ...] --profile full # execute on this machine (GPU: into the book)
    python -m systems.pipeline refs [NAME ...]               # smoke runs kept as nbval references
    python -m systems.pipeline status                        # write book/status.md from the stamps

A ``full`` run writes ``book/executed/NAME.ipynb`` and its raw results to ``book/data/NAME/``; it needs a
GPU, so the book only ever holds GPU results. A ``smoke`` run writes under ``_build/smoke/`` and cannot
reach the book. Every executed notebook carries the provenance stamp of the machine that ran it in its
metadata (``metadata.systems``), which the status page lists.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from systems import report

ROOT = report.ROOT
NOTEBOOKS = ROOT / "notebooks"
BOOK = ROOT / "book"
EXECUTED = BOOK / "executed"
BOOK_DATA = BOOK / "data"
SMOKE = ROOT / "_build" / "smoke"
NBVAL_REFS = ROOT / "tests" / "nbval"


def chapters() -> list[str]:
    """Chapter names, in book order (the numeric prefix orders them)."""
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def resolve_names(names: list[str] | None) -> list[str]:
    known = chapters()
    if not names:
        return known
    out = []
    for name in names:
        matches = [c for c in known if c == name or c.startswith(name + "_") or c.split("_", 1)[0] == name]
        if len(matches) != 1:
            raise SystemExit(f"no single chapter matches {name!r}; chapters: {', '.join(known)}")
        out.append(matches[0])
    return out


@dataclass(frozen=True)
class Target:
    notebook: Path
    data_dir: Path | None


def target(name: str, profile: str, into: str = "default") -> Target:
    """Where a run of ``name`` in ``profile`` writes. Only a full run on a GPU may write into the book."""
    if into == "refs":
        return Target(NBVAL_REFS / f"{name}.ipynb", None)
    if profile == "full":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("the full profile writes the book's chapters and needs a GPU; use --profile smoke")
        return Target(EXECUTED / f"{name}.ipynb", BOOK_DATA / name)
    return Target(SMOKE / f"{name}.ipynb", SMOKE / "data" / name)


def execute(name: str, profile: str, into: str = "default", timeout_s: int | None = None) -> Path:
    """Convert ``notebooks/NAME.py`` with jupytext, execute it with papermill, stamp it; return the path."""
    import jupytext
    import nbformat
    import papermill

    profile = report.resolve_profile(profile)
    out = target(name, profile, into)
    out.notebook.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = out.notebook.with_suffix(".source.ipynb")
    nbformat.write(nb, source)
    params = {"profile": profile, "data_dir": str(out.data_dir) if out.data_dir else None}
    try:
        papermill.execute_notebook(
            str(source), str(out.notebook), parameters=params, kernel_name="python3",
            cwd=str(ROOT), execution_timeout=timeout_s, progress_bar=False,
        )
    finally:
        source.unlink(missing_ok=True)
    executed = nbformat.read(out.notebook, as_version=4)
    executed.metadata["systems"] = report.provenance(profile)
    if into == "refs":
        # References are re-executed by nbval on other machines: keep them free of run-specific stamps.
        executed.metadata.pop("systems")
        executed.metadata.pop("papermill", None)
        for cell in executed.cells:
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
    nbformat.write(executed, out.notebook)
    return out.notebook


def matches_source(name: str, notebook) -> bool:
    """Whether an executed notebook (an nbformat node) holds the cells of the chapter's current source,
    parameters aside."""
    import jupytext

    source = [c.source for c in jupytext.read(NOTEBOOKS / f"{name}.py").cells]
    stored = [c.source for c in notebook.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    return stored == source


def stamps() -> list[dict]:
    """The provenance stamp of every executed chapter in the book, in book order."""
    import nbformat

    rows = []
    for name in chapters():
        path = EXECUTED / f"{name}.ipynb"
        if not path.exists():
            rows.append({"chapter": name, "status": "not yet run on a GPU"})
            continue
        nb = nbformat.read(path, as_version=4)
        rows.append({"chapter": name, "status": "executed", "source_changed": not matches_source(name, nb),
                     **nb.metadata.get("systems", {})})
    return rows


def write_status(path: Path = BOOK / "status.md") -> Path:
    """The status page: each chapter with the machine, software, commit and date that produced it."""
    lines = [
        "# Status and provenance",
        "",
        "Every chapter of this book is a notebook executed by `python -m systems.pipeline run NAME "
        "--profile full` on the machine named here; the book itself never executes code. This page is "
        "generated from the stamp each executed notebook carries in its metadata. *Source changed* means "
        "the chapter's source in `notebooks/` has been edited since that run (its prose or code), so the "
        "book shows the run as it was until the chapter is run again.",
        "",
        "| chapter | machine | GPUs | torch | triton | commit | date | source since the run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in stamps():
        if row["status"] != "executed":
            lines.append(f"| {row['chapter']} | {row['status']} | | | | | | |")
            continue
        lines.append(
            f"| {row['chapter']} | {row.get('gpu', '?')} | {row.get('gpu_count', '?')} | {row.get('torch', '?')} "
            f"| {row.get('triton', '?')} | `{row.get('commit', '?')}` | {row.get('date', '?')} "
            f"| {'changed' if row['source_changed'] else 'unchanged'} |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters and whether the book has a GPU run of each")
    run = sub.add_parser("run", help="execute chapters with papermill")
    run.add_argument("names", nargs="*")
    run.add_argument("--profile", default="auto", choices=("auto",) + report.PROFILES)
    run.add_argument("--timeout", type=int, default=None, help="seconds per cell")
    refs = sub.add_parser("refs", help="re-make the smoke references that nbval compares")
    refs.add_argument("names", nargs="*")
    sub.add_parser("status", help="write book/status.md from the executed chapters' stamps")
    args = p.parse_args(argv)

    if args.command == "list":
        for row in stamps():
            where = f"{row.get('gpu')} {row.get('date')}" if row["status"] == "executed" else row["status"]
            print(f"{row['chapter']:32s} {where}")
    elif args.command == "run":
        failed = []
        for name in resolve_names(args.names):
            print(f"[pipeline] {name} ({report.resolve_profile(args.profile)})", flush=True)
            try:
                print(f"[pipeline] wrote {execute(name, args.profile, timeout_s=args.timeout)}", flush=True)
            except Exception as exc:  # one failing chapter must not stop the others
                print(f"[pipeline] {name} FAILED: {exc}", file=sys.stderr, flush=True)
                failed.append(name)
        if report.resolve_profile(args.profile) == "full":
            write_status()
        if failed:
            raise SystemExit(f"failed: {', '.join(failed)}")
    elif args.command == "refs":
        for name in resolve_names(args.names):
            print(f"[pipeline] {name} -> {execute(name, 'smoke', into='refs')}", flush=True)
    elif args.command == "status":
        print(write_status())


if __name__ == "__main__":
    main(sys.argv[1:])

"""The literate pipeline: jupytext sources -> papermill execution -> the notebooks the book renders.

    python -m systems.pipeline list                          # the chapters and where they stand
    python -m systems.pipeline run [NAME ...] --profile full # execute on this machine (into the book)
    python -m systems.pipeline run NAME --resume             # go on from a run that stopped part-way
    python -m systems.pipeline refs [NAME ...]               # smoke runs kept as nbval references
    python -m systems.pipeline status                        # write book/status.md from the stamps

A chapter declares in its jupytext header (``jupyter: systems:``) what it needs to run for the book
(``requires``: ``gpu`` by default, ``2 gpus``, or ``cpu`` for an analysis that runs anywhere) and which
chapters' raw data it reads (``depends_on``); the pipeline runs dependencies first.

A ``full`` run writes ``book/executed/NAME.ipynb`` and its raw results to ``book/data/NAME/``; it refuses
a machine without what the chapter requires, so the book holds GPU results only where a GPU is needed. A
``smoke`` run writes under ``_build/smoke/`` and cannot reach the book. Every run executes in a staging folder
(``_build/staging/NAME/``, :mod:`systems.staging`) and replaces the chapter and its data only when it succeeds: a
chapter that fails or times out leaves what the book had untouched, and its partial notebook in the staging folder
to read (``--resume``: :mod:`systems.resumable`). Chapters run in their own folder and get ``data_dir`` relative
to it, so no machine's paths reach a page. Every executed notebook carries
the provenance stamp of the machine that ran it in its metadata (``metadata.systems``), which the status
page and the line at the top of each chapter show.

This module imports no torch at import time: the book's light build (``make book``) uses it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from systems import executed_notebook, provenance, resumable
from systems.cli import integer
from systems.files import write_text_atomically
from systems.same_code import same_code
from systems.staging import Target, publish, staged

ROOT = provenance.ROOT
NOTEBOOKS = ROOT / "notebooks"
BOOK = ROOT / "book"
EXECUTED = BOOK / "executed"
BOOK_DATA = BOOK / "data"
SMOKE = ROOT / "_build" / "smoke"
STAGING = ROOT / "_build" / "staging"
NBVAL_REFS = ROOT / "tests" / "nbval"
REQUIREMENTS = ("gpu", "2 gpus", "cpu")


def chapters() -> list[str]:
    """Chapter names, in book order (the numeric prefix orders them)."""
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


@dataclass(frozen=True)
class Needs:
    """What a chapter declares in its header: the hardware of a book run, the chapters whose data it reads."""

    requires: str = "gpu"
    depends_on: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return {"gpu": 1, "2 gpus": 2, "cpu": 0}[self.requires]


@cache
def _needs(name: str, mtime: float) -> Needs:
    import jupytext

    meta = jupytext.read(NOTEBOOKS / f"{name}.py").metadata.get("systems", {})
    needs = Needs(meta.get("requires", "gpu"), tuple(meta.get("depends_on", ())))
    if needs.requires not in REQUIREMENTS:
        raise ValueError(f"{name}: requires must be one of {REQUIREMENTS}, got {needs.requires!r}")
    unknown = set(needs.depends_on) - set(chapters())
    if unknown:
        raise ValueError(f"{name}: depends on unknown chapters {sorted(unknown)}")
    return needs


def needs(name: str) -> Needs:
    return _needs(name, (NOTEBOOKS / f"{name}.py").stat().st_mtime)


def resolve_names(names: list[str] | None) -> list[str]:
    """Chapters named by full name, prefix or number, ordered so that every chapter runs after those whose
    data it reads (which must be among the names, or already have their data)."""
    known = chapters()
    if not names:
        picked = known
    else:
        picked = []
        for name in names:
            matches = [c for c in known if c == name or c.startswith(name + "_") or c.split("_", 1)[0] == name]
            if len(matches) != 1:
                raise ValueError(f"no single chapter matches {name!r}; chapters: {', '.join(known)}")
            picked.append(matches[0])
    ordered: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ValueError(f"chapter dependencies form a cycle: {' -> '.join(path + (name,))}")
        for dep in needs(name).depends_on:
            if dep in picked:
                visit(dep, path + (name,))
        if name not in ordered:
            ordered.append(name)

    for name in picked:
        visit(name, ())
    return ordered


def target(name: str, profile: str, into: str = "default") -> Target:
    """Where a run of ``name`` in ``profile`` writes. Only a full run on the hardware the chapter requires
    may write into the book."""
    if into == "refs":
        return Target(NBVAL_REFS / f"{name}.ipynb", None)
    if profile == "full":
        gpus = needs(name).gpus
        if gpus:
            import torch

            if torch.cuda.device_count() < gpus:
                raise SystemExit(f"{name} needs {'a GPU' if gpus == 1 else f'{gpus} GPUs'} for the book (the full "
                                 f"profile), this machine has {torch.cuda.device_count()}: use --profile smoke")
        return Target(EXECUTED / f"{name}.ipynb", BOOK_DATA / name)
    return Target(SMOKE / f"{name}.ipynb", SMOKE / "data" / name)


class ChapterFailed(RuntimeError):
    """A chapter's run that did not finish; what it would have replaced is unchanged."""


def _resolve(name: str, profile: str) -> str:
    """``auto``: ``full`` where this machine has what the chapter needs, else ``smoke``."""
    if profile != "auto":
        return provenance.resolve_profile(profile)
    gpus = needs(name).gpus
    if not gpus:
        return "full"
    import torch  # only here: the book's light build has none

    return "full" if torch.cuda.device_count() >= gpus else "smoke"


def execute(name: str, profile: str, into: str = "default", timeout_s: int | None = None,
            resume: bool = False) -> Path:
    """Convert ``notebooks/NAME.py`` with jupytext, execute it with papermill, stamp it; return the path.
    ``resume``: read back what a stopped run of the chapter measured (:func:`systems.staging.staged`), the stamp says which."""
    import jupytext
    import nbformat
    import papermill

    profile = _resolve(name, profile)
    out = target(name, profile, into)
    out.notebook.parent.mkdir(parents=True, exist_ok=True)
    for dep in needs(name).depends_on:
        if out.data_dir is not None and not (out.data_dir.parent / dep).is_dir():
            raise SystemExit(f"{name} reads the data of {dep}, which has not run in this profile: run {dep} first")
    # the kernel inherits this process's environment: figures must show inline whatever backend it names
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    stage = staged(STAGING / name, out, needs(name).depends_on, resume)
    left = resumable.recorded(stage.data_dir) if stage.data_dir is not None else {}
    source = stage.notebook.with_suffix(".source.ipynb")
    nbformat.write(nb, source)
    try:
        papermill.execute_notebook(
            str(source), str(stage.notebook), parameters={"profile": profile, "data_dir": stage.data_param},
            kernel_name="python3", cwd=str(stage.notebook.parent), execution_timeout=timeout_s, progress_bar=False,
        )
    except Exception as exc:
        last = (str(exc).strip().splitlines() or [""])[-1][:300]
        raise ChapterFailed(f"{name} failed ({type(exc).__name__}: {last}); {out.notebook} and its data are "
                            f"unchanged; the failed run is in {stage.notebook}") from exc
    finally:
        source.unlink(missing_ok=True)
    executed = executed_notebook.scrub(nbformat.read(stage.notebook, as_version=4))
    if into == "refs":
        executed_notebook.unstamp(executed)
    else:
        executed.metadata["systems"] = provenance.stamp(profile)
        reused = resumable.read_back(left, resumable.recorded(stage.data_dir))
        if reused:
            executed.metadata["systems"]["resumed"] = reused
    if stage.data_dir is not None:
        shutil.rmtree(stage.data_dir / resumable.RECORDS, ignore_errors=True)
    nbformat.write(executed, stage.notebook)
    publish(stage, out)
    shutil.rmtree(STAGING / name, ignore_errors=True)
    return out.notebook


def cells(notebook) -> list[tuple[str, str]]:
    """(cell type, source) of every cell of a notebook (an nbformat node, or a chapter's name: its source now) but
    the parameters papermill injected."""
    if isinstance(notebook, str):
        import jupytext

        notebook = jupytext.read(NOTEBOOKS / f"{notebook}.py")
    return [(c.cell_type, c.source) for c in notebook.cells if "injected-parameters" not in c.metadata.get("tags", [])]


def matches_source(name: str, notebook) -> bool:
    """Whether an executed notebook holds the cells of the chapter's current source, parameters aside."""
    return [s for _, s in cells(notebook)] == [s for _, s in cells(name)]


def published_table(commit: str, chapter: str, name: str):
    """The table ``NAME.csv`` of a chapter's data as the run published at ``commit`` wrote it (a DataFrame): the
    data folder holds only the chapter's latest run, so setting one run beside another reads the other from the
    history."""
    import io

    import pandas as pd

    path = (BOOK_DATA / chapter / f"{name}.csv").relative_to(ROOT).as_posix()
    text = provenance.file_at(commit, path)
    if text is None:
        raise FileNotFoundError(f"{path} is not in commit {commit!r} (or there is no repository to ask)")
    return pd.read_csv(io.StringIO(text))


def run_info(name: str) -> dict:
    """What the book says of a chapter's run: the stamp, whether its commit is in this history, whether the
    chapter's source changed since, and the commits that changed it."""
    import nbformat

    path = EXECUTED / f"{name}.ipynb"
    info: dict = {"chapter": name, "requires": needs(name).requires}
    if not path.exists():
        return info | {"status": "not yet run"}
    nb = nbformat.read(path, as_version=4)
    stamp = nb.metadata.get("systems", {})
    commit = stamp.get("commit", "unknown")
    known = provenance.commit_exists(commit)
    # a run from a history that did not land names the commit here whose tree it ran (see its note)
    base = commit if known is not False else stamp.get("same_code_as")
    changed = not matches_source(name, nb)
    # edited only in where the code it calls lives: the run shows what this code computes
    moved = bool(changed and base and same_code(cells(nb), cells(name), base))
    since = provenance.commits_touching(base, [f"notebooks/{name}.py"]) if (changed and base) else []
    return info | {"status": "executed", "stamp": stamp, "commit_known": known, "base_commit": base,
                   "source_changed": changed and not moved, "same_code": moved, "changed_by": since,
                   "note": stamp.get("note")}


def machine(stamp: dict) -> str:
    """"1 × NVIDIA H100 80GB HBM3", or the CPU an analysis ran on."""
    if stamp.get("gpu_count"):
        return f"{stamp['gpu_count']} × {stamp['gpu']}"
    cpus = stamp.get("cpu_count")
    return f"CPU ({stamp.get('cpu', '?')}{f', {cpus} cores' if cpus else ''})"


def _commit_cell(info: dict) -> str:
    """The commit a run names, in backticks only where it is one of this repository's commits."""
    commit = provenance.short_commit(info["stamp"].get("commit", "unknown"))
    if info["commit_known"] is not False:
        return f"`{commit}`"
    if info["base_commit"]:
        return f"`{info['base_commit']}` (the run's own commit, {commit}, is of an earlier history)"
    return f"{commit} (of an earlier history, not in this repository)"


def provenance_line(info: dict) -> str:
    """The one line at the top of a chapter (Markdown): machine, date, commit, and whether the source changed."""
    if info["status"] != "executed":
        return f"Not yet run: this chapter needs {info['requires']}."
    stamp = info["stamp"]
    kind = "Analysis (needs no GPU), computed on" if info["requires"] == "cpu" else "Executed on"
    code = f"commit {_commit_cell(info)}"
    line = (f"{kind} {machine(stamp)} on {stamp.get('date', '?')[:10]} from {code}, "
            f"torch {stamp.get('torch', '?')}, Triton {stamp.get('triton', '?')}. ")
    if info["note"]:
        line += info["note"] + " "
    if stamp.get("resumed"):
        line += resumable.resumed_words(stamp["resumed"]) + " "
    if info.get("same_code"):
        commits = ", ".join(f"`{c.split()[0]}`" for c in info["changed_by"])
        return line + (f"The chapter's source has changed since (in {commits}) only in where the code it calls lives; "
                       "that code is the same, so this page shows what it computes.")
    if not info["source_changed"]:
        return line + "The chapter's source has not changed since."
    if not info["changed_by"]:
        return line + "The chapter's source differs from what ran: this page shows the run as it was."
    commits = ", ".join(f"`{c.split()[0]}`" for c in info["changed_by"])
    return line + f"The chapter's source has changed since (in {commits}): this page shows the run as it was."


def write_status(path: Path = BOOK / "status.md") -> Path:
    """The status page: each chapter with the machine, commit and date that produced it."""
    lines = [
        "# Status and provenance",
        "",
        "Every chapter of this book is a notebook executed by `python -m systems.pipeline run NAME "
        "--profile full` on the machine named here; the book itself never executes code. This page is "
        "generated from the stamp each executed notebook carries in its metadata. A chapter whose source in "
        "`notebooks/` was edited after its run shows that run as it was until it runs again. Chapters marked "
        "*analysis* need no GPU and ran on the CPU named.",
        "",
        "| chapter | needs | machine | commit | date | source since |",
        "|---|---|---|---|---|---|",
    ]
    for name in chapters():
        info = run_info(name)
        needs_ = "analysis" if info["requires"] == "cpu" else info["requires"]
        if info["status"] != "executed":
            lines.append(f"| {name} | {needs_} | not yet run | | | |")
            continue
        stamp = info["stamp"]
        lines.append(f"| {name} | {needs_} | {machine(stamp)} | {_commit_cell(info)} | {stamp.get('date', '?')[:10]} "
                     f"| {'changed' if info['source_changed'] else 'moved, same code' if info['same_code'] else 'unchanged'} |")
    return write_text_atomically(path, "\n".join(lines) + "\n", "status page")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters and whether the book has a run of each")
    run = sub.add_parser("run", help="execute chapters with papermill")
    run.add_argument("names", nargs="*")
    run.add_argument("--profile", default="auto", choices=("auto",) + provenance.PROFILES)
    run.add_argument("--timeout", type=integer(1), default=None, help="seconds per cell (default: no limit)")
    run.add_argument("--resume", action="store_true",
                     help="read back what a stopped run of the chapter measured, where the calls are the same")
    refs = sub.add_parser("refs", help="re-make the smoke references that nbval compares")
    refs.add_argument("names", nargs="*")
    sub.add_parser("status", help="write book/status.md from the executed chapters' stamps")
    args = p.parse_args(argv)
    try:
        names = resolve_names(args.names) if args.command in ("run", "refs") else []
    except ValueError as exc:  # a name that is no chapter: a usage error, before anything runs
        p.error(str(exc))

    if args.command == "list":
        for name in chapters():
            info = run_info(name)
            where = (f"{machine(info['stamp'])} {info['stamp'].get('date')}" if info["status"] == "executed"
                     else info["status"])
            print(f"{name:32s} {info['requires']:7s} {where}")
    elif args.command == "run":
        failed, wrote_book = [], False
        for name in names:
            profile = _resolve(name, args.profile)
            print(f"[pipeline] {name} ({profile})", flush=True)
            try:
                print(f"[pipeline] wrote {execute(name, profile, timeout_s=args.timeout, resume=args.resume)}", flush=True)
                wrote_book |= profile == "full"
            except Exception as exc:  # one failing chapter must not stop the others
                print(f"[pipeline] {name} FAILED: {exc}", file=sys.stderr, flush=True)
                failed.append(name)
        if wrote_book:
            write_status()
        if failed:
            raise SystemExit(f"failed: {', '.join(failed)}")
    elif args.command == "refs":
        for name in names:
            print(f"[pipeline] {name} -> {execute(name, 'smoke', into='refs')}", flush=True)
    elif args.command == "status":
        print(write_status())


if __name__ == "__main__":
    main(sys.argv[1:])

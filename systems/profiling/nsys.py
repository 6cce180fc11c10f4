"""Nsight Systems from Python: run a command under ``nsys profile``, then ask the report where GPU time went
(and, captured with ``--cuda-memory-usage=true``, when memory was allocated and freed).

Handout §1.1.4. The capture is kept small (CUDA and NVTX only, no CPU sampling, no context switches). The
report is exported to SQLite and read with :mod:`sqlite3`: every kernel, and the CPU-side time of the API
call that launched it, joined by correlation id. A kernel belongs to an NVTX range when it was *launched*
inside it; its GPU start may come later, since launches are asynchronous. That is the attribution nsys's
own NVTX projection uses, and it holds for ranges that never synchronise (the attention sub-steps).

    rep = profile(["python", "-m", "systems.profiling.target", "--size", "small"], "out/small")
    trace = load_trace(export_sqlite(rep))
    k = label_kernels(trace.kernels, trace.ranges)      # + columns config, stage, phase, block, op
    kernel_summary(k[(k.stage == "measured") & (k.phase == "forward")])

``nsys`` is found through ``$NSYS`` or the PATH (``find_nsys``). ``stats`` runs ``nsys stats`` reports
into DataFrames, for comparison with the tool's own tables.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from systems.kernel_names import MATMUL_KERNELS, OPTIMIZER_KERNELS

# NVTX push/pop and start/end ranges (torch.cuda.nvtx.range uses push/pop) in NVTX_EVENTS.eventType
NVTX_RANGE_TYPES = (59, 60)
CAPTURE_ARGS = ["-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none"]

# Kernel name patterns, lower case, tried in order: the first match names the category.
CATEGORIES: list[tuple[str, str]] = [
    ("optimizer", OPTIMIZER_KERNELS),
    ("matmul", MATMUL_KERNELS),
    ("softmax", r"softmax"),
    ("reduction", r"reduce|norm|nll_loss|cross_entropy|sum_kernel|mean"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|index|copy|fill|cat|where|masked|triu|tril"),
]

# The NVTX ranges this project emits, by level (outermost first); see systems/nvtx.py and model.py.
LEVELS: dict[str, Callable[[str], bool]] = {
    "config": lambda name: name.startswith("cfg:"),
    "stage": lambda name: name in ("warmup", "measured"),
    "phase": lambda name: name in ("forward", "backward", "optimizer"),
    "block": lambda name: name in ("attention", "feed_forward"),
    "op": lambda name: name in ("attention_scores", "attention_softmax", "attention_output"),
}


class NsysNotFound(RuntimeError):
    pass


def find_nsys() -> str:
    """Path of the nsys CLI: ``$NSYS`` if set, else ``nsys`` on the PATH."""
    candidate = os.environ.get("NSYS") or shutil.which("nsys")
    if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return candidate
    raise NsysNotFound(
        "Nsight Systems CLI not found: put `nsys` on the PATH or set NSYS=/path/to/nsys "
        "(see shared/gpu/README.md for the H100 machines)"
    )


def find_qdstrm_importer(nsys: str) -> str | None:
    """QdstrmImporter, which turns a raw ``.qdstrm`` capture into a ``.nsys-rep``: ``$QDSTRM_IMPORTER`` or
    next to nsys (``host-linux-x64/`` in a normal install, ``linux-desktop-*/`` in some bundles)."""
    if os.environ.get("QDSTRM_IMPORTER"):
        return os.environ["QDSTRM_IMPORTER"]
    root = Path(nsys).resolve().parent.parent
    found = sorted(root.glob("*/QdstrmImporter"))
    return str(found[0]) if found else None


def profile(command: list[str], output: str | Path, extra_args: Iterable[str] = (), env: dict | None = None,
            timeout: float | None = None) -> tuple[Path, subprocess.CompletedProcess]:
    """Run ``command`` under ``nsys profile``; return the ``.nsys-rep`` path and the finished process.

    The profiled command's exit status is in the process's ``returncode``; nsys passes it through.
    """
    nsys = find_nsys()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    argv = [nsys, "profile", *CAPTURE_ARGS, *extra_args, "--force-overwrite=true", "-o", str(output), *command]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    rep = output.with_suffix(".nsys-rep")
    qdstrm = output.with_suffix(".qdstrm")
    if not rep.exists() and qdstrm.exists():
        # Some installs lack the importer's libraries at capture time and leave only the raw stream.
        importer = find_qdstrm_importer(nsys)
        if importer is None:
            raise NsysNotFound(f"nsys left only {qdstrm} and no QdstrmImporter was found; set QDSTRM_IMPORTER")
        subprocess.run([importer, "-i", str(qdstrm)], check=True, capture_output=True, text=True, timeout=timeout)
    if not rep.exists():
        raise RuntimeError(f"nsys wrote no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return rep, proc


def export_sqlite(rep: str | Path) -> Path:
    """``nsys export --type sqlite``; the file sits next to the report, where ``nsys stats`` reuses it."""
    rep = Path(rep)
    out = rep.with_suffix(".sqlite")
    subprocess.run([find_nsys(), "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep)],
                   check=True, capture_output=True, text=True)
    return out


def stats(rep: str | Path, reports: Iterable[str] = ("cuda_gpu_kern_sum", "nvtx_sum")) -> dict[str, pd.DataFrame]:
    """``nsys stats --format csv`` for each report, as DataFrames keyed by report name."""
    rep, reports = Path(rep), list(reports)
    prefix = rep.with_suffix("")
    subprocess.run([find_nsys(), "stats", "--force-export=false", "--report", ",".join(reports), "--format", "csv",
                    "--force-overwrite=true", "-o", str(prefix), str(rep)], check=True, capture_output=True, text=True)
    return {r: read_stats_csv(f"{prefix}_{r}.csv") for r in reports}


def read_stats_csv(path: str | Path) -> pd.DataFrame:
    """An ``nsys stats`` CSV; columns renamed to snake case without units, e.g. ``Time (%)`` -> ``time_pct``."""
    df = pd.read_csv(path)

    def snake(col: str) -> str:
        col = col.replace("(%)", "pct").replace("(ns)", "ns")
        return re.sub(r"[^0-9a-zA-Z]+", "_", col).strip("_").lower()

    return df.rename(columns=snake)


@dataclass
class Trace:
    """What a report holds for us: one row per kernel, one row per NVTX range (times in ns)."""

    kernels: pd.DataFrame  # name, short_name, start, end, duration_ns, launch (CPU time of the launching call)
    ranges: pd.DataFrame  # name, start, end


@contextlib.contextmanager
def _export(sqlite_path: str | Path) -> Iterator[tuple[sqlite3.Connection, set[str]]]:
    """An nsys SQLite export opened read-only, with the names of its tables (a report holds only the tables of
    what it captured)."""
    with contextlib.closing(sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)) as db:
        yield db, {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def load_trace(sqlite_path: str | Path) -> Trace:
    with _export(sqlite_path) as (db, tables):
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            kernels = pd.read_sql_query(
                """
                SELECT d.value AS name, s.value AS short_name, k.start, k.end, k.end - k.start AS duration_ns,
                       r.start AS launch
                FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
                JOIN StringIds AS d ON d.id = k.demangledName
                JOIN StringIds AS s ON s.id = k.shortName
                LEFT JOIN (SELECT correlationId, MIN(start) AS start FROM CUPTI_ACTIVITY_KIND_RUNTIME
                           GROUP BY correlationId) AS r ON r.correlationId = k.correlationId
                ORDER BY k.start
                """, db)
        else:
            kernels = pd.DataFrame(columns=["name", "short_name", "start", "end", "duration_ns", "launch"])
        if "NVTX_EVENTS" in tables:
            ranges = pd.read_sql_query(
                f"""
                SELECT COALESCE(n.text, t.value) AS name, n.start, n.end
                FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS t ON t.id = n.textId
                WHERE n.eventType IN {NVTX_RANGE_TYPES} AND n.end > n.start
                ORDER BY n.start
                """, db)
        else:
            ranges = pd.DataFrame(columns=["name", "start", "end"])
    # A kernel with no recorded launch (rare: launched by a thread nsys did not trace) is placed by its start.
    kernels["launch"] = kernels["launch"].fillna(kernels["start"]).astype("int64")
    return Trace(kernels=kernels, ranges=ranges)


def load_memory_events(sqlite_path: str | Path) -> pd.DataFrame:
    """The CUDA memory events of a report captured with ``--cuda-memory-usage=true``, in time order: start (ns),
    address, bytes, and ``free`` (False for an allocation)."""
    with _export(sqlite_path) as (db, tables):
        if "CUDA_GPU_MEMORY_USAGE_EVENTS" not in tables:
            raise ValueError(f"{sqlite_path} holds no CUDA memory events: capture with --cuda-memory-usage=true")
        # memoryOperationType: 0 allocation, 1 deallocation (ENUM_CUDA_DEV_MEM_EVENT_OPER)
        events = pd.read_sql_query(
            """SELECT start, address, bytes, memoryOperationType = 1 AS free
               FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY start""", db)
    events["free"] = events["free"].astype(bool)
    return events


def enclosing(times: np.ndarray, ranges: pd.DataFrame, match: Callable[[str], bool], innermost: bool = True
              ) -> np.ndarray:
    """For each time, the name of the innermost (or outermost) range that ``match`` accepts and that contains it,
    or None."""
    order = np.argsort(times, kind="stable")
    sorted_times = times[order]
    out = np.full(len(times), None, dtype=object)
    chosen = ranges[ranges.name.map(match)]
    # The ranges that should win are written last: innermost, the narrowest; outermost, the widest.
    chosen = chosen.assign(width=chosen.end - chosen.start).sort_values("width", ascending=not innermost)
    for name, start, end in zip(chosen.name, chosen.start, chosen.end):
        lo, hi = np.searchsorted(sorted_times, [start, end], side="left")
        out[order[lo:hi]] = name
    return out


def label_kernels(kernels: pd.DataFrame, ranges: pd.DataFrame, levels: dict[str, Callable[[str], bool]] = LEVELS
                  ) -> pd.DataFrame:
    """``kernels`` plus one column per level: the enclosing range of that level at launch time, and the
    kernel's category (matmul, softmax, ...)."""
    out = kernels.copy()
    launch = out["launch"].to_numpy()
    for level, match in levels.items():
        out[level] = enclosing(launch, ranges, match)
    out["category"] = out["name"].map(classify)
    return out


def label_ranges(ranges: pd.DataFrame, levels: dict[str, Callable[[str], bool]] = LEVELS) -> pd.DataFrame:
    """``ranges`` plus, per level, the range of that level that encloses each range's start (itself included)."""
    out = ranges.copy()
    start = out["start"].to_numpy()
    for level, match in levels.items():
        out[level] = enclosing(start, ranges, match)
    return out


def classify(kernel_name: str) -> str:
    """matmul, softmax, reduction, elementwise, optimizer or other, from the kernel's name."""
    name = kernel_name.lower()
    for category, pattern in CATEGORIES:
        if re.search(pattern, name):
            return category
    return "other"


def display_name(kernel_name: str, width: int = 90) -> str:
    """A kernel name short enough for a table: no ``void``, no namespaces, cut at ``width`` characters."""
    name = re.sub(r"^void |\(anonymous namespace\)::|at::native::|at::|c10::|std::", "", kernel_name)
    return name if len(name) <= width else name[: width - 1] + "…"


def kernel_summary(kernels: pd.DataFrame, by: str | list[str] = "name", per: int = 1) -> pd.DataFrame:
    """Total GPU time per kernel (or per ``by``), as ``nsys stats cuda_gpu_kern_sum`` shows it.

    ``per`` divides totals and counts, e.g. by the number of measured steps to get per-pass figures.
    """
    by = [by] if isinstance(by, str) else list(by)
    if "category" not in kernels:
        kernels = kernels.assign(category=kernels["name"].map(classify))
    g = kernels.groupby(by, dropna=False)
    out = pd.DataFrame({"total_ms": g.duration_ns.sum() / 1e6 / per, "count": g.size() / per,
                        "mean_us": g.duration_ns.mean() / 1e3})
    if "category" not in by:
        out["category"] = g.category.first()
    total = out["total_ms"].sum()
    out["share"] = out["total_ms"] / total if total else np.nan
    return out.sort_values("total_ms", ascending=False).reset_index()


def range_times(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Each NVTX range with its CPU duration and its GPU projection: from the first start to the last end of
    the kernels launched inside it (``gpu_ms``), and their summed busy time (``kernel_ms``)."""
    by_launch = kernels.sort_values("launch", kind="stable")
    launch = by_launch.launch.to_numpy()
    starts, ends, busy = by_launch.start.to_numpy(), by_launch.end.to_numpy(), by_launch.duration_ns.to_numpy()
    lo = np.searchsorted(launch, ranges.start.to_numpy(), side="left")
    hi = np.searchsorted(launch, ranges.end.to_numpy(), side="left")
    gpu, kern, n = [], [], []
    for a, b in zip(lo, hi):
        gpu.append((ends[a:b].max() - starts[a:b].min()) / 1e6 if b > a else np.nan)
        kern.append(busy[a:b].sum() / 1e6)
        n.append(b - a)
    out = ranges.copy()
    out["cpu_ms"] = (out.end - out.start) / 1e6
    out["gpu_ms"], out["kernel_ms"], out["kernels"] = gpu, kern, n
    return out


def write_sqlite(path: str | Path, kernels: list[dict], ranges: list[dict], launch_offset_ns: int = 0,
                 memory: list[dict] = ()) -> Path:
    """A minimal report database with the tables :func:`load_trace` and :func:`load_memory_events` read, from
    plain rows.

    ``kernels``: dicts with name, start, end (ns) and optionally launch (ns; default start -
    ``launch_offset_ns``); ``ranges``: dicts with name, start, end; ``memory``: dicts with start, address, bytes
    and ``free`` (bool). For tests and for CPU-only smoke runs of the chapters, which have no nsys to produce a
    real report.
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        return strings.setdefault(s, len(strings) + 1)

    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(
            """
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, correlationId INT, demangledName INT,
                                                     shortName INT);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, correlationId INT, nameId INT);
            CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, textId INT);
            CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INT, globalPid INT, deviceId INT, contextId INT,
                                                       address INT, bytes INT, memKind INT, memoryOperationType INT);
            """)
        for i, k in enumerate(kernels):
            launch = k.get("launch", k["start"] - launch_offset_ns)
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?)",
                       (k["start"], k["end"], i, sid(k["name"]), sid(k["name"].split("<")[0].split("(")[0])))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)",
                       (launch, launch + 1, i, sid("cudaLaunchKernel")))
        # Half the names through the string table, half inline: nsys uses both (textId and text).
        for i, r in enumerate(ranges):
            text, text_id = (r["name"], None) if i % 2 else (None, sid(r["name"]))
            db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?)", (r["start"], r["end"], text, text_id))
        db.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, 1, 0, 1, ?, ?, 2, ?)",
                       [(m["start"], m["address"], m["bytes"], int(m["free"])) for m in memory])
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
        db.commit()
    return path

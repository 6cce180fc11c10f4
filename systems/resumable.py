"""A chapter's measurements, kept as they finish so that a run stopped part-way resumes where it stopped.

A chapter that measures for half an hour and dies in its last cell (a timeout, a lost machine) should not have to
measure the first twenty-nine minutes again. Each measuring cell calls its function through :func:`measured`,
which writes the result into the chapter's data dir the moment it exists, with a record of the call: the
function, its arguments, a fingerprint of the package's source (less the chapters' words, which measure
nothing), the GPU and the software versions. A run of the pipeline with ``--resume`` keeps the data dir of the run
that stopped, and a call whose record matches in every one of these is read back instead of measured; anything
else (other arguments, an edited package, another GPU or torch) measures afresh. The executed chapter's stamp
lists the parts read back and when they were measured.

    runs = measured(data_dir, "flash_sweep", fs.sweep, seq_lens, head_dims)   # a DataFrame, saved as CSV
    busy, own = measured(data_dir, ("kernel_time", "own_kernels"), fs.step_kernel_time, "small", 1024)
    steps = measured_sweep(data_dir, "model_step", lb.step_at, [(2, ours), (2, plain), (4, ours)])

A sweep that takes longer than a run may last is measured through :func:`measured_sweep`, which records it point
by point: each run that stops part-way leaves the points it finished, and the next one starts at the first it did
not.

Results are tables (a DataFrame, or a tuple of them: one name each) or plain JSON values (no name gets a CSV).
Records are JSON, never pickles: reading one back runs no code.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
from functools import cache
from pathlib import Path
from typing import Any, Callable, Iterable

from systems import provenance
from systems.files import write_text_atomically

RECORDS = ".measured"
# What the chapters say of their measurements; it measures nothing, and no module below it imports it
# (tests/test_layout.py), so its words can be corrected without measuring again: the fingerprint leaves it out.
WORDS = "chapters"


@cache
def _package_fingerprint() -> str:
    digest = hashlib.sha256()
    package = provenance.ROOT / "systems"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] != WORDS:
            digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def call_key(measure: Callable, args: tuple, kwargs: dict) -> dict[str, str]:
    """What must match for a recorded result to stand for a new call: the call, the code, the machine."""
    function = getattr(measure, "__qualname__", type(measure).__qualname__)
    if measure.__module__.startswith(f"systems.{WORDS}"):
        raise ValueError(f"{measure.__module__}.{function} is in the chapters' words, which the records' fingerprint "
                         "leaves out: measure with a function of the layers below them")
    machine = provenance.stamp()
    call = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in sorted(kwargs.items()))])
    try:  # a function defined in the chapter itself is outside the package's fingerprint
        source = hashlib.sha256(inspect.getsource(measure).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        source = "unknown"
    return {"call": f"{measure.__module__}.{function}({call})", "source": source, "package": _package_fingerprint(),
            **{k: str(machine[k]) for k in ("gpu", "gpu_count", "torch", "triton", "cuda")}}


def _encode(result: Any, names: tuple[str, ...]) -> dict:
    import pandas as pd

    tables = result if isinstance(result, tuple) else (result,)
    if all(isinstance(t, pd.DataFrame) for t in tables):
        if len(tables) != len(names):
            raise ValueError(f"{len(tables)} tables measured, {len(names)} names given: {names}")
        return {"tables": [json.loads(t.to_json(orient="table", index=False)) for t in tables],
                "tuple": isinstance(result, tuple)}
    return {"value": result}


def _decode(stored: dict) -> Any:
    import io

    import pandas as pd

    if "value" in stored:
        return stored["value"]
    tables = tuple(pd.read_json(io.StringIO(json.dumps(t)), orient="table") for t in stored["tables"])
    return tables if stored["tuple"] else tables[0]


def measured(data_dir: str | Path | None, name: str | tuple[str, ...], measure: Callable, *args, **kwargs) -> Any:
    """``measure(*args, **kwargs)``, or the result a stopped run of the chapter recorded for the very same call.

    Tables are saved as ``data_dir/NAME.csv`` with a download link (as :func:`systems.report.save_table`); the
    record goes to ``data_dir/.measured/NAME.json``, written atomically. Without a data dir (interactive and
    reference runs) it only measures."""
    from systems import report

    names = (name,) if isinstance(name, str) else tuple(name)
    if data_dir is None:
        return measure(*args, **kwargs)
    key = call_key(measure, args, kwargs)
    record_path, record = _record(data_dir, names[0])
    if record is not None and record["key"] == key:
        result = _decode(record["result"])
    else:
        result = measure(*args, **kwargs)
        record = {"key": key, "measured": _now(), "commit": provenance.git_commit(),
                  "result": _encode(result, names)}
        _write(record_path, record)
    if "tables" in record["result"]:
        for table_name, table in zip(names, result if isinstance(result, tuple) else (result,)):
            report.save_table(table, data_dir, table_name)
    return result


def measured_sweep(data_dir: str | Path | None, name: str, measure_point: Callable, points: Iterable, *args,
                   **kwargs) -> Any:
    """The rows of ``measure_point(point, earlier, *args, **kwargs)`` for each of ``points`` in turn, one table.

    ``earlier`` is the table of the points before it, for a measurement that learns from them (how much memory the
    shallower depths took, say). Each point's rows are added to ``data_dir/.measured/NAME.json`` the moment they
    exist, so a resumed run of the very same sweep reads back the points a stopped one finished and measures from
    the first it did not: a sweep longer than any one run can still finish, where :func:`measured` would start it
    over each time. The whole table is saved as ``data_dir/NAME.csv``."""
    # imported here, not above: `make book` runs the pipeline, which imports this module, without pandas or tqdm
    from tqdm.auto import tqdm

    from systems import report

    points = list(points)
    record_path = record = None
    if data_dir is not None:  # without one nothing is recorded, so no key or commit is needed
        key = call_key(measure_point, (points, *args), kwargs)
        record_path, record = _record(data_dir, name)
        if record is None or record["key"] != key or "points" not in record:
            record = {"key": key, "measured": None, "commit": provenance.git_commit(), "points": []}
    tables = [] if record is None else [_decode(stored) for stored in record["points"]]
    for point in tqdm(points[len(tables):], desc=name, initial=len(tables), total=len(points)):
        tables.append(measure_point(point, _joined(tables), *args, **kwargs))
        if record is not None:
            record["measured"] = record["measured"] or _now()
            record["points"].append(_encode(tables[-1], (name,)))
            _write(record_path, record)
    table = _joined(tables)
    if data_dir is not None:
        report.save_table(table, data_dir, name)
    return table


def _record(data_dir: str | Path, name: str) -> tuple[Path, dict | None]:
    """Where the measurement ``name`` is recorded, and its record if a run left one."""
    path = Path(data_dir) / RECORDS / f"{name}.json"
    return path, json.loads(path.read_text()) if path.is_file() else None


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(record), "measurement record")


def _joined(tables: list) -> Any:
    import pandas as pd

    rows = [t for t in tables if len(t)]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def recorded(data_dir: Path) -> dict[str, dict[str, str]]:
    """Every measurement recorded in ``data_dir``: name -> when (its first point, for a sweep) and at which commit
    it was measured, and for a sweep how many of its points are recorded."""
    folder = Path(data_dir) / RECORDS
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        record = json.loads(path.read_text())
        points = {"points": str(len(record["points"]))} if "points" in record else {}
        out[path.stem] = {"measured": record["measured"], "commit": record["commit"], **points}
    return out


def recorded_result(record: str | Path) -> Any:
    """What one record (a ``.measured/NAME.json`` file) holds, as a resumed run would read it back: the table or
    tables of a call, the rows of the points a sweep finished (one table), or a plain value. For looking at what a
    stopped run measured without running the chapter again."""
    stored = json.loads(Path(record).read_text())
    if not isinstance(stored, dict) or not {"points", "result"} & stored.keys():
        raise ValueError(f"{record} is not a measurement record (no 'result' or 'points')")
    if "points" in stored:
        return _joined([_decode(point) for point in stored["points"]])
    return _decode(stored["result"])


def read_back(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """What a resumed run read back: the records left by the stopped run (``before``) that it kept (``after``),
    each as it was before, so a sweep counts the points it read back and not those it went on to measure."""
    same = lambda a, b: (a["measured"], a["commit"]) == (b["measured"], b["commit"])  # noqa: E731
    return {part: was for part, was in before.items() if part in after and same(was, after[part])}


def resumed_words(parts: dict[str, dict[str, str]]) -> str:
    """For a chapter's provenance line: which measurements a resumed run read back (its stamp's ``resumed``)."""
    names = [f"{name}: {p['points']} of its points" if "points" in p else name for name, p in sorted(parts.items())]
    return (f"It went on from a run that stopped, reading back {len(parts)} measurement{'s' if len(parts) > 1 else ''} "
            f"({', '.join(names)}) made by the same code on the same machine from "
            f"{min(p['measured'] for p in parts.values())}.")

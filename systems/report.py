"""What a chapter shows: tables, glued numbers and words, raw-data files with their download links.

The display layer of the chapters; it computes nothing. Prose lives in the chapters' Markdown cells and
takes its numbers and its measurement-dependent words from the computation through glue::

    report.glue("e2e_small_fwd_ms", report.fmt(ms))             # {glue:text}`e2e_small_fwd_ms` in Markdown
    report.glue("e2e_faster", report.pick(ms < other, "faster", "slower"))
    report.table(df)                                            # an HTML table in the book
    report.save_table(df, data_dir, "forward_backward")         # CSV beside the chapter, linked from the page
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def glue(name: str, value: Any, display: bool = False) -> None:
    """Store ``value`` for ``{glue:}`` roles in the book (the myst-nb glue format, without needing myst-nb).

    Same output as ``myst_nb.glue``: a display-data bundle tagged with ``scrapbook`` metadata, so the GPU
    machines can run chapters with only IPython installed.
    """
    import numpy as np
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    if isinstance(value, np.generic):  # numpy scalars print as np.float64(...), which no format spec reads
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "" if display else "application/papermill.record/"
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def glue_all(prefix: str, values: dict[str, Any]) -> None:
    """Glue every entry of ``values`` as ``{prefix}_{key}``; numbers stay numbers, so the prose formats them
    (``{glue:text}`e2e_ratio:.2f```)."""
    for key, value in values.items():
        glue(f"{prefix}_{key}", value)


def fmt(x: float, digits: int = 3) -> str:
    """A number for prose: significant digits, no trailing noise."""
    return f"{x:.{digits}g}"


def more_or_less(amount: float, unit: str = "ms", more: str = "more", less: str = "less") -> str:
    """A signed difference in words, "1.95 ms more" or "0.466 ms less", never a negative "more"."""
    return f"{fmt(abs(amount))} {unit} {more if amount >= 0 else less}"


def pick(condition: bool, yes: str, no: str) -> str:
    """The word a measurement decides ("faster" or "slower"): glue it, never write it into the prose."""
    return yes if condition else no


def listed(items) -> str:
    """Items in words: "a", "a and b", "a, b and c"."""
    items = [str(item) for item in items]
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def percent_against(value: float, mark: float, decimals: int = 1) -> str:
    """A fraction as a percent with as many decimals as it takes for a value below ``mark`` not to read as the
    mark or above it (54.98%, not 55.0%); ``decimals`` where it does not."""
    for places in range(decimals, 5):
        if value >= mark or round(value * 100, places) < round(mark * 100, places):
            break
    return f"{value:.{places}%}"


def times(ratio: float, above: str = "slower", below: str = "faster", digits: int = 3) -> str:
    """A time ratio (ours / theirs) in words: "1.43× slower" above 1, "2.1× faster" (1/ratio) below it; within 1%
    of 1 in percent ("0.41% slower"), where "1× faster" would say nothing."""
    factor, word = (ratio, above) if ratio >= 1 else (1 / ratio, below)
    if factor < 1.01:
        return f"{fmt((factor - 1) * 100, 2)}% {word}"
    return f"{fmt(factor, digits)}× {word}"


def save_table(df, data_dir: str | Path | None, name: str, show_link: bool = True) -> Path | None:
    """Write ``data_dir/name.csv`` (committed beside the executed chapter) and show a download link to it.

    ``data_dir`` is relative to the chapter (the pipeline runs chapters in their own folder), so the link
    works in the book. No-op without a dir (interactive and reference runs).
    """
    if data_dir is None:
        return None
    path = Path(data_dir) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    if show_link:
        md(f"Raw data: {{download}}`{path.name} <{path.as_posix()}>` ({len(df)} rows).")
    return path


def markdown_table(df, floatfmt: str = ".2f", index: bool = False, missing: str = "—") -> str:
    """A DataFrame as a Markdown (pipe) table. A missing value (NaN, None) never shows as "nan": where its row has a
    ``status`` other than "ok" it shows that (OOM, unsupported, not run), elsewhere ``missing``."""
    import pandas as pd
    from tabulate import tabulate

    if df.isna().any().any():
        status = df["status"].astype(str) if "status" in df else pd.Series("ok", index=df.index)
        why = status.where(status != "ok", missing)
        df = df.astype(object).where(df.notna(), pd.DataFrame({c: why for c in df.columns}, index=df.index))

    # tabulate formats column by column, so integer columns stay integers beside floats; a column that
    # mixes numbers with words ("OOM", "unsupported") is formatted cell by cell
    df = df.copy()
    for c in df.select_dtypes(include="object").columns:  # (column names may be numbers: a pivot's contexts)
        df[c] = df[c].map(lambda x: format(x, floatfmt) if isinstance(x, float) else x)
    # (tabulate reads a DataFrame through .values, which turns an all-numeric frame into one float array:
    # as objects, every cell keeps its own type)
    return tabulate(df.astype(object), headers="keys", tablefmt="pipe", floatfmt=floatfmt, showindex=index)


# Both display at once rather than return a displayable: a returned object shows only as the last
# expression of a cell, so inside an `if` or before more code it would vanish from the book unnoticed.
def table(df, floatfmt: str = ".2f", index: bool = False, missing: str = "—") -> None:
    """Show a DataFrame as a table: Markdown, which the book renders as an HTML table (MyST format); a missing value
    says why (:func:`markdown_table`)."""
    md(markdown_table(df, floatfmt, index, missing))


def md(text: str) -> None:
    """Show Markdown (a table, a link, a note about the machine); prose belongs in Markdown cells."""
    from IPython.display import Markdown, display

    display(Markdown(text))


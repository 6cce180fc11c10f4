"""What an executed chapter keeps of its run: no machine's paths, no standard error, the injected parameters hidden;
and for an nbval reference, which other machines re-execute, nothing of the run at all."""

from __future__ import annotations

from pathlib import Path


def scrub(nb):
    """What of a run the book must not keep: the machine's paths (papermill's record of its input and
    output files) and standard error (warnings and progress bars, which the book does not render). The
    injected parameters cell is hidden: the line at the top of the page says how the chapter ran."""
    papermill = nb.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        if papermill.get(key):
            papermill[key] = Path(papermill[key]).name
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []) and "remove-cell" not in cell.metadata["tags"]:
            cell.metadata["tags"].append("remove-cell")
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    return nb


def unstamp(nb):
    """Take out every run-specific record (papermill's timings, execution times) of a reference notebook."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    return nb

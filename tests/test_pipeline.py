"""The notebook pipeline: profile choice, provenance stamps, smoke runs kept out of the book."""

import nbformat
import pandas as pd
import pytest
import torch

from systems import pipeline, report


def test_auto_profile_follows_the_hardware():
    assert report.resolve_profile("auto") == ("full" if torch.cuda.is_available() else "smoke")
    assert report.resolve_profile("smoke") == "smoke"
    with pytest.raises(ValueError, match="unknown profile"):
        report.resolve_profile("fast")


def test_provenance_names_machine_software_and_commit(monkeypatch):
    monkeypatch.setenv("SYSTEMS_GIT_COMMIT", "abc123")
    stamp = report.provenance("smoke")
    assert stamp["commit"] == "abc123" and stamp["profile"] == "smoke"
    assert stamp["torch"] == torch.__version__
    assert {"gpu", "gpu_count", "triton", "cuda", "date"} <= set(stamp)


def test_smoke_runs_never_target_the_book():
    t = pipeline.target("01_end_to_end", "smoke")
    assert pipeline.BOOK not in t.notebook.parents and pipeline.SMOKE in t.notebook.parents


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_full_profile_refuses_to_write_the_book_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a GPU"):
        pipeline.target("01_end_to_end", "full")


def test_chapter_names_resolve_by_number_and_prefix():
    first = pipeline.chapters()[0]
    assert pipeline.resolve_names([first.split("_")[0]]) == [first]
    assert pipeline.resolve_names([]) == pipeline.chapters()
    with pytest.raises(SystemExit, match="no single chapter"):
        pipeline.resolve_names(["99_nothing"])


def test_smoke_execution_stamps_and_leaves_the_book_alone(tmp_path, monkeypatch):
    notebooks, smoke = tmp_path / "notebooks", tmp_path / "smoke"
    notebooks.mkdir()
    (notebooks / "00_probe.py").write_text(
        '# %% tags=["parameters"]\nprofile = "auto"\ndata_dir = None\n\n'
        "# %%\nfrom systems import report\nreport.glue('probe_value', 6 * 7)\nprint(profile, data_dir)\n"
    )
    monkeypatch.setattr(pipeline, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(pipeline, "SMOKE", smoke)
    book_before = sorted(p.name for p in pipeline.EXECUTED.glob("*"))

    out = pipeline.execute("00_probe", "smoke")

    assert out == smoke / "00_probe.ipynb"
    nb = nbformat.read(out, as_version=4)
    assert nb.metadata["systems"]["profile"] == "smoke"
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"smoke {smoke / 'data' / '00_probe'}" in printed
    glued = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if o.get("metadata", {}).get("scrapbook", {}).get("name") == "probe_value"]
    assert glued and glued[0]["data"]["application/papermill.record/text/plain"] == "42"
    assert sorted(p.name for p in pipeline.EXECUTED.glob("*")) == book_before


def test_status_page_matches_the_executed_chapters(tmp_path):
    committed = (pipeline.BOOK / "status.md").read_text()
    fresh = pipeline.write_status(tmp_path / "status.md").read_text()
    assert fresh == committed, "book/status.md is stale: run `python -m systems.pipeline status`"


def test_executed_chapters_are_gpu_runs():
    for path in pipeline.EXECUTED.glob("*.ipynb"):
        stamp = nbformat.read(path, as_version=4).metadata["systems"]
        assert stamp["profile"] == "full" and stamp["gpu_count"] >= 1, path.name


@pytest.mark.parametrize("name", pipeline.chapters())
def test_every_chapter_has_an_up_to_date_nbval_reference(name):
    ref = pipeline.NBVAL_REFS / f"{name}.ipynb"
    assert ref.exists(), f"no nbval reference for {name}: run `python -m systems.pipeline refs {name}`"
    assert pipeline.matches_source(name, nbformat.read(ref, as_version=4)), f"the nbval reference of {name} is stale: run `python -m systems.pipeline refs {name}`"


def cells(markdown_table: str) -> list[list[str]]:
    return [[c.strip() for c in row.strip("|").split("|")] for row in markdown_table.splitlines()[2:]]


def test_tables_keep_integers_and_words_beside_floats():
    numbers = pd.DataFrame({"n": [128, 4096], "ms": [1.23456, 20.0]})
    assert cells(report.markdown_table(numbers, floatfmt=".2f")) == [["128", "1.23"], ["4096", "20.00"]]
    mixed = numbers.assign(status=[0.5, "OOM"])
    assert cells(report.markdown_table(mixed, floatfmt=".2f")) == [["128", "1.23", "0.50"], ["4096", "20.00", "OOM"]]


def test_prose_and_tables_show_wherever_they_are_called(monkeypatch):
    # not only as a cell's last expression: inside an `if`, or with code after them
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    if True:
        report.md("**words**")
        report.table(pd.DataFrame({"n": [1]}))
    assert [m.data for m in shown] == ["**words**", report.markdown_table(pd.DataFrame({"n": [1]}))]


def test_an_edited_source_is_noticed():
    nb = nbformat.read(pipeline.NBVAL_REFS / "01_end_to_end.ipynb", as_version=4)
    assert pipeline.matches_source("01_end_to_end", nb)
    markdown = next(c for c in nb.cells if c.cell_type == "markdown")
    markdown.source += " An edit."
    assert not pipeline.matches_source("01_end_to_end", nb)

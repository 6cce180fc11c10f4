"""The notebook pipeline: profile choice, provenance stamps, smoke runs kept out of the book."""

from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
import torch

from systems import pipeline, provenance, report


def test_auto_profile_follows_the_hardware():
    assert provenance.resolve_profile("auto") == ("full" if torch.cuda.is_available() else "smoke")
    assert provenance.resolve_profile("smoke") == "smoke"
    with pytest.raises(ValueError, match="unknown profile"):
        provenance.resolve_profile("fast")


def test_provenance_names_machine_software_and_commit(monkeypatch):
    monkeypatch.setenv("SYSTEMS_GIT_COMMIT", "abc123")
    stamp = provenance.stamp("smoke")
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
    with pytest.raises(ValueError, match="no single chapter"):
        pipeline.resolve_names(["99_nothing"])
    for argv in (["run", "99_nothing"], ["run", "--timeout", "0"], ["refs", "99_nothing"]):
        with pytest.raises(SystemExit) as exit_:  # a usage error: exit 2, before any chapter runs
            pipeline.main(argv)
        assert exit_.value.code == 2


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
    assert "smoke data/00_probe" in printed  # relative to the folder the chapter ran in
    assert str(tmp_path) not in out.read_text(), "the executed notebook holds a path of this machine"
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and "remove-cell" in injected[0].metadata.tags
    glued = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if o.get("metadata", {}).get("scrapbook", {}).get("name") == "probe_value"]
    assert glued and glued[0]["data"]["application/papermill.record/text/plain"] == "42"
    assert sorted(p.name for p in pipeline.EXECUTED.glob("*")) == book_before


def test_status_page_matches_the_executed_chapters(tmp_path):
    committed = (pipeline.BOOK / "status.md").read_text()
    fresh = pipeline.write_status(tmp_path / "status.md").read_text()
    assert fresh == committed, "book/status.md is stale: run `python -m systems.pipeline status`"


def test_the_book_command_runs_without_the_packages_it_does_not_install(tmp_path):
    """`make book` installs requirements/book.txt and this package without its dependencies, then writes the status
    page: the pipeline must import none of the dependencies pyproject.toml declares (torch, pandas, tqdm, ...)."""
    import re
    import subprocess
    import sys

    declared = re.search(r"^dependencies = \[(.*?)\]", (provenance.ROOT / "pyproject.toml").read_text(), re.S | re.M)
    absent = sorted(name.lower().replace("-", "_") for name in re.findall(r'"([A-Za-z0-9_.-]+)', declared.group(1)))
    assert {"torch", "pandas", "tqdm"} <= set(absent)
    refuse = (f"import sys\nclass Absent:\n    def find_spec(self, name, path=None, target=None):\n"
              f"        if name.split('.')[0] in {absent!r}:\n            raise ImportError('not installed: ' + name)\n"
              f"sys.meta_path.insert(0, Absent())\n")
    written = tmp_path / "status.md"
    run = subprocess.run([sys.executable, "-c", refuse + f"from systems import pipeline\n"
                          f"pipeline.write_status(__import__('pathlib').Path({str(written)!r}))"],
                         capture_output=True, text=True, cwd=provenance.ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert written.read_text() == (pipeline.BOOK / "status.md").read_text()


def test_executed_chapters_ran_on_what_they_require():
    """Full runs only; a GPU chapter on as many GPUs as it needs; an analysis chapter says it needs none."""
    for path in pipeline.EXECUTED.glob("*.ipynb"):
        stamp = nbformat.read(path, as_version=4).metadata["systems"]
        gpus = pipeline.needs(path.stem).gpus
        assert stamp["profile"] == "full" and stamp["gpu_count"] >= gpus, path.name


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
    pivot = pd.DataFrame({"size": ["small", "xl"], 512: [1.25, "OOM"], 1024: [2.5, 3.0]})  # contexts as column names
    assert cells(report.markdown_table(pivot, floatfmt=".1f")) == [["small", "1.2", "2.5"], ["xl", "OOM", "3.0"]]


def test_a_missing_value_says_why_never_nan():
    rows = pd.DataFrame({"n": [128, 4096, 8192], "ms": [1.5, float("nan"), None],
                         "status": ["ok", "OOM", "not run"], "note": [None, "x", None]})
    shown = cells(report.markdown_table(rows))
    assert shown == [["128", "1.50", "ok", "—"], ["4096", "OOM", "OOM", "x"], ["8192", "not run", "not run", "not run"]]
    assert "nan" not in report.markdown_table(pd.DataFrame({"a": [float("nan")]}), missing="unsupported")


def test_time_ratios_in_words_say_something_near_one():
    assert report.times(1.4305) == "1.43× slower" and report.times(1 / 2.1) == "2.1× faster"
    # "1× faster" says nothing: within 1% the words give the percentage
    assert report.times(0.99973) == "0.027% faster" and report.times(1.0041) == "0.41% slower"
    assert report.times(1.0) == "0% slower"


@pytest.mark.parametrize("value, said", [(0.5498, "54.98%"), (0.54996, "54.996%"), (0.546, "54.6%"),
                                         (0.55, "55.0%"), (0.5512, "55.1%"), (0.4752, "47.5%")])
def test_a_percent_below_its_mark_never_reads_as_the_mark(value, said):
    assert report.percent_against(value, 0.55) == said

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


def _chapter(folder, name, header=""):
    (folder / f"{name}.py").write_text(
        (f"# ---\n# jupyter:\n#   systems:\n{header}# ---\n\n" if header else "")
        + '# %% tags=["parameters"]\nprofile = "auto"\ndata_dir = None\n'
    )


def test_chapters_run_after_the_chapters_whose_data_they_read(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "NOTEBOOKS", tmp_path)
    _chapter(tmp_path, "01_source")
    _chapter(tmp_path, "02_model", "#     depends_on: [03_sweep]\n")
    _chapter(tmp_path, "03_sweep", "#     depends_on: [01_source]\n")
    _chapter(tmp_path, "04_analysis", "#     requires: cpu\n")
    assert pipeline.resolve_names(["02", "03", "01"]) == ["01_source", "03_sweep", "02_model"]
    assert pipeline.resolve_names([]) == ["01_source", "03_sweep", "02_model", "04_analysis"]
    assert pipeline.needs("04_analysis") == pipeline.Needs("cpu", ())
    assert pipeline._resolve("04_analysis", "auto") == "full"  # an analysis is a book run on any machine
    _chapter(tmp_path, "05_loop", "#     depends_on: [05_loop]\n")
    with pytest.raises(ValueError, match="cycle"):
        pipeline.resolve_names(["05"])
    _chapter(tmp_path, "06_bad", "#     requires: tpu\n")
    with pytest.raises(ValueError, match="requires must be one of"):
        pipeline.needs("06_bad")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_auto_runs_a_gpu_chapter_as_smoke_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "NOTEBOOKS", tmp_path)
    _chapter(tmp_path, "01_gpu")
    assert pipeline._resolve("01_gpu", "auto") == "smoke"


def _info(**overrides):
    stamp = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "commit": "abc123def456", "date": "2026-11-23 15:20 UTC",
             "torch": "2.11.0", "triton": "3.6.0"}
    base = {"chapter": "07_x", "requires": "gpu", "status": "executed", "stamp": stamp, "commit_known": True,
            "base_commit": "abc123def456", "source_changed": False, "changed_by": [], "note": None}
    return base | overrides


def test_the_provenance_line_says_machine_date_commit_and_whether_the_source_moved_on():
    line = pipeline.provenance_line(_info())
    assert line.startswith("Executed on 1 × NVIDIA H100 80GB HBM3 on 2026-11-23 from commit `abc123def456`")
    assert line.endswith("The chapter's source has not changed since.")
    changed = pipeline.provenance_line(_info(source_changed=True, changed_by=["f00dcafe1234 Chapter 07: prose"]))
    assert changed.endswith("has changed since (in `f00dcafe1234`): this page shows the run as it was.")
    moved = pipeline.provenance_line(_info(same_code=True, changed_by=["0123abcd4567 Narration to the chapters"]))
    assert moved.endswith("has changed since (in `0123abcd4567`) only in where the code it calls lives; that code is "
                          "the same, so this page shows what it computes.")
    lost = pipeline.provenance_line(_info(commit_known=False, base_commit=None))
    assert "`abc123def456`" not in lost and "abc123def456 (of an earlier history, not in this repository)" in lost
    analysis = pipeline.provenance_line(_info(requires="cpu", stamp=_info()["stamp"] | {"gpu_count": 0, "cpu": "x86_64",
                                                                                       "cpu_count": 2}))
    assert analysis.startswith("Analysis (needs no GPU), computed on CPU (x86_64, 2 cores)")
    resumed = pipeline.provenance_line(_info(stamp=_info()["stamp"] | {"resumed": {
        "b": {"measured": "2026-11-25 05:40 UTC", "commit": "abc"}, "a": {"measured": "2026-11-25 05:34 UTC"}}}))
    assert ("It went on from a run that stopped, reading back 2 measurements (a, b) made by the same code on the same "
            "machine from 2026-11-25 05:34 UTC.") in resumed
    swept = pipeline.provenance_line(_info(stamp=_info()["stamp"] | {"resumed": {
        "steps": {"measured": "2026-11-25 05:40 UTC", "commit": "abc", "points": "9"}}}))
    assert ("reading back 1 measurement (steps: 9 of its points) made by the same code on the same machine from "
            "2026-11-25 05:40 UTC.") in swept


def test_every_commit_the_book_names_is_in_this_history():
    for name in pipeline.chapters():
        info = pipeline.run_info(name)
        if info["status"] == "executed":
            assert info["commit_known"] is not False or info["base_commit"], (
                f"{name} names commit {info['stamp'].get('commit')}, which is not in this repository: run it again")


def test_every_figure_of_an_executed_chapter_was_drawn():
    # a figure cell whose run left no image (a non-interactive matplotlib backend, say) is a hole in the page
    for path in sorted(pipeline.EXECUTED.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if not pipeline.matches_source(path.stem, nb):
            continue  # a run of an older source is checked by what it was
        for cell in nb.cells:
            if cell.cell_type == "code" and "figures." in cell.source:
                images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
                assert images, f"{path.name}: a figure cell has no image: {cell.source[:80]!r}"


def _book(tmp_path, monkeypatch):
    """A book of its own under ``tmp_path``: chapters, executed notebooks, data and staging."""
    folders = {name: tmp_path / name for name in ("notebooks", "executed", "data", "staging")}
    for folder in folders.values():
        folder.mkdir()
    monkeypatch.setattr(pipeline, "NOTEBOOKS", folders["notebooks"])
    monkeypatch.setattr(pipeline, "EXECUTED", folders["executed"])
    monkeypatch.setattr(pipeline, "BOOK_DATA", folders["data"])
    monkeypatch.setattr(pipeline, "STAGING", folders["staging"])
    return folders


CHAPTER = ('# ---\n# jupyter:\n#   systems:\n#     requires: cpu\n# ---\n\n# %% tags=["parameters"]\nprofile = "auto"\n'
           'data_dir = None\n\n# %%\nimport pandas as pd\nfrom systems import report\n'
           'report.save_table(pd.DataFrame({"x": [1, 2]}), data_dir, "fresh")\n')


def test_a_failing_run_leaves_the_book_as_it_was(tmp_path, monkeypatch):
    book = _book(tmp_path, monkeypatch)
    (book["notebooks"] / "01_a.py").write_text(CHAPTER)
    pipeline.execute("01_a", "full")
    first = (book["executed"] / "01_a.ipynb").read_bytes()
    assert (book["data"] / "01_a" / "fresh.csv").exists()
    (book["data"] / "01_a" / "kept.csv").write_text("x\n1\n")  # what the user has now
    (book["notebooks"] / "01_a.py").write_text(CHAPTER + 'raise RuntimeError("a cell fails half-way")\n')
    with pytest.raises(pipeline.ChapterFailed, match="a cell fails half-way.*unchanged") as failure:
        pipeline.execute("01_a", "full")
    assert (book["executed"] / "01_a.ipynb").read_bytes() == first
    assert sorted(p.name for p in (book["data"] / "01_a").iterdir()) == ["fresh.csv", "kept.csv"]
    partial = nbformat.read(str(failure.value).rsplit("the failed run is in ", 1)[1], as_version=4)
    assert any(o.get("ename") == "RuntimeError" for c in partial.cells for o in c.get("outputs", []))
    # a run that succeeds replaces the chapter and its data as a whole: a file it did not write is not left behind
    (book["notebooks"] / "01_a.py").write_text(CHAPTER)
    pipeline.execute("01_a", "full")
    assert sorted(p.name for p in (book["data"] / "01_a").iterdir()) == ["fresh.csv"]
    assert "../data/01_a/fresh.csv" in (book["executed"] / "01_a.ipynb").read_text()  # links as the book needs them
    assert not list(book["staging"].iterdir())


def test_a_run_timing_out_leaves_the_book_as_it_was(tmp_path, monkeypatch):
    book = _book(tmp_path, monkeypatch)
    (book["notebooks"] / "01_a.py").write_text(CHAPTER)
    pipeline.execute("01_a", "full")
    first = (book["executed"] / "01_a.ipynb").read_bytes()
    (book["notebooks"] / "01_a.py").write_text(CHAPTER + "import time\ntime.sleep(60)\n")
    with pytest.raises(pipeline.ChapterFailed, match="unchanged"):
        pipeline.execute("01_a", "full", timeout_s=2)
    assert (book["executed"] / "01_a.ipynb").read_bytes() == first


def _stopped_once(tmp_path, monkeypatch, body) -> tuple[dict, Path]:
    """A chapter ``body(calls, stop)`` that stops while the file ``stop`` exists, run until it stopped; the file it
    counts its calls in. The stop is gone afterwards."""
    book = _book(tmp_path, monkeypatch)
    calls, stop = tmp_path / "calls", tmp_path / "stop"
    stop.touch()
    (book["notebooks"] / "01_a.py").write_text(CHAPTER + body(repr(str(calls)), repr(str(stop))))
    with pytest.raises(pipeline.ChapterFailed):
        pipeline.execute("01_a", "full")
    stop.unlink()
    return book, calls


def test_a_stopped_run_resumes_without_measuring_again(tmp_path, monkeypatch):
    book, calls = _stopped_once(tmp_path, monkeypatch, lambda calls, stop: (
        "from systems.resumable import measured\n"
        "def count(n):\n"
        f"    open({calls}, 'a').write('x')\n"
        "    return pd.DataFrame({'n': [n, n + 1], 'ms': [1.5, float('nan')], 'status': ['ok', 'OOM']})\n"
        "counted = measured(data_dir, 'counted', count, 3)\n\n"
        f"# %%\nimport os\nif os.path.exists({stop}):\n    raise RuntimeError('the machine went away')\n"))
    assert calls.read_text() == "x"
    pipeline.execute("01_a", "full", resume=True)
    assert calls.read_text() == "x"  # read back, not measured again
    executed = nbformat.read(book["executed"] / "01_a.ipynb", as_version=4)
    assert list(executed.metadata["systems"]["resumed"]) == ["counted"]
    assert sorted(p.name for p in (book["data"] / "01_a").iterdir()) == ["counted.csv", "fresh.csv"]  # no records
    pipeline.execute("01_a", "full", resume=True)  # nothing stopped: nothing to resume from
    assert calls.read_text() == "xx"
    assert "resumed" not in nbformat.read(book["executed"] / "01_a.ipynb", as_version=4).metadata["systems"]


def test_a_sweep_stopped_part_way_resumes_at_its_first_unfinished_point(tmp_path, monkeypatch):
    book, calls = _stopped_once(tmp_path, monkeypatch, lambda calls, stop: (
        "import os\n"
        "from systems.resumable import measured_sweep\n"
        "def at(point, earlier):\n"
        f"    open({calls}, 'a').write(str(point))\n"
        f"    if point == 2 and os.path.exists({stop}):\n"
        "        raise RuntimeError('the machine went away')\n"
        "    return pd.DataFrame({'point': [point], 'earlier': [len(earlier)]})\n"
        "swept = measured_sweep(data_dir, 'swept', at, range(4))\n"))
    assert calls.read_text() == "012"
    pipeline.execute("01_a", "full", resume=True)
    assert calls.read_text() == "01223"  # points 0 and 1 read back
    executed = nbformat.read(book["executed"] / "01_a.ipynb", as_version=4)
    assert executed.metadata["systems"]["resumed"]["swept"]["points"] == "2"
    table = pd.read_csv(book["data"] / "01_a" / "swept.csv")
    assert table.point.tolist() == [0, 1, 2, 3] and table.earlier.tolist() == [0, 1, 2, 3]


def test_a_full_commit_hash_is_cut_to_the_twelve_digits_the_pages_use(monkeypatch):
    full = "47442633ad12f73ef1975fd62b613f4a4f6f27b0"
    assert provenance.short_commit(full) == "47442633ad12"
    assert provenance.short_commit("unknown") == "unknown"
    monkeypatch.setenv("SYSTEMS_GIT_COMMIT", full)
    assert provenance.git_commit() == "47442633ad12"


def test_a_published_table_is_read_from_its_commit_and_a_missing_one_is_named(monkeypatch):
    rng = np.random.default_rng()
    table = pd.DataFrame({"layers": rng.integers(1, 40, 5), "ms": rng.random(5) * 1e4, "status": ["ok"] * 4 + ["OOM"]})
    asked = []

    def file_at(commit, path):
        asked.append((commit, path))
        return table.to_csv(index=False) if commit == "abc1234" else None

    monkeypatch.setattr(provenance, "file_at", file_at)
    pd.testing.assert_frame_equal(pipeline.published_table("abc1234", "18_leaderboard_one_gpu", "model_step"), table)
    assert asked == [("abc1234", "book/data/18_leaderboard_one_gpu/model_step.csv")]
    missing = "book/data/18_leaderboard_one_gpu/ablation.csv is not in commit 'fff0000'"
    with pytest.raises(FileNotFoundError, match=missing):
        pipeline.published_table("fff0000", "18_leaderboard_one_gpu", "ablation")

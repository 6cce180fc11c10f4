"""The book builds from the committed chapters with warnings as errors, and lists every executed one."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from systems import pipeline

ROOT = pipeline.ROOT


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_executed_chapter_is_in_the_toc():
    listed = set(toc_files())
    for path in pipeline.EXECUTED.glob("*.ipynb"):
        assert f"book/executed/{path.stem}" in listed, f"{path.name} is executed but not in _toc.yml"


@pytest.mark.book
def test_book_builds_without_warnings(tmp_path):
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).parent / "jupyter-book")
    proc = subprocess.run(
        [jb, "build", str(ROOT), "--path-output", str(tmp_path), "-n", "-W", "--keep-going"],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    for entry in toc_files():
        assert (html / f"{entry}.html").exists(), entry

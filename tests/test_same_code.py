"""A chapter edited only in where the code it calls lives keeps its run (systems.same_code): checked on a small git
repository of its own, a package with a function that moves between modules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from systems import same_code as sc

FACTS = 'def facts(df):\n    """What the chapter says."""\n    return {"n": len(df)}\n'
RUN = [("markdown", "# A chapter"), ("code", "from systems.bench import e2e\nfrom systems.bench.e2e import sweep"),
       ("code", "df = sweep()\nfound = e2e.facts(df)"), ("markdown", "It found {glue:text}`n`.")]


@pytest.fixture
def repo(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A repository whose commit holds ``facts`` in systems/bench/e2e.py; the work tree is then changed by the
    tests. Returns the tree and the commit."""
    (tmp_path / "systems" / "bench").mkdir(parents=True)
    (tmp_path / "systems" / "chapters").mkdir()
    (tmp_path / "systems" / "bench" / "e2e.py").write_text("def sweep():\n    return []\n\n\n" + FACTS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "run"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    def file_at(c: str, path: str) -> str | None:
        out = subprocess.run([*git, "show", f"{c}:{path}"], capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else None

    monkeypatch.setattr(sc, "ROOT", tmp_path)
    monkeypatch.setattr(sc, "file_at", file_at)
    sc._module_source.cache_clear()
    sc._definition.cache_clear()
    yield tmp_path, commit
    sc._module_source.cache_clear()
    sc._definition.cache_clear()


def _move(root: Path, body: str = FACTS) -> None:
    (root / "systems" / "bench" / "e2e.py").write_text("def sweep():\n    return []\n")
    (root / "systems" / "chapters" / "end_to_end.py").write_text(body)


NOW = [RUN[0], ("code", "from systems.bench.e2e import sweep\nfrom systems.chapters import end_to_end"),
       ("code", "df = sweep()\nfound = end_to_end.facts(df)"), RUN[3]]


def test_a_function_moved_verbatim_is_the_same_code(repo):
    root, commit = repo
    _move(root)
    assert sc.same_code(RUN, NOW, commit)
    by_name = [NOW[0], ("code", "from systems.bench.e2e import sweep\nfrom systems.chapters.end_to_end import facts"),
               ("code", "df = sweep()\nfound = facts(df)"), NOW[3]]
    assert sc.same_code(RUN, by_name, commit)


def test_a_moved_function_whose_text_changed_is_a_change(repo):
    root, commit = repo
    _move(root, FACTS.replace("len(df)", "len(df) + 1"))
    assert not sc.same_code(RUN, NOW, commit)


def test_another_statement_other_prose_or_a_missing_name_is_a_change(repo):
    root, commit = repo
    _move(root)
    assert not sc.same_code(RUN, [*NOW[:2], ("code", "df = sweep()\nfound = end_to_end.facts(df[:1])"), NOW[3]],
                            commit)
    assert not sc.same_code(RUN, [*NOW[:3], ("markdown", "It found {glue:text}`m`.")], commit)
    assert not sc.same_code(RUN, [*NOW[:2], ("code", "df = sweep()\nfound = end_to_end.nothing(df)"), NOW[3]],
                            commit)
    assert not sc.same_code(RUN, NOW[:3], commit)
    # nothing moved, the function is simply gone: the name the run used stands for nothing now
    (root / "systems" / "bench" / "e2e.py").write_text("def sweep():\n    return []\n")
    sc._module_source.cache_clear()
    sc._definition.cache_clear()
    assert not sc.same_code(RUN, [RUN[0], RUN[1], ("code", "df = sweep()\nfound = e2e.other(df)"), RUN[3]], commit)

"""Words that stay true: every name of the package and every file the documentation mentions exists.

The texts are the README, notebooks/README.md and every docstring of the package. A dotted name counts if it starts
with ``systems.`` or with a name the same text imported from the package (``from systems import report`` makes
``report.glue`` a name of ``systems.report``); a file counts if it ends in ``.py``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re

import pytest

from systems import pipeline

ROOT = pipeline.ROOT
DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
IMPORTED = re.compile(r"from (systems(?:\.\w+)*) import ([\w, ]+)")
FILE = re.compile(r"(?<![\w/.])((?:[\w-]+/)*[a-z_][a-z0-9_]*\.py)\b")  # placeholders (NAME.py) are capitals


@functools.cache
def texts() -> dict[str, str]:
    """Each documentation text by file: the two READMEs, and every .py file's docstrings joined."""
    out = {"README.md": (ROOT / "README.md").read_text(),
           "notebooks/README.md": (ROOT / "notebooks" / "README.md").read_text()}
    for path in sorted((ROOT / "systems").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = [ast.get_docstring(n) for n in [tree, *ast.walk(tree)]
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        out[str(path.relative_to(ROOT))] = "\n".join(d for d in docs if d)
    return out


def resolves(name: str) -> bool:
    """Whether ``name`` is a module of the package or an attribute reachable from its longest module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def package_names(text: str) -> set[str]:
    """The dotted names of the package ``text`` mentions, written in full."""
    aliases = {name.strip(): f"{module}.{name.strip()}" for module, names in IMPORTED.findall(text)
               for name in names.split(",") if name.strip()}
    found = set()
    for name in DOTTED.findall(text):
        head, _, rest = name.partition(".")
        if head == "systems":
            found.add(name)
        elif head in aliases:
            found.add(f"{aliases[head]}.{rest}")
    return found


def file_exists(name: str, where: str) -> bool:
    """A path from the repository's root, a file beside the text's own, or one of the package's files."""
    if "/" in name:
        return (ROOT / name).exists() or (ROOT / "systems" / name).exists()
    here = (ROOT / where).parent
    return (here / name).exists() or any(p.name == name for p in (ROOT / "systems").rglob(name))


@pytest.mark.parametrize("where", sorted(texts()))
def test_every_name_and_file_mentioned_exists(where):
    text = texts()[where]
    missing = sorted(n for n in package_names(text) if not resolves(n))
    missing += sorted(f for f in set(FILE.findall(text)) if not file_exists(f, where))
    assert not missing, f"{where} mentions what does not exist: {missing}"


def test_the_check_can_fail():
    assert resolves("systems.model.TransformerLM") and not resolves("systems.scaling.strategies")
    assert package_names("from systems import report\nreport.resolve_profile(p)") == {"systems.report.resolve_profile"}
    assert not resolves("systems.report.resolve_profile")
    assert not file_exists("flash_triton.py", "systems/attention/__init__.py")
    assert file_exists("reference.py", "systems/attention/__init__.py")

"""Whether a chapter's cells as they ran and as they are now run the same code, though the package moved it.

A chapter executed at commit C and then edited only in where the functions it calls live (a function moved from
one module to another, verbatim) still shows what its code computes: the page need not say its source changed. Two
cells are the same code when, after the package's imports are taken out, they are the same statements and every
name they use from the package is the same name, or one that moved: a definition that stood at C where it no longer
stands and now stands where it did not, with the same source text (read at C with ``git show``, and from the tree).
As for a cell that did not change at all, a definition that kept its place may have changed its text: the book
notes library changes in the log, not on each page. Anything else (another statement, a moved definition whose
text changed, a name that cannot be found) is a change. Only text is read, nothing is imported: the book's light build
(no torch) asks this too.

    same_code(cells_as_run, cells_now, commit)   # (cell type, source) pairs -> bool
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache

from systems.provenance import ROOT, file_at

PACKAGE = "systems"


@cache
def _module_source(module: str, commit: str | None) -> str | None:
    """The text of ``module`` (dotted) at ``commit`` (None: the tree), or None where it is no module there."""
    path = module.replace(".", "/")
    for candidate in (f"{path}.py", f"{path}/__init__.py"):
        if commit is None:
            if (ROOT / candidate).is_file():
                return (ROOT / candidate).read_text()
        else:
            text = file_at(commit, candidate)
            if text is not None:
                return text
    return None


@cache
def _definition(qualified: str, commit: str | None) -> str | None:
    """A fingerprint of what ``qualified`` (``package.module.name``) stands for at ``commit``: a module's own
    dotted name, or the hash of a top-level definition's source text; None where it is nothing of the package."""
    if _module_source(qualified, commit) is not None:
        return f"module {qualified}"
    module, _, name = qualified.rpartition(".")
    text = _module_source(module, commit)
    if not module or text is None:
        return None
    for node in ast.parse(text).body:
        names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else
                 [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else
                 [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else [])
        if name in names:
            return hashlib.sha256(ast.get_source_segment(text, node).encode()).hexdigest()[:16]
    return None


class _Resolve(ast.NodeTransformer):
    """Replaces every use of a name imported from the package by what it stands for: its full dotted name where that
    names the same thing at the run's commit and now, else (it moved) the fingerprint of its definition on this
    side (``commit``; None: the tree). ``unresolved`` notes a use of a name that stands for nothing on this side."""

    def __init__(self, aliases: dict[str, str], commit: str | None, other: str | None):
        self.aliases, self.commit, self.other, self.unresolved = aliases, commit, other, False

    def _token(self, qualified: str) -> ast.Name:
        here = _definition(qualified, self.commit)
        self.unresolved |= here is None
        stays = _definition(qualified, self.other) is not None
        return ast.Name(id=qualified if stays else f"@{here}", ctx=ast.Load())

    def visit_Attribute(self, node: ast.Attribute):
        if (isinstance(node.value, ast.Name) and node.value.id in self.aliases
                and _module_source(self.aliases[node.value.id], self.commit) is not None):  # module.name
            return self._token(f"{self.aliases[node.value.id]}.{node.attr}")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        return self._token(self.aliases[node.id]) if node.id in self.aliases else node


def _aliases(tree: ast.Module) -> dict[str, str]:
    """The names the package's imports at the top level of ``tree`` bind, to what they name in full."""
    aliases = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            aliases |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name: a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
    return aliases


def _is_package_import(node: ast.stmt) -> bool:
    return ((isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE)
            or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names)))


def _normalised(tree: ast.Module, aliases: dict[str, str], commit: str | None, other: str | None) -> str | None:
    """The cell with the package's imports taken out and its names replaced by what they stand for (see
    :class:`_Resolve`); None where a name stands for nothing it can read."""
    tree = ast.Module(body=[n for n in tree.body if not _is_package_import(n)], type_ignores=[])
    resolve = _Resolve(aliases, commit, other)
    dumped = ast.dump(resolve.visit(tree))
    return None if resolve.unresolved else dumped


def _parsed(cells: list[tuple[str, str]]) -> tuple[list[ast.Module | None], dict[str, str]]:
    """Each code cell parsed (None: prose, or code that is not Python), and the names the package's imports bind
    anywhere in the notebook (a later cell uses what an earlier one imported)."""
    trees, aliases = [], {}
    for kind, source in cells:
        try:
            tree = ast.parse(source) if kind == "code" else None
        except SyntaxError:  # a cell of Jupyter magic: only its text can be compared
            tree = None
        trees.append(tree)
        aliases |= _aliases(tree) if tree is not None else {}
    return trees, aliases


def same_code(cells_as_run: list[tuple[str, str]], cells_now: list[tuple[str, str]], commit: str) -> bool:
    """Whether the cells (cell type, source) as they ran at ``commit`` and as they are now run the same code (see
    the module doc): prose must be the same text, code the same code."""
    if [t for t, _ in cells_as_run] != [t for t, _ in cells_now]:
        return False
    (old_trees, old_aliases), (new_trees, new_aliases) = _parsed(cells_as_run), _parsed(cells_now)
    for (_, old), (_, new), before, after in zip(cells_as_run, cells_now, old_trees, new_trees):
        if old == new:
            continue
        if before is None or after is None:
            return False
        normalised = _normalised(before, old_aliases, commit, None)
        if normalised is None or normalised != _normalised(after, new_aliases, None, commit):
            return False
    return True

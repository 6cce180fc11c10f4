"""The package's shape: imports only point down its layers, no cycles, short modules, chapters that are mostly prose."""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest

from systems import pipeline

PACKAGE = pipeline.ROOT / "systems"
# Each module's layer; a module may import its own layer and those below. Listed by dotted prefix, most
# specific first.
LAYERS = [
    ("systems.device", 0), ("systems.provenance", 0), ("systems.nvtx", 0), ("systems.cli", 0),
    ("systems.hardware", 0), ("systems.files", 0), ("systems.interrupts", 0), ("systems.staging", 0), ("systems.triton_interpreter", 0),
    ("systems.kernel_names", 0),
    ("systems.same_code", 1),
    ("systems.attention", 1), ("systems.fused", 1), ("systems.recompute", 1), ("systems.offload", 1), ("systems.model", 2), ("systems.flops", 2), ("systems.data", 1), ("systems.dist", 1),
    ("systems.precision", 1), ("systems.checkpoint", 1),
    ("systems.ddp", 3), ("systems.zero", 3), ("systems.fsdp", 3), ("systems.memory", 3), ("systems.scaling", 3),
    ("systems.parallel", 4),
    ("systems.bench", 4), ("systems.profiling", 5), ("systems.train", 6), ("systems.train_runs", 6),
    ("systems.train_state", 6), ("systems.train_checks", 6),
    ("systems.figures", 7), ("systems.report", 7), ("systems.pipeline", 7), ("systems.chapters", 7),
    ("systems.resumable", 7), ("systems.executed_notebook", 7),
]
MAX_LINES = 400


def layer(module: str) -> int:
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return level
    raise AssertionError(f"{module} has no layer in tests/test_layout.py: place it")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, package: str) -> set[str]:
    """The modules of ours that ``path`` imports, anywhere in the file (late imports too)."""
    known = modules()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from pkg import sub` imports the module pkg.sub where there is one, else names of pkg itself
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(known)
            found |= subs if len(subs) == len(node.names) else {node.module} | subs
    return {m for m in found if m in known and m != "systems"}


def test_imports_only_point_down_the_layers():
    upward = []
    for module, path in modules().items():
        if module == "systems":
            continue
        for target in imports(path, module):
            if layer(target) > layer(module):
                upward.append(f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})")
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    graph = {m: imports(p, m) - {m} for m, p in modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("path", sorted(p.relative_to(pipeline.ROOT).as_posix() for p in PACKAGE.rglob("*.py")))
def test_modules_are_short(path):
    lines = len((pipeline.ROOT / path).read_text().splitlines())
    assert lines <= MAX_LINES, f"{path} has {lines} lines; split it by job"


def chapter_lines(name: str) -> tuple[int, int]:
    code = prose = 0
    for cell in jupytext.read(pipeline.NOTEBOOKS / f"{name}.py").cells:
        n = sum(1 for line in cell.source.splitlines() if line.strip())
        if cell.cell_type == "markdown":
            prose += n
        else:
            code += n
    return code, prose


@pytest.mark.parametrize("name", pipeline.chapters())
def test_each_chapter_is_more_prose_than_code(name):
    code, prose = chapter_lines(name)
    assert code < prose, f"{name} holds {code} lines of code against {prose} of prose"

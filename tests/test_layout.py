"""The package's layout as the architecture page states it, checked from the source: no
import cycle (function-local and type-checking imports included), the layer's base imports
neither the clusterer nor the study, and no module is over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnclust"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file (a package's
    ``__init__`` counts only where it is the module named)."""
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                root = ".".join(base + ([node.module] if node.module else [])) \
                    if node.level else node.module
                targets = [f"{root}.{a.name}" if f"{root}.{a.name}" in modules else root
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]], modules: dict[str, Path]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), the edges into
    packages' ``__init__`` (re-exports) left out."""
    skip = {m for m, p in modules.items() if p.name == "__init__.py"}
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v] - skip:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(graph) - skip):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    modules = _modules()
    assert cycles(import_graph(modules), modules) == []


def test_the_cycle_check_can_fail():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    paths = {m: Path(f"{m}.py") for m in graph}
    assert cycles(graph, paths) == [["a", "b", "c"]]


@pytest.mark.parametrize("base", ["attnclust.layer"])
def test_the_layers_base_imports_neither_the_clusterer_nor_the_study(base):
    modules = _modules()
    graph = import_graph(modules)
    above = ("attnclust.cluster", "attnclust.study", "attnclust.cli", "attnclust.plotting")
    found = {m: sorted(t for t in graph[m] if t.startswith(above))
             for m in graph if m == base or m.startswith(base + ".")}
    assert {m: t for m, t in found.items() if t} == {}


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}

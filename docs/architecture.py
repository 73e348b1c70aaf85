"""The picture of the package's layout: the study, the clusterer, and what joins them.

The documentation build (``conf.py``) runs it, and so does ``python docs/architecture.py``:
it writes ``docs/architecture.png`` (shown by the architecture page). The picture is read off the
source tree, not drawn by hand: one box per part of the package (``attnclust.study``,
``attnclust.cluster``, their subpackages, and the shared top-level modules), listing its
modules with their line counts, and one arrow per pair of parts that import from each
other, labelled with the number of import statements.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import matplotlib

HERE = Path(__file__).resolve().parent
OUT = HERE / "architecture.png"
PACKAGE = HERE.parent / "src" / "attnclust"
PARTS = ["attnclust.study", "attnclust.study.experiments", "attnclust.cluster",
         "attnclust.cluster.kmeans", "attnclust.cli", "attnclust"]


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    """The longest entry of PARTS that holds ``module``."""
    return max((p for p in PARTS if module == p or module.startswith(p + ".")), key=len)


def _imports(path: Path, module: str) -> list[str]:
    """The package's modules imported by the file at ``path`` (its name: ``module``)."""
    is_package = path.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.append(target)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
    return [t for t in found if t == "attnclust" or t.startswith("attnclust.")]


def layout() -> tuple[dict[str, list[tuple[str, int]]], Counter]:
    """Each part's modules ``(name, lines)`` and the import statements between parts."""
    modules: dict[str, list[tuple[str, int]]] = {p: [] for p in PARTS}
    edges: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        part = _part(module)
        name = module[len(part) + 1:] if module != part else "__init__"
        modules[part].append((name or "__init__", len(path.read_text().splitlines())))
        if module == "attnclust":
            continue            # the curated public names: every part, by design
        for target in _imports(path, module):
            other = _part(target)
            if other != part:
                edges[part, other] += 1
    return modules, edges


POSITION = {  # part: (x, y) of its box's top-left corner, in axes units
    "attnclust.study": (0.02, 0.97), "attnclust.study.experiments": (0.02, 0.40),
    "attnclust.cluster": (0.36, 0.97), "attnclust.cluster.kmeans": (0.36, 0.40),
    "attnclust.cli": (0.70, 0.97), "attnclust": (0.70, 0.55),
}


def draw(out: Path = OUT) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modules, edges = layout()
    fig, ax = plt.subplots(figsize=(12, 9))
    ax.set_axis_off()
    centres = {}
    for part, (x, y) in POSITION.items():
        rows = sorted(modules.get(part, []))
        if not rows:
            continue
        text = "\n".join(f"{name:<22}{lines:>5}" for name, lines in rows)
        box = ax.text(x, y, f"{part}\n\n{text}", va="top", ha="left", family="monospace",
                      fontsize=7.5, bbox=dict(boxstyle="round", fc="#f4f4f8", ec="#555"))
        fig.canvas.draw()
        bb = box.get_window_extent().transformed(ax.transAxes.inverted())
        centres[part] = ((bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2)
    for (a, b), count in sorted(edges.items()):
        if a in centres and b in centres:
            # the shared helpers (validation, threads, files) in grey, the rest in red;
            # the count sits a third of the way from the importer
            colour = "#999" if b == "attnclust" else "#c33"
            ax.annotate("", xy=centres[b], xytext=centres[a],
                        arrowprops=dict(arrowstyle="->", color=colour, alpha=0.6,
                                        connectionstyle="arc3,rad=0.12"))
            mx = centres[a][0] + (centres[b][0] - centres[a][0]) / 3
            my = centres[a][1] + (centres[b][1] - centres[a][1]) / 3
            ax.text(mx, my, str(count), color=colour, fontsize=9, weight="bold",
                    bbox=dict(boxstyle="circle,pad=0.2", fc="white", ec="none"))
    ax.set_title("attnclust: each part's modules (lines) and the import statements from one "
                 "part to another\n(the package's __init__, which re-exports the public "
                 "names, left out; grey: the shared helpers)")
    fig.savefig(out, dpi=100, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    draw()

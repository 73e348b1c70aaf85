"""The picture of the package's layout: the layer's base, the clusterer and the study above
it, the command line on top.

The documentation build (``conf.py``) runs it, and so does ``python docs/architecture.py``:
it writes ``docs/architecture.png`` (shown by the architecture page). The picture is read off
the source tree, not drawn by hand: one box per part of the package (``PARTS``: the
subpackages and the shared top-level modules), listing its modules with their line counts,
and one arrow per pair of parts that import from each other, labelled with the number of
import statements. Only where the boxes sit (``POSITION``) and how the long arrows go round
the others (``ROUTES``) is written here; an import between parts that has no route is drawn
as a straight arrow, so a new one still shows.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import matplotlib

HERE = Path(__file__).resolve().parent
OUT = HERE / "architecture.png"
PACKAGE = HERE.parent / "src" / "attnclust"
PARTS = ["attnclust.layer", "attnclust.cluster", "attnclust.cluster.mixture",
         "attnclust.cluster.choice", "attnclust.cluster.kmeans", "attnclust.plotting",
         "attnclust.study", "attnclust.study.experiments", "attnclust.cli", "attnclust"]
SHARED = "attnclust"    # the top-level modules: checks, files, threads, deprecations


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


# part: (x, y) of its box's top-left corner in inches; then its module list's columns, a
# width in inches at least, and what the part is
POSITION = {
    "attnclust": (0.35, 8.75), "attnclust.cli": (3.6, 8.75),
    "attnclust.study.experiments": (0.35, 6.75), "attnclust.cluster": (3.6, 6.75),
    "attnclust.plotting": (12.05, 4.2),
    "attnclust.study": (0.35, 4.2), "attnclust.cluster.kmeans": (3.6, 4.2),
    "attnclust.cluster.choice": (6.25, 4.2), "attnclust.cluster.mixture": (8.75, 4.2),
    "attnclust.layer": (0.05, 1.4),
}
LOOK = {
    "attnclust": (2, 2.8, "shared: checks, files, threads, spectra, deprecations"),
    "attnclust.cli": (4, 7.75, "the command line, one module per command"),
    "attnclust.study.experiments": (2, 2.8, "one module per figure of the paper"),
    "attnclust.cluster": (4, 7.75, "AttentionClustering: its plan, rows, fits and "
                          "temperature path"),
    "attnclust.plotting": (1, 1.4, "pictures"),
    "attnclust.study": (2, 2.8, "the paper: risks, PGD, in-context quantization"),
    "attnclust.cluster.kmeans": (1, 2.0, "the k-means engine"),
    "attnclust.cluster.choice": (1, 2.0, "the number of clusters"),
    "attnclust.cluster.mixture": (2, 2.6, "the mixture engine: shaped heads"),
    "attnclust.layer": (6, 14.15, "the layer's base: geometries, heads, sphere, schedules, "
                        "results; imports no other part but the shared modules"),
}
# (importer, imported): the arrow's path. Its first and last entries are points on the two
# boxes, (side, fraction along it from the left or the top; None: in line with the point
# before); between them ("x", v) moves across to x = v and ("y", v) up or down to y = v,
# v a number or (part, side, offset): that box's side, moved by offset. The count sits on
# the longest upright segment.
_BELOW_CLUSTER = ("y", ("attnclust.cluster", "bottom", -0.12))
ROUTES = {
    ("attnclust.cli", "attnclust.study.experiments"): [("left", 0.82), ("top", 0.45)],
    ("attnclust.cli", "attnclust.study"): [("left", 0.97), ("x", 3.3), ("right", 0.25)],
    ("attnclust.cli", "attnclust.cluster"): [("bottom", 0.5), ("top", None)],
    ("attnclust.cli", "attnclust.cluster.mixture"): [("right", 0.6), ("x", 11.55),
                                                     ("right", 0.3)],
    ("attnclust.cli", "attnclust.cluster.choice"): [("right", 0.75), ("x", 11.8),
                                                    _BELOW_CLUSTER, ("top", 0.3)],
    ("attnclust.cli", "attnclust.plotting"): [("right", 0.3), ("x", 12.9), ("top", None)],
    ("attnclust.cli", "attnclust.layer"): [("right", 0.1), ("x", 14.0), ("top", None)],
    ("attnclust.study.experiments", "attnclust.study"): [("bottom", 0.5), ("top", None)],
    ("attnclust.study.experiments", "attnclust.cluster"): [("right", 0.3), ("left", None)],
    ("attnclust.study.experiments", "attnclust.layer"): [("left", 0.6), ("x", 0.2),
                                                         ("top", None)],
    ("attnclust.study", "attnclust.layer"): [("bottom", 0.5), ("top", None)],
    ("attnclust.cluster", "attnclust.study"): [("left", 0.9), ("x", 3.47), ("right", 0.55)],
    ("attnclust.cluster", "attnclust.plotting"): [("right", 0.85), ("x", 12.5),
                                                  ("top", None)],
    ("attnclust.cluster", "attnclust.layer"): [("bottom", 0.31), ("top", None)],
    ("attnclust.cluster", "attnclust.cluster.kmeans"): [("bottom", 0.07), ("top", None)],
    ("attnclust.cluster.kmeans", "attnclust.cluster"): [("top", 0.7), ("bottom", None)],
    ("attnclust.cluster", "attnclust.cluster.choice"): [("bottom", 0.4), ("top", None)],
    ("attnclust.cluster.choice", "attnclust.cluster"): [("top", 0.7), ("bottom", None)],
    ("attnclust.cluster", "attnclust.cluster.mixture"): [("bottom", 0.73), ("top", None)],
    ("attnclust.cluster.mixture", "attnclust.cluster"): [("top", 0.6), ("bottom", None)],
    ("attnclust.cluster.choice", "attnclust.cluster.kmeans"): [("bottom", 0.2),
                                                               ("right", 0.86)],
    ("attnclust.cluster.choice", "attnclust.cluster.mixture"): [("right", 0.75),
                                                                ("left", None)],
    ("attnclust.cluster.kmeans", "attnclust.layer"): [("bottom", 0.5), ("top", None)],
    ("attnclust.cluster.mixture", "attnclust.layer"): [("bottom", 0.5), ("top", None)],
    ("attnclust.plotting", "attnclust.layer"): [("bottom", 0.3), ("top", None)],
}
RED, BLUE, GREY = "#c0392b", "#2c5d9e", "#888888"


def _box_text(rows: list[tuple[str, int]], columns: int) -> str:
    """The modules ``name  lines`` in ``columns`` columns, filled down."""
    rows = sorted(rows)
    width = max(len(name) for name, _ in rows) + 1
    depth = -(-len(rows) // columns)
    cells = [f"{name:<{width}}{lines:>4}" for name, lines in rows]
    return "\n".join("   ".join(cells[c * depth + r] for c in range(columns)
                                if c * depth + r < len(cells)) for r in range(depth))


def _anchor(box, side: str, fraction, before=None) -> tuple[float, float]:
    x0, y0, x1, y1 = box
    if side in ("top", "bottom"):
        x = before[0] if fraction is None else x0 + fraction * (x1 - x0)
        return x, (y1 if side == "top" else y0)
    return (x0 if side == "left" else x1), \
        (before[1] if fraction is None else y1 - fraction * (y1 - y0))


def _path(route, start: str, end: str, boxes) -> list[tuple[float, float]]:
    """The corners of an arrow: straight moves from the start to the end anchor."""
    points = [_anchor(boxes[start], *route[0])]
    for axis, value in route[1:-1]:
        if isinstance(value, tuple):
            part, side, offset = value
            value = _anchor(boxes[part], side, 0.0)[0 if side in ("left", "right") else 1] \
                + offset
        x, y = points[-1]
        points.append((value, y) if axis == "x" else (x, value))
    side, fraction = route[-1]
    target = _anchor(boxes[end], side, fraction, points[-1])
    x, y = points[-1]
    if x != target[0] and y != target[1]:
        # into a top or bottom: across first, then down; into a side: down, then across
        points.append((target[0], y) if side in ("top", "bottom") else (x, target[1]))
    points.append(target)
    return points


def _straight(a, b) -> list[tuple[float, float]]:
    """Centre to centre, cut at the two boxes' edges (an import with no route)."""
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = a, b
    ca, cb = ((ax0 + ax1) / 2, (ay0 + ay1) / 2), ((bx0 + bx1) / 2, (by0 + by1) / 2)

    def cut(c, box, towards):
        dx, dy = towards[0] - c[0], towards[1] - c[1]
        half_w, half_h = (box[2] - box[0]) / 2, (box[3] - box[1]) / 2
        t = min(half_w / abs(dx) if dx else float("inf"), half_h / abs(dy) if dy else float("inf"))
        return c[0] + t * dx, c[1] + t * dy
    return [cut(ca, a, cb), cut(cb, b, ca)]


def draw(out: Path = OUT) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path as MplPath

    modules, edges = layout()
    width, height = 14.45, 9.45
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    renderer = fig.canvas.get_renderer()
    to_data = ax.transData.inverted()

    def extent(artist):
        bb = artist.get_window_extent(renderer).transformed(to_data)
        return bb.width, bb.height

    shared = Counter({a: n for (a, b), n in edges.items() if b == SHARED})
    boxes, pad = {}, 0.1
    for part, (x, y) in POSITION.items():
        rows = modules.get(part, [])
        if not rows:
            continue
        columns, least, role = LOOK[part]
        title = ax.text(x + pad, y - pad, part, va="top", ha="left", weight="bold",
                        fontsize=10, zorder=3)
        note = ax.text(x + pad, y - pad - 0.2, role, va="top", ha="left", style="italic",
                       fontsize=8, color="#444", zorder=3)
        listing = ax.text(x + pad, y - pad - 0.45, _box_text(rows, columns), va="top",
                          ha="left", family="monospace", fontsize=7.5, zorder=3)
        w = max(extent(title)[0], extent(note)[0], extent(listing)[0]) + 2 * pad
        h = 0.45 + extent(listing)[1] + 2 * pad
        if part in shared:
            h += 0.2
            ax.text(x + pad, y - h + pad, f"+ {shared[part]} imports of the shared modules",
                    va="bottom", ha="left", fontsize=7.5, color=GREY, zorder=3)
        w = max(w, least)
        fc = "#eef3fb" if part.startswith("attnclust.cluster") else \
            "#fbf1ea" if part.startswith("attnclust.study") else \
            "#eef7ee" if part == "attnclust.layer" else "#f4f4f4"
        ax.add_patch(FancyBboxPatch((x, y - h), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                    fc=fc, ec="#555", lw=1.0, zorder=2))
        boxes[part] = (x, y - h, x + w, y)

    for (a, b), count in sorted(edges.items()):
        if b == SHARED or a not in boxes or b not in boxes:
            continue
        route = ROUTES.get((a, b))
        points = _path(route, a, b, boxes) if route else _straight(boxes[a], boxes[b])
        colour = RED if a == "attnclust.cli" or b == "attnclust.cli" else \
            GREY if a == SHARED else BLUE
        codes = [MplPath.MOVETO] + [MplPath.LINETO] * (len(points) - 1)
        ax.add_patch(FancyArrowPatch(path=MplPath(points, codes), arrowstyle="-|>",
                                     mutation_scale=12, color=colour, lw=1.3, alpha=0.85,
                                     zorder=1))
        # the count at the middle of the longest upright segment (of the longest where
        # there is none): clear of the boxes' rows of arrows
        i = max(range(len(points) - 1), key=lambda k: (points[k][0] == points[k + 1][0],
                abs(points[k + 1][0] - points[k][0]) + abs(points[k + 1][1] - points[k][1])))
        (x0, y0), (x1, y1) = points[i], points[i + 1]
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, str(count), color=colour, fontsize=9,
                weight="bold", ha="center", va="center", zorder=4,
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))

    ax.text(width / 2, height - 0.15,
            "attnclust: each part's modules (lines) and the import statements from one part "
            "to another", ha="center", va="top", fontsize=12)
    ax.text(width / 2, height - 0.42,
            "an arrow points from the importer to the imported; red: the command line's; "
            "the package's __init__ (the public names) left out", ha="center", va="top",
            fontsize=9, color="#444")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out}")


if __name__ == "__main__":
    draw()

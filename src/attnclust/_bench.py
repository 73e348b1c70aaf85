"""Runner for the benchmarks under ``benchmarks/`` (``attnclust bench``).

Each ``benchmarks/bench_*.py`` defines ``run(quick: bool) -> list[dict]``; every dict is
one row of the printed table (same keys within a file). Benchmarks report ratios
against a baseline measured in the same run, never absolute timings alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["find_benchmarks", "run_benchmarks", "format_table"]


def find_benchmarks(directory: str | Path | None = None) -> list[Path]:
    """The ``bench_*.py`` files of ``directory`` (default: ``./benchmarks`` or the repo's)."""
    candidates = [Path(directory)] if directory else [
        Path.cwd() / "benchmarks",
        Path(__file__).resolve().parents[2] / "benchmarks",  # src/attnclust/ -> repo root
    ]
    for folder in candidates:
        files = sorted(folder.glob("bench_*.py"))
        if files:
            return files
    raise ValueError(f"no benchmarks found in {', '.join(map(str, candidates))}")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"attnclust_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_benchmarks(files: list[Path], *, quick: bool, only: str | None = None):
    """Run each benchmark file; yield ``(name, rows)``."""
    for path in files:
        name = path.stem.removeprefix("bench_")
        if only and only not in name:
            continue
        yield name, _load(path).run(quick=quick)


def format_table(rows: list[dict]) -> str:
    """Plain-text table of dict rows; floats in 4 significant digits."""
    if not rows:
        return "(no rows)"
    keys = list(rows[0])

    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)

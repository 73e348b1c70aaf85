"""Runner for the benchmarks under ``benchmarks/`` (``attnclust bench``).

Each ``benchmarks/bench_*.py`` defines ``run(quick: bool) -> list[dict]``; every dict is
one row of the printed table (a row's missing columns print empty). A benchmark of device paths also
takes ``device`` (``attnclust bench --device cuda``). Benchmarks report ratios
against a baseline measured in the same run, never absolute timings alone.

The benchmark files belong to the source repository, not to the installed package (they
compare against baselines and are development tools). ``attnclust bench`` looks in
``--dir``, else ``./benchmarks``, else the ``benchmarks/`` folder of the source checkout
the package runs from (an editable install); an installed package without a checkout
says so and asks for ``--dir``.
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import traceback
from pathlib import Path

__all__ = ["describe_failure", "find_benchmarks", "run_benchmarks", "format_table"]


def _checkout_benchmarks() -> Path | None:
    """``benchmarks/`` of the source checkout this package runs from (``src/`` layout)."""
    package = Path(__file__).resolve().parent
    root = package.parents[1]
    if package.parent.name == "src" and (root / "pyproject.toml").is_file():
        return root / "benchmarks"
    return None


def find_benchmarks(directory: str | Path | None = None) -> list[Path]:
    """The ``bench_*.py`` files of ``directory`` (default: ``./benchmarks`` or the checkout's).

    Raises
    ------
    ValueError
        No benchmark file where it looked; the message names every folder tried and, for
        an installed package, says that the benchmarks come with the source code.
    """
    if directory is not None:
        files = sorted(Path(directory).glob("bench_*.py"))
        if not files:
            raise ValueError(f"no bench_*.py files in {directory}")
        return files
    checkout = _checkout_benchmarks()
    candidates = [Path.cwd() / "benchmarks"] + ([checkout] if checkout else [])
    for folder in candidates:
        files = sorted(folder.glob("bench_*.py"))
        if files:
            return files
    where = " or ".join(str(c) for c in candidates)
    hint = "" if checkout else (
        f"; the benchmarks come with the source code, not with the installed package "
        f"({Path(__file__).resolve().parent}): run from a checkout of the repository or pass "
        "--dir PATH/TO/attnclust/benchmarks")
    raise ValueError(f"no bench_*.py files in {where}{hint}")


def describe_failure(path: Path, exc: BaseException) -> str:
    """One line saying why the benchmark file ``path`` failed: the error and where.

    Examples
    --------
    >>> describe_failure(Path("bench_x.py"), ZeroDivisionError("division by zero"))
    'ZeroDivisionError: division by zero'
    """
    if isinstance(exc, subprocess.TimeoutExpired):
        what = f"a subprocess timed out after {exc.timeout:g} s"
    elif isinstance(exc, subprocess.CalledProcessError):
        what = f"a subprocess exited with status {exc.returncode}"
    elif isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    elif isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    else:
        text = " ".join(str(exc).split())
        line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__))
                     if Path(f.filename).resolve() == path.resolve()), None)
        return f"{type(exc).__name__}: {text}" + (f" (line {line})" if line else "")
    stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
        else (exc.stderr or "")
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    return what + (f": {last}" if last else "")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"attnclust_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_benchmarks(files: list[Path], *, quick: bool, only: str | None = None,
                   device: str | None = None):
    """Run each benchmark file; yield ``(name, rows)``.

    With ``device``, a benchmark whose ``run`` takes a ``device`` argument runs there; the
    others do not run and yield ``None`` rows (they measure the CPU only).
    """
    for path in files:
        name = path.stem.removeprefix("bench_")
        if only and only not in name:
            continue
        run = _load(path).run
        if device is None:
            yield name, run(quick=quick)
        elif "device" in inspect.signature(run).parameters:
            yield name, run(quick=quick, device=device)
        else:
            yield name, None


def format_table(rows: list[dict]) -> str:
    """Plain-text table of dict rows (the columns: every key of any row, in order of first
    appearance; a row without one leaves it blank); floats in 4 significant digits."""
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)

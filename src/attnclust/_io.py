"""File helpers: atomic writes (an interrupted run never leaves a partial file) and a loader
for data matrices (``.npy`` or ``.csv``, one point per row)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "load_matrix", "save_matrix"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    The temporary file keeps ``path``'s suffix (so writers that look at the extension,
    like ``numpy.save`` or ``matplotlib``, behave), and is removed if the block raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}",
                               dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _parse_csv(path: Path) -> np.ndarray:
    text = path.read_text(encoding="utf-8", errors="strict")
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise ValueError(f"{path}: empty file (no rows)")
    delimiter = "," if "," in lines[0] else (";" if ";" in lines[0] else None)

    def split(line: str) -> list[str]:
        return [c.strip() for c in (line.split(delimiter) if delimiter else line.split())]

    def numeric(cells: list[str]) -> bool:
        try:
            [float(c) for c in cells]
        except ValueError:
            return False
        return True

    start = 0 if numeric(split(lines[0])) else 1          # a non-numeric first line is a header
    rows = [split(ln) for ln in lines[start:]]
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")
    width = len(rows[0])
    out = np.empty((len(rows), width))
    for i, cells in enumerate(rows):
        if len(cells) != width:
            raise ValueError(f"{path}: line {i + start + 1} has {len(cells)} fields, "
                             f"expected {width}")
        for j, c in enumerate(cells):
            try:
                out[i, j] = float(c)
            except ValueError:
                raise ValueError(f"{path}: non-numeric value {c!r} at line {i + start + 1}, "
                                 f"column {j + 1}") from None
    return out


def load_matrix(path: str | os.PathLike, *, min_columns: int = 1) -> np.ndarray:
    r"""Read a data matrix, one point per row, from ``.npy`` or ``.csv`` (header optional).

    A CSV header is recognized as a first line that is not all numbers; fields are
    separated by commas (or semicolons, or whitespace when the first line has neither).

    Raises
    ------
    ValueError
        Missing or unreadable file, unknown suffix, non-numeric value, ragged rows, NaN or
        inf, no rows, not 2-D, or fewer than ``min_columns`` columns; the message names the
        file and, where it applies, the line or row.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
    >>> _ = path.write_text("a,b\n1,2\n3,4\n")
    >>> load_matrix(path)
    array([[1., 2.],
           [3., 4.]])
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            try:
                X = np.load(path, allow_pickle=False)
            except (ValueError, EOFError) as exc:
                raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
            if X.size and not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
                raise ValueError(f"{path}: non-numeric array of dtype {X.dtype}")
            X = np.asarray(X, dtype=np.float64)
        elif suffix == ".csv":
            X = _parse_csv(path)
        else:
            raise ValueError(f"{path}: unsupported file type {suffix or '(none)'!r}; "
                             "use .npy or .csv")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text CSV file") from None
    if X.size == 0:
        raise ValueError(f"{path}: empty data (shape {X.shape})")
    if X.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array (one point per row), got shape {X.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"{path}: NaN or inf at row {i + 1}, column {j + 1}")
    if X.shape[1] < min_columns:
        raise ValueError(f"{path}: {X.shape[1]} column(s), need at least {min_columns} "
                         "(one point per row, one feature per column)")
    return X


def save_matrix(X, path: Path) -> None:
    """Write ``X`` to ``path`` as ``.npy`` or ``.csv`` (by suffix); not atomic by itself."""
    X = np.asarray(X)
    if path.suffix.lower() == ".npy":
        np.save(path, X)
    elif path.suffix.lower() == ".csv":
        fmt = "%d" if np.issubdtype(X.dtype, np.integer) else "%.17g"
        np.savetxt(path, X if X.ndim == 2 else X[:, None], delimiter=",", fmt=fmt)
    else:
        raise ValueError(f"{path}: unsupported output type {path.suffix or '(none)'!r}; "
                         "use .npy or .csv")

"""File helpers: atomic writes (an interrupted run never leaves a partial file) and a loader
for data matrices (``.npy`` or ``.csv``, one point per row)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "load_matrix", "save_matrix", "save_matrices"]


def _file_mode(path: Path) -> int:
    """Permission bits for a new output: those of an existing ``path``, else ``0o666 & ~umask``.

    ``tempfile.mkstemp`` creates files readable by their owner only; an output file should
    have the permissions an ordinary ``open(path, "w")`` would give it.
    """
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        pass
    old = os.umask(0)          # the only portable way to read the umask is to set it
    os.umask(old)
    return 0o666 & ~old


def _temp_next_to(path: Path) -> Path:
    """Create an empty hidden temporary file in ``path``'s folder, with its suffix in lower case.

    Writers that look at the extension (``numpy.save`` appends ``.npy`` unless the name ends
    in exactly ``.npy``; ``matplotlib`` picks the format by suffix) see the suffix they expect.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix.lower()}",
                               dir=path.parent)
    os.close(fd)
    return Path(tmp)


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, cannot write a file there")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    The temporary file keeps ``path``'s suffix in lower case (so writers that look at the
    extension, like ``numpy.save`` or ``matplotlib``, behave), gets the permissions a plain
    ``open(path, "w")`` would give (``0o666`` less the umask, or those of the file it
    replaces), and is removed if the block raises.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
    >>> with atomic_path(path) as tmp:
    ...     _ = tmp.write_text("done")
    >>> path.read_text()
    'done'
    """
    path = Path(path)
    _check_target(path)
    tmp = _temp_next_to(path)
    try:
        yield tmp
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_matrices(outputs: Mapping[str | os.PathLike, object]) -> None:
    """Write every ``path -> array`` (by suffix, see :func:`save_matrix`), all or nothing.

    Every array is first written to a temporary file next to its target; only when all of
    them are written are they renamed, in one loop, onto their targets. If anything fails,
    every temporary file is removed, and so is every target this call had already created.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> save_matrices({folder / "a.npy": np.eye(2), folder / "a.csv": np.eye(2)})
    >>> sorted(p.name for p in folder.iterdir())
    ['a.csv', 'a.npy']
    """
    targets = [(Path(path), array) for path, array in outputs.items()]
    for path, _ in targets:
        _check_target(path)
    staged: list[tuple[Path, Path]] = []
    created: list[Path] = []
    try:
        for path, array in targets:
            tmp = _temp_next_to(path)
            staged.append((tmp, path))
            save_matrix(array, tmp)
            os.chmod(tmp, _file_mode(path))
        for tmp, path in staged:
            existed = path.exists()
            os.replace(tmp, path)
            if not existed:
                created.append(path)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _parse_csv(path: Path) -> np.ndarray:
    text = path.read_text(encoding="utf-8", errors="strict")
    # (line number in the file, stripped text) of the lines that hold data or a header
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), start=1)]
    lines = [(n, ln) for n, ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise ValueError(f"{path}: empty file (no rows)")
    first = lines[0][1]
    delimiter = "," if "," in first else (";" if ";" in first else None)

    def split(line: str) -> list[str]:
        return [c.strip() for c in (line.split(delimiter) if delimiter else line.split())]

    # the first line is a header only when none of its cells is a number: a line of numbers
    # with one bad cell is data with a bad value, reported below like any other
    header = not any(_is_number(c) for c in split(first))
    rows = [(n, split(ln)) for n, ln in lines[1 if header else 0:]]
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")
    width = len(rows[0][1])
    out = np.empty((len(rows), width))
    for i, (line_no, cells) in enumerate(rows):
        if len(cells) != width:
            raise ValueError(f"{path}: line {line_no} has {len(cells)} fields, "
                             f"expected {width}")
        for j, c in enumerate(cells):
            try:
                out[i, j] = float(c)
            except ValueError:
                raise ValueError(f"{path}: non-numeric value {c!r} at line {line_no}, "
                                 f"column {j + 1}") from None
    return out


def load_matrix(path: str | os.PathLike, *, min_columns: int = 1) -> np.ndarray:
    r"""Read a data matrix, one point per row, from ``.npy`` or ``.csv`` (header optional).

    A CSV header is recognized as a first line none of whose cells is a number (a first
    line of numbers with one bad cell is data with a bad value, reported as such); fields
    are separated by commas (or semicolons, or whitespace when the first line has neither).

    Raises
    ------
    ValueError
        Missing or unreadable file, unknown suffix, complex or other non-real ``.npy``
        dtype, non-numeric value, ragged rows, NaN or inf, no rows, not 2-D, or fewer than
        ``min_columns`` columns; the message names the file and, where it applies, the line
        (counted in the file, blank and comment lines included) or row.

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
            if np.issubdtype(X.dtype, np.complexfloating):
                raise ValueError(f"{path}: complex array (dtype {X.dtype}); the data must be "
                                 "real numbers")
            if X.dtype.kind not in "biuf":          # bool, integers, floats (no timedelta)
                raise ValueError(f"{path}: non-numeric array of dtype {X.dtype}; the data must "
                                 "be real numbers")
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


def save_matrix(X, path: str | os.PathLike) -> None:
    """Write ``X`` to ``path`` as ``.npy`` or ``.csv`` (by suffix, any case); not atomic.

    The file is written through an open handle, so the name is used exactly as given
    (``numpy.save`` given a name would append ``.npy`` to ``q.NPY``).
    """
    path = Path(path)
    X = np.asarray(X)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        with open(path, "wb") as f:
            np.save(f, X)
    elif suffix == ".csv":
        fmt = "%d" if np.issubdtype(X.dtype, np.integer) else "%.17g"
        with open(path, "w", encoding="utf-8", newline="") as f:
            np.savetxt(f, X if X.ndim == 2 else X[:, None], delimiter=",", fmt=fmt)
    else:
        raise ValueError(f"{path}: unsupported output type {path.suffix or '(none)'!r}; "
                         "use .npy or .csv")

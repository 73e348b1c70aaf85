"""Reading data matrices, one point per row: ``.npy`` or ``.csv``, and the checks of
their rows.

A ``.npy`` header is checked against the file's size before anything is allocated; the
file is then memory-mapped (:func:`open_npy`) or read by blocks of rows
(:class:`NpyRows`). A ``.csv`` is parsed with its header detected (:func:`load_matrix`).
Every error is one line that names the file and, where it applies, the line or row.

The atomic writes (an interrupted run never leaves a partial file) are
:mod:`attnclust._atomic`; their names are importable from here too.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from ._atomic import (  # the writes: importable from here, where the command line reads them
    atomic_path,
    deferred_interrupts,
    interrupt,
    remove_temporaries,
    save_matrices,
    save_matrix,
    writable_folder,
)

__all__ = ["NpyRows", "atomic_path", "check_finite_rows", "check_matrix_shape",
           "check_nonzero_rows", "deferred_interrupts", "interrupt",
           "load_matrix", "open_npy", "read_npy_header", "remove_temporaries", "save_matrix",
           "save_matrices", "writable_folder"]


def _human(n_bytes: float) -> str:
    """A byte count for messages: ``'58.2 TiB'``."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while n_bytes >= 1024 and power < len(units) - 1:
        n_bytes /= 1024
        power += 1
    return f"{n_bytes:.0f} bytes" if power == 0 else f"{n_bytes:.1f} {units[power]}"


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _is_integer(cell: str) -> bool:
    return _INTEGER.fullmatch(cell) is not None


def _numeric_header(path: Path, first: list[str], rows: list[tuple[int, list[str]]]) -> bool:
    """Whether a first line of numbers is a header (``header="auto"``), or ``ValueError``.

    A line of numbers is data, unless it reads like column names: increasing integers
    while the lines after it hold other numbers. Then it is pandas' ``to_csv(index=False)``
    header ``0,1,...,d-1`` when it is exactly that; anything else (``2019,2020``, or
    ``0,1,...`` above integer data) is ambiguous and refused: guessing would shift every
    label by one row, or drop a row, without a word. (NaN, inf and non-numbers below are
    left to the checks that report them.)
    """
    if not all(_is_integer(c) for c in first):
        return False
    values = [int(c) for c in first]
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        return False                  # column numbers increase; this is a row of data
    pandas = first == [str(j) for j in range(len(first))]
    integer_data = all(_is_integer(c) for _, cells in rows for c in cells
                       if _is_number(c) and math.isfinite(float(c)))
    if pandas and not integer_data:
        return True
    if integer_data and not pandas:
        return False
    raise ValueError(f"{path}: cannot tell whether the first line ({','.join(first)[:40]}) "
                     "is a header of column numbers or a row of data; pass --header yes "
                     "or --header no (header=True or False)")


def _parse_csv(path: Path, header: bool | None = None) -> np.ndarray:
    # utf-8-sig drops the byte-order mark that spreadsheet programs write ("CSV UTF-8")
    text = path.read_text(encoding="utf-8-sig", errors="strict")
    # (line number in the file, stripped text) of the lines that hold data or a header
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), start=1)]
    lines = [(n, ln) for n, ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise ValueError(f"{path}: empty file (no rows)")
    first = lines[0][1]
    delimiter = "," if "," in first else (";" if ";" in first else None)

    def split(line: str) -> list[str]:
        return [c.strip() for c in (line.split(delimiter) if delimiter else line.split())]

    if header is None:
        # a header when none of its cells is a number: a line of numbers with one bad cell
        # is data with a bad value, reported below like any other
        cells = split(first)
        header = not any(_is_number(c) for c in cells)
        if not header and all(_is_number(c) for c in cells):
            header = _numeric_header(path, cells, [(n, split(ln)) for n, ln in lines[1:]])
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


def read_npy_header(path: str | os.PathLike) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of a ``.npy`` file, checked against the file's size.

    Nothing of the data is read or allocated: a file whose header declares more data than
    it holds (truncated, or crafted to make a reader allocate terabytes) is refused here.

    Raises
    ------
    ValueError
        Not a ``.npy`` file, an unsupported format version, an object (pickled) dtype, or
        fewer data bytes than the header declares.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.npy"
    >>> np.save(path, np.zeros((3, 2), dtype=np.float32))
    >>> read_npy_header(path)
    ((3, 2), dtype('float32'), 128)
    """
    shape, _, dtype, offset = _npy_header(path)
    return shape, dtype, offset


def _npy_header(path: str | os.PathLike) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """:func:`read_npy_header` with the header's ``fortran_order`` too: ``(shape, fortran
    order, dtype, data offset)``."""
    path = Path(path)
    fmt = np.lib.format
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in readers:
                raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
            shape, fortran, dtype = readers[version](f)
            offset = f.tell()
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, EOFError, SyntaxError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({_first_line(exc)})") from None
    if dtype.hasobject:
        raise ValueError(f"{path}: array of Python objects (dtype {dtype}); the data must be "
                         "real numbers")
    declared = math.prod(shape) * dtype.itemsize     # Python ints: no overflow
    if size - offset < declared:
        raise ValueError(f"{path}: truncated or inconsistent .npy file: its header declares "
                         f"shape {shape} of {dtype} ({_human(declared)} of data), but the "
                         f"file holds {_human(max(size - offset, 0))}")
    return tuple(int(n) for n in shape), bool(fortran), dtype, offset


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_real_dtype(path: Path, dtype: np.dtype) -> None:
    """Refuse any ``.npy`` dtype but bool, integers and real floats (timedelta included)."""
    if np.issubdtype(dtype, np.complexfloating):
        raise ValueError(f"{path}: complex array (dtype {dtype}); the data must be real numbers")
    # kind, not issubdtype(number): timedelta64 subclasses numpy's signed integers
    if dtype.kind not in "biuf":
        raise ValueError(f"{path}: non-numeric array of dtype {dtype}; the data must be "
                         "real numbers")


def open_npy(path: str | os.PathLike) -> np.memmap | np.ndarray:
    """A ``.npy`` matrix, memory-mapped read-only, after checking its header and dtype.

    Raises ``ValueError`` as :func:`read_npy_header`, and for complex or other non-real
    dtypes. An empty array (which cannot be mapped) is returned as a plain array.
    """
    path = Path(path)
    shape, dtype, _ = read_npy_header(path)
    _check_real_dtype(path, dtype)
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=dtype)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({_first_line(exc)})") from None


class NpyRows:
    """The rows of a 2-D ``.npy`` file, read on demand with plain reads (no memory map).

    A memory map keeps every page it has touched in the process's resident memory until
    the system reclaims it; reading blocks into fresh arrays keeps the resident memory of
    a pass over the file at one block. Indexing: a slice of rows (step 1), an integer
    array of rows, or anything NumPy takes on the block of those rows.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.npy"
    >>> np.save(path, np.arange(12.0).reshape(4, 3))
    >>> rows = NpyRows(path)
    >>> rows.shape, rows[1:3].tolist(), rows[np.array([0, 3])][:, 0].tolist()
    ((4, 3), [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]], [0.0, 9.0])
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        shape, fortran, self.dtype, self._offset = _npy_header(self.path)
        _check_real_dtype(self.path, self.dtype)
        if len(shape) != 2:
            raise ValueError(f"{self.path}: expected a 2-D array (one point per row), got "
                             f"shape {shape}")
        if fortran:                        # a Fortran-ordered file is not row by row
            raise ValueError(f"{self.path}: a Fortran-ordered .npy; save it in C order "
                             "(np.save of np.ascontiguousarray(X))")
        self.shape = shape
        self.ndim, self.size = 2, math.prod(shape)

    def _read(self, start: int, stop: int) -> np.ndarray:
        n, d = self.shape
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        count = max(0, stop - start) * d
        row_bytes = d * self.dtype.itemsize
        with open(self.path, "rb") as f:
            f.seek(self._offset + start * row_bytes)
            block = np.fromfile(f, dtype=self.dtype, count=count)
        return block.reshape(-1, d)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(rows, slice) and rows.step in (None, 1):
            start, stop, _ = rows.indices(self.shape[0])
            block = self._read(start, stop)
        else:                       # rows picked out of blocks, in the order asked
            idx = np.arange(self.shape[0])[rows]
            flat = np.atleast_1d(idx)
            block = np.empty((flat.size, self.shape[1]), self.dtype)
            for start in range(0, self.shape[0], _CHECK_ROWS):
                here = np.flatnonzero((flat >= start) & (flat < start + _CHECK_ROWS))
                if here.size:
                    block[here] = self._read(start, start + _CHECK_ROWS)[flat[here] - start]
            if np.ndim(idx) == 0:
                block = block[0]
        return block[(slice(None), *rest)] if rest else block


# rows checked at once by the finiteness check: bounded memory on memory-mapped files
_CHECK_ROWS = 1 << 16


def check_finite_rows(X, path, *, row_offset: int = 0) -> None:
    """``ValueError`` naming the first NaN or inf (row and column counted from 1).

    Reads ``X`` in blocks of rows, so a memory-mapped file is never copied whole.
    ``row_offset`` is the global index of ``X``'s first row (a shard of a file).
    """
    if X.dtype.kind != "f":
        return                      # bool and integers are always finite
    for start in range(0, X.shape[0], _CHECK_ROWS):
        bad = ~np.isfinite(X[start:start + _CHECK_ROWS])
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"{path}: NaN or inf at row {row_offset + start + i + 1}, "
                             f"column {j + 1}")


def check_matrix_shape(X, path, *, min_columns: int = 1) -> None:
    """``ValueError`` unless ``X`` is a non-empty 2-D matrix of at least ``min_columns``."""
    if X.size == 0:
        raise ValueError(f"{path}: empty data (shape {X.shape})")
    if X.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array (one point per row), got shape {X.shape}")
    if X.shape[1] < min_columns:
        raise ValueError(f"{path}: {X.shape[1]} column(s), need at least {min_columns} "
                         "(one point per row, one feature per column)")


def check_nonzero_rows(X, path, *, row_offset: int = 0) -> None:
    """``ValueError`` naming the first all-zero row (counted from 1), read in blocks."""
    for start in range(0, X.shape[0], _CHECK_ROWS):
        zero = np.flatnonzero(~np.asarray(X[start:start + _CHECK_ROWS]).any(axis=1))
        if zero.size:
            raise ValueError(f"{path}: row {row_offset + start + zero[0] + 1} is all zeros and "
                             "has no direction; normalizing rows onto the sphere needs "
                             "non-zero rows")


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a data file")
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")


def load_matrix(path: str | os.PathLike, *, min_columns: int = 1,
                mmap: bool = False, header: bool | None = None) -> np.ndarray:
    r"""Read a data matrix, one point per row, from ``.npy`` or ``.csv`` (header optional).

    A CSV header is recognized as a first line none of whose cells is a number (a first
    line of numbers with one bad cell is data with a bad value, reported as such), or as
    pandas' header of column numbers ``0,1,...,d-1`` above rows that are not all integers;
    a first line of integers that could be either is refused (see ``header``). Fields
    are separated by commas (or semicolons, or whitespace when the first line has neither);
    a UTF-8 byte-order mark is skipped. A ``.npy`` header is checked against the file size
    before anything is allocated.

    Parameters
    ----------
    path : path of a ``.npy`` or ``.csv`` file
    min_columns : int, default=1
    mmap : bool, default=False
        Return a float32 or float64 ``.npy`` as a read-only memory map instead of a
        float64 copy in memory (other dtypes are still converted to float64).
    header : bool or None, default=None
        Whether a CSV's first line is a header (``True``: skipped whatever it holds;
        ``False``: data); ``None`` detects it as above. Ignored for ``.npy``.

    Raises
    ------
    ValueError
        Missing or unreadable file, unknown suffix, truncated ``.npy`` (fewer bytes than
        its header declares), complex or other non-real ``.npy`` dtype, non-numeric value,
        ragged rows, NaN or inf, no rows, not 2-D, or fewer than ``min_columns`` columns;
        one line, naming the file and, where it applies, the line (counted in the file,
        blank and comment lines included) or row.

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
    _check_file(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        X = open_npy(path)
    elif suffix == ".csv":
        try:
            X = _parse_csv(path, header)
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a text CSV file (not UTF-8)") from None
        except OSError as exc:
            raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    else:
        raise ValueError(f"{path}: unsupported file type {suffix or '(none)'!r}; "
                         "use .npy or .csv")
    check_matrix_shape(X, path, min_columns=min_columns)
    check_finite_rows(X, path)
    if mmap and X.dtype in (np.float32, np.float64):
        return X
    if isinstance(X, np.memmap):  # a copy in memory: writable, and the file is let go
        return np.array(X, dtype=np.float64)
    return X.astype(np.float64, copy=False)



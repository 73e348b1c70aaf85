"""Reading ``.npy`` matrices: the header checked against the file's size before anything
is allocated, then the file memory-mapped (:func:`open_npy`) or read by blocks of rows
(:class:`NpyRows`). Every error is one line that names the file."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

__all__ = ["BLOCK_ROWS", "NpyRows", "first_line", "open_npy", "read_npy_header"]

BLOCK_ROWS = 1 << 16       # rows read or checked at once: bounded memory on large files


def _human(n_bytes: float) -> str:
    """A byte count for messages: ``'58.2 TiB'``."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while n_bytes >= 1024 and power < len(units) - 1:
        n_bytes /= 1024
        power += 1
    return f"{n_bytes:.0f} bytes" if power == 0 else f"{n_bytes:.1f} {units[power]}"


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
        raise ValueError(f"{path}: not a readable .npy array ({first_line(exc)})") from None
    if dtype.hasobject:
        raise ValueError(f"{path}: array of Python objects (dtype {dtype}); the data must be "
                         "real numbers")
    declared = math.prod(shape) * dtype.itemsize     # Python ints: no overflow
    if size - offset < declared:
        raise ValueError(f"{path}: truncated or inconsistent .npy file: its header declares "
                         f"shape {shape} of {dtype} ({_human(declared)} of data), but the "
                         f"file holds {_human(max(size - offset, 0))}")
    return tuple(int(n) for n in shape), bool(fortran), dtype, offset


def first_line(exc: BaseException) -> str:
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
        raise ValueError(f"{path}: not a readable .npy array ({first_line(exc)})") from None


class NpyRows:
    """The rows of a 2-D ``.npy`` file, read on demand with plain reads (no memory map).

    A memory map keeps every page it has touched in the process's resident memory until
    the system reclaims it; reading blocks into fresh arrays keeps the resident memory of
    a pass over the file at one block (of a Fortran-ordered file, one read per column).
    Indexing: a slice of rows (step 1), an integer
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
        self._fortran = fortran            # column by column: a block is d reads
        self.shape = shape
        self.ndim, self.size = 2, math.prod(shape)

    def _read(self, start: int, stop: int) -> np.ndarray:
        n, d = self.shape
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        rows, size = max(0, stop - start), self.dtype.itemsize
        if self._fortran:
            block = np.empty((rows, d), self.dtype)
            with open(self.path, "rb") as f:
                for j in range(d * (rows > 0)):
                    f.seek(self._offset + (j * n + start) * size)
                    block[:, j] = np.fromfile(f, dtype=self.dtype, count=rows)
            return block
        count = rows * d
        row_bytes = d * size
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
            for start in range(0, self.shape[0], BLOCK_ROWS):
                here = np.flatnonzero((flat >= start) & (flat < start + BLOCK_ROWS))
                if here.size:
                    block[here] = self._read(start, start + BLOCK_ROWS)[flat[here] - start]
            if np.ndim(idx) == 0:
                block = block[0]
        return block[(slice(None), *rest)] if rest else block



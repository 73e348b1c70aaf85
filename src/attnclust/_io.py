"""File helpers: atomic writes (an interrupted run never leaves a partial file) and a loader
for data matrices (``.npy`` or ``.csv``, one point per row).

Interrupts. Every temporary file is created through :func:`_temp_next_to`, which records it
until it is renamed or removed, so the command line can remove whatever a signal left
behind (:func:`remove_temporaries`). Sections that must not be cut in the middle (creating
and recording a temporary file, renaming a set of outputs) run under
:func:`deferred_interrupts`: an interrupt raised through :func:`interrupt` while one runs
takes effect when it ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

__all__ = ["NpyRows", "atomic_path", "check_finite_rows", "check_matrix_shape",
           "check_nonzero_rows", "deferred_interrupts", "interrupt",
           "load_matrix", "open_npy", "read_npy_header", "remove_temporaries", "save_matrix",
           "save_matrices", "writable_folder"]

# temporary files created and not yet renamed or removed (see remove_temporaries)
_LIVE_TEMPS: set[Path] = set()
# depth of nested deferred_interrupts blocks, and the interrupt that arrived inside one
_DEFER = {"depth": 0, "pending": None}


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Run a block that an :func:`interrupt` must not cut; the interrupt fires at its end."""
    _DEFER["depth"] += 1
    try:
        yield
    finally:
        _DEFER["depth"] -= 1
        pending = _DEFER["pending"]
        if _DEFER["depth"] == 0 and pending is not None:
            _DEFER["pending"] = None
            pending()


def interrupt(raise_it: Callable[[], None]) -> None:
    """Call ``raise_it`` now, or when the running :func:`deferred_interrupts` block ends.

    For signal handlers: ``raise_it`` raises the exception that stops the program.
    """
    if _DEFER["depth"]:
        _DEFER["pending"] = raise_it
    else:
        raise_it()


def remove_temporaries() -> list[Path]:
    """Remove every temporary file this process created and has not renamed; return them."""
    removed = sorted(_LIVE_TEMPS)
    for tmp in removed:
        tmp.unlink(missing_ok=True)
    _LIVE_TEMPS.clear()
    return removed


def _discard(tmp: Path) -> None:
    tmp.unlink(missing_ok=True)
    _LIVE_TEMPS.discard(tmp)


def _human(n_bytes: float) -> str:
    """A byte count for messages: ``'58.2 TiB'``."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while n_bytes >= 1024 and power < len(units) - 1:
        n_bytes /= 1024
        power += 1
    return f"{n_bytes:.0f} bytes" if power == 0 else f"{n_bytes:.1f} {units[power]}"


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
    with deferred_interrupts():   # an interrupt between creating and recording would leak it
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.",
                                   suffix=f".tmp{path.suffix.lower()}", dir=path.parent)
        _LIVE_TEMPS.add(Path(tmp))
    os.close(fd)
    return Path(tmp)


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, outermost first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


@contextlib.contextmanager
def writable_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Check that files can be created in ``folder`` (making it), before any long work.

    Missing folders are created; if the block raises (an error, an interrupt), those of
    them that are still empty are removed again, so a failed command leaves the file
    system as it found it.

    Raises
    ------
    ValueError
        ``folder`` (or a parent) is a file, or a file cannot be created in it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> with writable_folder(base / "a" / "b"):
    ...     pass
    >>> (base / "a" / "b").is_dir()
    True
    """
    folder = Path(folder)
    created = _missing_folders(folder)
    try:
        try:
            for f in created:
                f.mkdir()
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            if isinstance(exc, (FileExistsError, NotADirectoryError)):
                reason = "a file is in the way"
            raise ValueError(f"{folder}: cannot write there ({reason})") from None
        yield folder
    except BaseException:
        with deferred_interrupts():
            for f in reversed(created):
                with contextlib.suppress(OSError):
                    f.rmdir()   # only if empty: never removes what someone else put there
        raise


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
        with deferred_interrupts():
            os.replace(tmp, path)
            _LIVE_TEMPS.discard(tmp)
    finally:
        _discard(tmp)


def save_matrices(outputs: Mapping[str | os.PathLike, object], *,
                  before_rename: Callable[[], None] | None = None) -> None:
    """Write every ``path -> array`` (by suffix, see :func:`save_matrix`), all or nothing.

    A value may also be a function that writes its file at the path it is given (a
    temporary path with the target's suffix), such as ``lambda p: fig.savefig(p)``.

    Every array is first written to a temporary file next to its target; only when all of
    them are written are they renamed, in one loop, onto their targets. If anything fails,
    every temporary file is removed, and so is every target this call had already created.
    The renames run under :func:`deferred_interrupts`, so an interrupt cannot leave half of
    the outputs renamed.

    ``before_rename`` is called once every file is staged and before any rename (the
    command line prints its summary there): if it raises, nothing is written.

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
    try:
        for path, array in targets:
            tmp = _temp_next_to(path)
            staged.append((tmp, path))
            if callable(array):     # a writer of its own format (a figure)
                array(tmp)
            else:
                save_matrix(array, tmp)
            os.chmod(tmp, _file_mode(path))
        if before_rename is not None:
            before_rename()
        with deferred_interrupts():
            _rename_all(staged)
    finally:
        with deferred_interrupts():     # a signal must not cut the cleanup short
            for tmp, _ in staged:
                _discard(tmp)


def _rename_all(staged: list[tuple[Path, Path]]) -> None:
    """Rename every ``(tmp, path)``; on a failure remove the targets already created."""
    created: list[Path] = []
    try:
        for tmp, path in staged:
            existed = path.exists()
            os.replace(tmp, path)
            _LIVE_TEMPS.discard(tmp)
            if not existed:
                created.append(path)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise


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
    path = Path(path)
    fmt = np.lib.format
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in readers:
                raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
            shape, _, dtype = readers[version](f)
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
    return tuple(int(n) for n in shape), dtype, offset


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
        shape, self.dtype, self._offset = read_npy_header(self.path)
        _check_real_dtype(self.path, self.dtype)
        if len(shape) != 2:
            raise ValueError(f"{self.path}: expected a 2-D array (one point per row), got "
                             f"shape {shape}")
        with open(self.path, "rb") as f:   # a Fortran-ordered file is not row by row
            version = np.lib.format.read_magic(f)
            fortran = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)(f)[1]
        if fortran:
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

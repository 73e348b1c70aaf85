"""Reading data matrices, one point per row: ``.npy``, ``.csv`` or parquet, and the
checks of their rows.

A ``.csv`` is parsed with its header detected (:func:`load_matrix`). Every error is one
line that names the file and, where it applies, the line or row. The ``.npy`` reads
(the header checked against the file's size before anything is allocated, then a memory
map or blocks of rows) are :mod:`attnclust._npy`, the atomic writes (an interrupted run
never leaves a partial file) :mod:`attnclust._atomic`; their names are importable from
here too.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

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
from ._npy import BLOCK_ROWS, NpyRows, first_line, open_npy, read_npy_header

__all__ = ["SUFFIXES", "ColumnError", "NpyRows", "Table", "atomic_path", "check_finite_rows",
           "check_matrix_shape", "check_nonzero_rows", "deferred_interrupts", "interrupt",
           "load_matrix", "load_table", "open_npy", "read_npy_header", "remove_temporaries",
           "save_matrix", "save_matrices", "writable_folder"]


# pandas writes a boolean column (``get_dummies``' columns) as True and False
_BOOLEANS = {"true": 1.0, "false": 0.0}


def _float(cell: str) -> float:
    """A cell's number (``True`` and ``False`` are 1 and 0, as NumPy reads booleans);
    ``ValueError`` for text, and for Python's ``1_000`` too."""
    if "_" in cell:
        raise ValueError(cell)
    boolean = _BOOLEANS.get(cell.strip().lower())
    return float(cell) if boolean is None else boolean


def _is_number(cell: str) -> bool:
    """Whether a cell reads as a number (``1_000`` too: a line of them is a row of data,
    refused when read, not a header; ``True`` and ``False``)."""
    if cell.strip().lower() in _BOOLEANS:
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


# a spreadsheet's error values, which are missing values and start like a comment
_SHEET_ERROR = re.compile(r"#(N/?A|VALUE!|DIV/0!|REF!|NAME\?|NUM!|NULL!)", re.IGNORECASE)


def _kept(line: str, delimiter: str | None) -> bool:
    """Whether a line holds data or a header: not blank (a line of tabs in a ``.tsv`` is
    empty cells) and no comment (``#``, but for a spreadsheet's ``#N/A`` and the like)."""
    if not (line.strip() or (delimiter == "\t" and line)):
        return False
    return not line.startswith("#") or _SHEET_ERROR.match(line) is not None


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
                     "or --header no")


class Table(NamedTuple):
    """A data matrix as read: the rows, the names of its columns, what the reader did
    that the user should hear about (a pandas index left out, say), and whether the names
    are the file's own (a header line, parquet's names), not the ``x0, x1, ...`` made up
    for a file without them."""

    X: np.ndarray
    columns: list[str]
    notes: list[str]
    header: bool = False


# suffixes read, by kind: text tables (their delimiter, and whether gzip-compressed), .npy,
# parquet
_TEXT = {".csv": (None, False), ".tsv": ("\t", False), ".csv.gz": (None, True),
         ".tsv.gz": ("\t", True)}
_PARQUET = (".parquet", ".pq")
SUFFIXES = (".npy", *_TEXT, *_PARQUET)


def _suffix(path: Path) -> str:
    """The suffix that names the file's kind (``.csv.gz`` counts as one), lower case."""
    name = path.name.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    return path.suffix.lower()


def data_stem(path: str | os.PathLike) -> str:
    """The file's name less the suffix of its kind (``blobs.csv.gz``: ``blobs``)."""
    path = Path(path)
    return path.name[:len(path.name) - len(_suffix(path))] or path.name     # ".csv": itself


def _read_text(path: Path, gz: bool) -> str:
    import gzip

    # utf-8-sig drops the byte-order mark that spreadsheet programs write ("CSV UTF-8")
    try:
        if gz:
            with gzip.open(path, "rt", encoding="utf-8-sig", errors="strict") as f:
                return f.read()
        return path.read_text(encoding="utf-8-sig", errors="strict")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text CSV file (not UTF-8)") from None
    except (OSError, EOFError) as exc:     # gzip's BadGzipFile is an OSError
        raise ValueError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from None


def _is_index(cells_of_rows: list[list[str]]) -> bool:
    """Whether a first column holds a row index: the integers 0..n-1 (pandas' ``to_csv``)
    or 1..n (R's ``write.csv``), in any order."""
    if not all(cells and _is_integer(cells[0]) for cells in cells_of_rows):
        return False
    values = sorted(int(cells[0]) for cells in cells_of_rows)
    return values[0] in (0, 1) and values == list(range(values[0], values[0] + len(values)))


def _parse_text(path: Path, header: bool | None, delimiter: str | None, gz: bool,
                selection) -> Table:
    """A text table: header detected (or as given), a row index left out, the columns
    selected (``selection``: a function of the names, before any value is converted), the
    values converted with errors naming the line and column."""
    text = _read_text(path, gz)
    # (line number, text) of the lines that hold data or a header: not blank, no comment
    # ("# ..." as numpy.savetxt writes a header; "#N/A" is a missing value); tabs kept
    lines = [(n, ln.strip(" \r\n")) for n, ln in enumerate(text.splitlines(), start=1)]
    lines = [(n, ln) for n, ln in lines if _kept(ln, delimiter)]
    if not lines:
        raise ValueError(f"{path}: empty file (no rows)")
    first = lines[0][1]
    if delimiter is None:
        delimiter = "," if "," in first else (";" if ";" in first else None)

    def split(line: str) -> list[str]:
        if delimiter and '"' in line:      # quoted fields (R's write.csv, spreadsheets)
            return [c.strip() for c in next(csv.reader([line], delimiter=delimiter))]
        return [c.strip() for c in (line.split(delimiter) if delimiter else line.split())]

    cells = split(first)
    detected = header is None
    if detected:
        header = _detect_header(path, cells, [(n, split(ln)) for n, ln in lines[1:]])
    rows = [(n, split(ln)) for n, ln in lines[1 if header else 0:]]
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")
    width = len(rows[0][1])
    for line_no, row in rows:
        if len(row) != width:
            hint = (" (if line 1 is a header, pass --header yes)"
                    if detected and not header and line_no == rows[0][0] else "")
            raise ValueError(f"{path}: line {line_no} has {len(row)} fields, "
                             f"expected {width}{hint}")
    if detected and header and len(cells) != width:
        split = (" (split on whitespace: separate the fields by commas, or name the file "
                 ".tsv)" if delimiter is None and len(cells) > width else "")
        raise ValueError(f"{path}: the header (line {lines[0][0]}) has {len(cells)} fields, "
                         f"the rows {width}{split}; pass --header yes to skip it")
    names = cells if header and len(cells) == width else [f"x{j}" for j in range(width)]
    notes = []
    if header and names[0] == "" and width > 1 and _is_index([r for _, r in rows]):
        notes.append(f"{path}: left out the first column, a row index (no name, the values "
                     f"0 to n-1 or 1 to n, as pandas' to_csv() or R's write.csv() write it); "
                     "write the file without it (to_csv(index=False), write.csv(row.names = "
                     "FALSE)) to skip this note")
        names, rows = names[1:], [(n, r[1:]) for n, r in rows]
    named = bool(header) and len(cells) == width      # else x0, x1, ... made up
    names = [name or f"x{j}" for j, name in enumerate(names)]
    keep = selection(names, named)
    return Table(_numbers(path, rows, keep, names, detected and not header),
                 [names[j] for j in keep], notes, named)


def _detect_header(path: Path, cells: list[str], rest: list[tuple[int, list[str]]]) -> bool:
    """Whether the first line (its ``cells``; ``rest``: the numbered cells of the lines
    below) is a header: none of its cells a number (a line of numbers with one bad cell
    is data with a bad value, reported like any other), or pandas' column numbers."""
    # pandas' to_csv() with its index: the first header cell is empty
    index = len(cells) > 1 and cells[0] == ""
    named = cells[1:] if index else cells
    if not any(_is_number(c) for c in named):
        return True
    if all(_is_number(c) for c in named):
        return _numeric_header(path, named, [(n, r[1:] if index else r) for n, r in rest])
    return False


def _numbers(path: Path, rows, keep: list[int], names: list[str], guessed_data: bool):
    """The ``keep`` columns of the numbered ``rows`` as floats; a cell that is no number
    is one line naming it (``guessed_data``: the first line was taken for data)."""
    out = np.empty((len(rows), len(keep)))
    for i, (line_no, row) in enumerate(rows):
        for jj, j in enumerate(keep):
            try:
                out[i, jj] = _float(row[j])
            except ValueError:
                raise ValueError(_non_numeric(path, row[j], line_no, j, names, guessed_data
                                              and line_no == rows[0][0])) from None
            if math.isnan(out[i, jj]):                # named by its line, as other cells
                raise ValueError(_non_numeric(path, row[j], line_no, j, names, False))
            if math.isinf(out[i, jj]):                # inf, or beyond float64 (1e400)
                raise ValueError(f"{path}: infinite value {row[j]!r} at line {line_no}, "
                                 f"column {j + 1} ({names[j]!r})")
    return out


_MISSING = {"", "na", "n/a", "nan", "-nan", "null", "none", "<na>", "#n/a", "?", "-"}  # as pandas


def _non_numeric(path: Path, cell: str, line_no: int, j: int, names: list[str],
                 first_line: bool) -> str:
    """Why a cell is refused (missing, infinite, text), and what to do."""
    name, where = names[j], f"at line {line_no}, column {j + 1} ({names[j]!r})"
    if cell.strip().lower() in _MISSING:
        return (f"{path}: missing value {cell!r} {where}; fill in or leave out the rows "
                "with missing values (each row is clustered whole)")
    hint = ("if line 1 is a header, pass --header yes" if first_line else
            f"select the numeric columns with --columns, or leave this one out with "
            f"--drop-columns {name if ',' not in name else j}")
    return f"{path}: non-numeric value {cell!r} {where}; {hint}"


def check_finite_rows(X, path, *, row_offset: int = 0) -> None:
    """``ValueError`` naming the first NaN or inf (row and column counted from 1).

    Reads ``X`` in blocks of rows, so a memory-mapped file is never copied whole.
    ``row_offset`` is the global index of ``X``'s first row (a shard of a file).
    """
    if X.dtype.kind != "f":
        return                      # bool and integers are always finite
    for start in range(0, X.shape[0], BLOCK_ROWS):
        bad = ~np.isfinite(X[start:start + BLOCK_ROWS])
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
    for start in range(0, X.shape[0], BLOCK_ROWS):
        zero = np.flatnonzero(~np.asarray(X[start:start + BLOCK_ROWS]).any(axis=1))
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


class ColumnError(ValueError):
    """A column named in ``columns`` or ``drop_columns`` that the file does not have."""


def _selection(path: Path, columns, drop_columns, *, by_name: bool = False):
    """The function that picks the kept columns' indices from the names (and whether
    they are the file's own, see :class:`Table`): ``columns`` (names or 0-based indices;
    all when None), less ``drop_columns``; with ``by_name``, names of the file's own only
    (a ``ColumnError`` for an index, or for a file without names)."""
    def pick(names: list[str], named: bool) -> list[int]:
        if by_name and not named:
            raise ColumnError(f"{path}: no header, so no column names to select by")

        def index(item, option: str) -> int:
            item = str(item).strip()
            if item in names:
                return names.index(item)
            if not by_name and _is_integer(item) and 0 <= int(item) < len(names):
                return int(item)
            shown = ", ".join(repr(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
            raise ColumnError(f"{path}: {option} {item!r} is neither a column name nor a "
                             f"0-based index below {len(names)} (columns: {shown})")
        keep = (list(range(len(names))) if columns is None
                else [index(c, "--columns") for c in columns])
        twice = next((j for n, j in enumerate(keep) if j in keep[:n]), None)
        if twice is not None:
            raise ValueError(f"{path}: --columns names the column {names[twice]!r} (0-based "
                             f"index {twice}) twice; list each column once")
        drop = {index(c, "--drop-columns") for c in drop_columns or ()}
        keep = [j for j in keep if j not in drop]
        if not keep:
            raise ValueError(f"{path}: no column left to cluster (--columns, --drop-columns)")
        return keep
    return pick


def _parquet(path: Path, selection) -> Table:
    """A parquet file's numeric columns, through pyarrow (the extra ``attnclust[parquet]``);
    pandas' stored index (``__index_level_N__``, or named in its metadata) left out."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{path}: reading parquet needs pyarrow: pip install "
                         "attnclust[parquet] (or pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:        # pyarrow's errors have no common base but Exception
        raise ValueError(f"{path}: not a readable parquet file ({first_line(exc)})") from None
    names = list(table.column_names)
    try:            # pandas' index columns, as its metadata names them (a named index too)
        stored = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        index = [n for n in stored.get("index_columns", []) if isinstance(n, str) and n in names]
    except (ValueError, AttributeError):
        index = []
    index += [n for n in names if n.startswith("__index_level_") and n not in index]
    notes = [f"{path}: left out {', '.join(index)}, a pandas index"] if index else []
    names = [n for n in names if n not in index]
    keep = selection(names, True)
    out = np.empty((table.num_rows, len(keep)))
    for jj, j in enumerate(keep):
        column = table.column(names[j])
        if column.null_count:    # a missing value (None), as in a CSV: named, not read as NaN
            row = int(column.is_null().to_numpy(zero_copy_only=False).argmax()) + 1
            raise ValueError(f"{path}: missing value at row {row}, column {names[j]!r}; fill in "
                             "or leave out the rows with missing values")
        try:            # numbers and booleans only: a date read as nanoseconds is no feature
            if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                    or pa.types.is_boolean(column.type) or pa.types.is_decimal(column.type)):
                raise TypeError(column.type)
            out[:, jj] = column.to_numpy(zero_copy_only=False).astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: column {names[j]!r} is not numeric ({column.type}); "
                             "select the numeric columns with --columns, or leave this one "
                             f"out with --drop-columns {names[j]}") from None
    return Table(out, [names[j] for j in keep], notes, True)


def load_table(path: str | os.PathLike, *, min_columns: int = 1, mmap: bool = False,
               header: bool | None = None, columns=None, drop_columns=None,
               by_name: bool = False) -> Table:
    r"""Read a data matrix, one point per row, with its column names: ``.npy``, ``.csv``,
    ``.tsv`` (either gzip-compressed, ``.csv.gz``, ``.tsv.gz``) or parquet.

    A text header is recognized as a first line none of whose cells is a number (a first
    line of numbers with one bad cell is data with a bad value, reported as such), or as
    pandas' header of column numbers ``0,1,...,d-1`` above rows that are not all integers;
    a first line of integers that could be either is refused (see ``header``). A first
    column without a name whose values are ``0..n-1`` (pandas' ``to_csv()`` with its index)
    is left out, with a note. Fields are separated by commas (or semicolons, or
    whitespace when the first line has neither; tabs in a ``.tsv``); a UTF-8 byte-order
    mark is skipped. A ``.npy`` header is checked against the file size before anything
    is allocated; its columns are named ``x0, x1, ...``, as those of a text file without
    a header.

    Parameters
    ----------
    path : path of the file
    min_columns : int, default=1
    mmap : bool, default=False
        Return a float32 or float64 ``.npy`` as a read-only memory map instead of a
        float64 copy in memory (other dtypes are still converted to float64).
    header : bool or None, default=None
        Whether a text file's first line is a header (``True``: skipped whatever it holds;
        ``False``: data); ``None`` detects it as above. Ignored for ``.npy`` and parquet.
    columns, drop_columns : sequence of str or int, optional
        The columns kept (names, or 0-based indices counted without a left-out index),
        and those left out of them (a label column, say); before any value is read as a
        number, so a column of text can be left out.
    by_name : bool, default=False
        Select ``columns`` and ``drop_columns`` by the file's own names only: no 0-based
        indices, and a file without names (a ``.npy``, a text file without a header) has
        none to select (``ColumnError``).

    Raises
    ------
    ValueError
        Missing or unreadable file, unknown suffix, truncated ``.npy`` (fewer bytes than
        its header declares), complex or other non-real ``.npy`` dtype, non-numeric value
        (naming its column), ragged rows, NaN or inf, no rows, not 2-D, fewer than
        ``min_columns`` columns, or an unknown column; one line, naming the file and,
        where it applies, the line (counted in the file, blank and comment lines
        included) or row.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "iris.csv"
    >>> _ = path.write_text("a,b,species\n1,2,setosa\n3,4,virginica\n")
    >>> table = load_table(path, drop_columns=["species"])
    >>> table.X, table.columns
    (array([[1., 2.],
           [3., 4.]]), ['a', 'b'])
    """
    path = Path(path)
    _check_file(path)
    suffix = _suffix(path)
    pick = _selection(path, columns, drop_columns, by_name=by_name)
    notes: list[str] = []
    named = suffix in _PARQUET
    if suffix == ".npy":
        X = open_npy(path)
        names = [f"x{j}" for j in range(X.shape[1])] if X.ndim == 2 else []
        if X.ndim == 2 and (columns is not None or drop_columns):
            keep = pick(names, False)
            X, names = np.asarray(X[:, keep]), [names[j] for j in keep]
    elif suffix in _TEXT:
        delimiter, gz = _TEXT[suffix]
        X, names, notes, named = _parse_text(path, header, delimiter, gz, pick)
    elif suffix in _PARQUET:
        X, names, notes, _ = _parquet(path, pick)
    else:
        raise ValueError(f"{path}: unsupported file type {suffix or '(none)'!r}; use "
                         ".npy, .csv, .tsv, .csv.gz, .tsv.gz or .parquet")
    check_matrix_shape(X, path, min_columns=min_columns)
    check_finite_rows(X, path)
    if not (mmap and X.dtype in (np.float32, np.float64)):
        X = (np.array(X, dtype=np.float64) if isinstance(X, np.memmap)  # the file let go
             else X.astype(np.float64, copy=False))
    return Table(X, names, notes, named)


def load_matrix(path: str | os.PathLike, *, min_columns: int = 1,
                mmap: bool = False, header: bool | None = None) -> np.ndarray:
    r"""A data matrix, one point per row (:func:`load_table`'s matrix, every column kept).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
    >>> _ = path.write_text("a,b\n1,2\n3,4\n")
    >>> load_matrix(path)
    array([[1., 2.],
           [3., 4.]])
    """
    return load_table(path, min_columns=min_columns, mmap=mmap, header=header).X

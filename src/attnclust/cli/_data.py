"""The rows of ``attnclust fit``'s DATA: opening the file, checking its rows block by block,
and their sample weights (``--sample-weight FILE`` or ``--weight-column J``).

Bad input is one line naming the file, and the row (counted from 1, in the whole file
even when a rank or a chunk holds only some of its rows) or the option at fault.
"""

from __future__ import annotations

import os

from ._common import CommandError, header


def min_columns(args) -> int:
    """The fewest columns DATA may have: one feature, and the weight column if any."""
    return 1 + (args.weight_column is not None)


def read_table(args, *, min_columns: int = 1, mmap: bool = False, by_name=None):
    """DATA as a :class:`attnclust._io.Table` (rows, column names), read with ``--header``,
    ``--columns`` and ``--drop-columns`` (or, ``by_name``, those columns of its header:
    :class:`attnclust._io.ColumnError` where it has not all of them); what the reader
    noted (a pandas index left out) is said on stderr."""
    from .._io import load_table
    from ._common import column_lists, say

    columns, drop = column_lists(args) if by_name is None else (list(by_name), None)
    table = load_table(args.data, min_columns=min_columns, mmap=mmap, header=header(args),
                       columns=columns, drop_columns=drop, by_name=by_name is not None)
    if not getattr(args, "quiet", False):
        for note in table.notes:
            say(f"attnclust {args.command}: note: {note}")
    return table


def check_plot_columns(args, n_features: int) -> None:
    """``--plot`` needs two features: refused before the fit."""
    if args.plot and n_features < 2:
        raise CommandError(f"--plot draws two columns or more; {args.data} has one feature: "
                           "leave out --plot")


def note_weight_column(args, columns: list[str]) -> None:
    """With ``--columns`` or ``--drop-columns``, a note on stderr naming the column that
    ``--weight-column J`` takes (J counts the columns they keep, not DATA's)."""
    from ._common import say

    j = args.weight_column
    selected = getattr(args, "columns", None) or getattr(args, "drop_columns", None)
    if j is not None and selected and 1 <= j <= len(columns) and not args.quiet:
        say(f"attnclust {args.command}: note: --weight-column {j} is {columns[j - 1]!r}, "
            "counted among the columns --columns and --drop-columns keep")


def open_rows(args, open_npy):
    """DATA as a :class:`attnclust._io.Table`: its rows, read when indexed, and the names
    of the features among its columns (:func:`feature_names`); a .npy opened by
    ``open_npy`` (a memory map, or :class:`attnclust._io.NpyRows`) with its shape checked,
    anything else read whole by :func:`read_table`. The note naming ``--weight-column``'s
    column is said here (:func:`note_weight_column`)."""
    from pathlib import Path

    from .._io import Table, check_matrix_shape

    path = Path(args.data)
    selected = getattr(args, "columns", None) or getattr(args, "drop_columns", None)
    if path.suffix.lower() == ".npy" and path.is_file() and not selected:
        X = open_npy(path)
        check_matrix_shape(X, path, min_columns=min_columns(args))
        return Table(X, feature_names(args, [f"x{j}" for j in range(X.shape[1])]), [])
    table = read_table(args, min_columns=min_columns(args))
    note_weight_column(args, table.columns)
    return table._replace(columns=feature_names(args, table.columns))


def feature_names(args, columns: list[str]) -> list[str]:
    """The names of the clustered columns: the columns read less the weight column; each
    once (the model names its columns, and ``predict`` finds them by name)."""
    features = list(columns) if args.weight_column is None else \
        [c for j, c in enumerate(columns) if j != args.weight_column - 1]
    seen: set[str] = set()
    for name in features:
        if name in seen:
            raise CommandError(f"{args.data}: the header names two kept columns {name!r}; "
                               "rename one, or leave one out with --drop-columns (by its "
                               "0-based index)")
        seen.add(name)
    return features


def checked_block(args, block, where, start: int, n_rows: int, weights=None):
    """``(features, weights)`` of the rows ``start, start + 1, ...`` of DATA's ``n_rows``:
    finite, split from their weights, non-zero where the fit normalizes rows. ``weights``:
    those of every row when already read (a ``--sample-weight`` file), else taken from the
    block or the file here; ``where`` names DATA in the messages."""
    from .._io import check_finite_rows, check_nonzero_rows

    check_finite_rows(block, where, row_offset=start)
    rows = slice(start, start + block.shape[0])
    if weights is None:
        block, weights = split_weights(args, block, rows=rows, n_rows=n_rows)
    else:
        weights = weights[rows]
    if normalizes_rows(args):
        check_nonzero_rows(block, where, row_offset=start)
    return block, weights


def normalizes_rows(args) -> bool:
    """Whether the fit projects rows on the sphere (then an all-zero row is an error)."""
    from ..layer.geometry import as_geometry

    return args.normalize == "rows" or (args.normalize == "auto"
                                        and as_geometry(args.geometry).normalize == "rows")


def split_weights(args, X, *, rows: slice | None = None, n_rows: int | None = None):
    """``(features, weights)``: DATA without ``--weight-column``, and the weights of its
    rows (a rank's shard: ``X`` holds ``rows`` of the file's ``n_rows``); weights ``None``
    without either option. Bad weights are one line naming their source."""
    import numpy as np

    if args.weight_column is None and args.sample_weight is None:
        return X, None
    if args.weight_column is not None:
        j, d = args.weight_column, X.shape[1]
        if not 1 <= j <= d:
            raise CommandError(f"--weight-column {j} is not a column of {args.data} (columns "
                               f"1 to {d})")
        where = f"--weight-column {j} of {args.data}"
        weights = np.asarray(X[:, j - 1], dtype=np.float64)
        X = X[:, [c for c in range(d) if c != j - 1]]
    else:
        weights = file_weights(args, X.shape[0] if n_rows is None else n_rows)
        return X, (weights if rows is None else weights[rows])
    if rows is None:
        return X, _all_weights(weights, X.shape[0], where)
    return X, _checked_weights(weights, X.shape[0], where, rows.start + 1)


def file_weights(args, n: int):
    """The ``n`` checked weights of the ``--sample-weight`` file."""
    where = f"--sample-weight {args.sample_weight}"
    weights = _weight_file(args, where, n)
    if weights.shape[0] != n:
        raise CommandError(f"{where}: {weights.shape[0]} weights for the {n} rows of "
                           f"{args.data}")
    return _all_weights(weights, n, where)


def _all_weights(weights, n: int, where: str):
    """Every row's weights, checked (:func:`_checked_weights`): some must be positive."""
    weights = _checked_weights(weights, n, where)
    if not weights.sum() > 0:
        raise CommandError(f"{where}: the weights sum to zero (no row has a positive weight)")
    return weights


def _checked_weights(weights, n: int, where: str, first_row: int = 1):
    """:func:`attnclust._validation.check_sample_weight`, its error one line naming
    ``where`` the weights come from and the bad weight's row (``first_row``: the row
    number of ``weights[0]``, counted from 1 as in the data's messages)."""
    from .._validation import check_sample_weight

    try:
        return check_sample_weight(weights, n, rows_from=first_row)
    except ValueError as exc:
        raise CommandError(f"{where}: {str(exc).removeprefix('sample_weight ')}") from None


def _weight_file(args, where: str, n: int):
    """The weights of ``--sample-weight``: a .npy of shape (n,) or (n, 1), or a one-column
    .csv (its header, if any, detected: ``--header`` is DATA's; a first line of a number
    that could be either, pandas' ``0`` above integer weights, is a header where the lines
    below it are the ``n`` rows' weights), as float64."""
    import numpy as np

    from .._io import load_matrix, open_npy

    path = args.sample_weight
    if path.lower().endswith(".npy") and os.path.isfile(path):
        weights = np.asarray(open_npy(path))    # (n,) allowed: load_matrix wants 2-D
    else:
        try:
            try:
                weights = load_matrix(path)
            except ValueError as exc:
                if "cannot tell whether the first line" not in str(exc):
                    raise
                weights = load_matrix(path, header=False)
                weights = weights[1:] if len(weights) == n + 1 else weights
        except ValueError as exc:      # its advice (--columns, --drop-columns) is DATA's
            raise CommandError(f"{str(exc).split('; ')[0]} ({where}: one number per "
                               "row)") from None
    if weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    if weights.ndim != 1 or weights.shape[0] == 0:
        raise CommandError(f"{where}: expected one weight per row, shape (n,) or (n, 1), "
                           f"got shape {weights.shape}")
    return np.array(weights, dtype=np.float64)     # a copy: a mapped file is read-only

"""``attnclust predict MODEL DATA``: the labels (and attention) of new rows by a model that
``attnclust fit`` saved (PREFIX.model.npz), DATA read as ``fit`` reads it."""

from __future__ import annotations

from ._common import CommandError, reading_options, refuse_overwriting_input, write_all


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="label new rows with a model saved by attnclust fit")
    p.add_argument("model", metavar="MODEL", help="a model file written by attnclust fit "
                                                  "(PREFIX.model.npz)")
    p.add_argument("data", metavar="DATA", help="data file, read as attnclust fit reads it")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.labels.{npy,csv} (default: DATA without its "
                        "suffix; a folder, written DIR/, gets the files named after DATA)")
    p.add_argument("--proba", action="store_true",
                   help="also write PREFIX.proba.{npy,csv}: each row's attention on every "
                        "head (with a noise head, a last column, noise)")
    p.add_argument("--quiet", action="store_true", help="no notes, no warnings")
    reading_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from pathlib import Path

    import numpy as np

    from .._atomic import WithHeader
    from .._io import writable_folder
    from ..cluster.model_file import load_model, model_info
    from ._fit_common import output_prefix, predict_proba

    prefix = output_prefix(args)
    outputs = [Path(f"{prefix}.labels.{s}") for s in ("npy", "csv")]
    if args.proba:
        outputs += [Path(f"{prefix}.proba.{s}") for s in ("npy", "csv")]
    refuse_overwriting_input(args.data, outputs)
    refuse_overwriting_input(args.model, outputs)
    try:
        est = load_model(args.model)
    except ValueError as exc:       # DATA first, then MODEL: say so
        swapped = str(args.data).lower().endswith(".npz") and \
            not str(args.model).lower().endswith(".npz")
        raise CommandError(f"{exc}; attnclust predict takes MODEL first, then DATA"
                           if swapped else str(exc)) from None
    info = model_info(args.model)       # a file written by save_model: any info at all
    info = info if isinstance(info, dict) else {}
    fitted_on = info.get("columns")
    if not (isinstance(fitted_on, list) and fitted_on
            and all(isinstance(c, str) for c in fitted_on)):
        fitted_on = None
    # whether the model's names are a header's (None: a file of an older attnclust, which
    # did not say)
    named = info.get("header") if isinstance(info.get("header"), bool) else None
    d = est.n_features_in_
    X = _read(args, fitted_on if fitted_on is not None and len(fitted_on) == d else None,
              named, d).X
    with writable_folder(Path(prefix).parent):
        labels = est.predict(X)
        values = {outputs[0]: labels, outputs[1]: WithHeader(labels, ["label"])}
        if args.proba:
            proba = predict_proba(est, X)
            K = len(est.cluster_centers_)
            names = [f"cluster_{k}" for k in range(K)] + ["noise"] * (proba.shape[1] > K)
            values.update({outputs[2]: proba, outputs[3]: WithHeader(proba, names)})
        sizes = np.bincount(labels[labels >= 0], minlength=len(est.cluster_centers_))
        noise = int((labels < 0).sum())
        lines = [f"n={X.shape[0]}  d={d}  K={len(sizes)}  model={args.model}"
                 + (f"  noise={noise}" if noise else ""),
                 f"{'cluster':>7s} {'size':>8s}",
                 *(f"{k:7d} {int(size):8d}" for k, size in enumerate(sizes)),
                 "wrote " + ", ".join(str(p) for p in values)]
        write_all(values, "\n".join(lines))
    return 0


def _made_up(name: str) -> bool:
    """Whether a column name is one of the ``x0, x1, ...`` the reader makes up for a file
    without a header (the 0-based position of the column in it)."""
    return name.startswith("x") and name[1:].isdigit()


def _read(args, fitted_on, named: bool | None, d: int):
    """DATA as the model reads it (``fitted_on``: the names of the model's ``d`` columns,
    or None; ``named``: whether they are a header's, None when the model does not say).

    Without ``--columns`` or ``--drop-columns``, a header (or parquet's names) that names
    every column the model was fitted on gives those columns, in the model's order (a
    label column beside them is left out); else every column is read, by position, and
    there must be ``d`` of them: a file without a header, and a ``.npy``, has no names, so
    a wider one is refused whatever the model's columns are called, never read in part.
    Other names than the model's, as many, are read by position with a warning. With
    either option, the columns they keep, ``d`` of them: in the model's order where their
    names are the model's (a file whose columns come in another order), else by position
    with the same warning.
    """
    import warnings

    from .._io import ColumnError
    from ._data import read_table

    chosen = args.columns is not None or args.drop_columns is not None
    if not chosen and fitted_on and named is not False:
        try:
            return read_table(args, by_name=fitted_on)
        except ColumnError:         # not all of them by name (or no header): by position
            pass
    table = read_table(args)
    if named is None and fitted_on:     # names like x0, x1, ...: maybe made up, not compared
        named = not all(_made_up(name) for name in fitted_on)
    if table.X.shape[1] != d:
        raise CommandError(_width_error(args, table, fitted_on, named, d, chosen))
    if not (fitted_on and named and table.header) or table.columns == fitted_on:
        return table
    if chosen and sorted(table.columns) == sorted(fitted_on):   # the model's, in its order
        order = [table.columns.index(name) for name in fitted_on]
        return table._replace(X=table.X[:, order], columns=list(fitted_on))
    warnings.warn(f"{args.data}'s columns ({_names(table.columns)}) are not those the "
                  f"model was fitted on ({_names(fitted_on)}): read by position; choose "
                  "them with --columns", UserWarning, stacklevel=2)
    return table


def _names(names: list[str], most: int = 12) -> str:
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def _width_error(args, table, fitted_on, named: bool | None, d: int, chosen: bool) -> str:
    """Why DATA's columns (``table``) cannot be the model's ``d``, and what to pass (the
    names of the model's it lacks, when they are a header's: ``named``)."""
    width = table.X.shape[1]
    model = f"the model was fitted on {d}" + (f" ({_names(fitted_on)})" if fitted_on else "")
    if chosen:
        options = " and ".join(option for option, value in (("--columns", args.columns),
                               ("--drop-columns", args.drop_columns)) if value is not None)
        return (f"{options} {'keep' if ' and ' in options else 'keeps'} {width} columns of "
                f"{args.data} ({_names(table.columns)}), {model}")
    if table.header:
        missing = [n for n in fitted_on or () if n not in table.columns] if named else []
        lacks = f" and none named {_names(missing)}" if missing else ""
        return (f"{args.data} has {width} columns ({_names(table.columns)}){lacks}; {model}: "
                "choose them with --columns or --drop-columns")
    advice = "choose them by 0-based position with --columns or --drop-columns"
    if fitted_on and named is False and all(_made_up(n) and int(n[1:]) < width for n in fitted_on):
        advice += (f" (--columns {','.join(n[1:] for n in fitted_on)} reads the positions "
                   "the model was fitted on)")
    return (f"{args.data} has no header and {width} columns, {model}; {advice}")

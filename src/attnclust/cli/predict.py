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
    fitted_on = info.get("columns") if isinstance(info, dict) else None
    if not (isinstance(fitted_on, list) and all(isinstance(c, str) for c in fitted_on)):
        fitted_on = None
    table = _read(args, fitted_on)
    X = table.X
    d = est.n_features_in_
    if X.shape[1] != d:
        named = f" ({', '.join(fitted_on)})" if fitted_on else ""
        raise CommandError(f"{args.data} has {X.shape[1]} columns, the model was fitted on "
                           f"{d}{named}; choose them with --columns or --drop-columns")
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


def _read(args, fitted_on):
    """DATA, its columns those the model was fitted on where neither column option is
    given and DATA has them all by name (a label column beside them is left out; without a
    header, columns that fit chose by the names ``x0, x1, ...`` it gave them), else as the
    options say; read by position under other names, with a warning."""
    import warnings

    from .._io import ColumnError
    from ._data import read_table

    def named(columns) -> bool:        # names of a header, not the x1, x2, ... of none
        return bool(columns) and not all(n.startswith("x") and n[1:].isdigit()
                                         for n in columns)
    chosen = args.columns is not None or args.drop_columns is not None
    # columns of a file without header that fit chose (not its first ones, in order: those
    # stay read by position, and a wider DATA is refused, not read in part)
    chosen_at_fit = bool(fitted_on) and not named(fitted_on) and \
        fitted_on != [f"x{j}" for j in range(len(fitted_on))]
    if not chosen and (named(fitted_on) or chosen_at_fit) and \
            not any("," in n for n in fitted_on):
        args.columns = ",".join(fitted_on)
        try:
            return read_table(args)
        except ColumnError:
            args.columns = None
    table = read_table(args)
    if not chosen and fitted_on and list(table.columns) != list(fitted_on) and \
            sorted(table.columns) == sorted(fitted_on) and not any("," in n for n in fitted_on):
        args.columns = ",".join(fitted_on)      # the same names in another order: a header's
        return read_table(args)                 # (x0, x1, ... too), read by name
    if not chosen and named(fitted_on) and named(table.columns) and \
            list(table.columns) != list(fitted_on):
        warnings.warn(f"{args.data}'s columns ({', '.join(table.columns)}) are not those the "
                      f"model was fitted on ({', '.join(fitted_on)}): read by position; "
                      "choose them with --columns", UserWarning, stacklevel=2)
    return table

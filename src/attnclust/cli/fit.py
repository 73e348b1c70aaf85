"""``attnclust fit``: its arguments, and the fit of DATA's rows in one process.

``--batch-rows`` streams the rows through ``partial_fit`` instead
(:mod:`attnclust.cli.fit_streamed`), ``--distributed`` fits them with one process per
rank under torchrun (:mod:`attnclust.cli.fit_distributed`); the three flows write the
same files and print a summary of the same form.
"""

from __future__ import annotations

import argparse

from . import fit_distributed, fit_streamed
from ._common import CommandError, inverse_temperature_option, reading_options
from ._data import (
    check_plot_columns,
    feature_names,
    min_columns,
    normalizes_rows,
    note_weight_column,
    read_table,
    split_weights,
)
from ._fit_common import (
    data_units,
    output_files,
    plot_writer,
    predict_proba,
    prepare,
    progress_callback,
    progress_total,
    run_fit,
)
from ._summary import choice_lines, fit_record, head_line, sampled_sums, steps_note, write_fit


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="cluster the rows of a data file with AttentionClustering")
    p.add_argument("data", metavar="DATA",
                   help="data file: .npy, .csv or .tsv (with or without header; also "
                        ".csv.gz, .tsv.gz), or .parquet (pip install attnclust[parquet])")
    p.add_argument("--n-clusters", "-k", type=_n_clusters_arg, required=True, metavar="K",
                   help="number of clusters (heads), or 'auto' (chosen by the BIC of the layer)")
    p.add_argument("--max-clusters", type=int, default=None, metavar="N",
                   help="with -k auto: the largest K scored (default: 10)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.centers.{npy,csv}, PREFIX.labels.{npy,csv}, "
                        "PREFIX.model.npz (for attnclust predict), PREFIX.summary.json, ... "
                        "(default: DATA without its suffix; a folder, written DIR/, gets "
                        "the files named after DATA)")
    inverse_temperature_option(p, required=False,
                               help="inverse temperature lambda (it multiplies the logits: "
                                    "larger is sharper), or 'auto' (default)")
    p.add_argument("--geometry", default="euclidean", choices=["euclidean", "sphere"],
                   help="euclidean: free heads, soft k-means cells (default); sphere: unit "
                        "heads, cones from the origin (directions, e.g. embeddings)")
    p.add_argument("--covariance-type", default="auto",
                   choices=["auto", "spherical", "diag", "full"],
                   help="the heads' shape (default auto: the spherical fit, then diagonal "
                        "and full heads fitted from it, the shape of least ICL kept; "
                        "spherical with --geometry sphere, a given --inverse-temperature "
                        "or --batch-rows)")
    p.add_argument("--noise-head", action="store_true",
                   help="a uniform background head beside diagonal or full heads takes the "
                        "rows no cluster explains (noise, outliers): they get the label -1 "
                        "(with --covariance-type auto, in one process)")
    p.add_argument("--normalize", default="auto", choices=["auto", "rows", "center-scale", "none"],
                   help="preprocessing of the rows (default auto: onto the unit sphere with "
                        "--geometry sphere, as given otherwise)")
    p.add_argument("--no-anneal", action="store_true",
                   help="fit at the target inverse temperature only")
    p.add_argument("--max-iter", type=int, default=None, metavar="N",
                   help="most fixed-point steps at the final inverse temperature (default: "
                        "300); the fit stops earlier when it converges (not read with "
                        "--batch-rows: one step per chunk)")
    p.add_argument("--seed", type=int, default=0, help="random_state (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no warnings")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel fit, one process per rank, launched by torchrun "
                        "(gloo on CPU, NCCL on CUDA); each rank memory-maps only its rows "
                        "of a .npy (a .csv is read whole, then sliced); rank 0 alone prints "
                        "and writes")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="with --distributed: how long a rank waits for the others before "
                        "failing (rendezvous and each collective; default: 300, at most "
                        "1e7)")
    _output_options(p)
    _weight_options(p)
    p.add_argument("--batch-rows", type=int, default=None, metavar="N",
                   help="stream DATA through partial_fit in chunks of N rows (one pass; a "
                        ".npy is read chunk by chunk, a .csv is parsed "
                        "whole), then write the outputs chunk by chunk: memory bounded by "
                        "the chunk, not the file; the rows should come in random order "
                        "(a file sorted by cluster seeds every head from its first "
                        "chunk: shuffle it first)")
    reading_options(p)
    p.set_defaults(handler=run)


def _n_clusters_arg(value: str):
    """``--n-clusters``: a positive integer, or ``auto``."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: give an integer or "
                                         "'auto'") from None


def _output_options(parser) -> None:
    parser.add_argument("--proba", action="store_true",
                        help="also write PREFIX.proba.{npy,csv}: each row's attention on "
                             "every head (soft memberships; rows sum to 1; with "
                             "--noise-head a last column, noise: the argmax of a row is "
                             "its label)")
    parser.add_argument("--plot", action="store_true",
                        help="also write PREFIX.png: the rows in 2-D (the data for d = 2, "
                             "else a PCA) coloured by cluster, the heads marked, at most "
                             "20,000 rows drawn")


def _weight_options(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample-weight", default=None, metavar="FILE",
                       help="a weight per row of DATA (.npy of shape (n,) or (n, 1), or a "
                            "one-column .csv; non-negative, not all zero): a row of weight "
                            "w counts as w copies of it")
    group.add_argument("--weight-column", type=int, default=None, metavar="J",
                       help="take the weights from column J of the columns read "
                            "(counted from 1: DATA's, or those --columns and --drop-columns "
                            "keep), which is then left out of the features")


def run(args) -> int:
    """``fit``: distributed, streamed, or (by default) every row in this process."""
    if args.distributed:
        return fit_distributed.run(args)
    if args.batch_rows is not None:
        return fit_streamed.run(args)
    from pathlib import Path

    import numpy as np

    from .._io import check_nonzero_rows, writable_folder
    from ..cluster.clustering import AttentionClustering

    params, prefix = prepare(args)
    # a float32/float64 .npy stays memory-mapped: no float64 copy made here
    table = read_table(args, min_columns=min_columns(args), mmap=True)
    X, weights = split_weights(args, table.X)
    features = feature_names(args, table.columns)
    note_weight_column(args, table.columns)
    if normalizes_rows(args):              # named by the file's row, before the fit
        check_nonzero_rows(X, args.data)
    check_plot_columns(args, X.shape[1])
    if args.n_clusters != "auto" and args.n_clusters > X.shape[0]:
        raise CommandError(f"--n-clusters {args.n_clusters} is larger than the number of rows "
                           f"({X.shape[0]}) of {args.data}")
    with writable_folder(Path(prefix).parent):     # fails now, not after the fit
        model = AttentionClustering(args.n_clusters, **params)
        bar, callback = progress_callback(progress_total(model), args.quiet)
        model.set_params(callback=callback)
        est, seconds = run_fit(lambda: model.fit(X, sample_weight=weights), bar)
        est.set_params(callback=None)       # a progress bar is no part of the model
        centers, covariances = data_units(est)
        outputs = output_files(args, prefix, centers, est.labels_, covariances=covariances,
                               weights=getattr(est, "weights_", None), features=features,
                               noise=hasattr(est, "noise_weight_"),
                               proba=lambda: predict_proba(est, X),
                               picture=lambda: plot_writer(args, est, X, est.labels_,
                                                           features=features))
        labels = est.labels_        # noise rows (-1) in no cluster; no copy without them
        sizes = np.bincount(labels if labels.min(initial=0) >= 0 else labels[labels >= 0],
                            minlength=est.n_clusters_)
        conf_mean, risk, rows_read = sampled_sums(est, X, est.n_clusters_, weights=weights,
                                                  seed=args.seed)
        head = choice_lines(est) + head_line(
            X.shape[0], X.shape[1], est.n_clusters_, weights=weights,
            inverse_temperature=est.inverse_temperature_, progress=steps_note(est),
            risk=risk, seconds=seconds)
        if rows_read < X.shape[0]:
            head += (f"\n(risk and mean max attention of {rows_read:,} rows drawn at random "
                     f"of the {X.shape[0]:,})")
        record = fit_record(args, est, n=X.shape[0], d=X.shape[1], features=features,
                            notes=table.notes, header=table.header, sizes=sizes,
                            conf_mean=conf_mean, risk=risk, seconds=seconds, rows_read=rows_read,
                            X=X if X.shape[0] <= CRITERIA_ROWS else None, weights=weights)
        write_fit(args, prefix, outputs, [head], sizes, conf_mean, est=est, record=record)
    return 0


# score, bic and aic of PREFIX.summary.json are computed on every row up to this many (a
# pass over the rows each; above, they are left out)
CRITERIA_ROWS = 200_000


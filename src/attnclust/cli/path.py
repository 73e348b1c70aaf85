"""``attnclust path``: the temperature path of the rows of a file, the clusters and the
risk against lambda, written as a picture and a JSON summary (with the K it suggests)."""

from __future__ import annotations

from ._common import (
    CommandError,
    as_options,
    progress_bar,
    reading_options,
    refuse_overwriting_input,
    write_all,
)


def add_parser(sub) -> None:
    p = sub.add_parser("path", help="the temperature path of a .npy/.csv file: clusters and "
                                    "risk against lambda (picture + JSON)")
    p.add_argument("data", metavar="DATA",
                   help="data file, read as attnclust fit reads it (.npy, .csv, .tsv, "
                        ".gz, .parquet)")
    p.add_argument("--max-clusters", type=int, required=True, metavar="N",
                   help="number of heads followed, at least 2 (the path stops once they are "
                        "all apart)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.png and PREFIX.json (default: DATA without its "
                        "suffix, plus .path; a folder ending in / gets that name inside; "
                        "a PREFIX ending in .json or .png is taken without it)")
    p.add_argument("--geometry", default="euclidean", choices=["euclidean", "sphere"],
                   help="euclidean (default), or sphere (rows scaled onto the unit sphere)")
    p.add_argument("--objective", default="free_energy", choices=["free_energy", "risk"],
                   help="free_energy: deterministic annealing (default); risk: the layer's "
                        "risk minimizer, which never merges its heads")
    p.add_argument("--min-cluster-size", type=int, default=None, metavar="M",
                   help="rows a cluster needs to be counted (default: max(5, n/100))")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no warnings")
    reading_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    import json
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .._io import check_nonzero_rows, writable_folder
    from ..cluster.annealing import path_grid, temperature_path
    from ..layer.geometry import as_geometry
    from ._data import read_table
    from ._fit_common import output_prefix

    prefix = output_prefix(args, suffix=".path")
    if Path(prefix).suffix.lower() in (".json", ".png") and Path(prefix).stem:
        prefix = prefix[:-len(Path(prefix).suffix)]     # --out p/x.json: not p/x.json.json
    outputs = [Path(f"{prefix}.png"), Path(f"{prefix}.json")]
    refuse_overwriting_input(args.data, outputs)
    X = read_table(args, min_columns=2).X
    if not 2 <= args.max_clusters <= X.shape[0]:
        raise CommandError(f"--max-clusters must be between 2 and the number of rows "
                           f"({X.shape[0]}) of {args.data}, got {args.max_clusters}")
    if args.min_cluster_size is not None and not 1 <= args.min_cluster_size <= X.shape[0]:
        raise CommandError(f"--min-cluster-size must be between 1 and the number of rows "
                           f"({X.shape[0]}) of {args.data}, got {args.min_cluster_size}")
    if as_geometry(args.geometry).unit_heads:       # rows onto the sphere, as fit does
        check_nonzero_rows(X, args.data)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    with writable_folder(Path(prefix).parent):     # fails now, not after the path
        try:
            grid = path_grid(X, geometry=args.geometry)
        except ValueError as exc:
            raise CommandError(_of_data(args.data, exc)) from None
        bar = progress_bar(len(grid), args.quiet, desc="path", unit="lambda")

        def callback(i, lam, k):
            if bar is not None:
                bar.update(1)
                bar.set_postfix(lam=f"{lam:.3g}", clusters=k, refresh=False)
        try:
            path = temperature_path(X, args.max_clusters, geometry=args.geometry,
                                    objective=args.objective, inverse_temperatures=grid,
                                    min_cluster_size=args.min_cluster_size, callback=callback)
        except ValueError as exc:       # the library's X: the rows of DATA
            raise CommandError(_of_data(args.data, exc)) from None
        finally:
            if bar is not None:
                bar.close()
        choice = path.choose_n_clusters()
        choice = choice._replace(reason=as_options(choice.reason, "path"))
        auto = _fit_auto_choice(X, args.max_clusters, args.geometry)
        auto = auto[0], as_options(auto[1], "path")
        summary = {"data": str(args.data), "n": int(X.shape[0]), "d": int(X.shape[1]),
                   "max_clusters": args.max_clusters, "chosen_n_clusters": choice.n_clusters,
                   "reason": choice.reason, "fit_auto_n_clusters": auto[0],
                   "fit_auto_reason": auto[1], **path.to_dict()}
        fig = path.plot()
        splits = ", ".join(f"{s:.3g}" for s in path.split_inverse_temperatures) or "none"
        line = (f"n={X.shape[0]}  d={X.shape[1]}  splits at lambda = {splits}\n"
                f"chose K={choice.n_clusters}: {choice.reason}\n"
                + _agreement(choice.n_clusters, auto, args.objective) +
                f"wrote {outputs[0]}, {outputs[1]}")
        try:
            write_all({outputs[0]: lambda p: fig.savefig(p, dpi=120),
                       outputs[1]: lambda p: p.write_text(json.dumps(summary, indent=1))},
                      line)
        finally:
            plt.close(fig)
    return 0


def _of_data(data: str, exc: ValueError) -> str:
    """The library's error about its ``X``, said of DATA's rows and naming the file."""
    import re

    message = re.sub(r"^X has\b", "the rows have", str(exc))
    message = re.sub(r"^X's\b", "the rows'", message)
    return message if message.startswith(f"{data}:") else f"{data}: {message}"


def _fit_auto_choice(X, max_clusters: int, geometry: str) -> tuple[int, str]:
    """What ``attnclust fit -k auto --max-clusters N --geometry G`` (seed 0) answers on the
    same rows: the fit's ``n_clusters_`` and ``n_clusters_reason_`` (the modes of the BIC's Gaussian
    components, and the clusters their heads hold)."""
    import warnings

    from ..cluster.clustering import AttentionClustering

    with warnings.catch_warnings():           # fit -k auto itself shows a weak choice
        warnings.simplefilter("ignore")
        est = AttentionClustering("auto", max_clusters=max(2, max_clusters),
                                  geometry=geometry, random_state=0).fit(X)
    return est.n_clusters_, est.n_clusters_reason_


def _agreement(n_clusters: int, auto: tuple[int, str], objective: str) -> str:
    """A line saying whether ``fit -k auto`` chooses the same ``K``, and why not, and
    where its choice is weak, why."""
    weak = auto[1].split("; weak: ", 1)[1] if "; weak: " in auto[1] else ""
    if auto[0] == n_clusters:
        return (f"fit -k auto chooses the same K={n_clusters} (by its own criterion: the BIC "
                "of a Gaussian mixture, the clusters of its heads, a test for no structure)"
                + (f"; weak: {weak}" if weak else "") + "\n")
    path = "soft k-means" if objective == "free_energy" else "the layer's risk minimizer"
    return (f"fit -k auto chooses K={auto[0]} instead: it scores Gaussian mixtures by their "
            f"BIC and counts the clusters of their heads ({auto[1]}), where the path reads K "
            f"off its widest plateau of {path}\n")

"""What the three flows of ``attnclust fit`` share (one process, streamed, distributed):
the checked arguments, the run with its progress bar and the check of its centers, and
the output files.
"""

from __future__ import annotations

import os
import warnings

from ._common import (
    CommandError,
    check_device,
    check_seed,
    inverse_temperature_arg,
    progress_bar,
    refuse_overwriting_input,
)

# torch's gloo and TCPStore fail on timeouts of 1e10 s and more; a day-long job is 1e5 s
MAX_TIMEOUT = 1e7
DEFAULT_TIMEOUT = 300.0       # --timeout: seconds a rank waits for the others


def prepare(args) -> tuple[dict, str]:
    """The estimator's parameters and the output prefix, once the arguments are checked
    and no output would overwrite DATA (before any work)."""
    params = fit_params(args)
    prefix = output_prefix(args)
    outputs = output_files(args, prefix)
    for source in input_files(args):
        refuse_overwriting_input(source, outputs)
    return params, prefix


def input_files(args) -> list[str]:
    """The files ``fit`` reads: DATA, and the ``--sample-weight`` file."""
    return [args.data] + ([args.sample_weight] if args.sample_weight is not None else [])


def fit_params(args) -> dict:
    """Estimator parameters from the ``fit`` arguments (checked here, before any work)."""
    if args.n_clusters != "auto" and args.n_clusters < 1:
        raise CommandError(f"--n-clusters must be a positive integer, got {args.n_clusters}")
    if args.n_clusters == "auto" and (args.distributed or args.batch_rows is not None):
        raise CommandError("-k auto chooses K on all the rows in one process: give K with "
                           "--distributed or --batch-rows")
    from ..cluster.mixture.covariance import as_covariance_type

    if as_covariance_type(args.covariance_type).shaped and args.batch_rows is not None:
        raise CommandError(f"--covariance-type {args.covariance_type} is fitted on all the "
                           "rows at once: leave out --batch-rows (streamed fits are "
                           "spherical)")
    if args.noise_head and (args.distributed or args.batch_rows is not None):
        raise CommandError("--noise-head fits all the rows in one process: leave out "
                           "--distributed and --batch-rows")
    if args.noise_head and not as_covariance_type(args.covariance_type).automatic:
        raise CommandError(f"--noise-head chooses diagonal or full heads beside the "
                           f"background: leave --covariance-type at auto, got "
                           f"{args.covariance_type}")
    if args.max_iter is not None and args.batch_rows is not None:
        warnings.warn("--max-iter is not read with --batch-rows: the stream takes one "
                      "fixed-point step per chunk", UserWarning, stacklevel=2)
    args.max_iter = 300 if args.max_iter is None else args.max_iter
    if args.max_iter < 1:
        raise CommandError(f"--max-iter must be a positive integer, got {args.max_iter}")
    max_clusters, args.timeout = _max_clusters_and_timeout(args)
    check_seed(args.seed)
    check_device(args.device)
    given = inverse_temperature_arg(args, default="auto")
    inverse_temperature = given
    if given != "auto":
        try:
            inverse_temperature = float(given)
        except ValueError:
            raise CommandError(f"--inverse-temperature must be a positive number or 'auto', "
                               f"got {given!r}") from None
    return dict(geometry=args.geometry, covariance_type=args.covariance_type,
                inverse_temperature=inverse_temperature,
                normalize=None if args.normalize == "none" else args.normalize,
                anneal=False if args.no_anneal else "auto", max_iter=args.max_iter,
                random_state=args.seed, device=args.device, noise_head=args.noise_head,
                max_clusters=max_clusters)


def _max_clusters_and_timeout(args) -> tuple[int, float]:
    """``--max-clusters`` (default 10) and ``--timeout`` (default :data:`DEFAULT_TIMEOUT`),
    checked; each given where it is not read warns."""
    max_clusters = getattr(args, "max_clusters", None)
    if max_clusters is not None and max_clusters < 2:
        raise CommandError(f"--max-clusters must be an integer of at least 2, got "
                           f"{max_clusters}")
    if max_clusters is not None and args.n_clusters != "auto":
        warnings.warn(f"--max-clusters is read only with -k auto; -k {args.n_clusters} "
                      "fits that many clusters", UserWarning, stacklevel=3)
    if args.timeout is not None and not args.distributed:
        warnings.warn("--timeout is read only with --distributed", UserWarning, stacklevel=3)
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    if not 0 < timeout <= MAX_TIMEOUT:       # also false for nan
        raise CommandError(f"--timeout must be a positive number of seconds, at most "
                           f"{MAX_TIMEOUT:g}, got {timeout}")
    return 10 if max_clusters is None else max_clusters, timeout


def output_prefix(args, suffix: str = "") -> str:
    """The output prefix: ``--out``, else DATA's stem beside it, or inside ``--out`` when
    that is a folder (ends in /); ``suffix`` follows the stem (``path``'s ``.path``)."""
    from pathlib import Path

    from .._io import data_stem

    if Path(args.data).is_dir():
        raise CommandError(f"{args.data} is a folder: give a data file (.npy, .csv, .tsv, "
                           ".parquet)")
    if args.out is None:
        return str(Path(args.data).parent / data_stem(args.data)) + suffix
    if not args.out.strip():
        raise CommandError("--out must not be empty: give a prefix such as results/run1, or a "
                           "folder ending in /")
    if args.out.endswith(("/", os.sep)) or Path(args.out).is_dir():
        return str(Path(args.out) / data_stem(args.data)) + suffix
    return args.out


def output_files(args, prefix: str, centers=None, labels=None, proba=None,
                 picture=None, covariances=None, *, features=None, weights=None,
                 noise: bool = False) -> dict:
    """``path -> array or writer`` of the fit's files: PREFIX.centers and PREFIX.labels
    (their CSVs with a header: the feature names, ``label``), PREFIX.covariances.npy when
    the heads are shaped (``covariances``), PREFIX.weights when the fit has mixing
    weights (``weights``), with ``--proba`` PREFIX.proba (``cluster_0, ...``, and a
    ``noise`` column with a ``noise`` head), with ``--plot`` PREFIX.png (``proba`` and
    ``picture``: functions giving them, called only when asked for); PREFIX.model.npz and
    PREFIX.summary.json are added by :func:`attnclust.cli._summary.write_fit`. Without
    values, every path the fit may write (for the check that no output is the input)."""
    from pathlib import Path

    from .._atomic import WithHeader

    paths_only = centers is None
    if features is None and centers is not None:
        features = [f"x{j}" for j in range(centers.shape[1])]
    outputs = {Path(f"{prefix}.centers.npy"): centers,
               Path(f"{prefix}.centers.csv"): None if paths_only else WithHeader(centers,
                                                                                 features),
               Path(f"{prefix}.labels.npy"): labels,
               Path(f"{prefix}.labels.csv"): _csv(labels, ["label"])}
    if covariances is not None or paths_only:
        outputs[Path(f"{prefix}.covariances.npy")] = covariances
    if weights is not None or paths_only:
        outputs.update({Path(f"{prefix}.weights.npy"): weights,
                        Path(f"{prefix}.weights.csv"): _csv(weights, ["weight"])})
    if args.proba:
        values = None if proba is None else proba()
        K = None if paths_only else centers.shape[0]
        names = None if paths_only else [f"cluster_{k}" for k in range(K)] + ["noise"] * noise
        outputs.update({Path(f"{prefix}.proba.npy"): values,
                        Path(f"{prefix}.proba.csv"): _csv(values, names)})
    if args.plot:
        outputs[Path(f"{prefix}.png")] = None if picture is None else picture()
    if paths_only:
        outputs.update({Path(f"{prefix}.model.npz"): None, Path(f"{prefix}.summary.json"): None})
    return outputs


def _csv(values, columns):
    """A CSV output: the array with its header; a writer (a function) or None as given."""
    from .._atomic import WithHeader

    if values is None or callable(values):
        return values
    return WithHeader(values, columns)


def predict_proba(est, X, *, chunk: int = 1 << 16):
    """``est.predict_proba`` of every row, in blocks (a memory map is read, not copied);
    with a noise head, a last column for the background, so that each row's argmax is its
    label (see :func:`noise_proba`)."""
    import numpy as np

    def fn(rows):
        return noise_proba(est, rows) if hasattr(est, "noise_weight_") else \
            est.predict_proba(rows)
    return np.concatenate([fn(X[s:s + chunk]) for s in range(0, X.shape[0], chunk)])


def noise_proba(est, X):
    """The posterior of each row over the ``K`` heads and the noise head (the last
    column): ``softmax`` of the heads' log-joints and the background's, the quantities
    ``predict`` compares; rows sum to one and their argmax is ``predict``'s label (the
    noise column for ``-1``). The first ``K`` columns are ``predict_proba`` (the heads given
    that the row is not noise) times one less the noise column."""
    import numpy as np

    logits = est._by_chunks(X, lambda Xp: est._logits(Xp).cpu().numpy())
    joint = np.concatenate([logits, np.full((len(logits), 1), est._noise_log_joint())], 1)
    joint -= joint.max(1, keepdims=True)
    np.exp(joint, out=joint)
    return joint / joint.sum(1, keepdims=True)


def data_units(est):
    """The heads ``(K, d)`` and their covariances (or ``None``) in the data's units: the
    estimator keeps them in the units it fits in, which ``--normalize center-scale``
    centres and scales (by one number, ``scale_``)."""
    centers, covariances = est.cluster_centers_, getattr(est, "covariances_", None)
    if getattr(est, "mean_", None) is None:
        return centers, covariances
    return (centers * est.scale_ + est.mean_,
            None if covariances is None else covariances * est.scale_ ** 2)


def plot_writer(args, est, X, labels, sizes=None, features=None):
    """Draw the picture now (``labels``: of every row, or None to predict those drawn;
    ``sizes``: the clusters' sizes, when known without them; ``features``: the columns'
    names, for its axes); return the function that writes it (as a PNG) when the
    outputs are staged."""
    import matplotlib

    from ..plotting.clusters import plot_clusters
    from ..study.experiments._style import RC

    with matplotlib.rc_context(RC):
        fig = plot_clusters(est, X, labels=labels, sizes=sizes, random_state=args.seed,
                            feature_names=features,
                            title=f"attnclust fit {os.path.basename(args.data)}: "
                                  f"K={est.n_clusters}, lambda={est.inverse_temperature_:.3g}, "
                                  f"{X.shape[0]:,} rows")

    def write(path) -> None:
        with matplotlib.rc_context(RC):
            fig.savefig(path, format="png", dpi=150)
    return write


def progress_total(est) -> int:
    """Most callback steps of a fit: the steps of its annealing plan, ``max_iter`` last."""
    return sum(est.max_iter if steps is None else steps for _, steps in est.anneal_plan())


def progress_callback(total: int, quiet: bool):
    """A tqdm bar fed by the estimator's callback; None when quiet or stderr is no terminal.

    ``total`` is the most steps the fit can take; it may stop earlier, having converged.
    """
    bar = progress_bar(total, quiet, desc="fit", unit="step")
    if bar is None:
        return None, None

    def callback(info) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{info.loss:.4g}", lam=f"{info.inverse_temperature:.3g}",
                        refresh=False)
    return bar, callback


def run_fit(fit, bar):
    """``fit()``, the estimator it returns, and its seconds; the progress ``bar`` (or None)
    is closed however the fit ends, and the centers are checked (:func:`check_centers`)."""
    import time

    start = time.perf_counter()
    try:
        est = fit()
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    check_centers(est)
    return est, seconds


def check_centers(est) -> None:
    """The CLI's last check before writing: finite centers (of unit norm on the sphere)."""
    import numpy as np

    centers = np.asarray(est.cluster_centers_, dtype=np.float64)
    if not np.isfinite(centers).all():
        raise CommandError("fit produced non-finite cluster centers (overflow); rescale the "
                           "data or lower --inverse-temperature")
    from ..layer.geometry import as_geometry

    if not as_geometry(est.geometry).unit_heads:
        return
    norms = np.linalg.norm(centers, axis=1)
    if not np.allclose(norms, 1.0, rtol=0.0, atol=1e-6):
        worst = int(np.argmax(np.abs(norms - 1.0)))
        raise CommandError(f"fit produced a cluster center of norm {norms[worst]:.6g} "
                           f"(center {worst}), not on the unit sphere; rescale the data or "
                           "lower --inverse-temperature")

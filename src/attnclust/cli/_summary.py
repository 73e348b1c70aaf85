"""The summary ``attnclust fit`` prints before its files are renamed into place: a line
of figures (rows, K, lambda, risk, time, ...), then one row per cluster (its size, its
share, the mean attention of its rows on their head), then the files written."""

from __future__ import annotations

import json
import math
import os

from ._common import as_options, same_file, write_all
from ._fit_common import input_files

# rows read for the table's attention and risk: all of them up to this many, else this
# many drawn at random (the sizes are always of every row): a pass of predict_proba and of
# the risk's terms over millions of rows cost the summary 30 times the fit's time
SUMMARY_ROWS = 100_000


def write_fit(args, prefix: str, outputs: dict, head: list[str], sizes, conf_mean, *,
              est, record: dict) -> None:
    """Stage ``outputs``, PREFIX.model.npz (``est``) and PREFIX.summary.json (``record``
    and the files written), print the summary (``head`` lines, the clusters, the files),
    then rename them all into place and remove the files of an earlier fit into the same
    PREFIX that this one did not write, all or nothing (see
    :func:`attnclust.cli._common.write_all`); a folder in the place of such a file is not
    this command's, and stays."""
    from pathlib import Path

    from ..cluster.model_file import write_model

    model, summary_path = Path(f"{prefix}.model.npz"), Path(f"{prefix}.summary.json")
    info = {"data": str(args.data), "columns": record["input"]["columns"],
            "header": record["input"]["header"]}
    outputs = {**outputs, model: lambda p: write_model(est, p, info=info)}
    record = {**record, "files": sorted(p.name for p in [*outputs, summary_path])}
    outputs[summary_path] = lambda p: Path(p).write_text(
        json.dumps(_finite(record), indent=2) + "\n", encoding="utf-8")
    inputs = input_files(args)          # an earlier output read as input now stays
    stale = [p for p in previous_outputs(prefix) if p not in outputs and not p.is_dir()
             and not any(same_file(p, source) for source in inputs)]
    write_all(outputs, summary(head, sizes, conf_mean, outputs), remove=stale)


def previous_outputs(prefix: str) -> list:
    """The files that an earlier ``attnclust fit`` into ``prefix`` wrote, as its
    PREFIX.summary.json lists them (nothing else is ever removed)."""
    from pathlib import Path

    path = Path(f"{prefix}.summary.json")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(record, dict) or record.get("written_by") != "attnclust fit":
        return []
    stem = Path(prefix).name
    return [path.parent / name for name in record.get("files", [])
            if isinstance(name, str) and name.startswith(f"{stem}.") and "/" not in name
            and os.sep not in name and name != ".."]


def _finite(value):
    """``value`` with NaN and infinities as None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def summary(head: list[str], sizes, conf_mean, outputs) -> str:
    """The printed summary of a fit: ``head`` lines, one row per cluster (its size, its
    share of the clustered rows, the mean max attention of its rows: NaN for none), the
    files."""
    n = sum(sizes)
    lines = [*head, f"{'cluster':>7s} {'size':>8s} {'share':>7s} {'mean max attention':>19s}"]
    for k, (size, conf) in enumerate(zip(sizes, conf_mean, strict=True)):
        mean = f"{conf:19.3f}" if size and math.isfinite(conf) else f"{'- (no row)':>19s}"
        share = f"{size / n:7.3f}" if n else f"{'-':>7s}"      # n = 0: every row noise
        lines.append(f"{k:7d} {int(size):8d} {share} {mean}")
    lines.append("wrote " + ", ".join(str(p) for p in outputs))
    return "\n".join(lines)


def fit_record(args, est, *, n: int, d: int, features: list[str], notes: list[str],
               sizes, conf_mean, risk: float, seconds: float, rows_read: int, X=None,
               weights=None, header: bool = False) -> dict:
    """The JSON summary of a fit (PREFIX.summary.json): the data (``header``: whether the
    ``features`` are names from DATA's header, not the ``x0, x1, ...`` of a file without
    one), what the fit chose and why, its figures, the clusters' sizes and weights;
    ``bic``, ``aic`` and ``inertia`` where the estimator has them (the criteria on every
    row of ``X``, when given)."""
    import numpy as np

    from .. import __version__

    def attr(name, kind=float):
        value = getattr(est, name, None)
        return None if value is None else kind(value)

    noise_rows = int((np.asarray(est.labels_) < 0).sum()) if hasattr(est, "labels_") else 0
    total = float(sum(sizes))
    record = {
        "written_by": "attnclust fit", "attnclust_version": __version__,
        "input": {"data": str(args.data), "columns": list(features), "header": bool(header),
                  "notes": list(notes), "sample_weight": args.sample_weight,
                  "weight_column": args.weight_column},
        "n_rows": int(n), "n_features": int(d), "n_clusters": int(len(est.cluster_centers_)),
        "n_clusters_asked": args.n_clusters,
        "n_clusters_reason": _reason(est, "n_clusters_reason_"),
        "covariance_type": getattr(est, "covariance_type_", "spherical"),
        "covariance_type_reason": _reason(est, "covariance_type_reason_"),
        "merge_heads": bool(getattr(est, "merge_heads_", False)),
        "merge_heads_reason": _reason(est, "merge_heads_reason_"),
        "n_heads": int(len(getattr(est, "heads_", est.cluster_centers_))),
        "inverse_temperature": float(est.inverse_temperature_),
        "converged": bool(est.converged_), "n_iter": int(est.n_iter_),
        "noise_rows": noise_rows, "noise_weight": attr("noise_weight_"),
        "clusters": [{"cluster": k, "size": int(size),
                      "share": float(size / total) if total else None,
                      "weight": (float(est.weights_[k]) if hasattr(est, "weights_")
                                 else None),
                      "mean_max_attention": float(conf)}
                     for k, (size, conf) in enumerate(zip(sizes, conf_mean, strict=True))],
        "weights": (np.asarray(est.weights_, dtype=float).tolist()
                    if hasattr(est, "weights_") else None),
        "risk": float(risk), "summary_rows": int(rows_read),
        "inertia": attr("inertia_"), "fit_seconds": float(seconds),
        "parameters": {k: v for k, v in est.get_params(deep=False).items()
                       if v is None or isinstance(v, str | int | float | bool)},
    }
    record.update(_criteria(est, X, weights))
    return record


def _reason(est, name: str) -> str | None:
    """The estimator's reason ``name`` (None where it has none), in the options of
    ``attnclust fit`` (``raise --max-clusters``, not ``raise max_clusters``)."""
    reason = getattr(est, name, None)
    return as_options(reason, "fit") if isinstance(reason, str) else reason


def _criteria(est, X, weights) -> dict:
    """``score`` (weighted as the fit), ``bic`` and ``aic`` of ``X``, as ``est.score``,
    ``est.bic`` and ``est.aic`` compute them, from one pass of ``est.score_samples``
    (None each where ``X`` is not given or the estimator has no likelihood)."""
    import numpy as np

    try:
        if X is None:
            raise ValueError("no rows")
        logp = est.score_samples(X)
        params = est._n_parameters()
    except (ValueError, TypeError, RuntimeError, AttributeError):
        return dict.fromkeys(("score", "bic", "aic"))
    n = logp.shape[0]
    mean = float(np.average(logp))
    score = (mean if weights is None else float(np.average(logp, weights=weights))
             if weights is None or weights.sum() > 0 else None)
    return {"score": score,
            "bic": -2.0 * mean * n + params * math.log(n),
            "aic": -2.0 * mean * n + 2.0 * params}


def head_line(n: int, d: int, n_clusters: int, *, weights, inverse_temperature: float,
              progress: str, risk: float, seconds: float, ranks: str = "") -> str:
    """The summary's first line: ``n= d= K=``, the ranks (``ranks``, when distributed),
    the total weight (when ``weights`` are given), ``lambda=``, the fit's ``progress``
    (its steps or batches), ``risk=`` and ``time=``."""
    return (f"n={n}  d={d}  K={n_clusters}  {ranks}{_weights_note(weights)}"
            f"lambda={inverse_temperature:.4g}  {progress}  risk={risk:.4g}  "
            f"time={seconds:.2f}s")


def choice_lines(est) -> str:
    """What the fit chose, a line each: ``K`` with ``-k auto``, the heads' shape with
    ``--covariance-type auto`` (``covariance_type_``, as PREFIX.summary.json has it: the
    clusters' shape where heads merged into clusters), and why."""
    from ..cluster.mixture.covariance import as_covariance_type

    lines = ""
    if est.n_clusters == "auto" and getattr(est, "n_clusters_reason_", None) is not None:
        lines += f"chose K={est.n_clusters_}: {_reason(est, 'n_clusters_reason_')}\n"
    if as_covariance_type(est.covariance_type).automatic:
        shape = getattr(est, "covariance_type_", "spherical")
        # the reason names the shape first ("diag: lowest ICL ..."), unless heads merged
        reason = str(_reason(est, "covariance_type_reason_")).removeprefix(f"{shape}: ")
        lines += f"chose covariance_type={shape}: {reason}\n"
    if hasattr(est, "noise_weight_"):
        lines += (f"noise head: weight {est.noise_weight_:.4g}, "
                  f"{int((est.labels_ < 0).sum()):,} rows labelled -1 (not in the clusters "
                  "below)\n")
    return lines


def steps_note(est) -> str:
    """``steps=N  converged=yes|no`` of a fit."""
    return f"steps={est.n_iter_}  converged={'yes' if est.converged_ else 'no'}"


def _weights_note(weights) -> str:
    return "" if weights is None else f"weights={float(weights.sum()):.6g}  "


def sampled_sums(est, X, n_clusters: int, *, weights=None, seed: int = 0):
    """``(mean max attention per cluster, risk, rows read)``: on every row of ``X`` up to
    :data:`SUMMARY_ROWS`, else on that many drawn at random with ``seed`` (rows labelled
    ``-1``, noise, count in the risk and in no cluster)."""
    import numpy as np

    n = X.shape[0]
    labels = np.asarray(est.labels_)
    if n > SUMMARY_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(n, SUMMARY_ROWS, replace=False))
        X, labels = np.asarray(X[rows]), labels[rows]
        weights = None if weights is None else weights[rows]
    proba = est.predict_proba(X)
    ww = np.ones(X.shape[0]) if weights is None else weights
    conf, err = block_sums(est, X, labels, proba, n_clusters, ww)
    counts = np.bincount(labels[labels >= 0], minlength=n_clusters)     # rows, unweighted
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, conf / np.where(counts > 0, counts, 1), np.nan)
    total = float(ww.sum())
    return mean, (err / total if total > 0 else float("nan")), X.shape[0]


def summary_sums(est, X, n_clusters: int, *, chunk: int = 1 << 16, weights=None):
    """Per cluster, the summed max attention of its rows; and the summed squared error
    (weighted by the sample weights, when given).

    In blocks of rows, so a memory-mapped ``X`` is never copied whole for the summary
    (``predict_proba`` and ``squared_errors`` act row by row, so the sums are exact).
    """
    import numpy as np

    conf_sum, sq_err = np.zeros(n_clusters), 0.0
    for start in range(0, X.shape[0], chunk):
        block = X[start:start + chunk]
        conf, err = block_sums(est, block, est.labels_[start:start + chunk],
                               est.predict_proba(block), n_clusters,
                               None if weights is None else weights[start:start + chunk])
        conf_sum += conf
        sq_err += err
    return conf_sum, sq_err


def block_sums(est, block, labels, proba, n_clusters: int, weights=None):
    """Of the rows of ``block`` (their ``labels`` and attention ``proba``): per cluster, the
    summed max attention; and the summed squared error, weighted by ``weights`` if any."""
    import numpy as np

    clustered = labels >= 0         # noise rows (-1) are in no cluster
    conf = np.bincount(labels[clustered], weights=proba.max(1)[clustered], minlength=n_clusters)
    errors = est.squared_errors(block)
    return conf, float(errors.sum() if weights is None else errors @ weights)

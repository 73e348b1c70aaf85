"""The summary ``attnclust fit`` prints before its files are renamed into place: a line
of figures (rows, K, lambda, risk, time, ...), then one row per cluster (its size, its
share, the mean attention of its rows on their head), then the files written."""

from __future__ import annotations

from ._common import write_all


def write_fit(outputs: dict, head: list[str], sizes, conf_sum) -> None:
    """Stage ``outputs``, print the summary (``head`` lines, the clusters, the files), then
    rename the outputs into place (see :func:`attnclust.cli._common.write_all`)."""
    write_all(outputs, summary(head, sizes, conf_sum, outputs))


def summary(head: list[str], sizes, conf_sum, outputs) -> str:
    """The printed summary of a fit: ``head`` lines, one row per cluster, the files."""
    n = sum(sizes)
    lines = [*head, f"{'cluster':>7s} {'size':>8s} {'share':>7s} {'mean max attention':>19s}"]
    for k, (size, conf) in enumerate(zip(sizes, conf_sum, strict=True)):
        mean = f"{conf / size:19.3f}" if size else f"{'- (no row)':>19s}"
        share = f"{size / n:7.3f}" if n else f"{'-':>7s}"      # n = 0: every row noise
        lines.append(f"{k:7d} {int(size):8d} {share} {mean}")
    lines.append("wrote " + ", ".join(str(p) for p in outputs))
    return "\n".join(lines)


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
    ``--covariance-type auto``, and why."""
    from ..cluster.covariance import as_covariance_type

    lines = ""
    if est.n_clusters == "auto" and getattr(est, "n_clusters_reason_", None) is not None:
        lines += f"chose K={est.n_clusters_}: {est.n_clusters_reason_}\n"
    if as_covariance_type(est.covariance_type).automatic:
        lines += f"chose covariance_type={est.covariance_type_reason_}\n"
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


def summary_sums(est, X, n_clusters: int, *, chunk: int = 1 << 16, weights=None):
    """Per cluster, the summed max attention of its rows; and the summed squared error
    (weighted by the sample weights, when given).

    In blocks of rows, so a memory-mapped ``X`` is never copied whole for the summary
    (``predict_proba`` and ``score`` act row by row, so the sums are exact).
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
    if weights is None:
        return conf, -est.score(block) * block.shape[0]
    if weights.sum() > 0:
        return conf, -est.score(block, sample_weight=weights) * float(weights.sum())
    return conf, 0.0

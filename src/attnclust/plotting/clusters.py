"""The picture of a fit: the rows in 2-D, coloured by cluster, the heads marked.

What is drawn
-------------
- ``d = 2``: the rows themselves (as the estimator sees them: on the unit circle when it
  normalizes rows), and the soft boundary on a grid: the largest attention
  ``max_h a_h(x)`` as grey shades (white where one head takes all the attention) and the
  decision boundary ``argmax_h a_h(x)`` as lines.
- ``d > 2``: the first two principal axes of the rows (a PCA fitted on all of them, as in
  figures 3 and 4; the covariance is summed in blocks of rows, so a memory-mapped file is
  never copied whole); a row's opacity is its largest attention (pale rows lie between
  clusters).
- Rows labelled ``-1`` (the noise head's, ``noise_head=True``) are grey, counted apart in
  the legend.
- At most ``max_points`` rows are drawn (a uniform sample without replacement, drawn from
  ``random_state``); the title says so when it samples. The PCA and the cluster sizes in
  the legend count every row.

Notation
--------
==============  ===============  ==========================================
paper           code             meaning
==============  ===============  ==========================================
``mu_h``        ``heads``        heads in the plotted space, ``(K, d)``
``a_h(x)``      ``proba``        attention of a row on head ``h``
``V``           ``axes``         principal axes, ``(2, d)``
==============  ===============  ==========================================
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .._spectral import DENSE_FEATURES, leading_eigenpairs
from ..layer.geometry import as_geometry

__all__ = ["plot_clusters", "principal_axes"]

_BLOCK = 1 << 16          # rows per block of the PCA's sums
_WIDE_ROWS = 5000         # rows whose axes stand for all beyond DENSE_FEATURES columns
_GRID = 160               # grid points per side of the d = 2 boundary
_LEGEND_MAX = 20          # clusters named in the legend, at most
_NOISE_COLOR = (0.6, 0.6, 0.6, 1.0)  # rows of the noise head (label -1): grey


def principal_axes(X, *, block: int = _BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean ``(d,)``, the two leading principal axes ``(2, d)`` and the variance shares of
    the two, from sums over blocks of rows (so a memory map is read, never copied); beyond
    :data:`~attnclust._spectral.DENSE_FEATURES` columns, of at most 5,000 rows evenly
    spaced (:func:`~attnclust._spectral.leading_eigenpairs`).

    Examples
    --------
    >>> X = np.random.default_rng(0).normal(size=(1000, 3)) * [5.0, 1.0, 0.1]
    >>> mean, axes, share = principal_axes(X)
    >>> np.round(np.abs(axes), 1)
    array([[1., 0., 0.],
           [0., 1., 0.]])
    >>> bool(share[0] > 0.9)
    True
    """
    n, d = X.shape
    total = np.zeros(d)
    for s in range(0, n, block):
        total += np.asarray(X[s:s + block], dtype=np.float64).sum(0)
    mean = total / n
    if d > DENSE_FEATURES:     # wide rows: the axes of at most _WIDE_ROWS rows, by Lanczos
        Y = np.asarray(X[::-(-n // _WIDE_ROWS)], dtype=np.float64) - mean
        vals, vecs = leading_eigenpairs(Y, 2)
        trace = float((Y * Y).sum()) / len(Y)
        return mean, vecs.T, vals / max(trace, np.finfo(np.float64).tiny)
    cov = np.zeros((d, d))
    for s in range(0, n, block):
        C = np.asarray(X[s:s + block], dtype=np.float64) - mean     # (m, d)
        cov += C.T @ C
    vals, vecs = np.linalg.eigh(cov / n)                            # ascending
    order = np.argsort(vals)[::-1][:2]
    share = vals[order] / max(vals.sum(), np.finfo(np.float64).tiny)
    return mean, vecs[:, order].T, share


def _normalizes_rows(est) -> bool:
    how = est.normalize
    return how == "rows" or (how == "auto" and as_geometry(est.geometry).normalize == "rows")


def _plotted_rows(est, X) -> np.ndarray:
    """Rows in the space the picture shows: the data, or on the sphere when the estimator
    normalizes rows (its heads are unit directions)."""
    X = np.asarray(X, dtype=np.float64)
    if _normalizes_rows(est):
        return X / np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _plotted_heads(est) -> np.ndarray:
    """The heads in the data's units (``center-scale`` is undone)."""
    heads = np.asarray(est.cluster_centers_, dtype=np.float64)
    if getattr(est, "mean_", None) is not None:
        heads = heads * est.scale_ + est.mean_
    return heads


def _colors(K: int) -> list:
    cmap = matplotlib.colormaps["tab10" if K <= 10 else "tab20" if K <= 20 else "turbo"]
    return [cmap(i if K <= 20 else i / max(K - 1, 1)) for i in range(K)]


def _sample(n: int, max_points: int, random_state) -> np.ndarray:
    if n <= max_points:
        return np.arange(n)
    gen = np.random.default_rng(random_state)
    return np.sort(gen.choice(n, max_points, replace=False))


def _boundary(ax, est, pts: np.ndarray) -> None:
    """Largest attention (shades) and decision boundary (lines) on a grid (d = 2)."""
    K = len(est.cluster_centers_)
    if K == 1:                       # one cell: attention 1 everywhere, no boundary
        return
    lo, hi = pts.min(0), pts.max(0)
    pad = 0.05 * np.maximum(hi - lo, 1e-12)
    gx, gy = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], _GRID),
                         np.linspace(lo[1] - pad[1], hi[1] + pad[1], _GRID))
    grid = np.column_stack([gx.ravel(), gy.ravel()])                # (G^2, 2)
    if _normalizes_rows(est):        # the origin has no direction: nudge it off
        grid[np.all(grid == 0, axis=1)] = np.finfo(np.float64).eps
    proba = est.predict_proba(grid)                                 # (G^2, K)
    top = proba.max(1).reshape(gx.shape)
    ax.contourf(gx, gy, top, levels=np.linspace(1.0 / K, 1.0, 9), cmap="Greys_r",
                alpha=0.35, zorder=0)
    labels = proba.argmax(1).reshape(gx.shape)
    for k in np.unique(labels):      # the edge of each cell (labels are not ordered)
        ax.contour(gx, gy, (labels == k).astype(float), levels=[0.5], colors="0.25",
                   linewidths=0.8, zorder=1)


def plot_clusters(est, X, *, labels=None, sizes=None, max_points: int = 20_000,
                  random_state=0, title: str | None = None, feature_names=None) -> Figure:
    """A figure of the fitted clusters of ``X`` (see the module docstring).

    Parameters
    ----------
    est : fitted AttentionClustering
    X : array-like of shape (n, d), d >= 2
        The rows (a memory map is read in blocks).
    labels : ndarray of shape (n,), optional
        The rows' clusters (default: ``est.predict`` of the drawn rows).
    sizes : ndarray of shape (n_clusters,), optional
        The clusters' sizes over all rows, for the legend (default: counted from
        ``labels``, else the rows drawn, and the legend says "drawn").
    max_points : int, default=20,000
        Rows drawn at most; more are sampled uniformly, and the title says so.
    random_state : int, default=0
        Seeds that sample.
    title : str, optional
        First line of the title (default: the estimator, ``K`` and ``lambda``).
    feature_names : list of str, optional
        The two columns' names on the axes of a 2-D picture (default: the estimator's
        ``feature_names_in_``, else ``x1`` and ``x2``).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.orthogonal(d=2, k=2, sigma=0.1).sample(300, rng=0)
    >>> fig = plot_clusters(ac.AttentionClustering(2, random_state=0).fit(X), X)
    >>> fig.axes[0].get_xlabel()
    'x1'
    """
    if not hasattr(X, "shape"):       # array-like: a list of rows (row readers stay as they are)
        X = np.asarray(X, dtype=np.float64)
    if len(X.shape) != 2 or X.shape[1] < 2:
        raise ValueError(f"plot_clusters needs rows of at least 2 columns, got shape "
                         f"{X.shape}")
    n, d = X.shape
    if labels is not None and len(labels) != n:
        raise ValueError(f"labels has {len(labels)} entries, X {n} rows")
    if not int(max_points) >= 1:
        raise ValueError(f"max_points must be at least 1, got {max_points}")
    idx = _sample(n, int(max_points), random_state)
    sample = X[idx]                                                  # one read of the rows
    rows = _plotted_rows(est, sample)                                # (m, d)
    proba = est.predict_proba(sample)                                # (m, K)
    if labels is not None:
        z = np.asarray(labels)[idx]
    else:       # the fit's labels: with a noise head, -1 where the background wins
        z = est.predict(sample) if hasattr(est, "noise_weight_") else proba.argmax(1)
    heads = _plotted_heads(est)
    K = heads.shape[0]
    fig = Figure(figsize=(6.4, 5.2), layout="constrained")
    ax = fig.subplots()
    if d == 2:
        pts, hpts = rows, heads
        _boundary(ax, est, np.vstack([pts, hpts]))
        names = feature_names if feature_names is not None else \
            getattr(est, "feature_names_in_", ["x1", "x2"])
        ax.set_xlabel(str(names[0]))
        ax.set_ylabel(str(names[1]))
        alpha = np.full(len(idx), 0.8)
    else:
        mean, axes, share = principal_axes(X if not _normalizes_rows(est) else
                                           _RowsOnSphere(X))
        pts, hpts = (rows - mean) @ axes.T, (heads - mean) @ axes.T
        ax.set_xlabel(f"PC1 ({100 * share[0]:.0f}% of the variance)")
        ax.set_ylabel(f"PC2 ({100 * share[1]:.0f}%)")
        alpha = 0.15 + 0.85 * (proba.max(1) - 1.0 / K) / max(1.0 - 1.0 / K, 1e-12)
    colors = _colors(K)
    size = float(np.clip(2e4 / max(len(idx), 1), 2, 20))
    rgba = np.array([colors[k] if k >= 0 else _NOISE_COLOR for k in z])
    rgba[:, 3] = np.clip(alpha, 0.05, 1.0)
    ax.scatter(pts[:, 0], pts[:, 1], c=rgba, s=size, lw=0, rasterized=True, zorder=2)
    # sizes over all rows when known, else over the rows drawn
    what = "rows" if sizes is not None or labels is not None else "drawn"
    counted = z if labels is None else np.asarray(labels)
    counts = np.asarray(sizes, dtype=np.int64) if sizes is not None else \
        np.bincount(counted[counted >= 0], minlength=K)
    for k in range(min(K, _LEGEND_MAX)):     # legend entries (the points carry their alpha)
        ax.scatter([], [], color=colors[k], s=20, label=f"cluster {k}: {counts[k]:,} {what}")
    if (counted < 0).any():
        ax.scatter([], [], color=_NOISE_COLOR, s=20,
                   label=f"noise (-1): {int((counted < 0).sum()):,} {what}")
    ax.scatter(hpts[:, 0], hpts[:, 1], marker="X", s=140, c=colors, edgecolors="black",
               linewidths=1.2, zorder=3)
    ax.scatter([], [], marker="X", s=140, color="white", edgecolors="black", linewidths=1.2,
               label="heads")
    if K > _LEGEND_MAX:
        ax.scatter([], [], color="none", label=f"... {K - _LEGEND_MAX} more clusters")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    lam = getattr(est, "inverse_temperature_", float("nan"))
    lines = [title or f"{type(est).__name__}: K={K}, lambda={lam:.3g}, {n:,} rows"]
    if len(idx) < n:
        lines.append(f"showing a random sample of {len(idx):,} of {n:,} rows "
                     f"(seed {random_state})")
    if d > 2:
        lines.append("PCA of all rows; paler points: less attention on their head")
    ax.set_title("\n".join(lines), fontsize=9)
    ax.set_aspect("equal", adjustable="datalim")
    return fig


class _RowsOnSphere:
    """Rows of ``X`` divided by their norms, block by block (for the PCA's sums)."""

    def __init__(self, X):
        self._X = X
        self.shape = X.shape

    def __getitem__(self, key):
        block = np.asarray(self._X[key], dtype=np.float64)
        return block / np.linalg.norm(block, axis=1, keepdims=True)

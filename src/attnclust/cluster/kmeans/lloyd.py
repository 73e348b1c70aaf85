"""Lloyd's steps on a sample, in torch: any geometry, and the batched runs' torch face.

As ``lambda -> infinity`` the attention of the K-head layer becomes the indicator of the
highest logit ``lambda <x, mu_h> - b_h`` (:meth:`attnclust.layer.geometry.Geometry.logits`),
and the layer's fixed-point step becomes Lloyd's step:

- ``geometry="euclidean"``: cells ``argmin_h ||x - mu_h||``, heads moved to the (weighted)
  means of their cells (k-means);
- ``geometry="sphere"``: cones ``argmax_h <x, mu_h>``, heads moved to the normalized sums
  of their cones (spherical k-means; for unit rows and heads ``||x - mu||^2 = 2 - 2 <x,
  mu>``, so the cones are the cells of the same objective ``R_inf``).

:func:`hard_lloyd` runs these steps on rows held in memory; :func:`sample_kmeans` is the
best of ``n_init`` greedy k-means++ seedings (Euclidean), the runs carried together in
NumPy by :mod:`attnclust.cluster.kmeans.batch`. Both return a
:class:`~attnclust.cluster.kmeans.result.KMeansResult` whose objective is recomputed from the
final heads and labels.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``z_i``        ``labels``      each row's highest logit, ``(n,)``
``mu_h``       ``heads``       heads, shape ``(K, d)``
``b_h``        (key bias)      the geometry's offset of head ``h`` in its logit
``w_i``        ``weights``     the rows' sample weights (default 1)
``R_inf``      ``objective``   ``sum_i w_i ||x_i - mu_{z_i}||^2 / sum_i w_i``
=============  ==============  =============================================
"""

from __future__ import annotations

import numpy as np
import torch

from ...layer.geometry import Geometry, as_geometry
from .batch import KMEANS_TOL, best_of_seedings
from .result import KMeansResult, objective_sums

__all__ = ["cell_sums", "hard_labels", "hard_lloyd", "sample_kmeans"]

_CHUNK = 16_384  # rows per chunk: bounds the (chunk, K) blocks below
_FLOAT64_SAMPLE = 1 << 16   # a float32 sample of at most this many numbers is run in float64


def hard_labels(X: torch.Tensor, heads: torch.Tensor, geometry: str | Geometry = "sphere", *,
                chunk: int = _CHUNK) -> torch.Tensor:
    """Index of the highest logit of each row, ``(n,)`` (the hard attention's winner; the
    first of equal ones).

    Examples
    --------
    >>> X = torch.tensor([[0.9, 0.0], [3.0, 0.0]])
    >>> hard_labels(X, torch.tensor([[0.0, 0.0], [2.0, 0.0]]), "euclidean").tolist()
    [0, 1]
    """
    geometry = as_geometry(geometry)
    labels = [geometry.logits(X[s:s + chunk], heads, 1.0).max(1)[1]
              for s in range(0, X.shape[0], chunk)]
    return torch.cat(labels) if labels else X.new_zeros(0, dtype=torch.long)


def cell_sums(X: torch.Tensor, labels: torch.Tensor, n_clusters: int,
              weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-cell counts ``(K,)`` and sums ``(K, d)`` of the rows ``X`` with hard ``labels``
    (of weights and weighted rows, with ``weights``): what Lloyd's step divides.

    Examples
    --------
    >>> X = torch.tensor([[0.0], [2.0], [5.0]])
    >>> counts, sums = cell_sums(X, torch.tensor([0, 0, 1]), 2)
    >>> counts.tolist(), sums[:, 0].tolist()
    ([2.0, 1.0], [2.0, 5.0])
    """
    if weights is None:
        return (torch.bincount(labels, minlength=n_clusters).to(X.dtype),
                X.new_zeros(n_clusters, X.shape[1]).index_add_(0, labels, X))
    return (X.new_zeros(n_clusters).index_add_(0, labels, weights),
            X.new_zeros(n_clusters, X.shape[1]).index_add_(0, labels, X * weights[:, None]))


def _objective(X, heads, labels, weights, chunk) -> float:
    """``R_inf`` of rows in memory, recomputed in one pass."""
    total = float(X.shape[0]) if weights is None else float(weights.sum())
    sums = objective_sums(lambda a, b: X[a:b], X.shape[0], heads, labels.cpu().numpy(),
                          chunk=chunk, weights=weights)
    return sums / max(total, 1e-300)


def hard_lloyd(rows: torch.Tensor, heads: torch.Tensor, max_iter: int, *, tol: float = 0.0,
               weights: torch.Tensor | None = None, geometry: str | Geometry = "sphere",
               chunk: int = _CHUNK) -> KMeansResult:
    """Hard Lloyd steps of the geometry, at most ``max_iter``, stopping early once no
    label changes or a step moves the heads by a sum of squares of at most ``tol``.

    Parameters
    ----------
    rows : Tensor of shape (n, d)
        Rows in memory (on the sphere: unit rows).
    heads : Tensor of shape (K, d)
        Initial heads.
    max_iter : int
        Lloyd steps at most.
    tol : float, default=0
        The heads' move that ends the run (0: only stable labels do).
    weights : Tensor of shape (n,), optional
        Each row counts with its weight in the means and the objective.
    geometry : str or Geometry, default="sphere"
        Whose cells and steps.
    chunk : int
        Rows per block of logits.

    Returns
    -------
    KMeansResult
        ``labels``: a tensor; ``objective``: ``R_inf`` of the final heads and labels (on
        the sphere ``2 - 2`` times the mean cosine to the heads, for unit rows and heads).

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = hard_lloyd(X, X[[0, 1]], 10, geometry="euclidean")
    >>> res.heads.tolist(), res.labels.tolist(), round(res.objective, 3), res.converged
    ([[0.1, 0.0], [3.2, 0.0]], [0, 0, 1, 1], 0.025, True)
    """
    K, geometry = heads.shape[0], as_geometry(geometry)
    labels = hard_labels(rows, heads, geometry, chunk=chunk)
    steps, converged = 0, False
    for _ in range(int(max_iter)):
        counts, sums = cell_sums(rows, labels, K, weights)
        new = geometry.lloyd_step(sums, counts, heads)
        steps += 1
        small = float(((new - heads) ** 2).sum()) <= tol
        heads = new
        new = hard_labels(rows, heads, geometry, chunk=chunk)
        changed = bool((new != labels).any())
        labels = new
        if not changed or small:
            converged = True
            break
    return KMeansResult(heads, labels, _objective(rows, heads, labels, weights, chunk), steps,
                        converged)


def sample_kmeans(S: torch.Tensor, n_clusters: int, *, init: torch.Tensor | None = None,
                  n_init: int = 1, seed: int | None = None, max_iter: int = 300,
                  weights: torch.Tensor | None = None, tol: float = KMEANS_TOL) -> KMeansResult:
    """k-means of the rows ``S``: the best of ``n_init`` greedy k-means++ seedings (or one
    run from ``init``), each run by Lloyd's steps to scikit-learn's stopping rule
    (:func:`attnclust.cluster.kmeans.batch.best_of_seedings`, all runs carried together;
    ``weights``: the rows' sample weights; ``tol``: scikit-learn's ``tol``, relative to
    the rows' mean variance per feature).

    A float32 sample of at most ``2^16`` numbers is copied to float64 for the runs, whose
    objectives pick the best (the copy costs little on so few numbers); a larger one is
    run in float32, whose products cost less (with the same labels on the large sets where
    the two were compared).

    Examples
    --------
    >>> S = torch.tensor([[0.0], [0.2], [3.0], [3.4]], dtype=torch.float64)
    >>> res = sample_kmeans(S, 2, init=S[[0, 2]])
    >>> res.heads[:, 0].tolist(), res.labels.tolist(), round(res.objective, 3)
    ([0.1, 3.2], [0, 0, 1, 1], 0.025)
    """
    X = S.detach().cpu().numpy()
    if X.dtype != np.float64 and X.size <= _FLOAT64_SAMPLE:
        X = X.astype(np.float64)
    w = None if weights is None else weights.detach().cpu().numpy().astype(X.dtype)
    start = None if init is None else init.detach().cpu().numpy()
    run = best_of_seedings(X, n_clusters, n_init, np.random.default_rng(seed),
                           max_iter=max_iter, tol=tol, weights=w, init=start)
    return run._replace(heads=torch.as_tensor(run.heads, dtype=S.dtype, device=S.device))

"""Greedy k-means++ seeding, several runs at once: the engine's one seeding.

Arthur and Vassilvitskii's D^2 sampling, greedy as in scikit-learn's ``KMeans``: the
first head of a run is a row drawn with probability proportional to its weight ``w_i``;
each next one is the best of ``2 + ln K`` candidate rows drawn with probability
proportional to ``w_i D_i^2``, the one whose addition lowers the potential

    phi = sum_i w_i D_i^2

most, ``D_i`` the distance from row ``i`` to its nearest head so far. The ``R`` runs of
a batch draw together: every draw of every run is one search in one cumulative sum of
their ``w_i D_i^2`` laid end to end, and every candidate's distances one product.

It is the package's one k-means++: the warm start's batched runs draw with a
``numpy.random.Generator``; the spherical warm start's single seeding (no k-means limit,
:mod:`attnclust.cluster.warm_start`) with a ``numpy.random.RandomState``, whose uniforms are
those of scikit-learn's ``kmeans_plusplus(random_state=seed)``: the same draws, so the
same seeds but where a draw falls within rounding of a boundary between two rows.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``D_i^2``      ``closest``     squared distance to the nearest head so far, ``(R, n)``
``phi``        ``potential``   ``sum_i w_i D_i^2`` of each candidate, ``(R, trials)``
``R``          ``n_runs``      seedings drawn together
``w_i``        ``weights``     the rows' sample weights (default 1)
=============  ==============  =============================================
"""

from __future__ import annotations

import numpy as np

__all__ = ["kmeanspp_batch"]


def kmeanspp_batch(X: np.ndarray, n_clusters: int, n_runs: int,
                   rng: np.random.Generator | np.random.RandomState, *,
                   weights: np.ndarray | None = None) -> np.ndarray:
    """``n_runs`` greedy k-means++ seedings of ``n_clusters`` heads, ``(n_runs, K, d)``.

    The first head of each run is a row drawn with probability proportional to its
    weight; each next one the best (lowest potential ``sum_i w_i D_i^2``) of ``2 + ln K``
    rows drawn with probability proportional to ``w_i D_i^2``, ``D_i`` the distance to
    the nearest head so far. Rows of weight zero are never drawn (all zero: unweighted).
    Memory: ``(n_runs (2 + ln K), n)`` distances at once and one ``(n, d + 2)`` copy of
    the rows (the warm-start sample has at most 20,000 rows). ``rng`` draws ``n_runs``
    uniforms for the first heads, then ``(n_runs, 2 + ln K)`` for each next head (its
    ``random`` method: a ``Generator`` or a ``RandomState``).

    Examples
    --------
    >>> X = np.array([[0.0], [0.1], [10.0], [10.1]])
    >>> heads = kmeanspp_batch(X, 2, 3, np.random.default_rng(0))
    >>> heads.shape, sorted((heads[:, :, 0] > 5).sum(1).tolist())
    ((3, 2, 1), [1, 1, 1])
    >>> from sklearn.cluster import kmeans_plusplus
    >>> one = kmeanspp_batch(X, 2, 1, np.random.RandomState(5))[0]
    >>> np.array_equal(one, kmeans_plusplus(X, 2, random_state=5)[0])
    True
    """
    n, d = X.shape
    K, R = int(n_clusters), int(n_runs)
    w = None if weights is None or not weights.sum() > 0 else np.asarray(weights, X.dtype)
    trials = 2 + int(np.log(K))
    sq = np.einsum("nd,nd->n", X, X)
    # squared distances as one product: [-2 x_i, -||x_i||^2, 1] . [x_j, -1, ||x_j||^2]
    rows = np.concatenate([X, -np.ones((n, 1), X.dtype), sq[:, None]], 1)     # (n, d + 2)

    def distances(idx):                                      # (len(idx), n)
        picked = np.empty((len(idx), d + 2), X.dtype)
        picked[:, :d], picked[:, d], picked[:, d + 1] = -2.0 * X[idx], -sq[idx], 1.0
        return picked @ rows.T
    heads = np.empty((R, K, d), dtype=X.dtype)
    runs = np.arange(R)
    mass = np.cumsum(np.ones(n) if w is None else w)
    first = np.searchsorted(mass, rng.random(R) * mass[-1], side="right").clip(0, n - 1)
    heads[:, 0] = X[first]
    closest = np.maximum(distances(first), 0.0)                         # (R, n)
    for k in range(1, K):
        # D^2 draws of every run from one cumulative sum over the runs' rows laid end to end
        cum = np.cumsum(closest if w is None else closest * w, dtype=np.float64)
        ends = cum[n - 1::n]                                                 # (R,)
        starts = np.concatenate([[0.0], ends[:-1]])
        draws = starts[:, None] + rng.random((R, trials)) * (ends - starts)[:, None]
        flat = np.searchsorted(cum, draws, side="right")
        picks = np.clip(flat - (runs * n)[:, None], 0, n - 1).ravel()      # (R trials,)
        dist = distances(picks).reshape(R, trials, n)
        np.minimum(dist, closest[:, None, :], out=dist)
        potential = dist.sum(2) if w is None else dist @ w                  # (R, trials)
        best = potential.argmin(1)
        heads[:, k] = X[picks.reshape(R, trials)[runs, best]]
        closest = np.maximum(dist[runs, best], 0.0)
    return heads

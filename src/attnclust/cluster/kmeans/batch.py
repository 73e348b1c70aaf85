"""Lloyd's steps of several k-means runs at once, on a sample: the warm start's restarts.

The estimator's warm start is the best of ``n_init`` k-means runs on its sample: each a
greedy k-means++ seeding (Arthur and Vassilvitskii's D^2 sampling, with ``2 + ln K``
candidates per head and the one that lowers the potential most kept, as scikit-learn's
``KMeans``) followed by Lloyd's steps to a stable partition, the run of lowest objective

    R_inf(mu) = sum_i w_i min_h ||x_i - mu_h||^2 / sum_i w_i

kept (its objective then recomputed from its heads and labels,
:func:`attnclust.cluster.kmeans.result.objective`). On small data the cost of such runs is the
fixed cost of each call, not its arithmetic, so the runs here are carried together (the
seedings are :mod:`attnclust.cluster.kmeans.seeding`'s): every step of the seeding and every
Lloyd step is one product of the rows with the heads of all runs still going (an
``(A K) x m`` block per chunk of ``m`` rows), each run's nearest heads, and one product
of the cell memberships with the rows for the per-cell sums. A run leaves the batch
when it converges (scikit-learn's rules: no label changed, or the heads moved by a sum
of squares of at most ``tol`` times the rows' mean variance per feature).

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads of one run, shape ``(K, d)``
``R_inf``      ``objective``   k-means objective per unit weight
``A``          ``A``           runs still going in a batch
``w_i``        ``weights``     the rows' sample weights (default 1)
=============  ==============  =============================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from .result import KMeansResult, objective
from .seeding import kmeanspp_batch

__all__ = ["KMEANS_TOL", "best_of_seedings", "kmeanspp_batch", "lloyd_batch"]

KMEANS_TOL = 1e-4   # scikit-learn's KMeans tol: squared moves over the mean feature variance

_FEW_HEADS = 16            # up to this many heads, scores laid out (A, K, m), else (m, A, K)
# entries of one (A K) x m block of scores: large with a few heads (8 MB in float64: a
# pass per head over fewer blocks), cache-sized with more (1 MB: many heads' steps are
# faster in a block that stays in cache, a few heads' slower)
_BLOCK = {True: 1 << 20, False: 1 << 17}
_DENSE_SUMS = 256          # up to this K d and ...
_DENSE_HEADS = 8           # ... this many heads, the cell sums by a product with 0/1 members


def _rows_per_block(A: int, K: int) -> int:
    return max(1, _BLOCK[K <= _FEW_HEADS] // max(1, A * K))


class _Pass(NamedTuple):
    """One pass of every run over the rows (:func:`_assign`)."""

    labels: np.ndarray    # nearest head of each row, (A, n)
    top: np.ndarray       # its score <x, mu> - ||mu||^2 / 2, (A, n)
    sums: np.ndarray      # per-cell (weighted) sums of the rows, (A, K, d)
    counts: np.ndarray    # per-cell weights, (A, K)


def _nearest(Xa, flat, A, K):
    """Each run's nearest head of the rows and its score ``<x, mu> - ||mu||^2 / 2``, both
    ``(A, m)`` (``Xa``: the rows with a column of -1, ``(m, d + 1)``; ``flat``: the runs'
    heads with their ``||mu||^2 / 2`` as a last column, ``(A K, d + 1)``).

    A few heads: scores laid out ``(A, K, m)`` (one product with the bias row), the best
    head kept by a pass per head (the first of equal scores, as an argmax: the last head
    that beat the running best, so the largest such ``k``: a maximum, cheaper than a
    masked write); more than ``_FEW_HEADS``: laid out ``(m, A, K)``, numpy's argmax along
    the contiguous heads (faster than along the middle axis there)."""
    if K <= _FEW_HEADS:
        scores = (flat @ Xa.T).reshape(A, K, -1)
        best = scores[:, 0].copy()
        first = np.zeros(best.shape, np.int8)
        better = np.empty(best.shape, bool)
        beaten_by = np.empty(best.shape, np.int8)
        for k in range(1, K):
            np.greater(scores[:, k], best, out=better)
            np.maximum(best, scores[:, k], out=best)
            np.multiply(better.view(np.int8), np.int8(k), out=beaten_by)
            np.maximum(first, beaten_by, out=first)
        return first, best
    scores = (Xa @ flat.T).reshape(-1, A, K)
    first = scores.argmax(2)
    best = scores.reshape(-1)[np.arange(first.size) * K + first.ravel()].reshape(first.shape)
    return first.T, best.T


def _assign(X, Xa, heads, Xw, w) -> _Pass:
    """Nearest heads of every run's rows ``X``, and the sums of Lloyd's step (``Xa``:
    :func:`_augmented` rows; heads ``(A, K, d)``; ``Xw`` the rows times their weights
    ``w``, or the rows and ``None``).

    The per-cell sums are a product of the 0/1 memberships ``(A, K, m)`` with the rows
    when that costs little (``K <= _DENSE_HEADS`` and ``K d <= _DENSE_SUMS``: the order
    of the scores' product), else a sparse product, ``O(A n d)`` rather than ``O(A K n
    d)``: faster from about ten heads."""
    A, K, d = heads.shape
    flat = np.empty((A * K, d + 1), X.dtype)     # [mu, ||mu||^2 / 2] of every run's heads
    flat[:, :d] = heads.reshape(A * K, d)
    flat[:, d] = 0.5 * (flat[:, :d] * flat[:, :d]).sum(1)
    n, block = X.shape[0], _rows_per_block(A, K)
    labels = np.empty((A, n), dtype=np.int64)
    top = np.empty((A, n), dtype=X.dtype)
    dense = K <= _DENSE_HEADS and K * d <= _DENSE_SUMS
    sums, counts = np.zeros((A, K, d), X.dtype), np.zeros((A, K), X.dtype)
    index = np.arange(K, dtype=np.int8)[None, :, None]
    for s in range(0, n, block):
        first, top[:, s:s + block] = _nearest(Xa[s:s + block], flat, A, K)
        labels[:, s:s + block] = first
        if dense:
            member = np.empty((A, K, first.shape[1]), X.dtype)       # 0/1 memberships
            np.equal(index, first[:, None], out=member, casting="unsafe")
            sums += member @ Xw[s:s + block]
            counts += member.sum(2) if w is None else member @ w[s:s + block]
    if not dense:
        cells = (labels + (K * np.arange(A))[:, None]).T.ravel()    # row-major (i, run)
        member = sp.csr_matrix((np.ones(n * A, X.dtype), cells, np.arange(0, n * A + 1, A)),
                               shape=(n, A * K))
        sums = np.asarray(member.T @ Xw).reshape(A, K, d)
        counts = np.bincount(cells, None if w is None else np.repeat(w, A),
                             minlength=A * K).reshape(A, K).astype(X.dtype)
    return _Pass(labels, top, sums, counts)


def _augmented(X):
    """The rows with a column of -1, ``(n, d + 1)``: one product with ``[mu, ||mu||^2 / 2]``
    gives the scores ``<x, mu> - ||mu||^2 / 2``."""
    Xa = np.empty((X.shape[0], X.shape[1] + 1), X.dtype)
    Xa[:, :-1] = X
    Xa[:, -1] = -1.0
    return Xa


def _means(step: _Pass, heads):
    """Lloyd's step of every run: the (weighted) means of the cells, ``(A, K, d)``; a head
    whose cell is empty (no weight) keeps its place."""
    full = step.counts > 0
    new = heads.copy()
    new[full] = step.sums[full] / step.counts[full][:, None]
    return new


def lloyd_batch(rows: np.ndarray, heads: np.ndarray, max_iter: int, *, tol: float = 0.0,
                weights: np.ndarray | None = None) -> KMeansResult:
    """Lloyd's steps of every run from ``heads`` ``(R, K, d)``, each to its own stop.

    Returns every run's end as one :class:`~attnclust.cluster.kmeans.result.KMeansResult` with a
    leading axis of runs: heads ``(R, K, d)``, labels ``(R, n)``, objective ``(R,)`` (from
    the last assignment's scores ``sq - 2 top``: what picks the best run), ``n_iter`` and
    ``converged`` ``(R,)``.

    A run stops when a step changes no label (its heads are then the means of their
    cells, and that step's labels and distances are its end) or moves its heads by a sum
    of squares of at most ``tol`` (its labels are then those of the moved heads, one more
    assignment), or after ``max_iter`` steps.

    Examples
    --------
    >>> X = np.array([[0.0], [0.2], [3.0], [3.4]])
    >>> runs = lloyd_batch(X, X[None, [0, 1]], max_iter=10)
    >>> runs.heads[0, :, 0].tolist(), runs.labels.tolist(), runs.objective.round(3).tolist()
    ([0.1, 3.2], [[0, 0, 1, 1]], [0.025])
    """
    heads = np.array(heads, dtype=rows.dtype)
    R, K, _ = heads.shape
    sq = np.einsum("nd,nd->n", rows, rows)
    Xw = rows if weights is None else rows * weights[:, None]
    Xa = _augmented(rows)
    total = rows.shape[0] if weights is None else float(weights.sum())

    def objective(top):                     # R_inf of each run from its rows' best scores
        dist = np.maximum(sq - 2.0 * top, 0.0)
        return (dist.sum(1) if weights is None else dist @ weights) / max(total, 1e-300)
    labels_end, objective_end = np.empty((R, rows.shape[0]), np.int64), np.empty(R)
    steps, converged, ended = np.zeros(R, np.int64), np.zeros(R, bool), np.zeros(R, bool)
    active, previous = np.arange(R), None
    for _ in range(int(max_iter)):
        current = heads[active]
        labels, top, *_ = step = _assign(rows, Xa, current, Xw, weights)
        new = _means(step, current)
        steps[active] += 1
        stable = np.zeros(len(active), bool) if previous is None else \
            (labels == previous).all(1)
        moved = ((new - current) ** 2).sum((1, 2))
        heads[active] = np.where(stable[:, None, None], current, new)
        done = stable | (moved <= tol)
        converged[active[done]] = True
        fin = active[stable]
        labels_end[fin], objective_end[fin], ended[fin] = labels[stable], \
            objective(top[stable]), True
        active, previous = active[~done], labels[~done]
        if not len(active):
            break
    rest = np.flatnonzero(~ended)           # moved by at most tol, or out of steps
    if len(rest):
        labels_end[rest], top, *_ = _assign(rows, Xa, heads[rest], Xw, weights)
        objective_end[rest] = objective(top)
    return KMeansResult(heads, labels_end, objective_end, steps, converged)


def best_of_seedings(X: np.ndarray, n_clusters: int, n_init: int, rng: np.random.Generator,
                     *, max_iter: int = 300, tol: float = KMEANS_TOL,
                     weights: np.ndarray | None = None,
                     init: np.ndarray | None = None) -> KMeansResult:
    """The best of ``n_init`` k-means runs (greedy k-means++ seedings, Lloyd's steps).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows (float64 or float32; the computation is in their dtype).
    n_clusters, n_init : int
        Heads per run, and seedings.
    rng : numpy.random.Generator
        Draws the seedings.
    max_iter : int, default=300
        Lloyd steps per run at most.
    tol : float, default=1e-4
        scikit-learn's ``tol``: a run stops when its heads move by a sum of squares of at
        most ``tol`` times the rows' mean (weighted) variance per feature.
    weights : ndarray of shape (n,), optional
        Sample weights: sums, means, objective and seeding draws are weighted.
    init : ndarray of shape (K, d), optional
        One run from these heads instead of seedings.

    Returns
    -------
    KMeansResult
        The best run; its objective recomputed from its heads and labels.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(c, 0.1, (50, 2)) for c in (1.0, 3.0, 6.0)])
    >>> res = best_of_seedings(X, 3, 10, np.random.default_rng(1))
    >>> sorted(np.round(res.heads[:, 0]).tolist()), res.converged
    ([1.0, 3.0, 6.0], True)
    """
    w = None if weights is None else np.asarray(weights, dtype=X.dtype)
    mean = np.average(X, axis=0, weights=w)
    variance = np.average((X - mean) ** 2, axis=0, weights=w).mean()
    tol = float(tol) * float(variance)
    starts = kmeanspp_batch(X, n_clusters, n_init, rng, weights=w) if init is None else \
        np.asarray(init, dtype=X.dtype)[None]
    runs = lloyd_batch(X, starts, max_iter=max_iter, tol=tol, weights=w)
    # the first run of lowest objective, ties within rounding included: runs that end in
    # one partition differ in the last bits with the rows' memory layout, and the choice
    # (the order of the heads) must not
    low = runs.objective.min()
    tie = max(1e-12, 16 * float(np.finfo(X.dtype).eps)) * abs(low)
    b = int(np.flatnonzero(runs.objective <= low + tie)[0])
    return KMeansResult(runs.heads[b], runs.labels[b],
                        objective(X, runs.heads[b], runs.labels[b], w),
                        int(runs.n_iter[b]), bool(runs.converged[b]))

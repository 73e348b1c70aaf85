"""The end of a Euclidean fit in the layer's hard limit: when to swap, when to repair.

In the hard limit ``lambda -> infinity`` the layer's fixed-point step is Lloyd's step and
the risk is the k-means objective ``R_inf`` (:mod:`attnclust.cluster.kmeans.passes`). Why a fit
ends this way: at the ``"auto"`` inverse temperature the soft fixed point moves the
boundaries between overlapping clusters away from the nearest-head partition (heads of
equal weight and equal spread pull each other's cells towards the smaller cluster),
while the labels are the nearest heads; and with ten seedings a soft step before the
hard limit changes no mean accuracy (the measurements are in
``docs/guide/default-estimator.md``).

The fit's end (:func:`fit_to_hard_limit`), from the warm start's k-means partition of
the warm-start sample ``S`` (:func:`~attnclust.cluster.kmeans.lloyd.sample_kmeans`: the best of
``n_init`` seedings, each run by Lloyd's steps to a stable partition):

1. with ``SWAP_HEADS`` (ten) heads or more, single swaps
   (:func:`~attnclust.cluster.kmeans.swap.swap_polish`), each kept only if it lowers ``R_inf``
   on ``S`` (so the end is never worse than the warm start);
2. with more rows than ``S``: Lloyd steps over all rows
   (:func:`~attnclust.cluster.kmeans.passes.lloyd_passes`), whose last step also gives the labels;
3. when the rows' ``R_inf`` ends above ``MISSED`` times the sample's, ``S`` missed rows
   far from the rest (one far row takes a head from a cluster, merged into a neighbour
   wherever it was): the ``FAR_ROWS`` rows farthest from the sample's heads join ``S``
   with their own weights, single swaps run on it from the heads of step 2, and Lloyd
   steps over all rows from the swapped heads are kept if they end lower (at most
   ``REPAIRS`` rounds, while the objective stays above that multiple).

In a data-parallel fit every rank holds its own rows; step 3 then gathers the far rows:
each rank finds its ``FAR_ROWS`` farthest rows, :meth:`~attnclust.cluster.communicator.
Communicator.gather` stacks every rank's candidates (distance, global index, weight,
row) on every rank, and the ``FAR_ROWS`` farthest of them, ordered by distance and then
global index (as one process orders them), join ``S`` identically on every rank. The
data-parallel fit is then one process's fit in this case too. A communicator that does
not say its ranks (``world = 1`` with rows on other ranks) cannot gather: the repair is
skipped with a warning.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``S``          ``S``           the warm-start sample, ``(m, d)``
``D_i``        ``dist``        squared distance of row ``i`` to its nearest head
``mu_h``       ``heads``       heads, shape ``(K, d)``
``R_inf``      ``objective``   k-means objective per unit weight
=============  ==============  =============================================
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ...layer.geometry import Geometry
from ...layer.results import IterationInfo
from ..degenerate import user_stacklevel
from ..rows import WorkingRows
from .batch import KMEANS_TOL
from .lloyd import sample_kmeans
from .passes import RowReader, lloyd_passes
from .result import KMeansHistory, KMeansResult
from .swap import SWAPS, nearest_two, swap_polish

__all__ = ["FAR_ROWS", "MISSED", "OBJECTIVE_RTOL", "REPAIRS", "fit_to_hard_limit"]

OBJECTIVE_RTOL = 1e-3   # steps over all rows stop once one gains less than this of R_inf
MISSED = 2.0        # the rows' R_inf beyond this multiple of the sample's: it missed far rows ...
FAR_ROWS = 256      # ... and this many of the rows farthest from their heads join it
REPAIRS = 3         # (rounds of swaps and passes at most)


def fit_to_hard_limit(S: torch.Tensor, rows: WorkingRows, start: KMeansResult, *,
                      geometry: Geometry, max_iter: int, callback=None,
                      weights: torch.Tensor | None = None,
                      tol: float = KMEANS_TOL) -> KMeansResult:
    """The fit's end of the module docstring, from the warm start ``start`` on ``S``.

    ``callback`` (an :class:`~attnclust.layer.results.IterationInfo` consumer, at an infinite
    inverse temperature) sees the sample's partition, then each step over all rows.
    ``weights``: the sample's weights (the rows' own are ``rows.weights``); ``tol``:
    scikit-learn's ``tol`` (squared moves of the heads over the rows' mean variance per
    feature, ``tol / d`` in the unit-variance working space) for the swaps' reruns and
    the steps over all rows.

    Returns a :class:`~attnclust.cluster.kmeans.result.KMeansResult`: this rank's labels,
    ``objective`` the final ``R_inf`` over all rows (as
    :func:`~attnclust.cluster.kmeans.passes.lloyd_passes` gives it), ``n_iter`` the Lloyd
    steps on the sample (the run kept and the swaps' runs) plus those over all rows, and
    ``history``: ``R_inf`` of the sample's partition when the sample is every row, else
    of the heads each step over all rows started from (its last entry the objective),
    with those heads and the steps before each.

    Examples
    --------
    >>> import attnclust as ac
    >>> from attnclust.cluster.kmeans import sample_kmeans
    >>> X, z = ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.1).sample(
    ...     300, rng=0, return_labels=True)
    >>> cells = ac.layer.geometry.Euclidean()
    >>> rows = WorkingRows.prepare(X, geometry=cells, comm=None)
    >>> S = rows.sample(np.random.default_rng(0), 300)          # every row
    >>> end = fit_to_hard_limit(S, rows, sample_kmeans(S, 2, seed=0), geometry=cells,
    ...                         max_iter=300)
    >>> ac.adjusted_rand_index(z, end.labels), end.converged
    (1.0, True)
    """
    d = start.heads.shape[1]
    best, swap_steps = swap_polish(S, start, geometry, max_iter=max_iter, weights=weights,
                                   tol=tol)
    n_sample = start.n_iter + swap_steps
    if callback is not None:
        callback(IterationInfo(n_sample, best.objective, float("inf"), 0.0, best.heads.clone()))
    if S.shape[0] == rows.n_total:   # the sample is every row, in order
        mine = slice(rows.comm.offset, rows.comm.offset + rows.rows.shape[0])
        history = KMeansHistory(np.array([best.objective]), best.heads[None].clone(),
                                np.array([n_sample]))
        return KMeansResult(best.heads, best.labels[mine], best.objective, n_sample,
                            best.converged, history)
    total = rows.n_total if rows.weights is None else \
        float(rows.comm.sum_array(float(rows.weights.sum())))
    reader = RowReader(rows.read, rows.rows.shape[0], rows.chunk, rows.take, rows.workers,
                       rows.comm.reduce, total)

    def passes(heads, before):   # Lloyd steps over all rows, counted after `before` steps
        def progress(info):      # in the callback's units
            callback(info._replace(iteration=before + info.iteration))
        run = lloyd_passes(reader, heads, max_iter, tol=tol / d, weights=rows.weights,
                           rtol=OBJECTIVE_RTOL,
                           callback=None if callback is None else progress)
        return run._replace(n_iter=before + run.n_iter, history=run.history._replace(
            step=before + run.history.step))
    end = passes(best.heads, n_sample)
    if start.heads.shape[0] < 2 or not _can_gather(rows):
        return end
    S2 = w2 = None
    for _ in range(REPAIRS):
        if not end.objective > MISSED * best.objective:
            break
        if S2 is None:
            S2, w2 = _with_far_rows(S, weights, rows, best.heads, total)
        repaired = _swapped_end(S2, w2, end, geometry, max_iter, passes, tol)
        if repaired is end:
            break
        end = repaired
    return end


def _can_gather(rows: WorkingRows) -> bool:
    """Whether the far rows of every rank can be gathered (one process, or a communicator
    that says its ranks); warns when not."""
    if rows.rows.shape[0] == rows.n_total or rows.comm.world > 1:
        return True
    warnings.warn("the far-row repair of the hard limit's end does not run: the "
                  "communicator holds a share of the rows but does not give its ranks "
                  "(Communicator.world); the fit may keep a head on a cluster's far rows",
                  RuntimeWarning, stacklevel=user_stacklevel())
    return False


def _with_far_rows(S, Sw, rows: WorkingRows, sampled: torch.Tensor, total: float):
    """``S`` and its weights with the ``FAR_ROWS`` rows (of every rank) farthest from the
    sample's heads ``sampled``: those with their own weights, the sample's rows standing
    for the others (``total``: the rows' total weight; a far row the sample holds counts
    twice, a small bias of the swaps' objective only: their result is kept only if the
    passes end lower)."""
    far, own = _far_rows(rows, sampled, min(FAR_ROWS, rows.n_total))
    own = own.to(S.dtype)
    stand = S.new_ones(S.shape[0]) if Sw is None else Sw.to(S.dtype)
    rest = max(float(total) - float(own.sum()), 0.0) / float(stand.sum())
    return torch.cat([S, far.to(S.dtype)]), torch.cat([stand * rest, own])


def _swapped_end(S2, w2, end: KMeansResult, geometry: Geometry, max_iter: int, passes,
                 tol: float) -> KMeansResult:
    """Single swaps on ``S2`` (weights ``w2``) from ``end``'s heads and, if one is kept,
    Lloyd steps over all rows from there (``passes``): ``end`` followed by them if they
    end lower (their history after ``end``'s), else ``end``."""
    start = sample_kmeans(S2, end.heads.shape[0], init=end.heads, max_iter=max_iter,
                          weights=w2, tol=tol)
    moved, steps = swap_polish(S2, start, geometry, max_iter=max_iter, weights=w2,
                               rounds=SWAPS, tol=tol)
    if not moved.objective < start.objective:
        return end
    again = passes(moved.heads, end.n_iter + start.n_iter + steps)
    if not again.objective < end.objective:
        return end
    return again._replace(history=KMeansHistory(*(
        np.concatenate([a, b]) if isinstance(a, np.ndarray) else torch.cat([a, b])
        for a, b in zip(end.history[:3], again.history[:3], strict=True)),
        end.history.full_passes + again.history.full_passes))


def _farthest(rows: WorkingRows, heads: torch.Tensor, m: int):
    """Indices of the ``m`` rows (of positive weight) of this rank farthest from their
    nearest head, and those squared distances."""
    half_sq = 0.5 * (heads * heads).sum(1)
    dist, index = heads.new_zeros(0), torch.zeros(0, dtype=torch.long, device=heads.device)
    for start in range(0, rows.rows.shape[0], rows.chunk):
        d1 = nearest_two(rows.read(start, start + rows.chunk), heads, half_sq)[1]
        if rows.weights is not None:
            d1 = d1.masked_fill(rows.weights[start:start + d1.numel()] <= 0, float("-inf"))
        dist = torch.cat([dist, d1])
        index = torch.cat([index, start + torch.arange(d1.numel(), device=heads.device)])
        if dist.numel() > m:
            dist, keep = dist.topk(m)
            index = index[keep]
    return index, dist


def _far_rows(rows: WorkingRows, heads: torch.Tensor, m: int):
    """The ``m`` rows of all ranks farthest from their nearest head and their weights,
    ``(m, d)`` and ``(m,)``, the same on every rank: ordered by distance, then by global
    index."""
    comm = rows.comm
    index, dist = _farthest(rows, heads, min(m, rows.rows.shape[0]))
    X = rows.take(index)
    w = X.new_ones(index.numel()) if rows.weights is None else rows.weights[index].to(X.dtype)
    where = (comm.offset + index).double()
    if comm.world > 1:       # every rank's candidates, padded to m rows, in rank order
        d = X.shape[1]
        table = torch.zeros(m, d + 4, dtype=torch.float64, device=X.device)
        k = index.numel()
        table[:k, 0], table[:k, 1], table[:k, 2] = 1.0, dist.double(), where.double()
        table[:k, 3], table[:k, 4:] = w.double(), X.double()
        table = comm.gather(table).reshape(-1, d + 4)
        table = table[table[:, 0] > 0]
        dist, where = table[:, 1].to(dist.dtype), table[:, 2]
        w, X = table[:, 3].to(X.dtype), table[:, 4:].to(X.dtype)
    by_index = torch.argsort(where)
    order = by_index[torch.argsort(-dist[by_index], stable=True)][:m]
    return X[order], w[order]

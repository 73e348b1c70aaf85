"""The end of a Euclidean fit: the layer's fixed-point steps in the hard limit (Lloyd passes).

For Euclidean heads the attention is ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)``.
As ``lambda -> infinity`` it becomes the indicator of the nearest head, the layer's
output ``T_mu(x)`` becomes that head, and the empirical risk becomes the k-means
objective

    R_inf(mu) = (1/n) sum_i min_h ||x_i - mu_h||^2 .

The fixed-point step of :mod:`attnclust.fixed_point` is then exactly Lloyd's step,
``mu_h <- mean of the rows nearest to mu_h``, and it never increases ``R_inf``: the new
means are the best heads for the old cells, and the new cells the best cells for the new
heads. So ``R_inf`` is non-increasing along the passes, and a pass that moves no head is
a fixed point of the step (a stable k-means partition).

Why a fit ends this way: at the ``"auto"`` inverse temperature the soft fixed point
moves the boundaries between overlapping clusters away from the nearest-head partition
(heads of equal weight and equal spread pull each other's cells towards the smaller
cluster), while the labels are the nearest heads; and with ten seedings a soft step
before the hard limit changes no mean accuracy (the measurements are in
``docs/guide/default-estimator.md``).

Each pass reads the rows once in chunks (one ``n x d x K`` product, per-cell sums) and,
with ``reduce`` (a sum over data-parallel ranks), sums ``K (d + 1) + 2`` numbers over the
ranks, so every rank takes the same steps.

The fit's end (:func:`fit_to_hard_limit`), from the warm start's k-means partition of
the warm-start sample ``S`` (:func:`sample_kmeans`: the best of ``n_init`` seedings, each
run by Lloyd's steps, the fixed-point step in the hard limit, to a stable partition):

1. with ten heads or more, single swaps (:func:`swap_polish`), each kept only if it
   lowers ``R_inf`` on ``S`` (so the end is never worse than the warm start);
2. with more rows than ``S``: Lloyd passes over all rows (:func:`lloyd_passes`), whose
   last pass also gives the labels.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``R_inf``      ``objective``   k-means objective per row after each pass
``mu_h``       ``heads``       heads, shape ``(K, d)``
``S``          ``S``           the warm-start sample, ``(m, d)``
=============  ==============  =============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ._threads import map_chunks
from .geometry import Euclidean, Geometry
from .multistart import best_of_seedings
from .results import IterationInfo
from .rows import WorkingRows
from .swap import single_swap

__all__ = ["HardEnding", "HardFit", "SampleKMeans", "cell_sums", "fit_to_hard_limit",
           "lloyd_passes", "sample_kmeans", "swap_polish"]

KMEANS_TOL = 1e-4   # scikit-learn's KMeans tol: squared moves over the mean feature variance
OBJECTIVE_RTOL = 1e-3   # passes over all rows stop once a step gains less than this of R_inf
SWAPS = 8           # single swaps at most from the sample's k-means partition ...
SWAP_HEADS = 10     # ... with at least this many heads (with fewer, restarts suffice)
_FLOAT64_SAMPLE = 1 << 16   # a float32 sample of at most this many numbers is run in float64


class HardEnding(NamedTuple):
    """Result of :func:`lloyd_passes`."""

    heads: torch.Tensor
    """Heads after the last pass, ``(K, d)``."""
    objective: np.ndarray
    """``R_inf`` of the heads each pass started from (non-increasing), ``(n_passes,)``."""
    path: torch.Tensor
    """The heads each pass started from, ``(n_passes, K, d)``."""
    n_passes: int
    """Passes over the rows."""
    converged: bool
    """A stopping rule (``tol`` or ``rtol``) was met before ``max_passes``."""


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


def _cell_sums(Xc: torch.Tensor, heads: torch.Tensor, half_sq: torch.Tensor, w=None,
               norms: bool = False):
    """Flat ``[counts (K), sums (K d), -2 sum_i max_h (<x_i, mu_h> - ||mu_h||^2 / 2),
    sum_i ||x_i||^2 (with ``norms``, else 0)]`` of one chunk (each term weighted by ``w``
    (m,) when given), and its labels ``(m,)``: the last two entries add up to
    ``sum_i min_h ||x_i - mu_h||^2``."""
    best, z = (Xc @ heads.T - half_sq).max(1)                 # (m,) <x, mu> - ||mu||^2 / 2
    counts, sums = cell_sums(Xc, z, heads.shape[0], w)
    sq = (Xc * Xc).sum(1) if norms else None
    if w is not None:
        best = best * w
        sq = None if sq is None else sq * w
    return torch.cat([counts, sums.reshape(-1), (-2.0 * best.sum()).reshape(1),
                      (best.new_zeros(1) if sq is None else sq.sum().reshape(1))]), z


def lloyd_passes(read: Callable[[int, int], torch.Tensor], n_rows: int, heads: torch.Tensor,
                 *, max_passes: int, tol: float, chunk: int, rtol: float = 0.0, workers: int = 1,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 n_total: int | None = None, labels: np.ndarray | None = None,
                 callback: Callable[[IterationInfo], None] | None = None,
                 weights: torch.Tensor | None = None) -> HardEnding:
    """Lloyd passes from ``heads`` until the step would move the heads by a sum of squares
    of at most ``tol``, or the last move lowered ``R_inf`` by at most ``rtol`` of its value.

    The ``tol`` rule is scikit-learn's ``KMeans`` rule (``sum_h ||mu_h' - mu_h||^2 <=
    tol``, which scikit-learn takes as ``1e-4`` times the data's mean variance per
    feature). The heads returned are those of the last pass, whose cells it computed: so
    ``labels``, when given, holds their nearest heads without another pass over the rows
    (the last step, of at most ``tol``, is not taken).

    Parameters
    ----------
    read : callable
        ``read(start, stop)`` returns rows ``start:stop`` of the fit, ``(m, d)``, in the
        dtype and on the device of ``heads``.
    n_rows : int
        Rows that ``read`` serves (this rank's).
    heads : Tensor of shape (K, d)
        Initial heads.
    max_passes : int
        At most this many passes.
    tol : float
        Stop at a pass whose step would move the heads by a sum of squares of at most ``tol``.
    rtol : float, default=0
        Stop at a pass that finds that the previous step lowered ``R_inf`` by at most
        ``rtol`` times its value: on many rows Lloyd's heads creep long after the
        partition has settled.
    chunk, workers :
        Rows per chunk, and threads sharing the chunks (:func:`attnclust._threads.map_chunks`).
    reduce : callable, optional
        Sum over data-parallel ranks of a tensor (the same on every rank).
    n_total : int, optional
        Rows of all ranks (default ``n_rows``); with ``weights``, their total weight.
    labels : ndarray of shape (n_rows,), optional
        Filled with the index of each row's nearest returned head.
    callback : callable, optional
        Called after each pass with an :class:`~attnclust.results.IterationInfo`
        (``iteration``: passes so far; ``loss``: ``R_inf`` of the pass's heads;
        ``inverse_temperature``: infinity; ``shift``: the largest move of a head): progress
        over the passes.
    weights : Tensor of shape (n_rows,), optional
        Sample weights of the rows: every sum (cell sizes, means, ``R_inf``) is weighted.

    Returns
    -------
    HardEnding
        A head whose cell is empty keeps its position.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = lloyd_passes(lambda a, b: X[a:b], 4, X[[0, 2]], max_passes=10, tol=0.0, chunk=2)
    >>> res.heads.tolist(), res.converged, res.objective.round(3).tolist()
    ([[0.1, 0.0], [3.2, 0.0]], True, [0.05, 0.025])
    """
    K, d = heads.shape
    n = n_rows if n_total is None else n_total
    objective: list[float] = []
    path: list[torch.Tensor] = []
    converged = False

    n_chunks = -(-n_rows // chunk)
    # each chunk's sums land in a row of an array made here: a tensor (or array) made on a
    # worker thread and kept alive pins that thread's malloc heap, and with it the freed
    # temporaries of every chunk (+150 MB on 5M x 8)
    parts = np.zeros((max(n_chunks, 1), K * (d + 1) + 2))

    def cells(start, h, q, norms):
        part, z = _cell_sums(read(start, start + chunk), h, q,
                             None if weights is None else weights[start:start + chunk], norms)
        if labels is not None:
            labels[start:start + z.shape[0]] = z.cpu().numpy()
        parts[start // chunk] = part.cpu().numpy()
    sq_norms = None     # sum_i ||x_i||^2, read on the first pass only
    for _ in range(int(max_passes)):
        half_sq = 0.5 * (heads * heads).sum(1)
        first = sq_norms is None
        map_chunks(lambda s, h=heads, q=half_sq, f=first: cells(s, h, q, f), n_rows, chunk,
                   workers)
        flat = torch.as_tensor(parts.sum(0), device=heads.device)      # float64
        if reduce is not None:
            flat = reduce(flat)
        counts, sums = flat[:K].to(heads.dtype), flat[K:K + K * d].reshape(K, d).to(heads.dtype)
        if first:
            sq_norms = float(flat[-1])
        objective.append((sq_norms + float(flat[-2])) / n)
        path.append(heads)
        new = Euclidean().lloyd_step(sums, counts, heads)   # counts: maybe weights < 1
        settled = len(objective) > 1 and objective[-2] - objective[-1] <= rtol * objective[-2]
        moves = ((new - heads) ** 2).sum(1)                   # (K,) squared moves
        if callback is not None:
            callback(IterationInfo(len(objective), objective[-1], float("inf"),
                                   float(moves.max()) ** 0.5, heads.detach().clone()))
        if float(moves.sum()) <= tol or settled:
            converged = True
            break
        if len(objective) < max_passes:
            heads = new
    return HardEnding(heads, np.asarray(objective, dtype=np.float64),
                      torch.stack(path) if path else heads.new_zeros(0, K, d), len(objective),
                      converged)


class SampleKMeans(NamedTuple):
    """k-means of the warm-start sample (:func:`sample_kmeans`)."""

    heads: torch.Tensor
    """Cluster means, ``(K, d)``, in the sample's dtype and device."""
    labels: np.ndarray
    """Nearest head of each sample row, ``(m,)``."""
    objective: float
    """``R_inf`` of the heads on the sample (mean squared distance to the nearest head)."""
    n_iter: int
    """Lloyd steps of the run kept."""
    converged: bool
    """The run kept met a stopping rule within ``max_iter`` steps."""


def sample_kmeans(S: torch.Tensor, n_clusters: int, *, init: torch.Tensor | None = None,
                  n_init: int = 1, seed: int | None = None, max_iter: int = 300,
                  weights: torch.Tensor | None = None) -> SampleKMeans:
    """k-means of the rows ``S``: the best of ``n_init`` greedy k-means++ seedings (or one
    run from ``init``), each run by Lloyd's steps to scikit-learn's stopping rule
    (:func:`attnclust.multistart.best_of_seedings`, all runs carried together;
    ``weights``: the rows' sample weights).

    A float32 sample of at most ``2^16`` numbers is copied to float64 for the runs, whose
    objectives pick the best; a larger one is run in float32 (its products take half the
    time: 0.69 -> 0.56 s for the 70,000 x 784 fit, 0.48 -> 0.42 s for 200,000 x 128, same
    labels).

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
                           max_iter=max_iter, tol=KMEANS_TOL, weights=w, init=start)
    heads = torch.as_tensor(run.heads, dtype=S.dtype, device=S.device)
    return SampleKMeans(heads, run.labels, run.objective, run.n_iter, run.converged)


def swap_polish(S: torch.Tensor, best: SampleKMeans, geometry: Geometry, *, max_iter: int,
                weights: torch.Tensor | None = None, rounds: int | None = None
                ) -> tuple[SampleKMeans, int]:
    """Single swaps from the k-means partition ``best`` of ``S``: while
    :func:`attnclust.swap.single_swap` finds a head that costs less to remove than the
    costliest cell gains from a split, move it there, run Lloyd's steps from the moved
    heads, and keep the result if its objective is lower (at most ``rounds``; default
    ``SWAPS`` with at least ``SWAP_HEADS`` heads, else none). Returns the partition kept
    and the Lloyd steps taken.

    Examples
    --------
    >>> S = torch.tensor([[0.0], [0.1], [5.0], [5.1], [9.0], [9.1]], dtype=torch.float64)
    >>> two_in_one = sample_kmeans(S, 3, init=S[[0, 1, 4]])     # 0 | 0.1 | 5..9.1
    >>> kept, _ = swap_polish(S, two_in_one, Euclidean(), max_iter=100, rounds=8)
    >>> sorted(kept.heads[:, 0].tolist()), round(kept.objective, 4)
    ([0.05, 5.05, 9.05], 0.0025)
    """
    K, steps = best.heads.shape[0], 0
    if rounds is None:
        rounds = SWAPS if K >= SWAP_HEADS else 0
    for _ in range(rounds):
        move = single_swap(S, best.heads, geometry, weights=weights)
        if move is None:
            break
        heads = best.heads.clone()
        heads[[move.h, move.g]] = move.new.to(heads.dtype)
        moved = sample_kmeans(S, K, init=heads, max_iter=max_iter, weights=weights)
        steps += moved.n_iter
        if not moved.objective < best.objective:
            break
        best = moved
    return best, steps


class HardFit(NamedTuple):
    """Result of :func:`fit_to_hard_limit`, in the working space."""

    heads: torch.Tensor
    """Final heads, ``(K, d)``: a stable k-means partition's means."""
    labels: np.ndarray
    """Nearest final head of each of this rank's rows."""
    objective: np.ndarray
    """``R_inf`` over all rows: of the sample's partition when the sample is every row,
    else of the heads each pass over all rows started from, ``(T,)``."""
    path: torch.Tensor
    """The heads of each entry of ``objective``, ``(T, K, d)``."""
    step: np.ndarray
    """Lloyd steps made before each entry of ``objective``, ``(T,)``."""
    n_iter: int
    """Lloyd steps on the sample (the run kept and the swaps' runs) plus passes over all
    rows."""
    converged: bool
    """The last Lloyd stage met its stopping rule."""


def fit_to_hard_limit(S: torch.Tensor, rows: WorkingRows, start: SampleKMeans, *,
                      geometry: Geometry, max_iter: int, callback=None,
                      weights: torch.Tensor | None = None) -> HardFit:
    """The fit's end of the module docstring, from the warm start ``start`` on ``S``.

    ``callback`` (an :class:`~attnclust.results.IterationInfo` consumer, at an infinite
    inverse temperature) sees the sample's partition, then each pass over all rows.
    ``weights``: the sample's weights (the rows' own are ``rows.weights``).

    Examples
    --------
    >>> import attnclust as ac
    >>> X, z = ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.1).sample(
    ...     300, rng=0, return_labels=True)
    >>> cells = ac.geometry.Euclidean()
    >>> rows = WorkingRows.prepare(X, geometry=cells, comm=None)
    >>> S = rows.sample(np.random.default_rng(0), 300)          # every row
    >>> end = fit_to_hard_limit(S, rows, sample_kmeans(S, 2, seed=0), geometry=cells,
    ...                         max_iter=300)
    >>> ac.adjusted_rand_index(z, end.labels), end.converged
    (1.0, True)
    """
    d = start.heads.shape[1]
    best, swap_steps = swap_polish(S, start, geometry, max_iter=max_iter, weights=weights)
    n_sample = start.n_iter + swap_steps
    if callback is not None:
        callback(IterationInfo(n_sample, best.objective, float("inf"), 0.0, best.heads.clone()))
    if S.shape[0] == rows.n_total:   # the sample is every row, in order
        mine = slice(rows.comm.offset, rows.comm.offset + rows.rows.shape[0])
        return HardFit(best.heads, best.labels[mine], np.array([best.objective]),
                       best.heads[None].clone(), np.array([n_sample]), n_sample,
                       best.converged)
    labels = np.empty(rows.rows.shape[0], dtype=np.int64)

    def progress(info):   # the passes continue the sample's count, in the callback's units
        callback(info._replace(iteration=n_sample + info.iteration))
    full = lloyd_passes(rows.read, rows.rows.shape[0], best.heads, max_passes=max_iter,
                        tol=KMEANS_TOL / d, rtol=OBJECTIVE_RTOL, chunk=rows.chunk,
                        workers=rows.workers, reduce=rows.comm.reduce,
                        n_total=rows.n_total if rows.weights is None else
                        float(rows.comm.sum_array(float(rows.weights.sum()))),
                        labels=labels, callback=None if callback is None else progress,
                        weights=rows.weights)
    return HardFit(full.heads, labels, full.objective, full.path,
                   n_sample + np.arange(full.n_passes), n_sample + full.n_passes, full.converged)

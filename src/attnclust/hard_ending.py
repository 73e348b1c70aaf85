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

A whole pass reads the rows once in chunks (one ``n x d x K`` product, per-cell sums);
the steps after it read only the rows whose cell may have changed (Hamerly's bounds on
the gap between each row's nearest two heads, 2 bytes a row; :func:`lloyd_passes`). With
``reduce`` (a sum over data-parallel ranks) a step sums ``K (d + 2) + 1`` numbers over
the ranks, so every rank takes the same steps.

The fit's end (:func:`fit_to_hard_limit`), from the warm start's k-means partition of
the warm-start sample ``S`` (:func:`sample_kmeans`: the best of ``n_init`` seedings, each
run by Lloyd's steps, the fixed-point step in the hard limit, to a stable partition):

1. with ten heads or more, single swaps (:func:`swap_polish`), each kept only if it
   lowers ``R_inf`` on ``S`` (so the end is never worse than the warm start);
2. with more rows than ``S``: Lloyd steps over all rows (:func:`lloyd_passes`), whose
   last step also gives the labels;
3. when the rows' ``R_inf`` ends above ``MISSED`` times the sample's, ``S`` missed rows
   far from the rest (one far row takes a head from a cluster, merged into a neighbour
   wherever it was): the ``FAR_ROWS`` rows farthest from the sample's heads join ``S``
   with their own weights, single swaps run on it from the heads of step 2, and Lloyd
   steps over all rows from the swapped heads are kept if they end lower (one process's
   rows; at most ``REPAIRS`` rounds, while the objective stays above that multiple).

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``R_inf``      ``objective``   k-means objective per row after each step
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
from .swap import nearest_two, single_swap

__all__ = ["HardEnding", "HardFit", "SampleKMeans", "cell_sums", "fit_to_hard_limit",
           "lloyd_passes", "sample_kmeans", "swap_polish"]

KMEANS_TOL = 1e-4   # scikit-learn's KMeans tol: squared moves over the mean feature variance
OBJECTIVE_RTOL = 1e-3   # steps over all rows stop once one gains less than this of R_inf ...
SETTLED = 0.01          # ... and moves at most this share of the rows to another cell
SWAPS = 8           # single swaps at most from the sample's k-means partition ...
SWAP_HEADS = 10     # ... with at least this many heads (with fewer, restarts suffice)
_FLOAT64_SAMPLE = 1 << 16   # a float32 sample of at most this many numbers is run in float64
FULL_PASS = 0.25    # a step over all rows reads every row when its bounds doubt more of them
MISSED = 2.0        # the rows' R_inf beyond this multiple of the sample's: it missed far rows ...
FAR_ROWS = 256      # ... and this many of the rows farthest from their heads join it
REPAIRS = 3         # (rounds of swaps and passes at most)
_PARTS_BYTES = 1 << 26      # per-chunk sums held at once by a step over all rows (64 MB)


class HardEnding(NamedTuple):
    """Result of :func:`lloyd_passes`."""

    heads: torch.Tensor
    """Heads after the last step, ``(K, d)``."""
    objective: np.ndarray
    """``R_inf`` of the heads each step started from (non-increasing), ``(n_passes,)``."""
    path: torch.Tensor
    """The heads each step started from, ``(n_passes, K, d)``."""
    n_passes: int
    """Lloyd steps over all rows."""
    converged: bool
    """A stopping rule (``tol`` or ``rtol``) was met before ``max_passes``."""
    full_passes: int
    """Steps that read every row (the others read the rows their bounds doubted)."""


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


def _gap(d1sq: torch.Tensor, d2sq: torch.Tensor) -> torch.Tensor:
    """``d2 - d1`` from the squared distances to the nearest two heads (``inf`` with one
    head). When both round to 0 (a row on two heads closer than float's resolution) it is
    ``0 / 0 = nan``, which :func:`_doubted` always rescores: a gap from the scores' own
    difference would then be infinite, and the row would keep its label when its head
    moves away."""
    return torch.where(torch.isinf(d2sq), d2sq, (d2sq - d1sq) / (d1sq.sqrt() + d2sq.sqrt()))


def _cell_stats(Xc: torch.Tensor, z: torch.Tensor, dsq: torch.Tensor, K: int,
                w: torch.Tensor | None) -> torch.Tensor:
    """Flat float64 ``[counts (K), sums (K d), sums of squared distances dsq (K)]`` of the
    rows ``Xc`` in the cells ``z`` (weighted by ``w`` (m,) when given)."""
    counts, sums = cell_sums(Xc, z, K, w)
    dist = torch.zeros(K, dtype=torch.float64, device=Xc.device).index_add_(
        0, z, (dsq if w is None else dsq * w).double())
    return torch.cat([counts.double(), sums.double().reshape(-1), dist])


def _move_heads(stats: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
    """Make the distance sums of ``stats`` (:func:`_cell_stats`, the cells unchanged) those
    to the heads ``new`` instead of ``old``, in place: ``sum_i ||x_i - b||^2 = sum_i ||x_i -
    a||^2 + 2 (a - b) . (s - n a) + n ||a - b||^2`` for a cell of ``n`` rows summing to ``s``.
    """
    K, d = old.shape
    counts, sums = stats[:K], stats[K:K + K * d].reshape(K, d)
    step = old - new
    stats[K + K * d:] += 2.0 * (step * (sums - counts[:, None] * old)).sum(1) \
        + counts * (step * step).sum(1)


def _down16(gap: torch.Tensor) -> np.ndarray:
    """float16 values at most ``gap`` (lower bounds stay lower bounds; ``nan`` stays): the
    rounding to nearest moves a value by at most ``2^-11`` of it, or ``2^-25`` below
    float16's normal range, which the slack covers; values above float16's largest are
    clamped to it."""
    return (gap.cpu().float() * (1.0 - 2.0**-10) - 2.0**-24).clamp_(max=65504.0).half().numpy()


def _doubted(bound: np.ndarray, labels: np.ndarray, drift: np.ndarray,
             block: int = 1 << 16) -> np.ndarray:
    """Indices of the rows whose gap bound ``bound_i - drift_{z_i}`` is not positive (or
    ``nan``), in blocks (no temporary of the rows' length)."""
    drift32 = np.nextafter(drift.astype(np.float32), np.float32(np.inf))   # rounded up
    return np.concatenate([start + np.flatnonzero(~(bound[start:start + block]
                                                     > drift32[labels[start:start + block]]))
                           for start in range(0, bound.size, block)] or [np.zeros(0, np.int64)])


def _sum_over_chunks(fill: Callable[[int, np.ndarray], None], n: int, chunk: int,
                     workers: int, size: int) -> np.ndarray:
    """``sum_c row_c`` over the chunks ``c`` of ``n`` items, where ``fill(start, row)`` writes
    chunk ``start:start + chunk``'s ``size`` numbers into ``row`` (on the workers).

    The rows belong to an array made here: a tensor (or array) made on a worker thread and
    kept alive pins that thread's malloc heap, and with it the freed temporaries of every
    chunk (+150 MB on 5M x 8). At most ``_PARTS_BYTES`` of rows are held at a time (``K =
    1,024`` heads of 784 numbers over 70,000 rows would hold 860 MB), added up in chunk
    order: the same sums with any number of workers.
    """
    per = max(workers, _PARTS_BYTES // (8 * size))          # chunks per group
    rows = np.empty((max(min(per, -(-n // chunk)), 1), size))
    total = np.zeros(size)
    for first in range(0, n, per * chunk):
        count = min(n - first, per * chunk)
        rows[:] = 0.0
        map_chunks(lambda s, first=first: fill(first + s, rows[s // chunk]), count, chunk,
                   workers)
        total += rows[:-(-count // chunk)].sum(0)
    return total


def _whole_pass(read, n_rows: int, heads, half_sq, labels: np.ndarray, bound: np.ndarray, *,
                chunk: int, workers: int, weights) -> np.ndarray:
    """This rank's cell statistics (:func:`_cell_stats`) of the nearest heads, over every
    row read in chunks, and the rows (their weight) whose label changed; each row's label
    and gap (its bound) written in place."""
    K, d = heads.shape

    def cells(start, row):
        Xc = read(start, start + chunk)
        z, d1sq, d2sq, _ = nearest_two(Xc, heads, half_sq)
        stop = start + z.shape[0]
        w = None if weights is None else weights[start:stop]
        new = z.cpu().numpy()
        changed = new != labels[start:stop]     # (no rule reads the first pass's count)
        labels[start:stop], bound[start:stop] = new, _down16(_gap(d1sq, d2sq))
        row[:-1] = _cell_stats(Xc, z, d1sq, K, w).cpu().numpy()
        row[-1] = changed.sum() if w is None else \
            float(w[torch.from_numpy(changed).to(w.device)].sum())
    return _sum_over_chunks(cells, n_rows, chunk, workers, K * (d + 2) + 1)


def _rescore(take, doubt: np.ndarray, heads, half_sq, labels: np.ndarray, bound: np.ndarray,
             drift: np.ndarray, *, chunk: int, workers: int, weights) -> np.ndarray:
    """The change of this rank's cell statistics when the rows ``doubt`` (indices) move to
    their nearest heads, and the rows (their weight) that moved; their labels and bounds
    written in place."""
    K, d = heads.shape

    def cells(start, row):
        idx = doubt[start:start + chunk]
        at = torch.from_numpy(idx).to(heads.device)
        old = torch.from_numpy(labels[idx]).to(heads.device)
        Xc = take(at)
        z, d1sq, d2sq, dold = nearest_two(Xc, heads, half_sq, old)
        bound[idx] = _down16(_gap(d1sq, d2sq).cpu() + torch.from_numpy(drift)[z.cpu()])
        moved = torch.nonzero(z != old)[:, 0]
        if moved.numel():
            labels[idx[moved.cpu().numpy()]] = z[moved].cpu().numpy()
            Xm, w = Xc[moved], None if weights is None else weights[at[moved]]
            row[:-1] = (_cell_stats(Xm, z[moved], d1sq[moved], K, w)
                        - _cell_stats(Xm, old[moved], dold[moved], K, w)).cpu().numpy()
            row[-1] = moved.numel() if w is None else float(w.sum())
    return _sum_over_chunks(cells, doubt.size, chunk, workers, K * (d + 2) + 1)


def lloyd_passes(read: Callable[[int, int], torch.Tensor], n_rows: int, heads: torch.Tensor,
                 *, max_passes: int, tol: float, chunk: int, rtol: float = 0.0, workers: int = 1,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 n_total: float | None = None, labels: np.ndarray | None = None,
                 callback: Callable[[IterationInfo], None] | None = None,
                 weights: torch.Tensor | None = None,
                 take: Callable[[torch.Tensor], torch.Tensor] | None = None) -> HardEnding:
    """Lloyd steps over all rows from ``heads`` until the step would move the heads by a
    sum of squares of at most ``tol``, or the last move lowered ``R_inf`` by at most
    ``rtol`` of its value and settled the partition.

    The ``tol`` rule is scikit-learn's ``KMeans`` rule (``sum_h ||mu_h' - mu_h||^2 <=
    tol``, which scikit-learn takes as ``1e-4`` times the data's mean variance per
    feature). The heads returned are those of the last step, whose cells it computed: so
    ``labels``, when given, holds their nearest heads without another pass over the rows
    (the last step, of at most ``tol``, is not taken).

    With ``take``, a step reads only the rows whose cell the heads' moves may have changed
    (Hamerly's bounds): each row keeps a lower bound on the gap ``d2 - d1`` between its
    distances to the second-nearest and the nearest head, exact after the row is scored and
    lowered by ``delta_z + max_h delta_h`` when the heads move by ``delta``; only rows whose
    bound is no longer positive are scored again (a whole pass when they are more than
    ``FULL_PASS`` of the rows), and the cells' counts, sums and squared distances follow
    the rows that change cell. The steps, stops, heads and labels are those of whole passes
    (up to rounding: a row whose bound stays positive is strictly nearer its head).

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
        At most this many steps.
    tol : float
        Stop at a step that would move the heads by a sum of squares of at most ``tol``.
    rtol : float, default=0
        Stop at a step that finds that the previous one lowered ``R_inf`` by at most
        ``rtol`` times its value, moved at most ``SETTLED`` (1%) of the rows (or of their
        weight) to another cell, and that its own move is sure to gain at most as much
        (``sum_h n_h ||mu_h' - mu_h||^2 / n``, what the move gains on unchanged cells): on
        many rows Lloyd's heads creep long after the partition has settled, and the last
        two conditions keep the rule from stopping where one far row dominates ``R_inf``
        and a head on its way to it gains little in its first step.
    chunk, workers :
        Rows per chunk, and threads sharing the chunks (:func:`attnclust._threads.map_chunks`).
    reduce : callable, optional
        Sum over data-parallel ranks of a tensor (the same on every rank).
    n_total : int or float, optional
        Rows of all ranks (default ``n_rows``); with ``weights``, their total weight.
    labels : ndarray of shape (n_rows,), optional
        Filled with the index of each row's nearest returned head.
    callback : callable, optional
        Called after each step with an :class:`~attnclust.results.IterationInfo`
        (``iteration``: steps so far; ``loss``: ``R_inf`` of the step's heads;
        ``inverse_temperature``: infinity; ``shift``: the largest move of a head): progress
        over the steps.
    weights : Tensor of shape (n_rows,), optional
        Sample weights of the rows: every sum (cell sizes, means, ``R_inf``) is weighted.
    take : callable, optional
        ``take(idx)`` returns the rows at the indices ``idx`` (a tensor on the device of
        ``heads``), as ``read`` does; without it every step is a whole pass.

    Returns
    -------
    HardEnding
        A head whose cell is empty keeps its position.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = lloyd_passes(lambda a, b: X[a:b], 4, X[[0, 2]], max_passes=10, tol=0.0, chunk=2,
    ...                    take=lambda idx: X[idx])
    >>> res.heads.tolist(), res.converged, res.objective.round(3).tolist(), res.full_passes
    ([[0.1, 0.0], [3.2, 0.0]], True, [0.05, 0.025], 1)
    """
    K, d = heads.shape
    n = n_rows if n_total is None else n_total
    objective: list[float] = []
    path: list[torch.Tensor] = []
    converged, full_passes = False, 0
    labels = np.empty(n_rows, dtype=np.int64) if labels is None else labels
    # the gap bound of row i is bound_i - drift_{z_i}: bound holds its gap when scored plus
    # the drift of its cell then, rounded down to float16 (2 bytes a row)
    bound = np.empty(n_rows, dtype=np.float16)
    drift = np.zeros(K)     # sum of delta_h + max delta over the steps since a whole pass
    stats = None                                   # this rank's [counts, sums, distances]
    for _ in range(int(max_passes)):
        half_sq = 0.5 * (heads * heads).sum(1)
        doubt = None if stats is None or take is None else _doubted(bound, labels, drift)
        if doubt is None or doubt.size > FULL_PASS * n_rows:
            drift[:] = 0.0
            part = _whole_pass(read, n_rows, heads, half_sq, labels, bound, chunk=chunk,
                               workers=workers, weights=weights)
            stats = part[:-1].copy()
            full_passes += 1
        else:
            part = _rescore(take, doubt, heads, half_sq, labels, bound, drift, chunk=chunk,
                            workers=workers, weights=weights)
            stats += part[:-1]
        # a copy (reduce may sum in place); the last entry: the rows that changed cell
        flat = torch.tensor(np.append(stats, part[-1]), device=heads.device)
        if reduce is not None:
            flat = reduce(flat)
        counts, sums = flat[:K].to(heads.dtype), flat[K:K + K * d].reshape(K, d).to(heads.dtype)
        objective.append(float(flat[K + K * d:-1].sum()) / n)
        path.append(heads)
        new = Euclidean().lloyd_step(sums, counts, heads)   # counts: maybe weights < 1
        moves = ((new - heads) ** 2).sum(1)                   # (K,) squared moves
        # the step about to be taken gains at least sum_h n_h ||moves_h||^2 / n (the cells
        # unchanged), the last one gained objective[-2] - objective[-1]
        settled = len(objective) > 1 and float(flat[-1]) <= SETTLED * n and \
            objective[-2] - objective[-1] <= rtol * objective[-2] and \
            float((counts * moves).sum()) <= rtol * n * objective[-1]
        if callback is not None:
            callback(IterationInfo(len(objective), objective[-1], float("inf"),
                                   float(moves.max()) ** 0.5, heads.detach().clone()))
        if float(moves.sum()) <= tol or settled:
            converged = True
            break
        if len(objective) < max_passes:
            shift = moves.sqrt().cpu().double().numpy()
            drift += shift + shift.max()
            _move_heads(stats, heads.cpu().double().numpy(), new.cpu().double().numpy())
            heads = new
    return HardEnding(heads, np.asarray(objective, dtype=np.float64),
                      torch.stack(path) if path else heads.new_zeros(0, K, d), len(objective),
                      converged, full_passes)


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
                  weights: torch.Tensor | None = None, tol: float = KMEANS_TOL) -> SampleKMeans:
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
                           max_iter=max_iter, tol=tol, weights=w, init=start)
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
    else of the heads each step over all rows started from, ``(T,)``."""
    path: torch.Tensor
    """The heads of each entry of ``objective``, ``(T, K, d)``."""
    step: np.ndarray
    """Lloyd steps made before each entry of ``objective``, ``(T,)``."""
    n_iter: int
    """Lloyd steps on the sample (the run kept and the swaps' runs) plus steps over all
    rows."""
    converged: bool
    """The last Lloyd stage met its stopping rule."""


def fit_to_hard_limit(S: torch.Tensor, rows: WorkingRows, start: SampleKMeans, *,
                      geometry: Geometry, max_iter: int, callback=None,
                      weights: torch.Tensor | None = None, tol: float = KMEANS_TOL) -> HardFit:
    """The fit's end of the module docstring, from the warm start ``start`` on ``S``.

    ``callback`` (an :class:`~attnclust.results.IterationInfo` consumer, at an infinite
    inverse temperature) sees the sample's partition, then each step over all rows.
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
    total = rows.n_total if rows.weights is None else \
        float(rows.comm.sum_array(float(rows.weights.sum())))

    def passes(heads, before):   # Lloyd steps over all rows, counted after `before` steps
        labels = np.empty(rows.rows.shape[0], dtype=np.int64)

        def progress(info):      # in the callback's units
            callback(info._replace(iteration=before + info.iteration))
        run = lloyd_passes(rows.read, rows.rows.shape[0], heads, max_passes=max_iter,
                           tol=tol / d, rtol=OBJECTIVE_RTOL, chunk=rows.chunk,
                           workers=rows.workers, reduce=rows.comm.reduce, n_total=total,
                           labels=labels, callback=None if callback is None else progress,
                           weights=rows.weights, take=rows.take)
        return HardFit(run.heads, labels, run.objective, run.path,
                       before + np.arange(run.n_passes), before + run.n_passes, run.converged)
    end = passes(best.heads, n_sample)
    if rows.rows.shape[0] < rows.n_total or start.heads.shape[0] < 2:
        return end                   # the repair below: one process's rows, and swaps
    S2 = w2 = None
    for _ in range(REPAIRS):
        if not end.objective[-1] > MISSED * best.objective:
            break
        if S2 is None:
            S2, w2 = _with_far_rows(S, weights, rows, best.heads)
        repaired = _swapped_end(S2, w2, end, geometry, max_iter, passes)
        if repaired is end:
            break
        end = repaired
    return end


def _with_far_rows(S, Sw, rows: WorkingRows, sampled: torch.Tensor):
    """``S`` and its weights with the ``FAR_ROWS`` rows farthest from the sample's heads
    ``sampled`` (one process's rows): those with their own weights, the sample's rows
    standing for the others (a far row the sample holds counts twice, a small bias of
    the swaps' objective only: their result is kept only if the passes end lower)."""
    far = _farthest(rows, sampled, min(FAR_ROWS, rows.rows.shape[0]))
    own = S.new_ones(far.numel()) if rows.weights is None else rows.weights[far].to(S.dtype)
    total = float(rows.rows.shape[0]) if rows.weights is None else float(rows.weights.sum())
    stand = S.new_ones(S.shape[0]) if Sw is None else Sw.to(S.dtype)
    rest = max(total - float(own.sum()), 0.0) / float(stand.sum())
    return torch.cat([S, rows.take(far)]), torch.cat([stand * rest, own])


def _swapped_end(S2, w2, end: HardFit, geometry: Geometry, max_iter: int, passes) -> HardFit:
    """Single swaps on ``S2`` (weights ``w2``) from ``end``'s heads and, if one is kept,
    Lloyd steps over all rows from there (``passes``): ``end`` followed by them if they
    end lower (their curve after ``end``'s), else ``end``."""
    start = sample_kmeans(S2, end.heads.shape[0], init=end.heads, max_iter=max_iter,
                          weights=w2)
    moved, steps = swap_polish(S2, start, geometry, max_iter=max_iter, weights=w2,
                               rounds=SWAPS)
    if not moved.objective < start.objective:
        return end
    again = passes(moved.heads, end.n_iter + start.n_iter + steps)
    if not again.objective[-1] < end.objective[-1]:
        return end
    return again._replace(objective=np.concatenate([end.objective, again.objective]),
                          path=torch.cat([end.path, again.path]),
                          step=np.concatenate([end.step, again.step]))


def _farthest(rows: WorkingRows, heads: torch.Tensor, m: int) -> torch.Tensor:
    """Indices of the ``m`` rows (of positive weight) farthest from their nearest head."""
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
    return index

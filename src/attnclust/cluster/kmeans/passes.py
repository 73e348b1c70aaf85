"""Lloyd's steps over all rows, with Hamerly's bounds and a sum over ranks.

For Euclidean heads the attention is ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)``.
As ``lambda -> infinity`` it becomes the indicator of the nearest head, the layer's
output ``T_mu(x)`` becomes that head, and the empirical risk becomes the k-means
objective

    R_inf(mu) = sum_i w_i min_h ||x_i - mu_h||^2 / sum_i w_i .

The fixed-point step of :mod:`attnclust.cluster.fixed_point` is then exactly Lloyd's step,
``mu_h <- mean of the rows nearest to mu_h``, and it never increases ``R_inf``: the new
means are the best heads for the old cells, and the new cells the best cells for the new
heads. So ``R_inf`` is non-increasing along the steps, and a step that moves no head is
a fixed point (a stable k-means partition).

A whole pass reads the rows once in chunks (one ``n x d x K`` product, per-cell sums);
the steps after it read only the rows whose cell may have changed (Hamerly's bounds on
the gap between each row's nearest two heads, 2 bytes a row; :func:`lloyd_passes`). With
``reduce`` (a sum over data-parallel ranks) a step sums ``K (d + 2) + 1`` numbers over
the ranks, so every rank takes the same steps. The per-cell sums of squared distances
that the steps keep (moved with the heads by :func:`_move_heads`) decide the stops, and
are the objective reported where they are accurate enough. A whole pass's distances are
``||x||^2 - 2 <x, mu> + ||mu||^2``, within ``(d + 2) eps (||x|| + ||mu||)^2`` of the exact
ones per row, and each step with bounds adds at most as much again: an error on the
scale of the rows' norms, not of the objective. Where that bound is within
``CARRIED_RTOL`` (1%) of the objective the sums' value is reported, which saves a read
of every row (a large share of a fit on many rows: the passes are few); where it is not
(tight clusters far apart, in float32) the objective is recomputed from the final heads
and labels in one more read of the rows (:mod:`attnclust.cluster.kmeans.result`), to
``(d + 2) eps`` of it.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``R_inf``      ``objective``   k-means objective per unit weight after each step
``mu_h``       ``heads``       heads, shape ``(K, d)``
``delta_h``    ``shift``       how far head ``h`` moved in a step
``z_i``        ``labels``      each row's nearest head, ``(n,)``
=============  ==============  =============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ..._threads import map_chunks
from ...layer.geometry import Euclidean
from ...layer.results import IterationInfo
from .lloyd import cell_sums
from .result import KMeansHistory, KMeansResult, chunk_objective
from .swap import nearest_two

__all__ = ["CARRIED_RTOL", "FULL_PASS", "RowReader", "lloyd_passes"]

FULL_PASS = 0.25    # a step over all rows reads every row when its bounds doubt more of them
SETTLED = 0.01      # the rtol stop also asks that a step moves at most this share of the rows
CARRIED_RTOL = 1e-2  # the objective the sums carry is reported within this bound, else recomputed
_PARTS_BYTES = 1 << 26      # per-chunk sums held at once by a step over all rows (64 MB)


class RowReader(NamedTuple):
    """Rows that a k-means reads in chunks, on one rank or a share on each of several:
    the row backend of :func:`lloyd_passes` (the other Lloyd steps hold their rows in
    memory, an array or a tensor, in its place).

    Examples
    --------
    >>> X = torch.arange(6.0).reshape(3, 2)
    >>> rows = RowReader.in_memory(X, chunk=2)
    >>> rows.read(2, 4).tolist(), rows.take(torch.tensor([0])).tolist(), rows.n_rows
    ([[4.0, 5.0]], [[0.0, 1.0]], 3)
    """

    read: Callable[[int, int], torch.Tensor]
    """``read(start, stop)``: rows ``start:stop`` of this rank, ``(m, d)``."""
    n_rows: int
    """Rows that ``read`` serves (this rank's)."""
    chunk: int
    """Rows per chunk read."""
    take: Callable[[torch.Tensor], torch.Tensor] | None = None
    """``take(idx)``: the rows at the indices ``idx`` (a tensor on the rows' device), as
    ``read`` gives them; without it every step reads every row (no bounds)."""
    workers: int = 1
    """Threads sharing the chunks (:func:`attnclust._threads.map_chunks`)."""
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Sum over data-parallel ranks of a tensor (the same on every rank)."""
    n_total: float | None = None
    """Rows of all ranks (default ``n_rows``); with weights, their total weight."""

    @classmethod
    def in_memory(cls, X: torch.Tensor, chunk: int, *, bounds: bool = True,
                  workers: int = 1, n_total: float | None = None) -> RowReader:
        """The rows of one tensor ``X`` ``(n, d)`` (``bounds``: with ``take``)."""
        return cls(lambda a, b: X[a:b], X.shape[0], int(chunk),
                   (lambda idx: X[idx]) if bounds else None, workers, None, n_total)


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
    chunk. At most ``_PARTS_BYTES`` of rows are held at a time (``K =
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


def lloyd_passes(rows: RowReader, heads: torch.Tensor, max_iter: int, *, tol: float = 0.0,
                 weights: torch.Tensor | None = None, rtol: float = 0.0,
                 labels: np.ndarray | None = None,
                 callback: Callable[[IterationInfo], None] | None = None) -> KMeansResult:
    """Lloyd steps over all rows from ``heads`` until the step would move the heads by a
    sum of squares of at most ``tol``, or the last move lowered ``R_inf`` by at most
    ``rtol`` of its value and settled the partition.

    The ``tol`` rule is scikit-learn's ``KMeans`` rule (``sum_h ||mu_h' - mu_h||^2 <=
    tol``, which scikit-learn takes as ``1e-4`` times the data's mean variance per
    feature). The heads returned are those of the last step, whose cells it computed: so
    ``labels``, when given, holds their nearest heads without another pass over the rows
    (the last step, of at most ``tol``, is not taken).

    With ``rows.take``, a step reads only the rows whose cell the heads' moves may have
    changed (Hamerly's bounds): each row keeps a lower bound on the gap ``d2 - d1`` between its
    distances to the second-nearest and the nearest head, exact after the row is scored and
    lowered by ``delta_z + max_h delta_h`` when the heads move by ``delta``; only rows whose
    bound is no longer positive are scored again (a whole pass when they are more than
    ``FULL_PASS`` of the rows), and the cells' counts, sums and squared distances follow
    the rows that change cell. The steps, stops, heads and labels are those of whole passes
    (up to rounding: a row whose bound stays positive is strictly nearer its head).

    Parameters
    ----------
    rows : RowReader
        The rows, read in chunks (this rank's share, with the sum over ranks).
    heads : Tensor of shape (K, d)
        Initial heads, in the dtype and on the device of the rows read.
    max_iter : int
        At most this many steps.
    tol : float, default=0
        Stop at a step that would move the heads by a sum of squares of at most ``tol``.
    weights : Tensor of shape (rows.n_rows,), optional
        Sample weights of the rows: every sum (cell sizes, means, ``R_inf``) is weighted
        (``rows.n_total`` is then their total weight over the ranks).
    rtol : float, default=0
        Stop at a step that finds that the previous one lowered ``R_inf`` by at most
        ``rtol`` times its value, moved at most ``SETTLED`` (1%) of the rows (or of their
        weight) to another cell, and that its own move is sure to gain at most as much
        (``sum_h n_h ||mu_h' - mu_h||^2 / n``, what the move gains on unchanged cells): on
        many rows Lloyd's heads creep long after the partition has settled, and the last
        two conditions keep the rule from stopping where one far row dominates ``R_inf``
        and a head on its way to it gains little in its first step.
    labels : ndarray of shape (rows.n_rows,), optional
        Filled with the index of each row's nearest returned head.
    callback : callable, optional
        Called after each step with an :class:`~attnclust.layer.results.IterationInfo`
        (``iteration``: steps so far; ``loss``: ``R_inf`` of the step's heads;
        ``inverse_temperature``: infinity; ``shift``: the largest move of a head): progress
        over the steps.

    Returns
    -------
    KMeansResult
        ``labels`` (this rank's), ``n_iter`` (the steps), ``converged`` (a stopping rule,
        ``tol`` or ``rtol``, met before ``max_iter``); ``objective``: ``R_inf`` of the
        final heads and labels (summed over the ranks), as the steps' sums give it where
        their rounding is within ``CARRIED_RTOL`` of it, else recomputed in one more read
        of the rows (the module docstring); ``history``: the ``R_inf`` of the heads each
        step started from, as the steps' sums gave it (non-increasing up to their
        rounding; its last entry ``objective``), those heads, and the steps that read
        every row. A head whose cell is empty keeps its position.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = lloyd_passes(RowReader.in_memory(X, chunk=2), X[[0, 2]], max_iter=10)
    >>> res.heads.tolist(), res.converged, res.history.objective.round(3).tolist()
    ([[0.1, 0.0], [3.2, 0.0]], True, [0.05, 0.025])
    >>> res.labels.tolist(), round(res.objective, 3), res.history.full_passes
    ([0, 0, 1, 1], 0.025, 1)
    """
    K, d = heads.shape
    read, take, n_rows, chunk, workers, reduce = rows.read, rows.take, rows.n_rows, \
        rows.chunk, rows.workers, rows.reduce
    n = n_rows if rows.n_total is None else rows.n_total
    objective: list[float] = []
    path: list[torch.Tensor] = []
    converged, full_passes, updates = False, 0, 0
    labels = np.empty(n_rows, dtype=np.int64) if labels is None else labels
    # the gap bound of row i is bound_i - drift_{z_i}: bound holds its gap when scored plus
    # the drift of its cell then, rounded down to float16 (2 bytes a row)
    bound = np.empty(n_rows, dtype=np.float16)
    drift = np.zeros(K)     # sum of delta_h + max delta over the steps since a whole pass
    stats = None                                   # this rank's [counts, sums, distances]
    for _ in range(int(max_iter)):
        half_sq = 0.5 * (heads * heads).sum(1)
        doubt = None if stats is None or take is None else _doubted(bound, labels, drift)
        if doubt is None or doubt.size > FULL_PASS * n_rows:
            drift[:] = 0.0
            part = _whole_pass(read, n_rows, heads, half_sq, labels, bound, chunk=chunk,
                               workers=workers, weights=weights)
            stats = part[:-1].copy()
            full_passes, updates = full_passes + 1, 0
        else:
            part = _rescore(take, doubt, heads, half_sq, labels, bound, drift, chunk=chunk,
                            workers=workers, weights=weights)
            stats += part[:-1]
            updates += 1
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
        if len(objective) < max_iter:
            shift = moves.sqrt().cpu().double().numpy()
            drift += shift + shift.max()
            _move_heads(stats, heads.cpu().double().numpy(), new.cpu().double().numpy())
            heads = new
    curve = np.asarray(objective, dtype=np.float64)
    if curve.size and _carried_rounding(flat, heads, n, updates) > CARRIED_RTOL * curve[-1]:
        # the final heads' R_inf, recomputed from their labels (every rank: flat is summed)
        curve[-1] = _recomputed(read, n_rows, heads, labels, chunk=chunk, workers=workers,
                                weights=weights, reduce=reduce) / n
    history = KMeansHistory(curve, torch.stack(path) if path else heads.new_zeros(0, K, d),
                            np.arange(curve.size), full_passes)
    return KMeansResult(heads, labels, float(curve[-1]) if curve.size else float("nan"),
                        curve.size, converged, history)


def _carried_rounding(flat: torch.Tensor, heads: torch.Tensor, n: float, updates: int) -> float:
    """A bound on the rounding of ``R_inf`` as the steps' sums ``flat`` (:func:`_cell_stats`
    over all ranks) carry it: ``(updates + 1) (d + 2) eps`` times the mean of ``(||x|| +
    ||mu_z||)^2 <= 2 (||x||^2 + ||mu_z||^2)`` (``tests/_tolerance.py``'s
    ``objective_tol``), the rows' squared norms read from the same sums (``||x||^2 = D + 2
    <x, mu> - ||mu||^2`` summed over each cell)."""
    K, d = heads.shape
    counts, sums = flat[:K].double(), flat[K:K + K * d].double().reshape(K, d)
    dist, mu = flat[K + K * d:-1].double(), heads.double()
    head_sq = counts * (mu * mu).sum(1)
    row_sq = dist + 2.0 * (mu * sums).sum(1) - head_sq
    eps = torch.finfo(heads.dtype).eps
    return (updates + 1) * (d + 2) * eps * 2.0 * float((row_sq + head_sq).sum()) / n


def _recomputed(read, n_rows: int, heads, labels: np.ndarray, *, chunk: int, workers: int,
                weights, reduce) -> float:
    """``sum_i w_i ||x_i - mu_{z_i}||^2`` over the rows of every rank, read once in
    chunks (on the workers, summed in chunk order)."""
    def fill(start, row):
        Xc = read(start, start + chunk)
        row[0] = chunk_objective(Xc, heads, labels[start:start + Xc.shape[0]],
                                 None if weights is None else weights[start:start + Xc.shape[0]])
    total = torch.tensor(_sum_over_chunks(fill, n_rows, chunk, workers, 1), device=heads.device)
    return float((total if reduce is None else reduce(total))[0])

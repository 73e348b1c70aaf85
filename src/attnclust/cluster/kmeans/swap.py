"""Single swaps: a head that costs little moves to where one head holds two clusters.

A streamed fit keeps running sums and takes one step per batch (:mod:`attnclust.cluster.streaming`),
so the heads it is seeded with decide which clusters it can find: two heads seeded in one
cluster split it for good, and a cluster left without a head is shared with a neighbour
(every seed of the ``K = 32`` set of ``benchmarks/bench_streaming.py``). Before each
batch's step, :func:`single_swap` tries the one move of the single-swap local search of
k-means (Kanungo et al., 2004) that repairs this, on the batch's rows with hard
attention:

- the *removal cost* of head ``h``, ``c_h = sum_{i in cell h} w_i (D2_i - D1_i)``
  (``D1_i``, ``D2_i``: the squared distances to the nearest and second-nearest heads),
  is what the batch's k-means cost grows by when ``h`` is removed;
- the *split gain* of the head ``g`` with the largest within-cell cost ``E_g = sum_{i in
  cell g} w_i D1_i`` (bisecting k-means's rule) is ``E_g`` minus the cost of its cell
  split in two by 2-means (started from the sign of the rows' projection on the cell's
  top principal direction, then ``_LLOYD`` Lloyd steps);
- if the gain exceeds the smallest removal cost among the other heads, ``h`` and ``g``
  move to the two centres of the split (brought back to the geometry's set), provided
  the batch's k-means cost ``sum_i w_i D1_i`` at the moved heads is lower than before
  (the estimate ``c_h - gain`` misses what the rows of ``h`` lose when their second head
  is ``g``, which moves): each swap is a descent step of the batch's k-means cost.

A head that wins nothing costs nothing to remove, so a dead head is always moved
(scikit-learn's ``MiniBatchKMeans`` reassigns small heads to random rows instead). When
the heads are right, removing any of them costs a whole cluster's distance to its
neighbour, far more than any split of one cluster gains, and nothing moves. Every sum
is weighted, so integer weights act as repeated rows. The rule is deterministic given
the batch and the heads. Memory: the batch's ``(n_b, 2)`` distances and one cell.

Notation
--------
=============  ==============  ==================================================
paper          code            meaning
=============  ==============  ==================================================
``D1, D2``     ``first``       squared distances to the nearest two heads, ``(n_b, 2)``
``c_h``        ``cost``        removal cost of each head, ``(K,)``
``E_g``        ``inertia``     within-cell cost of each head, ``(K,)``
``g``, ``h``   ``g``, ``h``    the head split, the head moved
=============  ==============  ==================================================
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...layer.geometry import Geometry
from .batch import KMEANS_TOL
from .lloyd import sample_kmeans
from .result import KMeansResult

__all__ = ["SWAPS", "SWAP_HEADS", "Swap", "nearest_two", "single_swap", "swap_polish"]

SWAPS = 8           # single swaps at most from the sample's k-means partition ...
SWAP_HEADS = 10     # ... with at least this many heads (with fewer, restarts suffice)
_LLOYD = 5           # Lloyd steps of the 2-means split
_POWER = 10          # power iterations for the top principal direction
_FEW_HEADS = 32      # nearest_two lays the scores out (K, m) up to this many heads


class Swap(NamedTuple):
    """A move found by :func:`single_swap`: heads ``h`` and ``g`` go to ``new[0]`` and
    ``new[1]``; ``gain`` and ``cost`` are the split gain and the removal cost."""

    h: int
    g: int
    new: torch.Tensor
    gain: float
    cost: float


def nearest_two(x: torch.Tensor, heads: torch.Tensor, half_sq: torch.Tensor,
                old: torch.Tensor | None = None):
    """Each row's nearest head ``z`` (the first of equal ones) and its squared distances
    to the nearest and the second-nearest head (``inf`` with one head), ``(m,)`` each; with
    ``old`` (labels), also the squared distances to those heads. ``half_sq``: ``||mu_h||^2
    / 2``, ``(K,)``. One product of rows and heads, then the two largest scores of each row
    (cheaper than torch's top-2).

    With at most ``_FEW_HEADS`` heads the scores are laid out ``(K, m)``, the two largest
    found by a knock-out over halves of the heads (:func:`_two_largest`) and the first
    head at the largest by one more maximum: torch's reductions over ``K`` numbers side
    by side are slow, and so is its ``(m, d) x (d, K)`` product.

    Examples
    --------
    >>> x = torch.tensor([[0.0], [3.0]])
    >>> heads = torch.tensor([[1.0], [4.0]])
    >>> z, d1, d2, _ = nearest_two(x, heads, 0.5 * heads[:, 0] ** 2)
    >>> z.tolist(), d1.tolist(), d2.tolist()
    ([0, 1], [1.0, 1.0], [16.0, 4.0])
    """
    K = heads.shape[0]
    sq = torch.linalg.vector_norm(x, dim=1).square_()       # no (m, d) temporary
    s2 = None
    if 1 < K <= _FEW_HEADS:
        # <x, mu> - ||mu||^2 / 2 = (||x||^2 - D) / 2, laid out (K, m)
        scores = torch.addmm(half_sq[:, None], heads, x.T, beta=-1)
        s1, s2 = _two_largest(scores)
        # the first head at the largest: the largest K - h over those heads h (a NaN
        # largest, of a NaN row or head, is "not below" every score: head 0, in range)
        rank = torch.arange(K, 0, -1, dtype=torch.uint8, device=x.device)[:, None]
        z = (K - (scores < s1).logical_not_().to(torch.uint8).mul_(rank).amax(0)).long()
        scores = scores.T                                    # (m, K), a view
    else:
        scores = x @ heads.T - half_sq                       # (m, K)
        s1, z = scores.max(1)
    dold = None if old is None else \
        (sq - 2.0 * scores.gather(1, old[:, None])[:, 0]).clamp_min(0.0)
    if s2 is None:
        s2 = torch.full_like(s1, float("-inf")) if K == 1 else \
            scores.scatter_(1, z[:, None], float("-inf")).amax(1)
    return z, (sq - 2.0 * s1).clamp_min(0.0), (sq - 2.0 * s2).clamp_min(0.0), dold


def _two_largest(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The largest and the second-largest of each column of ``scores`` ``(K, m)``, ``K >=
    2`` (equal when the largest is reached twice): each round pairs the first half of the
    rows with the second, and keeps the larger of each pair and the largest of what was
    left behind."""
    top, second = scores, None
    while top.shape[0] > 1:
        h = top.shape[0] // 2
        a, b = top[:h], top[h:2 * h]
        left = torch.minimum(a, b)
        if second is not None:
            left = torch.maximum(left, torch.maximum(second[:h], second[h:2 * h]))
        if top.shape[0] % 2:         # the odd row out goes on as it is
            odd = top[2 * h:]
            left = torch.cat([left, torch.full_like(odd, float("-inf"))
                              if second is None else second[2 * h:]])
            top = torch.cat([torch.maximum(a, b), odd])
        else:
            top = torch.maximum(a, b)
        second = left
    return top[0], second[0]


def _nearest_two(rows, heads, chunk):
    """Labels ``(n,)`` and squared distances to the nearest two heads ``(n, 2)``."""
    half_sq = 0.5 * (heads * heads).sum(1)
    parts = [nearest_two(rows[s:s + chunk], heads, half_sq)
             for s in range(0, rows.shape[0], chunk)]
    return (torch.cat([p[0] for p in parts]),
            torch.stack([torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])], 1))


def _split(x, w, geometry: Geometry):
    """2-means of one cell's rows ``x`` (weights ``w``): its two centres and its cost."""
    mean = (w[:, None] * x).sum(0) / w.sum()
    xc = x - mean
    v = xc[(xc * xc).sum(1).argmax()]
    for _ in range(_POWER):                         # top principal direction
        v = xc.T @ (w * (xc @ v))
        v = v / torch.linalg.vector_norm(v).clamp_min(torch.finfo(x.dtype).tiny)
    side = xc @ v > 0
    centres = None
    for _ in range(_LLOYD + 1):
        if bool(side.all()) or not bool(side.any()):
            return None, float("inf")
        wa, wb = w * side, w * ~side
        means = torch.stack([(wa[:, None] * x).sum(0) / wa.sum(),
                             (wb[:, None] * x).sum(0) / wb.sum()])
        centres = geometry.projx(means)
        d2 = ((x[:, None, :] - centres[None]) ** 2).sum(-1)     # (m, 2)
        side = d2[:, 0] < d2[:, 1]
    return centres, float((w * d2.min(1).values).sum())


def single_swap(rows: torch.Tensor, heads: torch.Tensor, geometry: Geometry, *,
                weights: torch.Tensor | None = None, chunk: int = 16_384) -> Swap | None:
    """The swap of the module docstring on the batch ``rows`` (n_b, d), or ``None``.

    Examples
    --------
    >>> import torch
    >>> from attnclust.layer.geometry import as_geometry
    >>> x = torch.tensor([[0.0, 0.0], [0.2, 0.0], [5.0, 0.0], [5.2, 0.0]],
    ...                  dtype=torch.float64)
    >>> heads = torch.tensor([[2.6, 0.0], [40.0, 0.0]], dtype=torch.float64)  # one dead
    >>> move = single_swap(x, heads, as_geometry("euclidean"))
    >>> move.h, move.g, move.new.tolist()
    (1, 0, [[0.1, 0.0], [5.1, 0.0]])
    """
    K = heads.shape[0]
    if K < 2 or rows.shape[0] < 2:
        return None
    w = rows.new_ones(rows.shape[0]) if weights is None else weights.to(rows.dtype)
    labels, near = _nearest_two(rows, heads, chunk)
    inertia = heads.new_zeros(K).index_add_(0, labels, w * near[:, 0])
    cost = heads.new_zeros(K).index_add_(0, labels, w * (near[:, 1] - near[:, 0]))
    g = int(inertia.argmax())
    cell = labels == g
    centres, split_cost = _split(rows[cell], w[cell], geometry)
    gain = float(inertia[g]) - split_cost
    cost[g] = float("inf")
    h = int(cost.argmin())
    if centres is None or not gain > float(cost[h]):
        return None
    moved = heads.clone()
    moved[[h, g]] = centres.to(heads.dtype)
    if not float((w * _nearest_two(rows, moved, chunk)[1][:, 0]).sum()) < float(
            (w * near[:, 0]).sum()):
        return None                 # the estimate missed what h's rows lose to g's move
    return Swap(h, g, centres, gain, float(cost[h]))


def swap_polish(S: torch.Tensor, best: KMeansResult, geometry: Geometry, *, max_iter: int,
                weights: torch.Tensor | None = None, rounds: int | None = None,
                tol: float = KMEANS_TOL) -> tuple[KMeansResult, int]:
    """Single swaps from the k-means partition ``best`` of ``S``: while
    :func:`single_swap` finds a head that costs less to remove than the
    costliest cell gains from a split, move it there, run Lloyd's steps from the moved
    heads, and keep the result if its objective is lower (at most ``rounds``; default
    ``SWAPS`` with at least ``SWAP_HEADS`` heads, else none). Returns the partition kept
    and the Lloyd steps taken (``tol``: the reruns' stopping rule, as
    :func:`~attnclust.cluster.kmeans.lloyd.sample_kmeans`'s).

    Examples
    --------
    >>> from attnclust.layer.geometry import as_geometry
    >>> S = torch.tensor([[0.0], [0.1], [5.0], [5.1], [9.0], [9.1]], dtype=torch.float64)
    >>> two_in_one = sample_kmeans(S, 3, init=S[[0, 1, 4]])     # 0 | 0.1 | 5..9.1
    >>> kept, _ = swap_polish(S, two_in_one, as_geometry('euclidean'), max_iter=100, rounds=8)
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
        moved = sample_kmeans(S, K, init=heads, max_iter=max_iter, weights=weights,
                              tol=tol)
        steps += moved.n_iter
        if not moved.objective < best.objective:
            break
        best = moved
    return best, steps

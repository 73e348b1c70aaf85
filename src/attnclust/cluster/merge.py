"""Clusters made of several heads: more heads than clusters, merged where the data say so.

A mixture of ``K`` Gaussian heads draws ``K`` convex cells; a ring, a crescent or a
spiral is no such cell. Here ``m = max(6 K, 60) > K`` small spherical heads (at most
one per 5 rows) tile 14 sampled rows per head, and the heads whose attention
overlaps are joined into ``K`` clusters, each a union of heads:

    a_h(x)   = softmax_h( -||x - mu_h||^2 / (2 v) ),   v = t * mean_i min_h ||x_i - mu_h||^2
    O_hg     = sum_i w_i a_h(x_i) a_g(x_i)                       (head overlap, m x m)
    S_hg     = O_hg / sqrt(O_hh O_gg)                            (cosine-normalized)

Heads are agglomerated on ``S`` (single linkage by default: the similarity of two
groups is that of their most similar pair of heads) down to ``K`` groups, under Genie's
constraint (Gagolewski, Bartoszuk and Cena, 2016): while the Gini index of the groups'
sizes (rows of their heads) exceeds ``gini_threshold``, a merge must involve a smallest
group, so that outlying heads do not make clusters of their own.

**When to merge.** The merged partition of the heads is kept only if its normalized cut
on the overlap graph ``O``,

    Ncut(P) = sum_c cut(c, not c) / vol(c),   cut(c, not c) = sum_{h in c, g not in c} O_hg,

is below ``cut_ratio`` (default 0.05) times that of the ``K``-head fit's partition read
on the same heads (each head takes the fit's majority label over its rows): the margin
keeps Gaussian clusters, overlapping or touching at their ends, from being merged (their
two cuts are within a factor of 2 to 15 of each other; a ring's or a crescent's merge
cuts the graph where it is empty). On Gaussian clusters the ``K``-head fit
already cuts the overlap graph where it is thin, and the merge is not taken; on shapes
the fit's convex cells cut through dense chains of heads, and the merge is.

**Only where the heads see the fit's partition.** The heads are spherical, in the rows'
own units; the ``K``-head fit may be diag or full and see what they do not (columns on
scales 10^3 apart: wine's proline). The cuts are compared only when the heads redraw the
fit's partition: reading each row's label through the heads (the cluster of largest
summed attention, heads labelled by majority) must agree with the fit's labels at an
adjusted Rand index of at least ``min_redraw`` (default 0.6; shapes 0.66-1, wine and
columns on scales 10^5 apart 0.02-0.5); below it the merge is not taken.

**Not when the K clusters barely overlap.** Before any head is tiled, the ``K``-head
fit's own posterior ``P`` ``(n, K)`` on the sampled rows gives the normalized cut of its
clusters' overlap ``Q = P^T W P`` ``(K x K)``, each cluster on its own:

    Ncut_K = sum_c (1 - Q_cc / vol_c),   vol_c = sum_i w_i P_ic.

Where it is below ``skip_cut`` (default 1e-3) the clusters barely share a row, the heads'
graph is cut where the fit cuts it, and a merged cut 20 times lower is not to be had: the
merge is skipped (on the dev battery, 5 seeds: 79 of 505 fits skipped, 2 of them merged
before, each to an ARI of 0.99 against the fit's 1.0; none of the generators' merges).

A cluster's membership is the sum of its heads' attention, ``p_c(x) = sum_{h in c}
a_h(x)``, and a row's label is the cluster of largest membership.

Notation
--------
==============  ==================  ===============================================
symbol          code                meaning
==============  ==================  ===============================================
``mu_h``        ``heads``           the ``m`` heads, ``(m, d)``
``v``           ``variance``        the attention's variance (``1 / lambda``)
``t``           ``temperature``     ``v`` over the heads' mean squared distance
``O``           ``overlap``         head overlap, ``(m, m)``
``c(h)``        ``head_labels``     cluster of head ``h``, ``(m,)``
==============  ==================  ===============================================
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

__all__ = ["MergeSettings", "HeadMerge", "n_heads", "squared_distances", "tile_heads",
           "head_attention", "head_overlap",
           "gini_index", "gini_linkage", "normalized_cut", "majority_labels", "adjusted_rand",
           "posterior_cut", "merge_heads",
           "cluster_membership"]

_LINKAGES = ("single", "average")


@dataclasses.dataclass(frozen=True)
class MergeSettings:
    """The settings of a merge of heads into clusters (:func:`merge_heads`).

    Parameters
    ----------
    heads_per_cluster, min_heads, rows_per_head : int
        ``m = min(max(heads_per_cluster * K, min_heads), n // rows_per_head)`` heads
        (defaults 6, 60 and 5); no merge when that is not more than ``K``. Finer heads
        trace shapes more closely: a floor of 60 heads rather than 30 raises the dev
        battery's mean ARI by about 0.02, with no Gaussian generator set merged (given 14
        rows per head: with 10, three sticks were).
    sample_per_head, max_rows : int
        The heads and their overlap are fitted on at most ``min(sample_per_head * m,
        max_rows)`` rows (a seeded sample; defaults 14 and 3,000), so that the merge's cost
        grows with the heads, not with the rows.
    max_iter : int
        Lloyd steps of the heads' k-means (default 5: the heads tile the data, they need
        not converge).
    temperature : float
        ``t``: the attention's variance over the heads' mean squared distance (default
        0.5).
    gini_threshold : float
        Genie's constraint on the groups' sizes (default 0.3; 1 turns it off).
    linkage : {"single", "average"}
        Similarity of two groups: of their most similar heads, or the mean over their
        pairs of heads.
    cut_ratio : float
        The merge is kept when its normalized cut is below ``cut_ratio`` times the
        ``K``-head fit's (default 0.05).
    min_redraw : float
        The merge is considered only when the heads redraw the ``K``-head fit's
        partition at an adjusted Rand index of at least ``min_redraw`` (default 0.6; 0
        turns the check off).
    skip_cut : float
        The merge is skipped, before any head is tiled, when the normalized cut of the
        ``K``-head fit's own posterior overlap (:func:`posterior_cut`) is below
        ``skip_cut`` (default 1e-3; 0 turns the check off).

    Examples
    --------
    >>> MergeSettings(temperature=1.0).linkage
    'single'
    >>> MergeSettings(linkage="complete")
    Traceback (most recent call last):
    ...
    ValueError: linkage must be one of ('single', 'average'), got 'complete'
    """

    heads_per_cluster: int = 6
    min_heads: int = 60
    rows_per_head: int = 5
    sample_per_head: int = 14
    max_rows: int = 3000
    max_iter: int = 5
    temperature: float = 0.5
    gini_threshold: float = 0.3
    linkage: str = "single"
    cut_ratio: float = 0.05
    min_redraw: float = 0.6
    skip_cut: float = 1e-3

    def __post_init__(self):
        for name in ("heads_per_cluster", "min_heads", "rows_per_head", "sample_per_head",
                     "max_rows", "max_iter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {self.temperature!r}")
        if not (isinstance(self.gini_threshold, (int, float)) and 0 <= self.gini_threshold <= 1):
            raise ValueError(f"gini_threshold must be in [0, 1], got {self.gini_threshold!r}")
        if not (isinstance(self.cut_ratio, (int, float)) and self.cut_ratio > 0):
            raise ValueError(f"cut_ratio must be a positive number, got {self.cut_ratio!r}")
        if not (isinstance(self.skip_cut, (int, float)) and self.skip_cut >= 0):
            raise ValueError(f"skip_cut must be a number >= 0, got {self.skip_cut!r}")
        if not (isinstance(self.min_redraw, (int, float)) and -1 <= self.min_redraw <= 1):
            raise ValueError(f"min_redraw must be in [-1, 1], got {self.min_redraw!r}")
        if self.linkage not in _LINKAGES:
            raise ValueError(f"linkage must be one of {_LINKAGES}, got {self.linkage!r}")


class HeadMerge(NamedTuple):
    """A merge of heads (:func:`merge_heads`): the heads ``(m, d)``, the cluster of each
    ``(m,)``, the attention's variance, whether the merged partition was kept, the two
    normalized cuts compared, the reason in words and how well the heads redraw the
    ``K``-head fit's partition (an adjusted Rand index). When ``merged`` is false the heads
    still carry the merged partition that was turned down (``head_labels``)."""

    heads: np.ndarray
    head_labels: np.ndarray
    variance: float
    merged: bool
    ncut_merged: float
    ncut_kept: float
    reason: str
    redraw: float = np.nan


def n_heads(n_clusters: int, n_rows: int, settings: MergeSettings = MergeSettings()) -> int:
    """Heads fitted for ``n_clusters`` clusters on ``n_rows`` rows.

    Examples
    --------
    >>> n_heads(3, 1000), n_heads(20, 1000), n_heads(3, 100)
    (60, 120, 20)
    """
    m = max(settings.heads_per_cluster * n_clusters, settings.min_heads)
    return int(min(m, n_rows // settings.rows_per_head))


def squared_distances(X: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """``||x_i - h_j||^2`` of rows ``(n, d)`` and heads ``(m, d)``: ``(n, m)``, from one
    matrix product (clamped at zero against rounding).

    Examples
    --------
    >>> squared_distances(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[0.0, 0.0]])).tolist()
    [[0.0], [25.0]]
    """
    d2 = np.einsum("nd,nd->n", X, X)[:, None] - 2.0 * X @ heads.T \
        + np.einsum("md,md->m", heads, heads)[None]
    return np.maximum(d2, 0.0)                               # (n, m)


def tile_heads(X: np.ndarray, n_heads: int, rng: np.random.Generator, *, max_iter: int = 5,
               weights: np.ndarray | None = None, pool: int = 2) -> np.ndarray:
    """``n_heads`` heads ``(m, d)`` that tile the rows ``X`` ``(n, d)``: k-means++ seeding
    (one draw per head) among ``pool * m`` rows drawn at random (default ``2 m``), then
    ``max_iter`` (weighted) Lloyd steps on all rows. The heads need not converge: they only
    pave the data finely enough for their overlap to trace its shape. This is not the
    k-means engine's seeding (:func:`~attnclust.cluster.kmeans.seeding.kmeanspp_batch`,
    greedy, several runs at once) on purpose: on the merge's samples (a few hundred rows,
    60 heads and more) one draw per head from the pool's distances costs a fraction of
    it, and the engine's seeding with its steps left the dev battery's mean ARI and NCA
    where they were (greedy) or lowered them (one draw per head) at more cost.

    Examples
    --------
    >>> X = np.repeat(np.arange(10.0), 20)[:, None]          # 10 distinct values
    >>> heads = tile_heads(X, 10, np.random.default_rng(0), pool=20)   # the pool: every row
    >>> np.sort(heads[:, 0]).tolist() == np.arange(10.0).tolist()  # D^2 draws: one per value
    True
    """
    n, m = X.shape[0], int(n_heads)
    positive = n if weights is None else int(np.count_nonzero(weights))
    if pool * m < positive:
        draw = None if weights is None else weights / weights.sum()
        P = X[np.sort(rng.choice(n, pool * m, replace=False, p=draw))]
    else:
        P = X if weights is None else X[weights > 0]
    D = squared_distances(P, P)                             # (p, p)
    pick = [int(rng.integers(len(P)))]
    nearest = D[pick[0]].copy()
    for u in rng.random(m - 1):                              # k-means++: D^2 draws
        total = np.cumsum(nearest)
        if total[-1] <= 0:                                   # fewer distinct rows than heads
            break
        pick.append(min(int(np.searchsorted(total, u * total[-1])), len(P) - 1))
        np.minimum(nearest, D[pick[-1]], out=nearest)
    heads = P[pick].copy()
    WX = X if weights is None else X * weights[:, None]
    for _ in range(max_iter):
        near = (np.einsum("md,md->m", heads, heads)[None] - 2.0 * X @ heads.T).argmin(1)
        order = np.argsort(near, kind="stable")
        held = np.flatnonzero(np.bincount(near, minlength=len(heads)))   # heads with rows
        sums = np.add.reduceat(WX[order], np.searchsorted(near[order], held), axis=0)
        mass = np.bincount(near, weights=weights, minlength=len(heads))[held]
        moved = mass > 0
        heads[held[moved]] = sums[moved] / mass[moved, None]
    return heads


def head_attention(X: np.ndarray, heads: np.ndarray, variance: float) -> np.ndarray:
    """``a_h(x) = softmax_h(-||x - mu_h||^2 / (2 v))`` of rows ``(n, d)``: ``(n, m)``.

    Examples
    --------
    >>> A = head_attention(np.array([[0.0], [1.0]]), np.array([[0.0], [1.0]]), 0.1)
    >>> A.round(3).tolist(), A.sum(1).tolist()
    ([[0.993, 0.007], [0.007, 0.993]], [1.0, 1.0])
    """
    return _attention(squared_distances(X, heads), variance)


def _attention(d2: np.ndarray, variance: float) -> np.ndarray:
    """:func:`head_attention` from the squared distances ``(n, m)``."""
    logits = d2 / (-2.0 * variance)
    logits -= logits.max(1, keepdims=True)
    A = np.exp(logits)
    return A / A.sum(1, keepdims=True)


def head_overlap(A: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``O = A^T W A`` ``(m, m)``: how much the heads share the rows' attention.

    Examples
    --------
    >>> head_overlap(np.array([[1.0, 0.0], [0.5, 0.5]])).tolist()
    [[1.25, 0.25], [0.25, 0.25]]
    """
    return A.T @ (A if weights is None else A * weights[:, None])


def gini_index(sizes) -> float:
    """Gini index of group sizes, ``sum_{i<j} |s_i - s_j| / ((k - 1) sum s)``: 0 when equal,
    1 when one group holds everything (Genie's normalization).

    Examples
    --------
    >>> gini_index([5, 5, 5]), gini_index([0, 0, 9]), gini_index([7])
    (0.0, 1.0, 0.0)
    """
    s = np.sort(np.asarray(sizes, dtype=np.float64))
    k, total = len(s), float(s.sum())
    if k < 2 or total <= 0:
        return 0.0
    i = np.arange(1, k + 1)
    return float(((2 * i - k - 1) * s).sum() / ((k - 1) * total))


def gini_linkage(similarity: np.ndarray, sizes, n_clusters: int, *,
                 gini_threshold: float = 0.3, linkage: str = "single") -> np.ndarray:
    """Agglomerate ``m`` items of similarity ``(m, m)`` and ``sizes`` into ``n_clusters``
    groups, most similar pair first, under Genie's constraint: while the Gini index of the
    groups' sizes exceeds ``gini_threshold``, the pair must include a smallest group (its
    most similar partner is taken). Ties: the first pair in row-major order of the
    current groups. Returns each item's group ``(m,)``, numbered in order of first item.

    Examples
    --------
    >>> S = np.array([[1, .9, .1, .0], [.9, 1, .2, .1], [.1, .2, 1, .8], [.0, .1, .8, 1]])
    >>> gini_linkage(S, [1, 1, 1, 1], 2).tolist()
    [0, 0, 1, 1]
    >>> gini_linkage(S, [50, 50, 50, 1], 2, gini_threshold=0.2).tolist()
    [0, 0, 1, 1]
    """
    if linkage == "single":
        return _single_genie(np.asarray(similarity, dtype=np.float64), sizes, int(n_clusters),
                             gini_threshold)
    C = np.array(similarity, dtype=np.float64, copy=True)
    m = len(C)
    np.fill_diagonal(C, -np.inf)
    size = np.asarray(sizes, dtype=np.float64).copy()
    count = np.ones(m)                      # items per group (average linkage)
    group = np.arange(m)                    # each item's group: the index of its leader
    alive = np.ones(m, dtype=bool)
    for _ in range(m - int(n_clusters)):
        live = np.flatnonzero(alive)
        sub = C[np.ix_(live, live)]
        if gini_index(size[live]) > gini_threshold:
            small = size[live] == size[live].min()
            sub = np.where(small[:, None] | small[None, :], sub, -np.inf)
        i, j = np.unravel_index(int(np.argmax(sub)), sub.shape)
        a, b = sorted((int(live[i]), int(live[j])))
        if linkage == "single":
            new = np.maximum(C[a], C[b])
        else:
            new = (count[a] * C[a] + count[b] * C[b]) / (count[a] + count[b])
        C[a], C[:, a] = new, new
        C[a, a] = -np.inf
        C[b], C[:, b] = -np.inf, -np.inf
        alive[b] = False
        size[a] += size[b]
        count[a] += count[b]
        group[group == b] = a
    _, labels = np.unique(group, return_inverse=True)
    return labels.astype(np.int64)


def _single_genie(S: np.ndarray, sizes, n_clusters: int, gini_threshold: float) -> np.ndarray:
    """Single linkage under Genie's constraint along the maximum spanning tree of ``S``
    (Prim's):
    the most similar pair of two groups is joined by a tree edge (an edge of largest
    similarity across any cut is in that tree), so the edges, most similar first, are the
    only candidates (Gagolewski et al. 2016). A Python loop over at most ``m`` edges."""
    m = len(S)
    inside, parent = np.zeros(m, dtype=bool), np.zeros(m, dtype=np.int64)
    best = S[0].astype(np.float64, copy=True)                # Prim's tree, from item 0
    inside[0], best[0] = True, -np.inf
    ends = []
    for _ in range(m - 1):
        j = int(np.argmax(best))
        ends.append((int(parent[j]), j))
        inside[j], best[j] = True, -np.inf
        closer = (S[j] > best) & ~inside
        best[closer], parent[closer] = S[j][closer], j
    weight = [-S[a, b] for a, b in ends]
    edges = [ends[e] for e in sorted(range(m - 1), key=weight.__getitem__)]  # stable
    leader, members = list(range(m)), [[i] for i in range(m)]
    size = dict(enumerate(np.asarray(sizes, dtype=np.float64).tolist()))
    total = sum(size.values())
    while len(size) > n_clusters and edges:
        s = np.sort(np.fromiter(size.values(), np.float64, len(size)))
        k = len(s)
        pick = 0
        if total > 0 and float((np.arange(1 - k, k, 2) * s).sum()) \
                > gini_threshold * (k - 1) * total:          # Gini index above the threshold
            pick = next(e for e, (a, b) in enumerate(edges)
                        if s[0] in (size[leader[a]], size[leader[b]]))
        a, b = sorted(leader[i] for i in edges.pop(pick))
        for i in members[b]:
            leader[i] = a
        members[a] += members[b]
        size[a] += size.pop(b)
    _, labels = np.unique(leader, return_inverse=True)
    return labels.astype(np.int64)


def normalized_cut(overlap: np.ndarray, labels: np.ndarray) -> float:
    """``sum_c cut(c, not c) / vol(c)`` of a partition ``labels`` ``(m,)`` of the graph
    ``overlap`` ``(m, m)`` (empty groups count 0).

    Examples
    --------
    >>> O = np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 0.1], [0.0, 0.1, 2.0]])
    >>> round(normalized_cut(O, np.array([0, 0, 1])), 3)     # 0.1 / 6.1 + 0.1 / 2.1
    0.064
    >>> round(normalized_cut(O, np.array([0, 1, 1])), 3)
    0.526
    """
    degree = overlap.sum(1)
    total = 0.0
    for c in np.unique(labels):
        inside = labels == c
        volume = float(degree[inside].sum())
        if volume > 0:
            cut = volume - float(overlap[np.ix_(inside, inside)].sum())
            total += max(cut, 0.0) / volume               # not below 0 by rounding
    return total


def majority_labels(nearest: np.ndarray, labels: np.ndarray, n_heads: int, n_clusters: int,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """Each head's majority label over its rows (``nearest``: each row's head); a head
    without rows takes label 0.

    Examples
    --------
    >>> majority_labels(np.array([0, 0, 0, 1]), np.array([1, 1, 0, 0]), 3, 2).tolist()
    [1, 0, 0]
    """
    votes = np.bincount(nearest * n_clusters + labels, weights=weights,
                        minlength=n_heads * n_clusters).reshape(n_heads, n_clusters)
    return votes.argmax(1).astype(np.int64)


def adjusted_rand(a: np.ndarray, b: np.ndarray) -> float:
    """The adjusted Rand index of two labelings ``(n,)`` (as scikit-learn's
    ``adjusted_rand_score``, from the contingency table by ``bincount``: no input checks).

    Examples
    --------
    >>> adjusted_rand(np.array([0, 0, 1, 1]), np.array([1, 1, 0, 0]))
    1.0
    >>> round(adjusted_rand(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])), 3)
    -0.5
    """
    _, a = np.unique(a, return_inverse=True)
    _, b = np.unique(b, return_inverse=True)

    def pairs(counts):
        c = counts.astype(np.float64)
        return float((c * (c - 1)).sum()) / 2.0
    both, left, right = pairs(np.bincount(a * (b.max() + 1) + b)), pairs(np.bincount(a)), \
        pairs(np.bincount(b))
    expected = left * right / max(len(a) * (len(a) - 1) / 2.0, 1.0)
    top = (left + right) / 2.0
    return 1.0 if top == expected else (both - expected) / (top - expected)


def posterior_cut(proba: np.ndarray, weights: np.ndarray | None = None) -> float:
    """``sum_c (1 - Q_cc / vol_c)`` of ``Q = P^T W P``: the normalized cut of the
    overlap of ``K`` clusters whose posterior is ``proba`` ``(n, K)`` (rows summing to one),
    each cluster on its own (empty clusters count 0): 0 when every row is sure of its
    cluster.

    Examples
    --------
    >>> posterior_cut(np.array([[1.0, 0.0], [0.0, 1.0]]))
    0.0
    >>> round(posterior_cut(np.array([[0.5, 0.5], [0.0, 1.0]])), 3)  # 0.5 + 1 - 1.25 / 1.5
    0.667
    """
    P = np.asarray(proba, dtype=np.float64)
    W = P if weights is None else P * np.asarray(weights, dtype=np.float64)[:, None]
    volume = W.sum(0)
    inside = np.einsum("nk,nk->k", W, P)
    held = volume > 0
    return float(np.sum(1.0 - inside[held] / volume[held]))


def merge_heads(X: np.ndarray, labels: np.ndarray, n_clusters: int, *,
                rng: np.random.Generator, weights: np.ndarray | None = None,
                settings: MergeSettings = MergeSettings(), force: bool = False,
                proba: np.ndarray | None = None) -> HeadMerge:
    """Fit ``m`` heads to the rows ``X`` ``(n, d)``, merge them into ``n_clusters`` groups
    and decide whether the merge beats the ``K``-cluster partition ``labels`` ``(n,)``.

    The heads tile at most ``min(sample_per_head * m, max_rows)`` rows (a sample drawn
    with ``rng``; :func:`tile_heads`); the overlap, the linkage and the cuts are computed
    on the same rows (module docstring), so the cost grows with the heads, not with the
    rows. ``force``: keep the merge whatever the cuts say. ``proba``: the ``K``-head
    fit's posterior on the rows ``(n, K)``; when given (and not ``force``), the merge is
    skipped before any head is tiled if :func:`posterior_cut` is below
    ``settings.skip_cut`` (module docstring), and ``rng`` is not drawn from.

    Returns
    -------
    HeadMerge
        With ``merged`` false and no heads beyond ``K`` when ``n_heads`` is not above ``K``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(0, 2 * np.pi, 600)
    >>> r = np.repeat([1.0, 4.0], 300)                     # two rings
    >>> X = np.c_[r * np.cos(t), r * np.sin(t)] + rng.normal(0, 0.1, (600, 2))
    >>> kmeans = (X[:, 0] > 0).astype(int)                 # a convex cut across both
    >>> res = merge_heads(X, kmeans, 2, rng=np.random.default_rng(0))
    >>> res.merged, len(res.heads) > 2
    (True, True)
    >>> sure = np.eye(2)[kmeans]                           # a fit sure of every row
    >>> merge_heads(X, kmeans, 2, rng=np.random.default_rng(0), proba=sure).reason
    'not merged: the 2 clusters barely overlap (normalized cut of their posterior 0 < 0.001)'
    >>> z = cluster_membership(X, res).argmax(1)
    >>> bool(np.all(z[:300] == z[0]) and np.all(z[300:] != z[0]))
    True
    """
    n, K = X.shape[0], int(n_clusters)

    def not_tiled(reason: str, cut_kept: float = np.nan) -> HeadMerge:
        return HeadMerge(np.empty((0, X.shape[1])), np.empty(0, np.int64), np.nan, False,
                         np.nan, cut_kept, "not merged: " + reason)
    m = n_heads(K, n, settings)
    if m <= K:
        return not_tiled(f"{n} rows give no more heads than clusters ({m} <= {K})")
    if proba is not None and not force and settings.skip_cut > 0:
        cut = posterior_cut(proba, weights)
        if cut < settings.skip_cut:
            return not_tiled(f"the {K} clusters barely overlap (normalized cut of their "
                             f"posterior {cut:.3g} < {settings.skip_cut:g})", cut)
    cap = min(settings.max_rows, settings.sample_per_head * m)
    take = np.sort(rng.choice(n, cap, replace=False)) if n > cap else np.arange(n)
    S, z = np.asarray(X[take], dtype=np.float64), np.asarray(labels)[take]
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[take]
    heads = tile_heads(S, m, rng, max_iter=settings.max_iter, weights=w)
    m = len(heads)
    if m <= K:                                               # fewer distinct rows than heads
        return not_tiled(f"{m} distinct rows give no more heads than clusters ({m} <= {K})")
    d2 = squared_distances(S, heads)                        # (n, m)
    nearest = d2.argmin(1)
    spread = float(np.average(d2[np.arange(len(S)), nearest], weights=w))
    # heads on every distinct row leave no spread: floored as the fit's lambda is, at
    # 1e-12 times the rows' mean squared distance from their mean (1 when that is 0)
    scatter = float(np.average(((S - np.average(S, 0, weights=w)) ** 2).sum(1), weights=w))
    variance = settings.temperature * max(spread, 1e-12 * (scatter if scatter > 0 else 1.0))
    A = _attention(d2, variance)                             # head_attention, d2 reused
    overlap = head_overlap(A, w)
    root = np.sqrt(np.maximum(np.diag(overlap), np.finfo(np.float64).tiny))
    sizes = np.bincount(nearest, weights=w, minlength=m)
    head_labels = gini_linkage(overlap / root[:, None] / root[None], sizes, K,
                               gini_threshold=settings.gini_threshold, linkage=settings.linkage)
    kept = majority_labels(nearest, z, m, K, w)
    cut_merged, cut_kept = normalized_cut(overlap, head_labels), normalized_cut(overlap, kept)
    redraw = adjusted_rand(z, (A @ np.eye(K)[kept]).argmax(1))
    lower = cut_merged < settings.cut_ratio * cut_kept
    seen = redraw >= settings.min_redraw
    merged = bool(force or (lower and seen))
    verdict = "merged" if merged else "not merged"
    why = "merge_heads=True" if force else ("below" if lower else "not below")
    reason = (f"{verdict}: {m} heads into {K} clusters, normalized cut of the heads' "
              f"overlap {cut_merged:.4g} ({why} {settings.cut_ratio:g} times the {K}-head "
              f"fit's {cut_kept:.4g})")
    if not (force or seen):
        reason += (f"; the heads redraw the {K}-head fit's partition at ARI {redraw:.2f}, "
                   f"below {settings.min_redraw:g}: they do not see what it sees")
    return HeadMerge(heads, head_labels, variance, merged, cut_merged, cut_kept, reason, redraw)


def cluster_membership(X: np.ndarray, merge: HeadMerge, *,
                       squared: np.ndarray | None = None) -> np.ndarray:
    """``p_c(x) = sum_{h in c} a_h(x)`` of rows ``(n, d)``: ``(n, K)``, rows summing to one;
    ``squared``: the rows' squared distances to the heads ``(n, m)``, when at hand.

    Examples
    --------
    >>> merge = HeadMerge(np.array([[0.0], [1.0], [5.0]]), np.array([0, 0, 1]), 0.5,
    ...                   True, 0.0, 1.0, "")
    >>> cluster_membership(np.array([[0.5], [5.0]]), merge).round(3).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    if squared is None:
        squared = squared_distances(np.asarray(X, dtype=np.float64), merge.heads)
    A = _attention(squared, merge.variance)
    K = int(merge.head_labels.max()) + 1
    return A @ np.eye(K)[merge.head_labels]

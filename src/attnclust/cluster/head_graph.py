"""The heads' graph: small heads that tile the rows, the overlap of their attention, the
Genie linkage of that graph and its normalized cuts; the pieces of the merge of heads
into clusters (:mod:`attnclust.cluster.merge`, which says how they are used):

    a_h(x)   = softmax_h( -||x - mu_h||^2 / (2 v) )          head_attention
    O        = A^T W A                                        head_overlap
    S_hg     = O_hg / sqrt(O_hh O_gg)                         head_similarity
    Ncut(P)  = sum_c cut(c, not c) / vol(c)                   normalized_cut
    G(s)     = sum_{i<j} |s_i - s_j| / ((k - 1) sum s)        gini_index (Genie's rule)

Notation
--------
==============  ==================  ===============================================
symbol          code                meaning
==============  ==================  ===============================================
``A``           ``A``               the rows' attention over the heads, ``(n, m)``
``W``           ``weights``         the rows' weights (diagonal)
``S``           ``similarity``      ``O`` cosine-normalized, ``(m, m)``
``P``           ``labels``          a partition of the heads, ``(m,)``
==============  ==================  ===============================================
"""

from __future__ import annotations

import numpy as np

__all__ = ["squared_distances", "distinct_rows", "dequantized", "draw_copies", "tile_heads",
           "head_attention", "head_overlap",
           "head_similarity", "gini_index",
           "gini_linkage", "normalized_cut", "majority_labels", "adjusted_rand",
           "posterior_cut"]


def squared_distances(X: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """``||x_i - h_j||^2`` of rows ``(n, d)`` and heads ``(m, d)``: ``(n, m)``, from one
    matrix product (clamped at zero against rounding).

    Examples
    --------
    >>> squared_distances(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[0.0, 0.0]])).tolist()
    [[0.0], [25.0]]
    """
    d2 = X @ (-2.0 * heads).T                               # (n, m), the one array made
    d2 += np.einsum("nd,nd->n", X, X)[:, None]
    d2 += np.einsum("md,md->m", heads, heads)[None]
    return np.maximum(d2, 0.0, out=d2)


def distinct_rows(X: np.ndarray) -> int:
    """The number of distinct rows of ``X`` ``(n, d)`` (each row's bytes compared at once:
    ``np.unique(axis=0)`` sorts by one column at a time, ten times slower on wide rows;
    ``-0.0`` is ``0.0``).

    Examples
    --------
    >>> distinct_rows(np.array([[0.0, 1.0], [-0.0, 1.0], [2.0, 1.0]]))
    2
    """
    rows = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0)
    return len(np.unique(rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1])))))


# integer weights summing to less than this are drawn as copies of rows (the
# multivariate hypergeometric's "marginals" method loses precision above 1e9 items)
MOST_COPIES = 10**9


def dequantized(rows: np.ndarray, rng: np.random.Generator, level: float) -> np.ndarray:
    """The rows ``(n, d)`` with each column on a coarse grid spread over its cells, ``x_j +
    u h_j`` with ``u ~ U(-1/2, 1/2)`` drawn from ``rng`` and ``h_j`` the least gap between
    the column's distinct values: a column whose rounding variance ``h_j^2 / 12`` is at
    least ``level`` times its variance (a binary, count or graded column). Between two
    neighbouring values of a grid there is no row, which is no gap between clusters: a
    yes/no column cuts the rows into two slabs whose heads share no attention. Spread
    over its cells, a grid's neighbouring values touch, and only gaps of more than one
    step stay. Other columns are kept, and where no column is on such a grid (or ``level``
    is ``inf``) the rows are returned as they are, with no draw from ``rng``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = np.c_[rng.normal(size=200), rng.integers(0, 2, 200)]     # a yes/no column
    >>> Z = dequantized(X, rng, 1e-4)
    >>> bool(np.array_equal(Z[:, 0], X[:, 0])), bool(np.abs(Z[:, 1] - X[:, 1]).max() <= 0.5)
    (True, True)
    >>> float(np.diff(np.sort(Z[:, 1])).max()) < 0.1                # no gap between 0 and 1
    True
    >>> Y = X[:, :1]
    >>> dequantized(Y, rng, 1e-4) is Y                                 # no grid: as given
    True
    """
    if not np.isfinite(level):                          # (the merge's default: off)
        return rows
    ordered = np.sort(rows, axis=0)
    gaps = np.diff(ordered, axis=0)
    step = np.where(gaps > 0, gaps, np.inf).min(axis=0, initial=np.inf)
    grid = np.isfinite(step) & (step * step / 12.0 >= level * rows.var(axis=0))
    if not grid.any():
        return rows
    spread = rows.copy()
    spread[:, grid] += rng.uniform(-0.5, 0.5, (len(rows), int(grid.sum()))) * step[grid]
    return spread


def draw_copies(weights: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Copies of each row ``(n,)`` in a random draw of ``size`` rows from rows of non-negative
    ``weights`` ``(n,)`` counted in rows. Integer weights are copies of their rows: the
    counts of ``size`` rows drawn without replacement from the rows repeated, the
    multivariate hypergeometric law (a row is drawn at most as often as its weight; the
    same law as ``rng.choice`` of the repeated rows, not the same draws). Other weights,
    and integer weights of a billion rows or more (where a draw of a few thousand rows
    hardly repeats one), give ``size`` draws in proportion to the weights, with
    replacement (multinomial counts).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> copies = draw_copies(np.array([0.0, 1.0, 3.0, 6.0]), 5, rng)
    >>> int(copies.sum()), int(copies[0]), bool(np.all(copies <= [0, 1, 3, 6]))
    (5, 0, True)
    >>> int(draw_copies(np.array([0.5, 1.5]), 4, rng).sum())
    4
    """
    w = np.asarray(weights, dtype=np.float64)
    if np.array_equal(w, np.round(w)) and w.sum() < MOST_COPIES:
        return rng.multivariate_hypergeometric(w.astype(np.int64), int(size))
    return rng.multinomial(int(size), w / w.sum())


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

    ``weights`` ``(n,)`` count rows: the pool is ``pool * m`` rows of the weights' total
    (:func:`draw_copies`), each seed drawn with probability proportional to its copies in
    the pool (times the squared distance), so that integer weights tile as the rows
    repeated do, in distribution.

    Examples
    --------
    >>> X = np.repeat(np.arange(10.0), 20)[:, None]          # 10 distinct values
    >>> heads = tile_heads(X, 10, np.random.default_rng(0), pool=20)   # the pool: every row
    >>> np.sort(heads[:, 0]).tolist() == np.arange(10.0).tolist()  # D^2 draws: one per value
    True
    >>> heads = tile_heads(np.arange(10.0)[:, None], 10, np.random.default_rng(0),
    ...                    weights=np.full(10, 20.0), pool=20)        # the same, as weights
    >>> np.sort(heads[:, 0]).tolist() == np.arange(10.0).tolist()
    True
    """
    n, m = X.shape[0], int(n_heads)
    copies = None                                           # the pool's weights
    if weights is None:
        P = X[np.sort(rng.choice(n, pool * m, replace=False))] if pool * m < n else X
    elif pool * m < (weights.sum() if np.array_equal(weights, np.round(weights))
                     else np.count_nonzero(weights)):   # copies of rows, or rows weighed
        drawn = draw_copies(weights, pool * m, rng)
        P, copies = X[drawn > 0], drawn[drawn > 0].astype(np.float64)
    else:
        P, copies = X[weights > 0], weights[weights > 0]
    D = squared_distances(P, P)                             # (p, p)
    first = int(rng.integers(len(P))) if copies is None else \
        int(np.searchsorted(np.cumsum(copies), rng.random() * copies.sum(), side="right"))
    pick = [min(first, len(P) - 1)]
    nearest = D[pick[0]].copy()
    start = None
    for u in rng.random(m - 1):                              # k-means++: D^2 draws
        total = np.cumsum(nearest if copies is None else nearest * copies)
        start = total[-1] if start is None else start
        if total[-1] <= 1e-12 * start:      # every distinct row of the pool is a head: what
            break                           # is left is the distances' rounding
        pick.append(min(int(np.searchsorted(total, u * total[-1])), len(P) - 1))
        np.minimum(nearest, D[pick[-1]], out=nearest)
    heads = P[pick].copy()
    WX = X if weights is None else X * weights[:, None]
    for _ in range(max_iter):
        near = X @ (-2.0 * heads).T                          # ||x - h||^2 less ||x||^2
        near += np.einsum("md,md->m", heads, heads)[None]
        near = near.argmin(1)
        order = np.argsort(near, kind="stable")
        held = np.flatnonzero(np.bincount(near, minlength=len(heads)))   # heads with rows
        sums = np.add.reduceat(WX[order], np.searchsorted(near[order], held), axis=0)
        mass = np.bincount(near, weights=weights, minlength=len(heads))[held]
        moved = mass > 0
        heads[held[moved]] = sums[moved] / mass[moved, None]
    return heads


def head_attention(X: np.ndarray, heads: np.ndarray, variance: float, *,
                   squared: np.ndarray | None = None) -> np.ndarray:
    """``a_h(x) = softmax_h(-||x - mu_h||^2 / (2 v))`` of rows ``(n, d)``: ``(n, m)``;
    ``squared``: the rows' squared distances to the heads ``(n, m)``, when at hand.

    Examples
    --------
    >>> A = head_attention(np.array([[0.0], [1.0]]), np.array([[0.0], [1.0]]), 0.1)
    >>> A.round(3).tolist(), A.sum(1).tolist()
    ([[0.993, 0.007], [0.007, 0.993]], [1.0, 1.0])
    """
    d2 = squared_distances(X, heads) if squared is None else squared
    A = np.divide(d2, -2.0 * variance)                       # the logits, then in place
    A -= A.max(1, keepdims=True)
    np.exp(A, out=A)
    A /= A.sum(1, keepdims=True)
    return A


def head_overlap(A: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``O = A^T W A`` ``(m, m)``: how much the heads share the rows' attention.

    Examples
    --------
    >>> head_overlap(np.array([[1.0, 0.0], [0.5, 0.5]])).tolist()
    [[1.25, 0.25], [0.25, 0.25]]
    """
    return A.T @ (A if weights is None else A * weights[:, None])


def head_similarity(overlap: np.ndarray) -> np.ndarray:
    """``S_hg = O_hg / sqrt(O_hh O_gg)``: the overlap ``(m, m)`` cosine-normalized (a head
    that holds no attention counts as the smallest positive number on its diagonal).

    Examples
    --------
    >>> head_similarity(np.array([[4.0, 1.0], [1.0, 1.0]])).tolist()
    [[1.0, 0.5], [0.5, 1.0]]
    """
    root = np.sqrt(np.maximum(np.diag(overlap), np.finfo(np.float64).tiny))
    return overlap / root[:, None] / root[None]


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
    only candidates (Gagolewski et al. 2016). A Python loop over at most ``m`` edges; under
    the constraint, a smallest group's best pair is the first of its own tree edges."""
    m = len(S)
    ends = _maximum_spanning_tree(S)
    weight = -S[ends[:, 0], ends[:, 1]]
    edges = ends[np.argsort(weight, kind="stable")].tolist()            # most similar first
    incident = [[] for _ in range(m)]          # each group's tree edges (a tree edge always
    for e, (a, b) in enumerate(edges):         # joins two groups; used ones are skipped)
        incident[a].append(e)
        incident[b].append(e)
    used, first = [False] * len(edges), 0
    leader, members = list(range(m)), [[i] for i in range(m)]
    size = np.asarray(sizes, dtype=np.float64).copy()       # at each group's leader
    live = size.copy()                                      # and inf for a group joined
    total, groups = float(size.sum()), m
    while groups > n_clusters and groups > 1:
        while used[first]:
            first += 1
        least = live.min()
        pick = first           # the most similar pair: a smallest group's too, or no constraint
        a, b = edges[first]
        if least != size[leader[a]] and least != size[leader[b]] and total > 0:
            s = np.sort(live)[:groups]
            if float((np.arange(1 - groups, groups, 2) * s).sum()) > \
                    gini_threshold * (groups - 1) * total:
                pick = min(e for g in np.flatnonzero(live == least)
                           for e in incident[g] if not used[e])
        used[pick] = True
        a, b = (leader[i] for i in edges[pick])
        if len(members[a]) < len(members[b]):                # the larger group's leader stays
            a, b = b, a
        for i in members[b]:
            leader[i] = a
        members[a] += members[b]
        incident[a] += incident[b]
        size[a] += size[b]
        live[a], live[b] = size[a], np.inf
        groups -= 1
    _, first_item, labels = np.unique(leader, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first_item))[labels].astype(np.int64)  # by first item


def _maximum_spanning_tree(S: np.ndarray) -> np.ndarray:
    """The ``m - 1`` edges ``(parent, item)`` ``(m - 1, 2)`` of the maximum spanning tree of
    ``S`` ``(m, m)`` by Prim's algorithm from item 0, in the order the items join (ties:
    the first item, and its first parent to reach that similarity)."""
    m = len(S)
    outside = np.array(S, dtype=np.float64, copy=True)    # columns of joined items: -inf
    outside[:, 0] = -np.inf
    best, parent = outside[0].copy(), np.zeros(m, dtype=np.int64)
    ends = np.empty((m - 1, 2), dtype=np.int64)
    for t in range(m - 1):
        j = int(best.argmax())
        ends[t] = parent[j], j
        outside[:, j], best[j] = -np.inf, -np.inf
        closer = outside[j] > best
        np.copyto(best, outside[j], where=closer)
        parent[closer] = j
    return ends


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


def adjusted_rand(a: np.ndarray, b: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The adjusted Rand index of two labelings ``(n,)`` (as scikit-learn's
    ``adjusted_rand_score``, from the contingency table by ``bincount``: no input checks);
    ``weights`` ``(n,)``: the rows' copies (an integer weight counts as that many rows).

    Examples
    --------
    >>> adjusted_rand(np.array([0, 0, 1, 1]), np.array([1, 1, 0, 0]))
    1.0
    >>> round(adjusted_rand(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])), 3)
    -0.5
    >>> a, b, w = np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([2, 1, 3])
    >>> adjusted_rand(a, b, w) == adjusted_rand(np.repeat(a, w), np.repeat(b, w))
    True
    """
    _, a = np.unique(a, return_inverse=True)
    _, b = np.unique(b, return_inverse=True)

    def pairs(counts):
        c = counts.astype(np.float64)
        return float((c * (c - 1)).sum()) / 2.0
    both, left, right = (pairs(np.bincount(c, weights=weights))
                         for c in (a * (b.max() + 1) + b, a, b))
    n = len(a) if weights is None else float(np.sum(weights))
    expected = left * right / max(n * (n - 1) / 2.0, 1.0)
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

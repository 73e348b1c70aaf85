"""Clusters made of several heads: more heads than clusters, merged where the data say so.

A mixture of ``K`` Gaussian heads draws ``K`` convex cells; a ring, a crescent or a
spiral is no such cell. Here ``m = max(6 K, 150) > K`` small spherical heads (at most
one per 5 sampled rows, and one per 5 distinct ones: a repeated row is one place to tile)
tile 14 sampled rows per head, and the heads whose attention overlaps are joined into
``K`` clusters, each a union of heads:

    a_h(x)   = softmax_h( -||x - mu_h||^2 / (2 v) ),   v = t * mean_i min_h ||x_i - mu_h||^2
    O_hg     = sum_i w_i a_h(x_i) a_g(x_i)                       (head overlap, m x m)
    S_hg     = O_hg / sqrt(O_hh O_gg)                            (cosine-normalized)

Heads are agglomerated on ``S`` (single linkage by default: the similarity of two
groups is that of their most similar pair of heads) down to ``K`` groups, under Genie's
constraint (Gagolewski, Bartoszuk and Cena, 2016): while the Gini index of the groups'
sizes (rows of their heads) exceeds ``gini_threshold``, a merge must involve a smallest
group, so that outlying heads do not make clusters of their own.

**When to merge.** Two partitions of the heads are compared: the merged one and the
``K``-head fit's read on the same heads (each head takes the fit's majority label over its
rows), by their normalized cuts of the overlap graph ``O``,

    Ncut(P) = sum_c cut(c, not c) / vol(c),   cut(c, not c) = sum_{h in c, g not in c} O_hg,

and by whether ``K`` Gaussians describe the rows: the split gain

    g = (BIC(K) - BIC(2 K)) / n

of ``2 K`` full-covariance Gaussian components over ``K`` started from the fit's partition
(a uniform background beside each, a few EM steps on the standardized sample at the
data's resolution, :func:`~attnclust.cluster.choice.k_choice.resolution_floor`; the ``2 K``
started from k-means cells of the heads: :func:`split_gain`). A BIC lower with twice the
components says that the ``K`` clusters are not Gaussian. The merge is kept

- where the merged cut is below ``cut_ratio`` (default 0.1) times the fit's and ``g``
  above ``split_gain_floor`` (default -1: ``K`` components not by far the better), or
- where the merged cut is below the fit's and ``g`` above ``min_split_gain`` (default
  0.05: the ``K`` components under-fit the rows), but not where the fit's cut is below
  ``cut_floor`` (it cuts nothing: clusters apart).

Why 0.1: on 494 fits (the development battery, the generated families and an imitation
of the public suites, seeds 0-1) the mean ARI reads 0.7717, 0.7754, 0.7773 and 0.7770
at ``cut_ratio`` 0.05, 0.07, 0.1 and 0.2; from 0.05 to 0.1 seven fits rise (shapes in
contact whose merged cut is 9-20 times below the fit's: ``spiralsquare``,
``impossible``, a noisy ring, two stripes; 0.16-1.0 each) and one falls by 0.05, while
at 0.2 two fits of ten Gaussian ellipses fall by 0.12 and 0.34.

The first rule holds there too: separated shapes, one of them in pieces with a gap
between, can have a fit whose cells cut nothing and join a piece to the wrong shape,
where the merged cut is lower still (three thin zigzags of 84 rows each, the fit's cut
2e-5, the merged 0: ARI 0.51 -> 1.00, ``tests/test_merge.py``; one-off probe on 494 fits
of the development battery, the generated families and an imitation of the public
suites, seeds 0-1: 3 fits moved, each to 1.00, mean ARI 0.7693 -> 0.7721). No merge on
rows of one feature: there a cluster of heads is an interval, which the fit's cells draw
too, so merging only moves their ends to where the heads thin out (on two overlapping
Gaussians in 1-D, rounded or not, 0.014-0.057 mean ARI below the fit over 16 draws;
one-off probes).
On Gaussian clusters the ``K``-head fit already cuts the overlap graph where it is thin,
and ``2 K`` components gain nothing (``g < 0`` on blobs and elongated sticks); on shapes
the fit's convex cells cut through dense chains of heads, and ``2 K`` components trace
them better (``g > 0.05`` on crescents and spirals cut in halves: ``tests/test_merge.py``;
thin concentric rings not always, and they merge by the cut ratio). The split gain needs
``split_rows`` (2) sampled rows per parameter of the ``2 K`` components: on at most 2,100
sampled rows (``K <= 25``), at most 21 columns for ``K = 2``, 9 for ``K = 8``; beyond,
or where it cannot be read, no merge at ``K`` is taken (and, but for
``n_clusters="auto"``'s count, no head tiled). Neither rule takes a disk inside a ring
that touches it (the ``disk-*`` sets) or shapes that cross.

**Only where the heads see the fit's partition.** The heads are spherical, in the rows'
own units; the ``K``-head fit may be diag or full and see what they do not (columns on
scales 10^3 apart: wine's proline). The cuts are compared only when the heads redraw the
fit's partition: each row's label read through the heads (the cluster of largest summed
attention, heads labelled by majority) must agree with the fit's labels at an adjusted
Rand index of at least ``min_redraw`` (default 0.6; shapes 0.66-1, wine 0.02-0.5).

**Rows on a grid.** Between two neighbouring values of a binary, count or graded column
there is no row, and the heads on either side share no attention: the merged cut along
such a column is near 0. Where the column carries the clusters, that cut finds them (a
yes/no column that is the label of two overlapping blobs: ARI 0.98, the ``K``-head fit
0.42); where it is unrelated to them, the merge can take its slabs for clusters (three
blobs beside a yes/no column, 3 of 10 seeds). With a finite ``grid_variance`` the heads
tile the sample with such columns spread over their cells
(:func:`~attnclust.cluster.head_graph.dequantized`), so that only gaps of more than one
step of a grid stay; off by default.

**Not when the K clusters barely overlap.** Before any head is tiled, the fit's posterior
``P`` ``(n, K)`` on the sampled rows gives the normalized cut of ``Q = P^T W P``:

    Ncut_K = sum_c (1 - Q_cc / vol_c),   vol_c = sum_i w_i P_ic.

Where it is below ``skip_cut`` (default 0.03) the clusters barely share a row: skipped.

**How many clusters** (``n_clusters="auto"``, whose ``K`` counts the modes of Gaussian
components):
the heads may hold another count of clusters, read on their graph at a wider attention
(:mod:`attnclust.cluster.head_count`).

A cluster's membership is the sum of its heads' attention, ``p_c(x) = sum_{h in c}
a_h(x)``, and a row's label is the cluster of largest membership.

**Sample weights** count rows (:func:`weights_in_rows`): a row of weight zero is no row;
where the rows of positive weight weigh the same, they are read unweighted, with the
draws of the rows alone (all ones, or all sevens, are no weights); an integer weight is
that many copies of its row; other weights are scaled to a mean of one row. The number
of heads and the sample sizes are of the weights' total (the heads at most one per 5
distinct sampled rows of positive weight), and every sample is a draw of
that many rows (:func:`~attnclust.cluster.head_graph.draw_copies`): for integer weights
the counts of a draw without replacement from the rows repeated, so that the merge of
weighted rows is the merge of the repeated rows in distribution over the random draws
(the same law, not the same draws: the draws that pick rows differ), and each cut, split
gain and adjusted Rand index counts the copies.

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

from typing import NamedTuple

import numpy as np

from .choice.k_choice import bic_gain
from .head_count import HeadCount, HeadTiles, cluster_count, counted_clusters
from .head_graph import (
    MOST_COPIES,
    adjusted_rand,
    dequantized,
    distinct_rows,
    draw_copies,
    gini_index,
    gini_linkage,
    head_attention,
    head_overlap,
    head_similarity,
    majority_labels,
    normalized_cut,
    posterior_cut,
    squared_distances,
    tile_heads,
)
from .kmeans.batch import best_of_seedings
from .mixture.covariance import as_covariance
from .settings import FitSettings, MergeSettings

__all__ = ["MergeSettings", "HeadMerge", "HeadCount", "n_heads", "distinct_rows",
           "weights_in_rows", "sample_rows",
           "squared_distances", "tile_heads",
           "head_attention", "head_overlap", "head_similarity",
           "gini_index", "gini_linkage", "normalized_cut", "majority_labels", "adjusted_rand",
           "posterior_cut", "cluster_count", "split_gain", "merge_heads",
           "cluster_membership", "cluster_argmax", "cluster_labels"]


class HeadMerge(NamedTuple):
    """A merge of heads (:func:`merge_heads`): the heads ``(m, d)``, the cluster of each
    ``(m,)``, the attention's variance, whether the merged partition was kept, the two
    normalized cuts compared, the reason in words and how well the heads redraw the
    ``K``-head fit's partition (an adjusted Rand index). When ``merged`` is false the heads
    still carry the merged partition that was turned down (``head_labels``). Merged into
    another count of clusters than ``K`` (``n_clusters="auto"``), the variance is the
    count's wider one (``count_temperature``), and ``ncut_kept`` the cut of as many k-means
    cells."""

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
    >>> n_heads(3, 1000), n_heads(30, 2000), n_heads(3, 100)
    (150, 180, 20)
    """
    m = max(settings.heads_per_cluster * n_clusters, settings.min_heads)
    return int(min(m, n_rows // settings.rows_per_head))


def weights_in_rows(weights: np.ndarray) -> np.ndarray | None:
    """Positive sample weights ``(n,)`` as the merge counts rows (module docstring,
    *Sample weights*): ``None`` where they are all equal (the rows, unweighted: scaling
    the weights changes nothing), integer weights as they are (copies of the rows; up to
    a total of a billion rows), other weights scaled to a mean of one row.

    Examples
    --------
    >>> weights_in_rows(np.full(3, 7.0)) is None, weights_in_rows(np.array([1.0, 3.0]))
    (True, array([1., 3.]))
    >>> weights_in_rows(np.array([0.5, 1.0, 1.5])).tolist()
    [0.5, 1.0, 1.5]
    >>> weights_in_rows(np.array([1e-300, 3e-300])).tolist()
    [0.5, 1.5]
    >>> weights_in_rows(np.array([1e308, 7.5e307])).round(3).tolist()   # no copies: inf
    [1.143, 0.857]
    """
    w = np.asarray(weights, dtype=np.float64)
    if not len(w) or np.ptp(w) == 0:
        return None
    if np.array_equal(w, np.round(w)) and w.sum() < MOST_COPIES:   # (inf: not copies)
        return w
    w = w / w.max()                         # no overflow of the sum of weights of 1e308
    return w * (len(w) / w.sum())


def split_gain(S: np.ndarray, weights: np.ndarray | None, labels: np.ndarray,
               heads: np.ndarray, nearest: np.ndarray, n_clusters: int,
               rng: np.random.Generator) -> float:
    """``g``, the split gain of ``2 K`` components over the fit's ``K`` on the merge's rows
    ``S`` ``(n, d)`` (module docstring, *When to merge*;
    :func:`~attnclust.cluster.choice.k_choice.bic_gain`): ``K`` components from the fit's
    ``labels`` ``(n,)``, ``2 K`` from k-means cells of the ``heads`` ``(m, d)``, each row in
    the cell of its ``nearest`` head; ``-inf`` (no evidence) where the heads allow no
    ``2 K`` cells. Integer ``weights`` ``(n,)`` are copies of the rows (the rows repeated),
    others weigh them.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> t = rng.uniform(0, 2 * np.pi, 600)
    >>> ring = np.c_[np.cos(t), np.sin(t)] + rng.normal(0, 0.05, (600, 2))
    >>> blobs = np.r_[rng.normal(-4, 1, (300, 2)), rng.normal(4, 1, (300, 2))]
    >>> def gain(X, labels):
    ...     heads = tile_heads(X, 40, rng)
    ...     nearest = squared_distances(X, heads).argmin(1)
    ...     return split_gain(X, None, labels, heads, nearest, 2, rng)
    >>> bool(gain(ring, (ring[:, 0] > 0).astype(int)) > 0.05)
    True
    >>> bool(gain(blobs, np.repeat([0, 1], 300)) < 0.05)
    True
    """
    K = int(n_clusters)
    if 2 * K >= len(heads):
        return -np.inf
    cells = np.asarray(best_of_seedings(heads, 2 * K, 1, rng, max_iter=10).labels)[nearest]
    if weights is not None and np.array_equal(weights, np.round(weights)):
        # copies of rows, as repeated: bic_gain standardizes and floors the rows unweighted
        copies = np.asarray(weights, dtype=np.int64)
        return bic_gain(np.repeat(S, copies, axis=0), np.repeat(labels, copies),
                        np.repeat(cells, copies))
    return bic_gain(S, labels, cells, sample_weight=weights)


def _splits(n_rows: int, n_features: int, n_clusters: int, rows_per_parameter: float) -> bool:
    """Whether ``n_rows`` rows hold ``rows_per_parameter`` per parameter of ``2 K`` full
    Gaussians and a background (on at most ``FitSettings.max_dim`` standardized features)."""
    parameters = as_covariance("full").n_parameters(2 * n_clusters, min(int(n_features),
                                                                      FitSettings.max_dim)) + 1
    return n_rows >= rows_per_parameter * parameters


def merge_heads(X: np.ndarray, labels: np.ndarray, n_clusters: int, *,
                rng: np.random.Generator, weights: np.ndarray | None = None,
                settings: MergeSettings = MergeSettings(), force: bool = False,
                proba: np.ndarray | None = None, count_up_to: int = 0) -> HeadMerge:
    """Fit ``m`` heads to the rows ``X`` ``(n, d)``, merge them into ``n_clusters`` groups
    and decide whether the merge beats the ``K``-cluster partition ``labels`` ``(n,)``.

    The heads tile at most ``min(sample_per_head * m, max_rows)`` rows (a sample drawn
    with ``rng``; :func:`tile_heads`); the overlap, the linkage and the cuts are computed
    on the same rows (module docstring), so the cost grows with the heads, not with the
    rows. ``weights`` ``(n,)``: the rows' weights counted in rows (module docstring,
    *Sample weights*): the heads ``m`` and the sample are of their total, not of ``n``.
    ``force``: keep the merge whatever the cuts say. ``proba``: the ``K``-head
    fit's posterior on the rows ``(n, K)``; when given (and not ``force``), the merge is
    skipped before any head is tiled, and ``rng`` is not drawn from, if
    :func:`posterior_cut` is below ``settings.skip_cut`` (module docstring). ``count_up_to``
    (``n_clusters="auto"``, whose ``K`` counts the modes of Gaussian components: its
    ``max_clusters``):
    the heads may hold from 2 to ``max(K, count_up_to)`` clusters
    (:mod:`~attnclust.cluster.head_count`; not with ``force``; tiled for one component,
    ``K = 1``, and on one feature too); 0: ``K`` clusters.

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
    'not merged: the 2 clusters barely overlap (normalized cut of their posterior 0 < 0.03)'
    >>> z = cluster_membership(X, res).argmax(1)
    >>> bool(np.all(z[:300] == z[0]) and np.all(z[300:] != z[0]))
    True

    Eight convex cells across the two rings (a count of Gaussian components, with their
    soft posterior: each row's angle from the cells' middles), and the heads' two clusters:

    >>> cells = (np.arctan2(X[:, 1], X[:, 0]) // (np.pi / 4)).astype(int) + 4
    >>> gap = np.angle(np.exp(1j * (np.arctan2(X[:, 1], X[:, 0])[:, None]
    ...                             - (np.arange(8) - 3.5) * np.pi / 4)))
    >>> P = np.exp(-gap ** 2 / (2 * 0.3 ** 2))
    >>> P /= P.sum(1, keepdims=True)
    >>> res = merge_heads(X, cells, 8, rng=np.random.default_rng(0), count_up_to=8, proba=P)
    >>> res.merged, int(res.head_labels.max()) + 1
    (True, 2)
    """
    n, K = X.shape[0], int(n_clusters)
    counts = count_up_to > 0 and not force
    weights = None if weights is None else weights_in_rows(weights)
    units = n if weights is None else int(round(float(weights.sum())))   # rows they count

    def not_tiled(reason: str, cut_kept: float = np.nan) -> HeadMerge:
        return HeadMerge(np.empty((0, X.shape[1])), np.empty(0, np.int64), np.nan, False,
                         np.nan, cut_kept, "not merged: " + reason)
    m = n_heads(K, min(units, settings.max_rows), settings)  # at most one per rows_per_head
    if m <= K:
        return not_tiled(f"{units} rows give no more heads than clusters ({m} <= {K})")
    barely = None if force else _no_merge_at(K, X.shape[1], proba, weights, settings)
    if barely is not None and not (counts and barely[2]):
        return not_tiled(*barely[:2])
    cap = min(settings.max_rows, settings.sample_per_head * m)
    sampled = min(units, cap)
    splits = _splits(sampled, X.shape[1], K, settings.split_rows)
    if not (splits or counts or force):
        return not_tiled(f"{sampled} sampled rows are fewer than {settings.split_rows:g} "
                         f"per parameter of {2 * K} full-covariance components (split gain)")
    take, places, tiles = _sampled_tiles(X, weights, cap, K, rng, settings)
    m = n_heads(K, places, settings) if tiles is None else len(tiles.heads)
    if m <= K:
        return not_tiled(f"{places} distinct sampled rows give no more heads than clusters "
                         f"({m} <= {K})")
    S, w, heads, d2, nearest, sizes = tiles
    z = np.asarray(labels)[take]
    spread = float(np.average(d2[np.arange(len(S)), nearest], weights=w))
    # rows_per_head distinct rows per head leave a spread; floored all the same, as the
    # fit's lambda is, at 1e-12 times the rows' mean squared distance from their mean (1
    # when that is 0), for rows that differ only in their last digits
    scatter = float(np.average(((S - np.average(S, 0, weights=w)) ** 2).sum(1), weights=w))
    variance = settings.temperature * max(spread, 1e-12 * (scatter if scatter > 0 else 1.0))
    A = head_attention(S, heads, variance, squared=d2)
    overlap = head_overlap(A, w)
    similarity = head_similarity(overlap)
    head_labels = gini_linkage(similarity, sizes, K, gini_threshold=settings.gini_threshold,
                               linkage=settings.linkage)
    kept = majority_labels(nearest, z, m, K, w)
    cut_merged, cut_kept = normalized_cut(overlap, head_labels), normalized_cut(overlap, kept)
    components = A @ np.eye(K)[kept]          # each component's membership, read on the heads
    redraw = adjusted_rand(z, components.argmax(1), w)
    cutting = cut_kept >= settings.cut_floor     # below it the fit's cells cut nothing
    lower = cut_merged < settings.cut_ratio * cut_kept
    seen = redraw >= settings.min_redraw
    found = None
    if counts and seen:
        wide = variance * settings.count_temperature / settings.temperature
        # the components' posterior: the fit's, else their membership read on the heads
        P = components if proba is None else np.asarray(proba, np.float64)[take]
        found = counted_clusters(tiles, wide, kept, K, P, rng, settings, max(K, count_up_to))
        if not isinstance(found, str):
            labels_c, cut_c, cut_convex, reason = found
            return HeadMerge(heads, labels_c, wide, True, cut_c, cut_convex, reason, redraw)
    unseen = (f"; the heads redraw the {K}-head fit's partition at ARI {redraw:.2f}, below "
              f"{settings.min_redraw:g}: they do not see what it sees")
    if barely is not None:
        why, cut = barely[:2]
        why += (f"; no other count of clusters: {found}" if found is not None else
                unseen if counts else "")
        return not_tiled(why, cut)
    gain = np.nan                                       # read only where it can decide
    if seen and (cutting or lower) and cut_merged < cut_kept and not force:
        rows = np.asarray(X[take], dtype=np.float64)      # on their grid, as the fit's
        gain = split_gain(rows, w, z, heads, nearest, K, rng) if splits else -np.inf
    merged, reason = _verdict(force, seen, lower, gain, settings, m, K, cut_merged, cut_kept)
    if not (force or seen):
        reason += unseen
    if isinstance(found, str):
        reason += f"; no other count of clusters: {found}"
    return HeadMerge(heads, head_labels, variance, merged, cut_merged, cut_kept, reason, redraw)


def sample_rows(n: int, weights: np.ndarray | None, cap: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """The merge's sample of at most ``cap`` of ``n`` rows of ``weights`` ``(n,)`` (counted
    in rows: :func:`weights_in_rows`), drawn with ``rng``: the sampled rows' indices,
    sorted, and their weights. Unweighted, ``cap`` rows drawn without replacement;
    weighted, ``cap`` rows of the weights' total, each sampled row weighing its copies in
    the draw (:func:`~attnclust.cluster.head_graph.draw_copies`: for integer weights, the
    law of the repeated rows' draw).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> take, w = sample_rows(5, None, 3, rng)
    >>> len(take), w
    (3, None)
    >>> take, w = sample_rows(3, np.array([0.0, 2.0, 5.0]), 4, rng)
    >>> int(w.sum()), bool(np.all(w <= np.array([0.0, 2.0, 5.0])[take]))
    (4, True)
    """
    if weights is None:
        return (np.sort(rng.choice(n, cap, replace=False)) if n > cap else np.arange(n)), None
    if not weights.sum() > cap:
        return np.arange(n), weights
    copies = draw_copies(weights, cap, rng)
    take = np.flatnonzero(copies)
    return take, copies[take].astype(np.float64)


def _no_merge_at(K: int, d: int, proba: np.ndarray | None, weights: np.ndarray | None,
                 settings: MergeSettings) -> tuple[str, float, bool] | None:
    """Why no merge into ``K`` clusters is taken on rows of ``d`` features, the fit's cut,
    and whether the heads may still count clusters; or ``None``: one cluster has no two
    to merge (they may); the ``K`` clusters barely overlap (the :func:`posterior_cut` of
    their posterior ``proba`` ``(n, K)``: no head is tiled); on one feature a cluster of
    heads is an interval (module docstring; they may)."""
    if K == 1:
        return "one cluster, no two to merge", 0.0, True
    if proba is not None and settings.skip_cut > 0:
        cut = posterior_cut(proba, weights)
        if cut < settings.skip_cut:
            return (f"the {K} clusters barely overlap (normalized cut of their posterior "
                    f"{cut:.3g} < {settings.skip_cut:g})", cut, False)
    if d == 1:
        return (f"one feature: a cluster of heads on a line is an interval, which the "
                f"{K}-head fit's cells draw too", np.nan, True)
    return None


def _sampled_tiles(X, weights, cap: int, K: int, rng: np.random.Generator,
                   settings: MergeSettings) -> tuple[np.ndarray, int, HeadTiles | None]:
    """The merge's sample of at most ``cap`` rows of ``X`` (:func:`sample_rows`): its
    rows' indices, its count of distinct rows of positive weight (a repeated row is one
    place to tile) and the heads tiled on it, one per ``rows_per_head`` places (``None``
    where that is not more than ``K``; fewer heads where the seeds' pool holds fewer),
    its columns on a coarse grid spread over their cells
    (:func:`~attnclust.cluster.head_graph.dequantized`)."""
    take, w = sample_rows(X.shape[0], weights, cap, rng)
    rows = np.asarray(X[take], dtype=np.float64)
    places = distinct_rows(rows if w is None else rows[w > 0])
    m = n_heads(K, places, settings)
    if m <= K:
        return take, places, None
    return take, places, _tiles(dequantized(rows, rng, settings.grid_variance), w, m, rng,
                                settings)


def _tiles(S: np.ndarray, w: np.ndarray | None, m: int, rng: np.random.Generator,
           settings: MergeSettings) -> HeadTiles:
    """``m`` heads tiled on the sampled rows ``S`` ``(n, d)`` of weights ``w``, with the
    rows' squared distances to them, each row's nearest head and each head's rows."""
    heads = tile_heads(S, m, rng, max_iter=settings.max_iter, weights=w)
    d2 = squared_distances(S, heads)                        # (n, m)
    nearest = d2.argmin(1)
    return HeadTiles(S, w, heads, d2, nearest, np.bincount(nearest, weights=w,
                                                           minlength=len(heads)))


def _verdict(force, seen, lower, gain, settings, m, K, cut_merged, cut_kept) -> tuple[bool, str]:
    """Whether the merge is kept (module docstring, *When to merge*), and why in words."""
    under_fit = gain > settings.min_split_gain            # False when not read (nan, -inf)
    merged = bool(force or (seen and ((lower and gain > settings.split_gain_floor) or under_fit)))
    why = "merge_heads=True; against" if force else "below" if under_fit and not lower else \
        f"{'below' if lower else 'not below'} {settings.cut_ratio:g} times"
    reason = (f"{'merged' if merged else 'not merged'}: {m} heads into {K} clusters, "
              f"normalized cut of the heads' overlap {cut_merged:.4g} ({why} the {K}-head "
              f"fit's {cut_kept:.4g})")
    if np.isfinite(gain):
        if under_fit:
            level = f"above {settings.min_split_gain:g}: the {K} components under-fit the rows"
        elif gain > settings.split_gain_floor:
            level = f"not above {settings.min_split_gain:g}"
        else:
            level = f"not above {settings.split_gain_floor:g}: the {K} components fit the rows"
        reason += f"; split gain {gain:.3g} per row ({level})"
    elif gain == -np.inf:
        reason += f"; no split gain: too few heads or rows for {2 * K} components"
    return merged, reason


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
    A = head_attention(X, merge.heads, merge.variance, squared=squared)
    K = int(merge.head_labels.max()) + 1
    return A @ np.eye(K)[merge.head_labels]


def cluster_argmax(logits: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's cluster of largest summed attention, ``argmax_c sum_{h in c} exp g_h``,
    and its top logit ``max_h g_h``, both ``(n,)``, from its heads' logits ``g`` ``(n, m)``
    (up to a constant of the row) whose columns are grouped by cluster: the first
    ``sizes[0]`` heads are cluster 0's, and so on. Ties: the first cluster.

    With ``M_c`` the largest logit of cluster ``c``'s ``m_c`` heads, the cluster ``c*`` of
    the top head sums at least ``exp M_c*`` and any other at most ``m_c exp M_c``: where
    ``M_c + log m_c < M_c* - 0.001`` for every ``c != c*``, the label is ``c*`` without an
    exponential. Only the other rows (near a border between clusters) sum their heads'
    attention, so that on many rows this costs a fraction of the sums.

    Examples
    --------
    >>> g = np.array([[0.0, -1.0, -9.0], [-2.0, -2.0, -1.5], [-9.0, -8.0, 0.0]])
    >>> labels, top = cluster_argmax(g, np.array([2, 1]))
    >>> labels.tolist(), top.tolist()     # row 1: two heads' 2 e^-2 = 0.27 > e^-1.5 = 0.22
    ([0, 0, 1], [0.0, -1.5, 0.0])
    """
    held = np.flatnonzero(sizes)                       # a cluster without heads wins no row
    starts = np.cumsum(sizes)[held] - sizes[held]
    best = np.maximum.reduceat(logits, starts, axis=1)         # M_c, (n, clusters held)
    rows = np.arange(len(logits))
    first = best.argmax(1)
    top = best[rows, first]
    rival = best + np.log(sizes[held])
    rival[rows, first] = -np.inf
    near = np.flatnonzero(rival.max(1, initial=-np.inf) >= top - 1e-3)
    if len(near):                       # the sums, where another cluster may win
        attention = np.exp(logits[near] - top[near, None])
        first[near] = np.add.reduceat(attention, starts, axis=1).argmax(1)
    return held[first], top


def cluster_labels(X: np.ndarray, merge: HeadMerge) -> tuple[np.ndarray, np.ndarray]:
    """Each row's cluster of largest membership, ``argmax_c p_c(x)``
    (:func:`cluster_argmax`: :func:`cluster_membership`'s argmax at a fraction of its cost
    on many rows), and its squared distance to its nearest head, both ``(n,)``.

    Examples
    --------
    >>> merge = HeadMerge(np.array([[0.0], [1.0], [5.0]]), np.array([0, 0, 1]), 0.5,
    ...                   True, 0.0, 1.0, "")
    >>> X = np.array([[0.5], [3.0], [5.0]])
    >>> labels, nearest = cluster_labels(X, merge)
    >>> labels.tolist(), nearest.tolist()
    ([0, 0, 1], [0.25, 4.0, 0.0])
    >>> labels.tolist() == cluster_membership(X, merge).argmax(1).tolist()
    True
    """
    X = np.asarray(X, dtype=np.float64)
    order = np.argsort(merge.head_labels, kind="stable")      # heads grouped by cluster
    heads, v = merge.heads[order], merge.variance
    logits = X @ (heads.T / v)                    # -||x - mu_h||^2 / 2v + ||x||^2 / 2v
    logits -= np.einsum("md,md->m", heads, heads) / (2.0 * v)
    labels, top = cluster_argmax(logits, np.bincount(merge.head_labels))
    return labels, np.maximum(np.einsum("nd,nd->n", X, X) - 2.0 * v * top, 0.0)

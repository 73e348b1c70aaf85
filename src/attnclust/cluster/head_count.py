"""How many clusters the heads hold (``n_clusters="auto"``): the count of clusters of
the heads' graph (:mod:`attnclust.cluster.head_graph`), against the ``K`` Gaussian
components of least BIC (:mod:`attnclust.cluster.choice.k_choice`), which count a crescent
or a ring as several components, and concentric rings as one or two (``K = 1`` where the
gap test's k-means cells see no structure in them and one component has the least BIC
by strong evidence).

The merge (:mod:`attnclust.cluster.merge`) tiles the rows with heads (here also for one
component, ``K = 1``); their overlap is read again at a wider attention, ``t =
count_temperature`` (default 4), so that a chain of heads along a thin shape holds
together (at 2, 150 heads parted the tests' two rings and two spirals on some seeds); its
Genie linkage at each count ``C = 2..C_max + 1`` (``C_max = max(K, max_clusters)``) has
the normalized cut ``N(C)``, and the heads hold

    C* = argmax_{2 <= C <= C_max} (N(C + 1) + f) / (N(C) + f),     f = cut_floor (3e-4)

clusters: the count after which the cut rises most (a cut below ``f`` counts as none;
:func:`cluster_count`). ``C* = K``: the components are the clusters. Another count is
kept only where the heads redraw the ``K``-head fit's partition (``min_redraw``, as for
the merge), the cut at least doubles there (``min_rise``, default 2; the checks below do
the rest: ``AttentionClustering("auto", max_clusters=max(10, 2 K),
merge_heads=MergeSettings(min_rise=r))`` on the development battery's 95 sets with 2-12
clusters, seeds 0-4, gave the same counts for ``r`` = 1, 1.5, 2 and 3, while 5 kept four
concentric rings, ``dartboard1``, whose rise is 3.5-4.6 on 3 seeds, at one cluster), and:

More clusters than components, ``C* > K``, only where they are a shape convex cells cut
through: ``N(C*)`` below ``count_cut_ratio`` times the cut of ``C*`` k-means cells of the rows
read on the heads (concentric rings), and the last condition below holds.

Fewer clusters than components, ``C* < K``, only where

- ``N(C*)`` is below ``count_cut_ratio`` times the cut of the ``K`` components read on the
  same heads (merging them must remove what they cut);
- the merged clusters are what convex cells cannot draw: ``N(C*)`` below ``count_cut_ratio``
  times the cut of ``C*`` k-means cells of the rows read on the heads (a shape), or both
  below ``f`` (clusters apart, each of several Gaussian components: two long crescents);
- and the components each cluster joins share their rows as pieces of one body do: in
  every cluster of two components or more, the mean over its components ``c`` of
  ``sum_{c' != c} Q_cc' / sum_c' Q_cc'`` (``Q = P^T W P``, ``P`` the ``K``-head fit's
  posterior, else the components' membership read on the heads) is at least
  ``min_shared`` (default 0.015; the shapes of the development battery and the tests'
  generators shared 0.017-0.11, touching Gaussian blobs 0.011-0.016).

Else the ``K`` components are the clusters, merged or not as the merge decides.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .head_graph import (
    gini_linkage,
    head_attention,
    head_overlap,
    head_similarity,
    majority_labels,
    normalized_cut,
)
from .kmeans.batch import best_of_seedings
from .settings import MergeSettings

__all__ = ["HeadCount", "HeadTiles", "cluster_count", "counted_clusters"]


class HeadCount(NamedTuple):
    """The count of clusters of the heads' graph (:func:`cluster_count`)."""

    count: int
    """``C*``, at most ``most``."""
    cuts: dict[int, float]
    """``N(C)`` of the Genie linkage at ``C = 2..most + 1`` (those the ``m`` heads allow)."""
    rise: float
    """``(N(C* + 1) + f) / (N(C*) + f)``; 0 where the heads allow no rise."""
    labels: np.ndarray | None
    """The heads' clusters at ``C*`` ``(m,)``; ``None`` where the heads allow no rise."""


def cluster_count(overlap: np.ndarray, similarity: np.ndarray, sizes, most: int, *,
                  settings: MergeSettings = MergeSettings()) -> HeadCount:
    """The number of clusters the heads' graph holds, at most ``most`` (module docstring):
    the count ``C`` in ``2..most`` after which the normalized cut of
    the heads' Genie linkage rises most, ``(N(C + 1) + f) / (N(C) + f)`` with ``f =
    settings.cut_floor`` (ties: the larger ``C``; ``most`` where the ``m`` heads allow no
    rise).

    Examples
    --------
    >>> O = np.kron(np.eye(2), np.ones((3, 3)))   # two groups of three heads, no overlap
    >>> O[2, 3] = O[3, 2] = 0.01                  # but one faint link
    >>> found = cluster_count(O, O / 1.0, [1] * 6, 4)
    >>> found.count, [round(found.cuts[c], 4) for c in (2, 3)], found.labels.tolist()
    (2, [0.0022, 1.0022], [0, 0, 0, 1, 1, 1])
    """
    cuts, partitions = {}, {}
    for C in range(2, min(int(most) + 1, len(overlap)) + 1):
        partitions[C] = gini_linkage(similarity, sizes, C, gini_threshold=settings.gini_threshold,
                                     linkage=settings.linkage)
        cuts[C] = normalized_cut(overlap, partitions[C])
    f = settings.cut_floor
    rises = {C: (cuts[C + 1] + f) / (cuts[C] + f) for C in cuts if C + 1 in cuts}
    if not rises:
        return HeadCount(int(most), cuts, 0.0, None)
    count = max(rises, key=lambda C: (rises[C], C))
    return HeadCount(count, cuts, rises[count], partitions[count])


class HeadTiles(NamedTuple):
    """The merge's sampled rows ``(n, d)``, their weights, the heads ``(m, d)``, the rows'
    squared distances to them ``(n, m)``, each row's nearest head and each head's rows."""

    rows: np.ndarray
    weights: np.ndarray | None
    heads: np.ndarray
    squared: np.ndarray
    nearest: np.ndarray
    sizes: np.ndarray


def _least_shared(P, kept, labels, count, sizes, w) -> float:
    """The least share of their rows that the components joined into one cluster give each
    other: for each cluster of two components or more, the mean over its components
    ``c`` of ``sum_{c' != c in it} Q_cc' / sum_c' Q_cc'``, ``Q = P^T W P`` (a component is
    in the cluster of most of its heads' rows; one that holds no head is in none); ``inf``
    when every cluster is one component."""
    K = P.shape[1]
    votes = np.bincount(kept * count + labels, weights=sizes,
                        minlength=K * count).reshape(K, count)
    group = np.where(votes.sum(1) > 0, votes.argmax(1), -1)   # a component with no head: none
    Q = P.T @ (P if w is None else P * w[:, None])
    volume = np.maximum(Q.sum(1), np.finfo(np.float64).tiny)
    least = np.inf
    for g in range(count):
        inside = np.flatnonzero(group == g)
        if len(inside) > 1:
            share = (Q[np.ix_(inside, inside)].sum(1) - np.diag(Q)[inside]) / volume[inside]
            least = min(least, float(share.mean()))
    return least


def counted_clusters(tiles: HeadTiles, variance: float, kept: np.ndarray, K: int,
                    posterior: np.ndarray, rng: np.random.Generator, settings: MergeSettings,
                    most: int) -> tuple[np.ndarray, float, float, str] | str:
    """The heads' clusters where they hold another count than the ``K`` components, at most
    ``most`` (module docstring) of the heads' attention at ``variance`` (``kept``: each
    head's component; ``posterior``: the components' posterior on the tiles' rows, ``(n,
    K)``): ``(head_labels, ncut_merged, ncut_convex, reason)``, or why not in words when
    the heads hold ``K`` clusters, or the components or convex cells cut them as well."""
    S, w, heads, d2, nearest, sizes = tiles
    overlap = head_overlap(head_attention(S, heads, variance, squared=d2), w)
    similarity = head_similarity(overlap)
    count, cuts, rise, labels = cluster_count(overlap, similarity, sizes, most, settings=settings)
    floor = settings.cut_floor
    if count == K:
        return f"the heads' cut rises most from {K} to {K + 1} clusters (x{rise:.3g})"
    if rise < settings.min_rise:
        return (f"the heads' cut rises most from {count} to {count + 1} clusters, x{rise:.3g} "
                f"< {settings.min_rise:g}")
    components = normalized_cut(overlap, kept) if count < K else np.nan
    if count < K and not cuts[count] < settings.count_cut_ratio * components:
        return (f"{count} clusters of the heads cut {cuts[count]:.4g}, not below "
                f"{settings.count_cut_ratio:g} times the {K} components' {components:.4g}")
    cells = best_of_seedings(S, count, 3, rng, weights=w)
    convex = normalized_cut(overlap, majority_labels(nearest, np.asarray(cells.labels), len(
        overlap), count, w))
    merged = cuts[count]
    shape = merged < settings.count_cut_ratio * convex
    if count > K and not shape:
        return (f"{count} clusters of the heads cut {merged:.4g}, not below "
                f"{settings.count_cut_ratio:g} times that of {count} k-means cells, {convex:.4g}")
    if shape:
        why = (f"below {settings.count_cut_ratio:g} times that of {count} k-means cells, "
               f"{convex:.4g}: a shape convex cells cut through")
    elif max(merged, convex) < floor:
        why = (f"below {floor:g}, as is that of {count} k-means cells, {convex:.4g}: "
               f"clusters apart, each of several Gaussian components")
    else:
        return (f"{count} clusters of the heads cut {merged:.4g}, as {count} k-means cells "
                f"do ({convex:.4g})")
    joined = _least_shared(posterior, kept, labels, count, sizes, w)
    if joined < settings.min_shared:
        return (f"the components the heads join share {joined:.3g} of their rows, below "
                f"{settings.min_shared:g}: Gaussian clusters that touch")
    shared = "" if np.isinf(joined) else \
        f"; the components each cluster joins share {joined:.3g} of their rows or more"
    return (labels, merged, convex,
            f"merged: {len(overlap)} heads of {K} component{'s' * (K > 1)} into {count} "
            f"clusters, where the normalized cut of the heads' overlap rises most "
            f"(x{rise:.3g} from {count} to {count + 1} clusters); their cut {merged:.4g} is "
            f"{why}{shared}")

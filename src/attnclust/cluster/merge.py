"""Clusters made of several heads: more heads than clusters, merged where the data say so.

A mixture of ``K`` Gaussian heads draws ``K`` convex cells; a ring, a crescent or a
spiral is no such cell. Here ``m = max(6 K, 150) > K`` small spherical heads (at most
one per 5 sampled rows) tile 14 sampled rows per head, and the heads whose attention
overlaps are joined into ``K`` clusters, each a union of heads:

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
(a uniform background beside each, a few EM steps on the standardized sample; the ``2 K``
started from k-means cells of the heads: :func:`split_gain`). A BIC lower with twice the
components says that the ``K`` clusters are not Gaussian. The merge is kept

- where the merged cut is below ``cut_ratio`` (default 0.05) times the fit's and ``g``
  above ``split_gain_floor`` (default -1: ``K`` components not by far the better), or
- where the merged cut is below the fit's and ``g`` above ``min_split_gain`` (default
  0.05: the ``K`` components under-fit the rows),

and never where the fit's cut is below ``cut_floor`` (it cuts nothing: clusters apart).
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

**Not when the K clusters barely overlap.** Before any head is tiled, the fit's posterior
``P`` ``(n, K)`` on the sampled rows gives the normalized cut of ``Q = P^T W P``:

    Ncut_K = sum_c (1 - Q_cc / vol_c),   vol_c = sum_i w_i P_ic.

Where it is below ``skip_cut`` (default 0.03) the clusters barely share a row: skipped.

**How many clusters** (``n_clusters="auto"``, whose ``K`` counts the Gaussian components
of least BIC, :mod:`attnclust.cluster.choice.k_choice`: a crescent or a ring takes several).
The heads' overlap is read again at a wider attention, ``t = count_temperature`` (default
4), so that a chain of heads along a thin shape holds together (at 2, 150 heads parted
the tests' two rings and two spirals on some seeds); its Genie linkage at each count
``C = 2..K + 1`` has the normalized cut ``N(C)``, and the heads hold

    C* = argmax_{2 <= C <= K} (N(C + 1) + f) / (N(C) + f),     f = cut_floor (3e-4)

clusters: the count after which the cut rises most (a cut below ``f`` counts as none).
Fewer clusters than components, ``C* < K``, are kept only where

- the rise is at least ``min_rise`` (default 5: below it, touching Gaussian clusters
  were counted as few as shapes on the development battery);
- the heads redraw the ``K``-head fit (``min_redraw``), and ``N(C*)`` is below
  ``cut_ratio`` times the cut of the ``K`` components read on the same heads (merging
  them must remove what they cut);
- the merged clusters are what convex cells cannot draw: ``N(C*)`` below ``cut_ratio``
  times the cut of ``C*`` k-means cells of the rows read on the heads (a shape), or both
  below ``f`` (clusters apart, each of several Gaussian components: two long crescents);
- and the components each cluster joins share their rows as pieces of one body do: in
  every cluster of two components or more, the mean over its components ``c`` of
  ``sum_{c' != c} Q_cc' / sum_c' Q_cc'`` (``Q = P^T W P``, ``P`` the ``K``-head fit's
  posterior, else the components' membership read on the heads) is at least
  ``min_shared`` (default 0.015; the shapes of the development battery and the tests'
  generators shared 0.017-0.11, touching Gaussian blobs 0.011-0.016).

Else the ``K`` components are the clusters, merged or not as above (in the rows' units).

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

from .choice.k_choice import bic_gain
from .head_graph import (
    adjusted_rand,
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
from .settings import FitSettings

__all__ = ["MergeSettings", "HeadMerge", "HeadCount", "n_heads", "squared_distances", "tile_heads",
           "head_attention", "head_overlap", "head_similarity",
           "gini_index", "gini_linkage", "normalized_cut", "majority_labels", "adjusted_rand",
           "posterior_cut", "cluster_count", "split_gain", "merge_heads",
           "cluster_membership"]

_LINKAGES = ("single", "average")
_NUMBER = (int, float, np.integer, np.floating)
_CHECKS = (   # MergeSettings' fields: (names, what they must be, the test)
    (("heads_per_cluster", "min_heads", "rows_per_head", "sample_per_head", "max_rows",
      "max_iter"), "an integer >= 1", lambda v: isinstance(v, (int, np.integer)) and v >= 1),
    (("temperature", "cut_ratio", "count_temperature", "cut_floor", "min_rise", "min_shared",
      "split_rows"), "a positive number", lambda v: v > 0),
    (("gini_threshold",), "in [0, 1]", lambda v: 0 <= v <= 1),
    (("skip_cut",), "a number >= 0", lambda v: v >= 0),
    (("min_redraw",), "in [-1, 1]", lambda v: -1 <= v <= 1),
    (("min_split_gain", "split_gain_floor"), "a finite number",
     lambda v: bool(np.isfinite(v))),
)


@dataclasses.dataclass(frozen=True)
class MergeSettings:
    """The settings of a merge of heads into clusters (:func:`merge_heads`).

    Parameters
    ----------
    heads_per_cluster, min_heads, rows_per_head : int
        ``m = min(max(heads_per_cluster * K, min_heads), min(n, max_rows) // rows_per_head)``
        (defaults 6, 150 and 5); no merge when that is not more than ``K``. Finer heads
        trace shapes more closely (the guide, *Clusters of any shape*).
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
        ``K``-head fit's (default 0.05) and the split gain is above ``split_gain_floor``,
        or when its cut is below the fit's and the split gain above ``min_split_gain``.
    min_split_gain, split_gain_floor, split_rows : float
        The per-row BIC gain of ``2 K`` Gaussian components over ``K`` (:func:`split_gain`)
        above which the ``K`` components under-fit the rows (default 0.05), below which
        they fit them so much better that no merge is taken (default -1), and the sampled
        rows per parameter of the ``2 K`` components it needs (default 2; with fewer, EM
        fits the covariance floor, not the rows, and no merge is taken: no heads tiled).
    min_redraw : float
        The merge is considered only when the heads redraw the ``K``-head fit's
        partition at an adjusted Rand index of at least ``min_redraw`` (default 0.6; 0
        turns the check off).
    skip_cut : float
        The merge is skipped, before any head is tiled, when the normalized cut of the
        ``K``-head fit's own posterior overlap (:func:`posterior_cut`) is below
        ``skip_cut`` (default 0.03; 0 turns the check off).
    count_temperature, cut_floor, min_rise, min_shared : float
        With ``n_clusters="auto"`` (module docstring, *How many clusters*): the heads'
        count of clusters reads their overlap at ``t = count_temperature`` (default 4: a
        wider attention than the merge's, so that chains of heads along a thin shape do not
        part at their sparser links); a normalized cut below ``cut_floor`` counts as none
        (default 3e-4: in the rise of the cut from one count to the next, where merged and
        convex cells both separate the clusters, and in the fit's cut at ``K``); fewer
        clusters than components only where that rise is at least ``min_rise`` (default 5)
        and the components joined into one cluster share at least ``min_shared`` of their
        rows (default 0.015).

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
    min_heads: int = 150
    rows_per_head: int = 5
    sample_per_head: int = 14
    max_rows: int = 3000
    max_iter: int = 5
    temperature: float = 0.5
    gini_threshold: float = 0.3
    linkage: str = "single"
    cut_ratio: float = 0.05
    min_redraw: float = 0.6
    skip_cut: float = 0.03
    count_temperature: float = 4.0
    cut_floor: float = 3e-4
    min_rise: float = 5.0
    min_shared: float = 0.015
    min_split_gain: float = 0.05
    split_gain_floor: float = -1.0
    split_rows: float = 2.0

    def __post_init__(self):
        for names, what, ok in _CHECKS:
            for name in names:
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, _NUMBER) or not ok(value):
                    raise ValueError(f"{name} must be {what}, got {value!r}")
        if self.linkage not in _LINKAGES:
            raise ValueError(f"linkage must be one of {_LINKAGES}, got {self.linkage!r}")


class HeadMerge(NamedTuple):
    """A merge of heads (:func:`merge_heads`): the heads ``(m, d)``, the cluster of each
    ``(m,)``, the attention's variance, whether the merged partition was kept, the two
    normalized cuts compared, the reason in words and how well the heads redraw the
    ``K``-head fit's partition (an adjusted Rand index). When ``merged`` is false the heads
    still carry the merged partition that was turned down (``head_labels``). Merged into
    fewer clusters than ``K`` (``n_clusters="auto"``), the variance is the count's wider
    one (``count_temperature``), and ``ncut_kept`` the cut of as many k-means cells."""

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
    """The number of clusters the heads' graph holds, at most ``most`` (module docstring,
    *How many clusters*): the count ``C`` in ``2..most`` after which the normalized cut of
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


def split_gain(S: np.ndarray, weights: np.ndarray | None, labels: np.ndarray,
               heads: np.ndarray, nearest: np.ndarray, n_clusters: int,
               rng: np.random.Generator) -> float:
    """``g``, the split gain of ``2 K`` components over the fit's ``K`` on the merge's rows
    ``S`` ``(n, d)`` (module docstring, *When to merge*;
    :func:`~attnclust.cluster.choice.k_choice.bic_gain`): ``K`` components from the fit's
    ``labels`` ``(n,)``, ``2 K`` from k-means cells of the ``heads`` ``(m, d)``, each row in
    the cell of its ``nearest`` head; ``-inf`` (no evidence) where the heads allow no
    ``2 K`` cells.

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
                proba: np.ndarray | None = None, fewer: bool = False) -> HeadMerge:
    """Fit ``m`` heads to the rows ``X`` ``(n, d)``, merge them into ``n_clusters`` groups
    and decide whether the merge beats the ``K``-cluster partition ``labels`` ``(n,)``.

    The heads tile at most ``min(sample_per_head * m, max_rows)`` rows (a sample drawn
    with ``rng``; :func:`tile_heads`); the overlap, the linkage and the cuts are computed
    on the same rows (module docstring), so the cost grows with the heads, not with the
    rows. ``force``: keep the merge whatever the cuts say. ``proba``: the ``K``-head
    fit's posterior on the rows ``(n, K)``; when given (and not ``force``), the merge is
    skipped before any head is tiled if :func:`posterior_cut` is below
    ``settings.skip_cut`` (module docstring), and ``rng`` is not drawn from. ``fewer``
    (``n_clusters="auto"``, whose ``K`` counts Gaussian components): the heads may form
    fewer clusters than ``K`` (module docstring, *How many clusters*; not with ``force``).

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
    >>> res = merge_heads(X, cells, 8, rng=np.random.default_rng(0), fewer=True, proba=P)
    >>> res.merged, int(res.head_labels.max()) + 1
    (True, 2)
    """
    n, K = X.shape[0], int(n_clusters)

    def not_tiled(reason: str, cut_kept: float = np.nan) -> HeadMerge:
        return HeadMerge(np.empty((0, X.shape[1])), np.empty(0, np.int64), np.nan, False,
                         np.nan, cut_kept, "not merged: " + reason)
    m = n_heads(K, min(n, settings.max_rows), settings)     # at most one per rows_per_head tiled
    if m <= K:
        return not_tiled(f"{n} rows give no more heads than clusters ({m} <= {K})")
    if proba is not None and not force and settings.skip_cut > 0:
        cut = posterior_cut(proba, weights)
        if cut < settings.skip_cut:
            return not_tiled(f"the {K} clusters barely overlap (normalized cut of their "
                             f"posterior {cut:.3g} < {settings.skip_cut:g})", cut)
    cap = min(settings.max_rows, settings.sample_per_head * m)
    sampled = min(n, cap)
    splits = _splits(sampled, X.shape[1], K, settings.split_rows)
    if not (splits or fewer or force):
        return not_tiled(f"{sampled} sampled rows are fewer than {settings.split_rows:g} "
                         f"per parameter of {2 * K} full-covariance components (split gain)")
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
    A = head_attention(S, heads, variance, squared=d2)
    overlap = head_overlap(A, w)
    sizes = np.bincount(nearest, weights=w, minlength=m)
    similarity = head_similarity(overlap)
    head_labels = gini_linkage(similarity, sizes, K, gini_threshold=settings.gini_threshold,
                               linkage=settings.linkage)
    kept = majority_labels(nearest, z, m, K, w)
    cut_merged, cut_kept = normalized_cut(overlap, head_labels), normalized_cut(overlap, kept)
    components = A @ np.eye(K)[kept]          # each component's membership, read on the heads
    redraw = adjusted_rand(z, components.argmax(1))
    cutting = cut_kept >= settings.cut_floor     # below it the fit's cells cut nothing
    lower = cutting and cut_merged < settings.cut_ratio * cut_kept
    seen = redraw >= settings.min_redraw
    found = None
    if fewer and seen and not force:
        wide = variance * settings.count_temperature / settings.temperature
        # the components' posterior: the fit's, else their membership read on the heads
        P = components if proba is None else np.asarray(proba, np.float64)[take]
        found = _fewer_clusters(_Tiles(S, w, heads, d2, nearest, sizes), wide, kept, K,
                                P, rng, settings)
        if not isinstance(found, str):
            labels_c, cut_c, cut_convex, reason = found
            return HeadMerge(heads, labels_c, wide, True, cut_c, cut_convex, reason, redraw)
    gain = np.nan                                       # read only where it can decide
    if seen and cutting and cut_merged < cut_kept and not force:
        gain = split_gain(S, w, z, heads, nearest, K, rng) if splits else -np.inf
    merged, reason = _verdict(force, seen, lower, gain, settings, m, K, cut_merged, cut_kept)
    if not (force or seen):
        reason += (f"; the heads redraw the {K}-head fit's partition at ARI {redraw:.2f}, "
                   f"below {settings.min_redraw:g}: they do not see what it sees")
    if isinstance(found, str):
        reason += f"; no fewer clusters: {found}"
    return HeadMerge(heads, head_labels, variance, merged, cut_merged, cut_kept, reason, redraw)


def _verdict(force, seen, lower, gain, settings, m, K, cut_merged, cut_kept) -> tuple[bool, str]:
    """Whether the merge is kept (module docstring, *When to merge*), and why in words."""
    under_fit = gain > settings.min_split_gain            # False when not read (nan, -inf)
    merged = bool(force or (seen and ((lower and gain > settings.split_gain_floor) or under_fit)))
    why = "merge_heads=True" if force else "below" if under_fit and not lower else \
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


class _Tiles(NamedTuple):
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


def _fewer_clusters(tiles: _Tiles, variance: float, kept: np.ndarray, K: int,
                    posterior: np.ndarray, rng: np.random.Generator, settings: MergeSettings):
    """The merge into fewer clusters than the ``K`` components (module docstring, *How many
    clusters*) of the heads' attention at ``variance`` (``kept``: each head's component;
    ``posterior``: the components' posterior on the tiles' rows, ``(n, K)``):
    ``(head_labels, ncut_merged, ncut_convex, reason)``, or why not in words when the
    heads hold ``K`` clusters, or the components or convex cells cut them as well."""
    S, w, heads, d2, nearest, sizes = tiles
    overlap = head_overlap(head_attention(S, heads, variance, squared=d2), w)
    similarity = head_similarity(overlap)
    count, cuts, rise, labels = cluster_count(overlap, similarity, sizes, K, settings=settings)
    floor = settings.cut_floor
    components = normalized_cut(overlap, kept)
    if count == K:
        return f"the heads' cut rises most from {K} to {K + 1} clusters (x{rise:.3g})"
    if rise < settings.min_rise:
        return (f"the heads' cut rises most from {count} to {count + 1} clusters, x{rise:.3g} "
                f"< {settings.min_rise:g}")
    if not cuts[count] < settings.cut_ratio * components:
        return (f"{count} clusters of the heads cut {cuts[count]:.4g}, not below "
                f"{settings.cut_ratio:g} times the {K} components' {components:.4g}")
    cells = best_of_seedings(S, count, 3, rng, weights=w)
    convex = normalized_cut(overlap, majority_labels(nearest, np.asarray(cells.labels), len(
        overlap), count, w))
    merged = cuts[count]
    if merged < settings.cut_ratio * convex:
        why = (f"below {settings.cut_ratio:g} times that of {count} k-means cells, "
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
    return (labels, merged, convex,
            f"merged: {len(overlap)} heads of {K} components into {count} clusters, where the "
            f"normalized cut of the heads' overlap rises most (x{rise:.3g} from {count} to "
            f"{count + 1} clusters); their cut {merged:.4g} is {why}; the components each "
            f"cluster joins share {joined:.3g} of their rows or more")


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

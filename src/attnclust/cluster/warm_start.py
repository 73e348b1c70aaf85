"""Warm start of :class:`~attnclust.AttentionClustering`: hard Lloyd steps, the auto lambda.

As ``lambda -> infinity`` the attention of the K-head layer becomes the indicator of the
highest logit (:func:`attnclust.layer.heads.head_logits`), and the fixed-point step of
:mod:`attnclust.cluster.fixed_point` becomes a Lloyd step:

- ``geometry="euclidean"``: cells ``argmin_h ||x - mu_h||``, heads moved to the means of
  their cells (k-means);
- ``geometry="sphere"``: cones ``argmax_h <x, mu_h>``, heads moved to the normalized sums
  of their cones (spherical k-means).

:func:`attnclust.cluster.kmeans.lloyd.hard_lloyd` runs these steps to a stable partition (the
k-means engine, :mod:`attnclust.cluster.kmeans`); ``auto_inverse_temperature`` reads the
inverse temperature off that partition. The softmax of the layer is the E-step of an
equal-weight isotropic Gaussian mixture of variance ``1 / lambda`` (exactly for Euclidean
heads, ``-lambda ||x - mu_h||^2 / 2``; on the sphere because ``||x - mu_h||^2 = ||x||^2 + 1
- 2 <x, mu_h>``), so the rule is ``lambda = 1 / s^2`` with ``s^2`` a within-cluster
variance: the variance *across each cluster's nearest boundary*, the one direction the
softmax has to resolve there (a per-coordinate variance would be dominated by directions
that decide nothing on anisotropic data).

:func:`warm_start` is the estimator's start: ``n_init`` seedings (k-means++, random
directions, or given heads), each followed by hard Lloyd steps, the best of them by the
k-means objective, and with ``inverse_temperature="auto"`` the rule above on a last
Lloyd run (a seeding is then replaced by its Lloyd heads). All of it runs on the
estimator's warm-start sample, which a data-parallel fit assembles on every rank (see
:class:`~attnclust.cluster.rows.WorkingRows`), so it needs no sums over ranks. Rows are read in
chunks of ``chunk`` so that memory stays ``O(chunk K)`` beyond the data. Every function
takes optional ``weights`` ``w_i >= 0`` (the estimator's ``sample_weight``): each sum over
rows becomes ``sum_i w_i (...)``, each count a sum of weights and k-means++ draws seeds
with probability proportional to weight times squared distance, so integer weights act
as repeated rows and zero weights as absent rows.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads, shape ``(K, d)``
``lambda``     return value    inverse temperature of :func:`auto_inverse_temperature`
``P``          ``P``           projections ``X mu^T``, shape ``(n, K)``
=============  ==============  =============================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..layer.geometry import Geometry, as_geometry
from .annealing import anneal_heads
from .kmeans import KMeansResult, hard_labels, hard_lloyd, sample_kmeans
from .kmeans.batch import KMEANS_TOL
from .kmeans.seeding import kmeanspp_batch
from .rows import WorkingRows

__all__ = ["BoundaryVariance", "LloydResult", "WarmStart", "auto_inverse_temperature",
           "auto_lambda", "boundary_variance", "kmeans_lambda", "hard_labels", "hard_lloyd",
           "warm_start"]

_CHUNK = 16_384  # rows per chunk: bounds the (chunk, K) blocks below
# least s^2, relative to the rows' mean squared norm: below it a variance computed from
# second moments is rounding noise of the dtype (and lambda would be unbounded)
_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-6}
_LLOYD_STEPS = 20         # hard Lloyd steps of the warm start (stops when stable)


LloydResult = KMeansResult   # the old name of hard_lloyd's result


def _total(X, weights) -> float:
    return float(X.shape[0]) if weights is None else float(weights.sum())


class BoundaryVariance(NamedTuple):
    """What :func:`boundary_variance` measured."""

    variance: float
    """Pooled within-cluster variance across the nearest boundaries, ``s^2``."""
    floor: float
    """``1e-12`` (float32: ``1e-6``) times the rows' mean squared norm (sphere) or distance
    from their mean (Euclidean), or times 1 when that is zero (all rows equal): the least
    ``s^2`` the rule uses."""


def _cluster_moments(X, heads, labels, chunk, weights=None):
    """Per cluster ``a``: count, ``sum P_ib``, ``sum P_ib^2`` and ``sum P_ia P_ib`` over its
    rows, for every head ``b`` (``(K,)``, then three ``(K, K)``), ``P = X mu^T``, weighted
    by ``weights`` when given.

    These are the entries ``(b, b)`` and ``(a, b)`` of each cluster's ``K x K`` second
    moment of ``P``: all the rule needs, in ``O(n K)`` memory and work beyond ``X mu^T``
    (the whole ``K x K x K`` moment would cost ``n K^2``, which dominates with many heads).
    """
    K = heads.shape[0]
    counts = (torch.bincount(labels, minlength=K).to(X.dtype) if weights is None
              else X.new_zeros(K).index_add_(0, labels, weights))
    sums, squares, cross = X.new_zeros(K, K), X.new_zeros(K, K), X.new_zeros(K, K)
    for s in range(0, X.shape[0], chunk):
        P, z = X[s:s + chunk] @ heads.T, labels[s:s + chunk]   # (m, K), (m,)
        wP = P if weights is None else P * weights[s:s + chunk, None]
        sums.index_add_(0, z, wP)
        squares.index_add_(0, z, wP * P)
        cross.index_add_(0, z, wP * P.gather(1, z[:, None]))  # w_i P_ib P_i,own
    return counts, sums, squares, cross


def boundary_variance(X: torch.Tensor, heads: torch.Tensor, *,
                      geometry: str | Geometry = "sphere", chunk: int = _CHUNK,
                      weights: torch.Tensor | None = None,
                      labels: torch.Tensor | None = None) -> BoundaryVariance:
    """Within-cluster variance across the nearest boundaries (see
    :func:`auto_inverse_temperature`); ``weights`` ``(n,)`` weigh the rows; ``labels``
    ``(n,)``: the rows' nearest heads, when known (computed otherwise)."""
    geometry = as_geometry(geometry)
    if labels is None:
        labels = hard_labels(X, heads, geometry, chunk=chunk)
    K = heads.shape[0]
    counts, sums, squares, cross = _cluster_moments(X, heads, labels, chunk, weights)
    wX = X if weights is None else X * weights[:, None]
    col_sums, sq_norm, n = wX.sum(0), float((wX * X).sum()), _total(X, weights)
    tiny = torch.finfo(X.dtype).tiny          # counts are sums of weights: maybe below 1
    size = counts.clamp_min(tiny)[:, None]
    means = sums / size                                        # (K, K) mean projection
    h = torch.arange(K, device=X.device)
    var = squares / size - means**2                            # var[a, b] = cov_a[b, b]
    cov_own = cross / size - means[h, h][:, None] * means      # cov_a[a, b]
    # the floor's scale: the rows' mean squared norm on the sphere, their mean squared
    # distance from their mean for Euclidean heads (the rule is then translation invariant);
    # rows without any spread (all equal) have no scale of their own: the working unit's
    spread = geometry.spread(sq_norm, col_sums, n)
    floor = _FLOOR[X.dtype] * (spread if spread > 0 else 1.0)
    if K == 1:
        s2 = geometry.one_head_variance(heads, var[:, :, None], counts, sq_norm, n,
                                        X.shape[1])
        return BoundaryVariance(max(s2, 0.0), floor)
    # the nearest other head c_h and the boundary normal mu_c - g2_h mu_h, of norm^2 norm2
    c, g2, norm2 = geometry.nearest_boundary(heads @ heads.T)

    # variance within cluster a of <x, mu_b - g mu_a> = e^T cov_a e, e = e_b - g e_a
    def var_across(a, b):
        return var[a, b] - 2 * g2 * cov_own[a, b] + g2**2 * var[a, a]
    pooled = (counts * var_across(h, c) + counts[c] * var_across(c, h)) \
        / (counts + counts[c]).clamp_min(tiny)
    s2 = float((counts * pooled.clamp_min(0) / norm2).sum()) / n
    return BoundaryVariance(s2, floor)


def auto_inverse_temperature(X: torch.Tensor, heads: torch.Tensor, *,
                             geometry: str | Geometry = "sphere",
                             weights: torch.Tensor | None = None) -> float:
    """``1 / s^2`` with ``s^2`` the within-cluster variance across each head's nearest boundary.

    Clusters are the hard assignments (highest logit). For cluster ``h`` with nearest
    other head ``g``, ``s_h^2`` is the variance within cluster ``h`` of ``<x, u_hg>``, with
    ``u_hg`` the unit normal of the boundary between the two: on the sphere the unit
    tangent at ``mu_h`` pointing to ``mu_g`` (``(mu_g - G_hg mu_h) / sqrt(1 - G_hg^2)``,
    ``G_hg = <mu_h, mu_g>``; the chord ``mu_g - mu_h`` for nearly antipodal heads), for
    Euclidean heads ``(mu_g - mu_h) / ||mu_g - mu_h||``. It is pooled (weighted by cluster
    size) with the same variance of cluster ``g`` along ``u_gh``; ``s^2`` is the mean of
    ``s_h^2`` weighted by cluster size. Only the projections ``P = X mu^T`` are needed:
    the variance along ``u_hg`` follows from each cluster's ``K x K`` covariance of ``P``.
    ``s^2`` is floored at ``1e-12`` (float32: ``1e-6``) times the mean squared norm of the
    rows (Euclidean: their mean squared distance from their mean; 1 when that is zero),
    so ``lambda`` stays finite on duplicated points; with one head (the attention is then
    constant) it is the within-cluster variance of ``P`` (sphere) or per coordinate (Euclidean).

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=20, k=2, sigma=0.1)
    >>> X = torch.as_tensor(mix.sample(20_000, rng=0))
    >>> round(auto_inverse_temperature(X, torch.as_tensor(mix.centroids)), -1)
    100.0
    >>> round(auto_inverse_temperature(X, torch.as_tensor(mix.centroids), geometry="euclidean"), -1)
    100.0
    """
    return auto_lambda(X, heads, geometry, weights)[0]


# -- the estimator's warm start -------------------------------------------------------------
def _kmeans_plusplus(S, K, gen, geometry, weights=None) -> np.ndarray:
    """Greedy k-means++ seeding of ``K`` heads on the rows ``S``: the engine's
    (:func:`~attnclust.cluster.kmeans.seeding.kmeanspp_batch`, one run, in float64), seeds
    drawn with probability proportional to weight times squared distance (a sample holding
    only rows of weight zero is seeded as unweighted). Its draws come from a
    ``RandomState`` seeded off ``gen``: scikit-learn's ``kmeans_plusplus`` draws, which
    this seeding made before it was the engine's, so fits keep their seeds."""
    rng = np.random.RandomState(int(gen.integers(2**31 - 1)))
    w = None if weights is None else weights.cpu().double().numpy()
    return kmeanspp_batch(S.cpu().double().numpy(), K, 1, rng, weights=w)[0]


def _random_directions(S, K, gen, geometry, weights=None) -> np.ndarray:
    """``K`` uniform random directions, as the geometry starts from them."""
    return geometry.init_directions(gen.standard_normal((K, S.shape[1])))


def _anneal_seeding(S, K, gen, geometry, weights=None) -> np.ndarray:
    """The annealing path's heads at ``K`` (cold start, no randomness: ``gen`` unused; the
    rows unweighted)."""
    return anneal_heads(S.double().cpu().numpy(), K, geometry=geometry.name)


_SEEDINGS = {"kmeans++": _kmeans_plusplus, "sphere": _random_directions,   # init="..."
             "anneal": _anneal_seeding}


def _initial_heads(S: torch.Tensor, rows: WorkingRows, init, K: int, geometry: Geometry,
                   gen: np.random.Generator, weights=None) -> torch.Tensor:
    """One seeding (``init``: a name of ``_SEEDINGS`` or heads in the preprocessed space),
    on the set of the geometry, the same on every rank."""
    d = S.shape[1]
    if isinstance(init, str):
        if init not in _SEEDINGS:
            raise ValueError(f"init must be 'kmeans++', 'sphere', 'anneal' or an array, got "
                             f"{init!r}")
        centers = _SEEDINGS[init](S, K, gen, geometry, weights)
    else:
        centers = np.array(init, dtype=np.float64)
        if centers.shape != (K, d):
            raise ValueError(f"init array must have shape (n_clusters, n_features) = "
                             f"{(K, d)}, got {centers.shape}")
        if not np.all(np.isfinite(centers)):
            raise ValueError("init array contains NaN or inf")
        centers = rows.heads_in(centers)
    heads = torch.as_tensor(geometry.start_heads(centers, gen), dtype=S.dtype, device=S.device)
    # every rank computed the same heads; rank 0's copy makes sure they agree bitwise
    return rows.comm.broadcast(heads)


class WarmStart(NamedTuple):
    """Result of :func:`warm_start`, in the working space of the fit."""

    heads: torch.Tensor
    """Starting heads of the solver, ``(K, d)``."""
    inverse_temperature: float | None
    """``1 / s^2`` of :func:`auto_inverse_temperature` (``None`` when not asked for)."""
    capped: bool
    """Whether ``s^2`` was at its floor (clusters without spread)."""
    kmeans: KMeansResult | None = None
    """The k-means of the sample that gave ``heads`` (k-means++ seedings or the annealing
    path's heads, for a geometry whose hard limit is k-means), ``None`` otherwise."""


def warm_start(S: torch.Tensor, rows: WorkingRows, *, init, n_clusters: int, n_init: int,
               geometry: Geometry, gen: np.random.Generator, auto: bool,
               weights: torch.Tensor | None = None, max_iter: int = 300,
               tol: float = KMEANS_TOL) -> WarmStart:
    """The estimator's starting heads and, with ``auto``, its inverse temperature.

    ``S`` is the warm-start sample (working rows, the same on every rank). With
    ``init="kmeans++"`` and a geometry whose hard limit is k-means, the start is the
    k-means of ``S`` of :func:`attnclust.cluster.kmeans.lloyd.sample_kmeans` (``n_init``
    seedings, each run to a stable partition, the best kept); with ``init="anneal"``,
    one such run from the annealing path's heads. Otherwise,
    with ``n_init > 1`` each seeding is followed by hard Lloyd steps and the run of lowest
    objective is kept. With ``auto``, hard Lloyd steps from those heads
    give the partition whose boundary variance sets ``lambda``; a seeding is replaced by
    these Lloyd heads (a warm start), given heads are kept. ``weights``: the sample's
    weights (see the module docstring); ``max_iter``: Lloyd steps per k-means run at most;
    ``tol``: the k-means runs' stopping rule
    (:func:`~attnclust.cluster.kmeans.lloyd.sample_kmeans`).

    Examples
    --------
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.1).sample(400, rng=0)
    >>> rows = WorkingRows.prepare(X, geometry=ac.layer.geometry.Sphere(), comm=None)
    >>> start = warm_start(rows.rows, rows, init="kmeans++", n_clusters=2, n_init=1,
    ...                    geometry=ac.layer.geometry.Sphere(), gen=np.random.default_rng(0),
    ...                    auto=True)
    >>> round(start.inverse_temperature, -1), start.capped
    (100.0, False)
    """
    if isinstance(init, str) and init in ("kmeans++", "anneal") and geometry.kmeans_limit:
        heads = None if init == "kmeans++" else \
            _initial_heads(S, rows, init, n_clusters, geometry, gen, weights)
        return _kmeans_start(S, rows, n_clusters, n_init, geometry, gen, auto, weights,
                             heads, max_iter, tol)

    def seed():
        return _initial_heads(S, rows, init, n_clusters, geometry, gen, weights)
    if n_init == 1:
        heads = seed()
    else:
        runs = [hard_lloyd(S, seed(), _LLOYD_STEPS, geometry=geometry, weights=weights)
                for _ in range(n_init)]
        heads = min(runs, key=lambda run: run.objective).heads
    if not auto:
        return WarmStart(heads, None, False)
    lloyd = hard_lloyd(S, heads, _LLOYD_STEPS, geometry=geometry, weights=weights).heads
    lam, capped = auto_lambda(S, lloyd, geometry, weights)
    return WarmStart(lloyd if isinstance(init, str) else heads, lam, capped)


def auto_lambda(S, heads, geometry, weights, labels=None) -> tuple[float, bool]:
    """``1 / s^2`` of the heads' partition of ``S`` (``labels``: its cells, when known), and
    whether ``s^2`` is at its floor."""
    s2, floor = boundary_variance(S, heads, geometry=geometry, weights=weights, labels=labels)
    return 1.0 / max(s2, floor, torch.finfo(S.dtype).tiny), s2 <= floor


def _kmeans_start(S, rows, n_clusters, n_init, geometry, gen, auto, weights, heads,
                  max_iter, tol=KMEANS_TOL) -> WarmStart:
    """The best of ``n_init`` k-means++ seedings, or one run from ``heads``, each run to
    a stable partition by batched Lloyd steps (weighted; the same on every rank)."""
    km = sample_kmeans(S, n_clusters, n_init=n_init, seed=int(gen.integers(2**31 - 1)),
                       weights=weights, init=heads, max_iter=max_iter, tol=tol)
    km = km._replace(heads=rows.comm.broadcast(km.heads))
    start = WarmStart(km.heads, None, False, km)
    return kmeans_lambda(S, weights, start, geometry) if auto else start


def kmeans_lambda(S: torch.Tensor, Sw: torch.Tensor | None, start: WarmStart,
                  geometry: Geometry) -> WarmStart:
    """The warm ``start`` of the sample ``S`` (weights ``Sw``) with the ``"auto"`` inverse
    temperature of its k-means partition (:func:`auto_lambda` of its heads and cells):
    read by the warm start, or, in a fit that chooses its shape, only once the spherical
    heads are chosen (:func:`~attnclust.cluster.plan.estimator_warm_start` leaves it to
    then: a fit of shaped heads has no use for it, and on a small set it is a noticeable
    share of the fit)."""
    km = start.kmeans
    lam, capped = auto_lambda(S, km.heads, geometry, Sw,
                              torch.as_tensor(km.labels, device=S.device))
    return start._replace(inverse_temperature=lam, capped=capped)

"""Warm start of :class:`~attnclust.AttentionClustering`: hard Lloyd steps, the auto lambda.

As ``lambda -> infinity`` the attention of the K-head layer becomes the indicator of the
highest logit (:func:`attnclust.heads.head_logits`), and the fixed-point step of
:mod:`attnclust.fixed_point` becomes a Lloyd step:

- ``geometry="euclidean"``: cells ``argmin_h ||x - mu_h||``, heads moved to the means of
  their cells (k-means);
- ``geometry="sphere"``: cones ``argmax_h <x, mu_h>``, heads moved to the normalized sums
  of their cones (spherical k-means).

``hard_lloyd`` runs these steps to a stable partition; ``auto_inverse_temperature`` reads the
inverse temperature off that partition. The softmax of the layer is the E-step of an
equal-weight isotropic Gaussian mixture of variance ``1 / lambda`` (exactly for Euclidean
heads, ``-lambda ||x - mu_h||^2 / 2``; on the sphere because ``||x - mu_h||^2 = ||x||^2 + 1
- 2 <x, mu_h>``), so the rule is ``lambda = 1 / s^2`` with ``s^2`` a within-cluster
variance: the variance *across each cluster's nearest boundary*, the one direction the
softmax has to resolve there (a per-coordinate variance would be dominated by directions
that decide nothing on anisotropic data).

They run on the estimator's warm-start sample, which a data-parallel fit assembles on
every rank (see :class:`~attnclust.AttentionClustering`), so they need no sums over ranks.
Rows are read in chunks of ``chunk`` so that memory stays ``O(chunk K)`` beyond the data.

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

import torch

from .geometry import Geometry, as_geometry

__all__ = ["BoundaryVariance", "LloydResult", "auto_inverse_temperature", "boundary_variance",
           "hard_labels", "hard_lloyd"]

_CHUNK = 16_384  # rows per chunk: bounds the (chunk, K) blocks below
# least s^2, relative to the rows' mean squared norm: below it a variance computed from
# second moments is rounding noise of the dtype (and lambda would be unbounded)
_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-6}


def hard_labels(X: torch.Tensor, heads: torch.Tensor, geometry: str | Geometry = "sphere", *,
                chunk: int = _CHUNK) -> torch.Tensor:
    """Index of the highest logit of each row, ``(n,)`` (the hard attention's winner).

    Examples
    --------
    >>> X = torch.tensor([[0.9, 0.0], [3.0, 0.0]])
    >>> hard_labels(X, torch.tensor([[0.0, 0.0], [2.0, 0.0]]), "euclidean").tolist()
    [0, 1]
    """
    return _assign(X, heads, as_geometry(geometry), chunk)[0]


def _assign(X, heads, geometry, chunk):
    """Labels ``(n,)`` and the sum of the winning logits at ``lambda = 1`` (a 0-dim tensor)."""
    labels, score = [], X.new_zeros(())
    for s in range(0, X.shape[0], chunk):
        best, z = geometry.logits(X[s:s + chunk], heads, 1.0).max(1)
        labels.append(z)
        score = score + best.sum()
    return (torch.cat(labels) if labels else X.new_zeros(0, dtype=torch.long)), score


class LloydResult(NamedTuple):
    """Result of :func:`hard_lloyd`."""

    heads: torch.Tensor
    """Heads after the last step, ``(K, d)``."""
    labels: torch.Tensor
    """Hard assignment of the rows to these heads, ``(n,)``."""
    score: float
    """Mean winning logit at ``lambda = 1``: ``-(1/2)`` the k-means inertia per row up to
    the rows' own ``||x||^2 / 2`` (Euclidean), the mean cosine to the heads (sphere); the
    higher the better."""


def hard_lloyd(X: torch.Tensor, heads: torch.Tensor, n_steps: int, *,
               geometry: str | Geometry = "sphere", chunk: int = _CHUNK) -> LloydResult:
    """Hard Lloyd steps, at most ``n_steps``, stopping early once no label changes.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = hard_lloyd(X, X[[0, 1]], 10, geometry="euclidean")
    >>> res.heads.tolist(), res.labels.tolist()
    ([[0.1, 0.0], [3.2, 0.0]], [0, 0, 1, 1])
    """
    K, geometry = heads.shape[0], as_geometry(geometry)
    labels, score = _assign(X, heads, geometry, chunk)
    for _ in range(n_steps):
        counts = torch.bincount(labels, minlength=K).to(X.dtype)
        sums = torch.zeros_like(heads).index_add_(0, labels, X)
        heads = geometry.lloyd_step(sums, counts, heads)
        new, score = _assign(X, heads, geometry, chunk)
        changed = bool((new != labels).any())
        labels = new
        if not changed:
            break
    return LloydResult(heads, labels, float(score) / X.shape[0])


class BoundaryVariance(NamedTuple):
    """What :func:`boundary_variance` measured."""

    variance: float
    """Pooled within-cluster variance across the nearest boundaries, ``s^2``."""
    floor: float
    """``1e-12`` (float32: ``1e-6``) times the rows' mean squared norm (sphere) or distance
    from their mean (Euclidean): the least ``s^2`` the rule uses."""


def _cluster_moments(X, heads, labels, chunk):
    """Per-cluster count, sum and second moment of the projections ``P = X mu^T``."""
    K = heads.shape[0]
    counts = torch.bincount(labels, minlength=K).to(X.dtype)
    sums = X.new_zeros(K, K)
    outer = X.new_zeros(K, K, K)                               # sum_{i in h} P_i P_i^T
    chunk = max(1, min(chunk, (1 << 20) // (K * K)))          # (m, K, K) below 1M numbers
    for s in range(0, X.shape[0], chunk):
        P, z = X[s:s + chunk] @ heads.T, labels[s:s + chunk]   # (m, K), (m,)
        sums.index_add_(0, z, P)
        outer.index_add_(0, z, P[:, :, None] * P[:, None, :])
    return counts, sums, outer


def boundary_variance(X: torch.Tensor, heads: torch.Tensor, *,
                      geometry: str | Geometry = "sphere", chunk: int = _CHUNK
                      ) -> BoundaryVariance:
    """Within-cluster variance across the nearest boundaries (see
    :func:`auto_inverse_temperature`)."""
    geometry = as_geometry(geometry)
    labels = hard_labels(X, heads, geometry, chunk=chunk)
    K = heads.shape[0]
    counts, sums, outer = _cluster_moments(X, heads, labels, chunk)
    extra = torch.cat([X.sum(0), torch.stack([(X * X).sum(), X.new_tensor(float(X.shape[0]))])])
    stats = torch.cat([counts, sums.reshape(-1), outer.reshape(-1), extra])
    counts, sums = stats[:K], stats[K:K + K * K].reshape(K, K)
    outer = stats[K + K * K:K + K * K + K**3].reshape(K, K, K)
    col_sums, sq_norm, n = stats[-2 - X.shape[1]:-2], float(stats[-2]), float(stats[-1])
    means = sums / counts.clamp_min(1)[:, None]                # (K, K) mean projection
    cov = outer / counts.clamp_min(1)[:, None, None] - means[:, :, None] * means[:, None, :]
    # the floor's scale: the rows' mean squared norm on the sphere, their mean squared
    # distance from their mean for Euclidean heads (the rule is then translation invariant)
    floor = _FLOOR[X.dtype] * max(geometry.spread(sq_norm, col_sums, n), 0.0)
    if K == 1:
        s2 = geometry.one_head_variance(heads, cov, counts, sq_norm, n, X.shape[1])
        return BoundaryVariance(max(s2, 0.0), floor)
    h = torch.arange(K, device=X.device)
    # the nearest other head c_h and the boundary normal mu_c - g2_h mu_h, of norm^2 norm2
    c, g2, norm2 = geometry.nearest_boundary(heads @ heads.T)

    # variance within cluster a of <x, mu_b - g mu_a> = e^T cov_a e, e = e_b - g e_a
    def var_across(a, b):
        return cov[a, b, b] - 2 * g2 * cov[a, a, b] + g2**2 * cov[a, a, a]
    pooled = (counts * var_across(h, c) + counts[c] * var_across(c, h)) \
        / (counts + counts[c]).clamp_min(1)
    s2 = float((counts * pooled.clamp_min(0) / norm2).sum()) / n
    return BoundaryVariance(s2, floor)


def auto_inverse_temperature(X: torch.Tensor, heads: torch.Tensor, *,
                             geometry: str | Geometry = "sphere") -> float:
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
    rows (Euclidean: their mean squared distance from their mean), so ``lambda`` stays
    finite on duplicated points; with one head (the attention is then constant) it
    is the within-cluster variance of ``P`` (sphere) or per coordinate (Euclidean).

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
    s2, floor = boundary_variance(X, heads, geometry=geometry)
    return 1.0 / max(s2, floor, torch.finfo(X.dtype).tiny)

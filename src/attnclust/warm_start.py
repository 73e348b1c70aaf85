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
Every function takes optional ``weights`` ``w_i >= 0`` (the estimator's
``sample_weight``): each sum over rows becomes ``sum_i w_i (...)`` and each count a sum of
weights, so integer weights act as repeated rows and zero weights as absent rows.

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

from .heads import head_logits

__all__ = ["BoundaryVariance", "LloydResult", "auto_inverse_temperature", "boundary_variance",
           "hard_labels", "hard_lloyd"]

_CHUNK = 16_384  # rows per chunk: bounds the (chunk, K) blocks below
# least s^2, relative to the rows' mean squared norm: below it a variance computed from
# second moments is rounding noise of the dtype (and lambda would be unbounded)
_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-6}


def hard_labels(X: torch.Tensor, heads: torch.Tensor, geometry: str = "sphere", *,
                chunk: int = _CHUNK) -> torch.Tensor:
    """Index of the highest logit of each row, ``(n,)`` (the hard attention's winner).

    Examples
    --------
    >>> X = torch.tensor([[0.9, 0.0], [3.0, 0.0]])
    >>> hard_labels(X, torch.tensor([[0.0, 0.0], [2.0, 0.0]]), "euclidean").tolist()
    [0, 1]
    """
    return _assign(X, heads, geometry, chunk)[0]


def _assign(X, heads, geometry, chunk, weights=None):
    """Labels ``(n,)`` and the (weighted) sum of the winning logits at ``lambda = 1`` (a
    0-dim tensor)."""
    labels, score = [], X.new_zeros(())
    for s in range(0, X.shape[0], chunk):
        best, z = head_logits(X[s:s + chunk], heads, 1.0, geometry).max(1)
        labels.append(z)
        score = score + (best.sum() if weights is None else best @ weights[s:s + chunk])
    return (torch.cat(labels) if labels else X.new_zeros(0, dtype=torch.long)), score


def _lloyd_heads(sums, counts, heads, geometry):
    """New heads from the per-cell sums ``(K, d)``; an empty cell keeps its head."""
    if geometry == "euclidean":   # counts are sums of weights: maybe fractional
        new = sums / counts.clamp_min(torch.finfo(sums.dtype).tiny)[:, None]
        return torch.where((counts > 0)[:, None], new, heads)
    norm = torch.linalg.vector_norm(sums, dim=1, keepdim=True)
    return torch.where(norm > 0, sums / norm.clamp_min(torch.finfo(sums.dtype).tiny), heads)


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


def _weighted_sums(X, labels, K, weights):
    """Per-cell counts ``(K,)`` and sums ``(K, d)`` (of weights and weighted rows)."""
    if weights is None:
        return (torch.bincount(labels, minlength=K).to(X.dtype),
                X.new_zeros(K, X.shape[1]).index_add_(0, labels, X))
    return (X.new_zeros(K).index_add_(0, labels, weights),
            X.new_zeros(K, X.shape[1]).index_add_(0, labels, X * weights[:, None]))


def _total(X, weights) -> float:
    return float(X.shape[0]) if weights is None else float(weights.sum())


def hard_lloyd(X: torch.Tensor, heads: torch.Tensor, n_steps: int, *,
               geometry: str = "sphere", chunk: int = _CHUNK,
               weights: torch.Tensor | None = None) -> LloydResult:
    """Hard Lloyd steps, at most ``n_steps``, stopping early once no label changes.

    ``weights`` ``(n,)``: each row counts with its weight in the means (and the score).

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = hard_lloyd(X, X[[0, 1]], 10, geometry="euclidean")
    >>> res.heads.tolist(), res.labels.tolist()
    ([[0.1, 0.0], [3.2, 0.0]], [0, 0, 1, 1])
    """
    K = heads.shape[0]
    labels, score = _assign(X, heads, geometry, chunk, weights)
    for _ in range(n_steps):
        counts, sums = _weighted_sums(X, labels, K, weights)
        heads = _lloyd_heads(sums, counts, heads, geometry)
        new, score = _assign(X, heads, geometry, chunk, weights)
        changed = bool((new != labels).any())
        labels = new
        if not changed:
            break
    return LloydResult(heads, labels, float(score) / _total(X, weights))


class BoundaryVariance(NamedTuple):
    """What :func:`boundary_variance` measured."""

    variance: float
    """Pooled within-cluster variance across the nearest boundaries, ``s^2``."""
    floor: float
    """``1e-12`` (float32: ``1e-6``) times the rows' mean squared norm (sphere) or distance
    from their mean (Euclidean), or times 1 when that is zero (all rows equal): the least
    ``s^2`` the rule uses."""


def _cluster_moments(X, heads, labels, chunk, weights=None):
    """Per-cluster count, sum and second moment of the projections ``P = X mu^T``
    (weighted by ``weights`` when given)."""
    K = heads.shape[0]
    counts = (torch.bincount(labels, minlength=K).to(X.dtype) if weights is None
              else X.new_zeros(K).index_add_(0, labels, weights))
    sums = X.new_zeros(K, K)
    outer = X.new_zeros(K, K, K)                               # sum_{i in h} P_i P_i^T
    chunk = max(1, min(chunk, (1 << 20) // (K * K)))          # (m, K, K) below 1M numbers
    for s in range(0, X.shape[0], chunk):
        P, z = X[s:s + chunk] @ heads.T, labels[s:s + chunk]   # (m, K), (m,)
        wP = P if weights is None else P * weights[s:s + chunk, None]
        sums.index_add_(0, z, wP)
        outer.index_add_(0, z, wP[:, :, None] * P[:, None, :])
    return counts, sums, outer


def boundary_variance(X: torch.Tensor, heads: torch.Tensor, *, geometry: str = "sphere",
                      chunk: int = _CHUNK, weights: torch.Tensor | None = None
                      ) -> BoundaryVariance:
    """Within-cluster variance across the nearest boundaries (see
    :func:`auto_inverse_temperature`); ``weights`` ``(n,)`` weigh the rows."""
    labels = hard_labels(X, heads, geometry, chunk=chunk)
    K = heads.shape[0]
    counts, sums, outer = _cluster_moments(X, heads, labels, chunk, weights)
    wX = X if weights is None else X * weights[:, None]
    extra = torch.cat([wX.sum(0), torch.stack([(wX * X).sum(),
                                               X.new_tensor(_total(X, weights))])])
    stats = torch.cat([counts, sums.reshape(-1), outer.reshape(-1), extra])
    counts, sums = stats[:K], stats[K:K + K * K].reshape(K, K)
    outer = stats[K + K * K:K + K * K + K**3].reshape(K, K, K)
    col_sums, sq_norm, n = stats[-2 - X.shape[1]:-2], float(stats[-2]), float(stats[-1])
    tiny = torch.finfo(X.dtype).tiny           # counts are sums of weights: maybe below 1
    means = sums / counts.clamp_min(tiny)[:, None]                # (K, K) mean projection
    cov = outer / counts.clamp_min(tiny)[:, None, None] - means[:, :, None] * means[:, None, :]
    # the floor's scale: the rows' mean squared norm on the sphere, their mean squared
    # distance from their mean for Euclidean heads (the rule is then translation invariant)
    msq = sq_norm / n - (float((col_sums / n) @ (col_sums / n)) if geometry == "euclidean" else 0)
    # rows without any spread (all equal) have no scale of their own: the working unit's
    floor = _FLOOR[X.dtype] * (msq if msq > 0 else 1.0)
    if K == 1:
        if geometry == "euclidean":   # the head is the mean: the variance per coordinate
            s2 = (sq_norm / n - float(heads[0] @ heads[0])) / X.shape[1]
        else:
            s2 = float(cov[0, 0, 0] * counts[0]) / n
        return BoundaryVariance(max(s2, 0.0), floor)
    gram = heads @ heads.T
    h = torch.arange(K, device=X.device)
    if geometry == "euclidean":
        # nearest head in distance, boundary normal u = (mu_g - mu_h) / ||mu_g - mu_h||
        dist2 = (torch.diagonal(gram)[:, None] + torch.diagonal(gram)[None, :] - 2 * gram)
        c = (dist2 + torch.eye(K, dtype=X.dtype, device=X.device) * float("inf")).argmin(1)
        g2 = torch.ones(K, dtype=X.dtype, device=X.device)   # <x, mu_g - 1 * mu_h>
        norm2 = dist2[h, c].clamp_min(tiny)
    else:
        # nearest head in angle; the tangent at mu_h pointing to mu_g is mu_g - G mu_h,
        # of squared norm 1 - G^2. Nearly antipodal heads have no such direction (every
        # tangent points to mu_g): there the boundary <x, mu_h> = <x, mu_g> is crossed
        # along the chord mu_g - mu_h, as for Euclidean heads
        c = (gram - 3.0 * torch.eye(K, dtype=X.dtype, device=X.device)).argmax(1)
        G = gram[h, c]
        antipodal = 1.0 - G**2 < 1e-3
        g2 = torch.where(antipodal, torch.ones_like(G), G)
        norm2 = torch.where(antipodal, 2.0 - 2.0 * G, 1.0 - G**2).clamp_min(tiny)

    # variance within cluster a of <x, mu_b - g mu_a> = e^T cov_a e, e = e_b - g e_a
    def var_across(a, b):
        return cov[a, b, b] - 2 * g2 * cov[a, a, b] + g2**2 * cov[a, a, a]
    pooled = (counts * var_across(h, c) + counts[c] * var_across(c, h)) \
        / (counts + counts[c]).clamp_min(tiny)
    s2 = float((counts * pooled.clamp_min(0) / norm2).sum()) / n
    return BoundaryVariance(s2, floor)


def auto_inverse_temperature(X: torch.Tensor, heads: torch.Tensor, *, geometry: str = "sphere",
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
    s2, floor = boundary_variance(X, heads, geometry=geometry, weights=weights)
    return 1.0 / max(s2, floor, torch.finfo(X.dtype).tiny)

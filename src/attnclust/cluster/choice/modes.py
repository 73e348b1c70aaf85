"""The modes of a Gaussian mixture: how many clusters its components draw.

The BIC counts Gaussian components, and a cluster that is not Gaussian takes several: a
density sharply peaked at its centre with wide tails (rows at a Gaussian-distributed
distance, in a uniform direction, from the centre) takes a narrow component on its core
and wide ones around it, 6-10 components for two such clusters. Their mixture still has
one mode per cluster. Each component's mean climbs the mixture's density by the modal
EM of Li, Ray and Lindsay (2007, *A nonparametric statistical approach to clustering via
mode identification*), the fixed point of ``grad f(x) = 0``,

    f(x)    = sum_k pi_k N(x; mu_k, Sigma_k),    p_k(x) = pi_k N(x; mu_k, Sigma_k) / f(x)
    x  <-  (sum_k p_k(x) Sigma_k^-1)^-1  sum_k p_k(x) Sigma_k^-1 mu_k

(a uniform background adds a constant to ``f`` and nothing to its gradient), and the
components whose climbs end at one mode are one cluster: two ends are one mode when
``f`` on the segment between them stays above ``1 - flat`` times the lower of the two
(``flat`` = 1e-3: no valley, only the climbs' last steps left).

Notation
--------
==============  ==================  ===============================================
symbol          code                meaning
==============  ==================  ===============================================
``mu_k``        ``means``           the components' means, ``(K, d)``
``Sigma_k``     ``covariances``     spherical ``(K,)``, diag ``(K, d)``, full ``(K, d, d)``
``pi_k``        ``weights``         the components' weights, ``(K,)``
==============  ==================  ===============================================
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["mixture_modes"]

_SEGMENT = np.linspace(0.0, 1.0, 21)[1:-1]          # points between two ends


def _full(covariances: np.ndarray, K: int, d: int) -> np.ndarray:
    """The covariances as ``(K, d, d)`` matrices."""
    c = np.asarray(covariances, dtype=np.float64)
    if c.ndim == 1:
        return c[:, None, None] * np.eye(d)
    if c.ndim == 2:
        return c[:, :, None] * np.eye(d)
    return c.reshape(K, d, d)


def _log_joint(x, means, whiten, log_det, log_w):
    """``log pi_k + log N(x; mu_k, Sigma_k)`` of points ``(s, d)``: ``(s, K)``
    (``whiten``: ``L_k^-1`` of ``Sigma_k = L_k L_k^T``, ``(K, d, d)``; ``log_det``: ``log
    |Sigma_k|``)."""
    white = np.einsum("ked,skd->ske", whiten, x[:, None, :] - means[None])   # L^-1 (x - mu)
    return log_w - 0.5 * ((white ** 2).sum(-1) + log_det + means.shape[1] * np.log(2 * np.pi))


def mixture_modes(means: np.ndarray, covariances: np.ndarray, weights: np.ndarray, *,
                  flat: float = 1e-3, max_iter: int = 1000) -> np.ndarray:
    """The mode of the mixture's density that each component's mean climbs to (module
    docstring), numbered ``0, 1, ...`` in the order of the components: ``(K,)``. A
    component of weight zero climbs as the others do.

    Examples
    --------
    Two components on one centre, narrow and wide, and a third far away: two modes.

    >>> means = np.array([[0.0, 0.0], [0.3, 0.0], [6.0, 0.0]])
    >>> mixture_modes(means, np.array([0.1, 2.0, 1.0]), np.array([0.3, 0.4, 0.3])).tolist()
    [0, 0, 1]

    A light component midway between two heavy ones sits at a density minimum, and its
    climb goes to one of them:

    >>> means = np.array([[-3.0], [0.0], [3.0], [20.0]])
    >>> mixture_modes(means, np.ones(4), np.array([0.32, 0.02, 0.32, 0.34])).tolist()
    [0, 0, 1, 2]

    Two equal Gaussians 3 spreads apart have two modes, 1.5 spreads apart one:

    >>> mixture_modes(np.array([[0.0], [3.0]]), np.ones(2), np.ones(2) / 2).tolist()
    [0, 1]
    >>> mixture_modes(np.array([[0.0], [1.5]]), np.ones(2), np.ones(2) / 2).tolist()
    [0, 0]
    """
    means = np.asarray(means, dtype=np.float64)
    K, d = means.shape
    covs = _full(covariances, K, d)
    chol = np.linalg.cholesky(covs)
    whiten = np.linalg.inv(chol)
    log_det = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    precisions = np.linalg.inv(covs)
    with np.errstate(divide="ignore"):
        log_w = np.log(np.asarray(weights, dtype=np.float64))
    pm = np.einsum("kij,kj->ki", precisions, means)                      # Sigma_k^-1 mu_k
    scale = float(np.sqrt(np.linalg.eigvalsh(covs).min()))

    def climb(x):
        for _ in range(int(max_iter)):
            lj = _log_joint(x, means, whiten, log_det, log_w)
            p = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))      # (K starts, K)
            new = np.linalg.solve(np.einsum("sk,kij->sij", p, precisions),
                                  (p @ pm)[..., None])[..., 0]
            moved = float(np.abs(new - x).max())
            x = new
            if moved <= 1e-10 * scale:
                break
        return x
    # a climb that starts on a saddle (a light component midway between two) stays there:
    # each end, nudged by 1e-3 of the least spread in a fixed random direction, climbs on
    x = climb(means.copy())
    nudge = np.random.default_rng(0).standard_normal(x.shape)
    x = climb(x + 1e-3 * scale * nudge / np.linalg.norm(nudge, axis=1, keepdims=True))

    def log_density(points):
        return logsumexp(_log_joint(points, means, whiten, log_det, log_w), axis=1)
    ends = log_density(x)
    parent = list(range(K))

    def root(k):
        while parent[k] != k:
            k = parent[k]
        return k
    for a in range(K):
        for b in range(a + 1, K):
            if root(a) == root(b):
                continue
            between = log_density(x[a] + _SEGMENT[:, None] * (x[b] - x[a]))
            if between.min() >= min(ends[a], ends[b]) + np.log1p(-flat):
                low, high = sorted((root(a), root(b)))
                parent[high] = low                     # each mode numbered by its first
    roots = [root(k) for k in range(K)]
    return np.unique(roots, return_inverse=True)[1].reshape(K)

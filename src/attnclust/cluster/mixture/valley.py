"""A guard of the shape choice: shaped heads that part cores from tails, not clusters.

Two clusters whose rows lie at a Gaussian-distributed distance, in a uniform direction,
from their centres have a density sharply peaked at each centre with wide tails. A
Gaussian diagonal or full mixture can fit them better as *one narrow head on both cores
and one wide head on the tails* than as two clusters: its likelihood (and ICL) wins,
and its partition (cores against tails, ARI about 0) ignores the two clusters the
spherical partition finds. A cluster nested in another (a ball in a shell, a blob in a
ring) gives the same picture of the heads, a narrow one inside a wide one, and there the
shaped fit is right. What tells them apart is the density between the spherical cells,
read in a tube along the segment between the two cells of closest means ``m_a, m_b``:

    t_i    = <x_i - m_a, m_b - m_a> / ||m_b - m_a||^2       (rows of cells a, b)
    r_i    = ||x_i - m_a - t_i (m_b - m_a)||                 (distance to the segment's line)
    rho(s) = sum_{i: |t_i - s| < h, r_i <= r_q} w_i          (rows near the point s)

with ``r_q`` the ``q`` quantile of ``r`` (the tube: a quarter of the pair's rows). The
cells are two clusters where ``rho`` has a peak on each side of their boundary ``s =
1/2`` (the largest of ``rho`` over ``s <= 1/2`` and over ``s >= 1/2``, each at least
``balance`` times the other) and a valley at the boundary, ``rho(1/2)`` below ``v``
times the lower peak ``rho*`` and below it by ``z`` standard deviations of the counts,
``rho* - rho(1/2) >= z sqrt(v* + v(1/2))``, ``v`` the windows' sums of ``w_i^2`` (weights
in units of their mean: for equal weights ``v = rho``, the counts' Poisson variance; a
dip elsewhere, or of a few rows, as between elongated clusters that the cells cut, is no
valley); a shaped partition
that disagrees with them (ARI below ``agreement``) has then parted cores from tails.
Nested clusters have their peak between the spherical cells (the inner cluster), a core
beside half a ring one peak that the ring's half, spread around the tube, does not match,
and elongated clusters a flat density along the segment: all keep the shaped fit.

Why a tube and peaks: the density of all rows projected on the segment (a slab) mixes
the tails of every direction into the middle, and at a separation of about one spread
(the clusters' centres 0.5-0.8 times the spread of their distances apart) it left no
valley where the tube's density falls to a tenth; the spherical cells' means lie beyond
the peaks, in the tails that the cells' far sides add.

Notation
--------
==============  ==================  ===============================================
symbol          code                meaning
==============  ==================  ===============================================
``m_a``         ``means``           the spherical cells' means
``h``           ``width``           half-width of the windows, in units of the segment
``q``           ``tube``            the share of the pair's rows the tube holds
``v``           ``valley``          the depth a valley needs (default 0.5)
``z``           ``z``               its standard deviations below the lower peak (3)
==============  ==================  ===============================================
"""

from __future__ import annotations

import math

import numpy as np

from ..head_graph import adjusted_rand

__all__ = ["cores_from_tails", "tube_density"]

_POINTS = np.arange(-2, 13) / 10           # s = -0.2, -0.1, ..., 1.2 along the segment


def tube_density(X: np.ndarray, spherical: np.ndarray, weights: np.ndarray, *,
                 tube: float = 0.25, width: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``rho(s)`` at ``s = -0.2, -0.1, ..., 1.2`` (module docstring) along the segment
    between the two cells of closest means of the partition ``spherical`` ``(n,)`` (at
    least two cells of positive weight) of rows ``X`` ``(n, d)`` of ``weights`` ``(n,)``,
    and ``v(s)``, the windows' sums of the weights' squares (the variance of ``rho``).

    Examples
    --------
    >>> X = np.r_[np.zeros((5, 2)), np.ones((5, 2))]
    >>> rho, v = tube_density(X, np.repeat([0, 1], 5), np.ones(10))
    >>> rho.tolist()[1:4], bool((v == rho).all())
    ([0.0, 5.0, 0.0], True)
    """
    held = weights > 0
    X, spherical, weights = X[held], spherical[held], weights[held]
    cells = np.unique(spherical)
    if len(cells) < 2:
        raise ValueError("tube_density needs two cells of rows of positive weight")
    means = np.stack([np.average(X[spherical == c], axis=0, weights=weights[spherical == c])
                      for c in cells])                                   # (k, d)
    gap = ((means[:, None] - means[None]) ** 2).sum(-1)
    gap[np.diag_indices(len(cells))] = np.inf
    a, b = np.unravel_index(int(np.argmin(gap)), gap.shape)
    pair = (spherical == cells[a]) | (spherical == cells[b])
    step = means[b] - means[a]
    length2 = max(float(step @ step), np.finfo(np.float64).tiny)
    Z = X[pair] - means[a]
    t = Z @ step / length2
    off = np.maximum(np.einsum("nd,nd->n", Z, Z) - t * t * length2, 0.0)   # r_i^2
    inside = off <= np.quantile(off, tube)
    t, w = t[inside], weights[pair][inside]
    w = w / w.mean()                            # in rows: counts for unit weights
    near = np.abs(t[None] - _POINTS[:, None]) < width             # (points, rows)
    return near @ w, near @ (w * w)


def cores_from_tails(X: np.ndarray, spherical: np.ndarray, shaped: np.ndarray,
                     weights: np.ndarray | None = None, *, agreement: float = 0.5,
                     valley: float = 0.5, balance: float = 0.25, tube: float = 0.25,
                     width: float = 0.1, z: float = 3.0) -> bool:
    """Whether the shaped partition ``shaped`` ``(n,)`` of rows ``X`` ``(n, d)`` parts
    cores from tails: it disagrees with the spherical partition ``spherical`` ``(n,)``
    (adjusted Rand index below ``agreement``) while the two spherical cells of closest
    means are two peaks of density with a valley between them (module docstring).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(1000, 8))
    >>> u /= np.linalg.norm(u, axis=1, keepdims=True)
    >>> y = np.repeat([0, 1], 500)
    >>> X = rng.normal(size=(1000, 1)) * u + 0.8 * np.c_[y, np.zeros((1000, 7))]
    >>> core = (np.linalg.norm(X - X.mean(0), axis=1) < 1.0).astype(int)
    >>> cores_from_tails(X, y, core), cores_from_tails(X, y, y)
    (True, False)
    """
    spherical, shaped = np.asarray(spherical), np.asarray(shaped)
    if adjusted_rand(spherical, shaped) >= agreement:
        return False
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(np.unique(spherical[w > 0])) < 2:
        return False
    rho, var = tube_density(X, spherical, w, tube=tube, width=width)
    middle = len(rho) // 2                          # s = 1/2: the cells' boundary
    peaks = (int(np.argmax(rho[:middle + 1])), middle + int(np.argmax(rho[middle:])))
    i = min(peaks, key=lambda k: rho[k])                            # the lower peak
    low, high = rho[i], max(rho[k] for k in peaks)
    dip = low - rho[middle]              # in rows; its variance: the windows' sums of w^2
    return bool(low >= balance * high and rho[middle] < valley * low
                and dip >= z * math.sqrt(var[i] + var[middle]))

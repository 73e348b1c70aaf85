"""A guard of the shape choice: shaped heads that part cores from tails, not clusters.

Two clusters whose rows lie at a Gaussian-distributed distance, in a uniform direction,
from their centres have a density sharply peaked at each centre with wide tails. A
Gaussian diagonal or full mixture can fit them better as *one narrow head on both cores
and one wide head on the tails* than as two clusters: its likelihood (and ICL) wins,
and its partition (cores against tails, ARI about 0) ignores the two clusters the
spherical partition finds (ARI 0.7-0.9 at d = 8). A cluster nested in another (a ball in
a shell, a blob in a ring) gives the same picture of the heads, a narrow one inside a
wide one, and there the shaped fit is right. What tells them apart is the density
between the spherical cells:

    t_i    = <x_i - m_a, m_b - m_a> / ||m_b - m_a||^2      (rows of cells a, b)
    rho(s) = sum_{i: |t_i - s| < h} w_i                     (rows near the point s)
    valley = rho(1/2) < v * min(rho(0), rho(1))

for the two spherical cells ``a, b`` of closest means ``m_a, m_b``: where the two cells
are separated by a valley of density, they are two clusters, and a shaped partition
that disagrees with them (ARI below ``agreement``) has parted cores from tails. Nested
clusters have their peak between the spherical cells (the inner cluster), elongated
clusters their rows; both keep the shaped fit.

Notation
--------
==============  ==================  ===============================================
symbol          code                meaning
==============  ==================  ===============================================
``m_a``         ``means``           the spherical cells' means
``h``           ``width``           half-width of the windows, in units of the segment
``v``           ``valley``          the depth a valley needs (default 0.5)
==============  ==================  ===============================================
"""

from __future__ import annotations

import numpy as np

from ..head_graph import adjusted_rand

__all__ = ["cores_from_tails"]


def cores_from_tails(X: np.ndarray, spherical: np.ndarray, shaped: np.ndarray,
                     weights: np.ndarray | None = None, *, agreement: float = 0.5,
                     valley: float = 0.5, width: float = 0.1) -> bool:
    """Whether the shaped partition ``shaped`` ``(n,)`` of rows ``X`` ``(n, d)`` parts
    cores from tails: it disagrees with the spherical partition ``spherical`` ``(n,)``
    (adjusted Rand index below ``agreement``) while the two spherical cells of closest
    means are separated by a valley of density (module docstring).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(1000, 8))
    >>> u /= np.linalg.norm(u, axis=1, keepdims=True)
    >>> y = np.repeat([0, 1], 500)
    >>> X = rng.normal(size=(1000, 1)) * u + 1.5 * np.c_[y, np.zeros((1000, 7))]
    >>> core = (np.linalg.norm(X - X.mean(0), axis=1) < 1.0).astype(int)
    >>> cores_from_tails(X, y, core), cores_from_tails(X, y, y)
    (True, False)
    """
    spherical, shaped = np.asarray(spherical), np.asarray(shaped)
    if adjusted_rand(spherical, shaped) >= agreement:
        return False
    cells = np.unique(spherical)
    if len(cells) < 2:
        return False
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    means = np.stack([np.average(X[spherical == c], axis=0, weights=w[spherical == c])
                      if w[spherical == c].sum() > 0 else X[spherical == c].mean(0)
                      for c in cells])                                   # (k, d)
    gap = ((means[:, None] - means[None]) ** 2).sum(-1)
    gap[np.diag_indices(len(cells))] = np.inf
    a, b = np.unravel_index(int(np.argmin(gap)), gap.shape)
    pair = (spherical == cells[a]) | (spherical == cells[b])
    step = means[b] - means[a]
    t = (X[pair] - means[a]) @ step / max(float(step @ step), np.finfo(np.float64).tiny)

    def near(s: float) -> float:
        return float(w[pair][np.abs(t - s) < width].sum())

    return near(0.5) < valley * min(near(0.0), near(1.0))

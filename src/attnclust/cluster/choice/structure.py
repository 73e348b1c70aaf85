"""The test for no structure of ``n_clusters="auto"`` (:mod:`attnclust.cluster.choice.k_choice`,
*No structure*): a gap statistic at ``K*``, after Tibshirani, Walther and Hastie (2001).

The k-means cells of ``K*`` remove a share of the scatter, ``D = log(W_1 / W_K*)``
(``W_K`` the within-cell sum of squares); the same is computed on ``n_references``
reference sets drawn uniformly in the rows' principal box (one k-means run each), and

    z = (D - mean D_ref) / (sd D_ref sqrt(1 + 1/B)).

**The test stops early** when the references drawn so far already decide it: after
  ``b`` of them (``b`` in ``looks``), ``z_b`` (the same ``z`` of those ``b``) is
  returned when ``|z_b| > c_b``, ``c_b`` the ``1 - level`` quantile
  of Student's ``t`` with ``b - 1`` degrees of freedom (22.2 at ``b = 4``, 6.01 at 10);
  else all ``n_references`` are drawn. Were the rows one more draw of the references
  (the null, ``D`` and ``D_ref`` normal), ``z_b`` would be ``t_{b-1}``, so each early
  look says "structure" with probability ``level``: the level of the test,
  ``P(t_19 > 3) = 0.0037`` with all 20, rises by at most ``2e-4`` (Bonferroni over the
  looks). On the separated mixtures of ``benchmarks/bench_auto_k.py`` ``z_4 > 22.2`` on
  84 of 90; Gaussian blobs often stop at 10 with ``z_10 < -6.01``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import stdtrit

from ..kmeans.batch import best_of_seedings
from ..settings import FitSettings

__all__ = ["early_bound", "kmeans_cells", "principal_box", "structure_z"]


def principal_box(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows in their principal axes ``(n, d)``, and that box's lower and upper ends."""
    _, _, Vt = np.linalg.svd(Z - Z.mean(0), full_matrices=False)
    P = (Z - Z.mean(0)) @ Vt.T
    return P, P.min(0), P.max(0)


def kmeans_cells(Z, k, rng, n_init=FitSettings.k_init, init=None):
    """K-means cells ``(labels, W_K, heads)``: the best of ``n_init`` runs, or one from
    the heads ``init``."""
    if k == 1:
        return (np.zeros(Z.shape[0], dtype=np.int64), float(((Z - Z.mean(0)) ** 2).sum()),
                Z.mean(0, keepdims=True))
    run = best_of_seedings(Z, k, n_init, rng, init=init)
    return np.asarray(run.labels), float(run.objective) * Z.shape[0], np.asarray(run.heads)


def early_bound(b: int, level: float = FitSettings.early_level) -> float:
    """``c_b``: the bound on ``|z|`` that stops the test after ``b`` references, the
    ``1 - level`` quantile of Student's ``t`` with ``b - 1`` degrees of freedom
    (``z``'s law after ``b`` references when the rows are one more draw of them)."""
    return float(stdtrit(b - 1, 1.0 - level))


def structure_z(Z: np.ndarray, within: float, n_clusters: int, rng, *,
                n_references: int = FitSettings.n_references,
                looks: tuple[int, ...] = FitSettings.looks,
                level: float = FitSettings.early_level) -> float:
    """The test for no structure (module docstring): ``z`` of ``D = log(W_1 / W_K)`` of
    the rows (``within``: their ``W_K``) against uniform references in their principal box,
    drawn until ``|z|`` passes :func:`early_bound` at a look of ``looks`` or
    ``n_references`` are drawn (``looks=()``: all of them).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Z = np.r_[rng.normal(-3, 1, (200, 2)), rng.normal(3, 1, (200, 2))]
    >>> W2 = ((Z - np.where(np.arange(400)[:, None] < 200, -3, 3)) ** 2).sum()
    >>> bool(structure_z(Z, W2, 2, np.random.default_rng(1)) > 3)
    True
    """
    P, lo, hi = principal_box(Z)
    total = float(((Z - Z.mean(0)) ** 2).sum())
    gap = math.log(total / max(within, 1e-300))
    refs = []
    for b in range(1, n_references + 1):
        U = rng.uniform(lo, hi, P.shape)
        w1 = float(((U - U.mean(0)) ** 2).sum())
        refs.append(math.log(w1 / max(kmeans_cells(U, n_clusters, rng, 1)[1], 1e-300)))
        if b in looks or b == n_references:
            spread = float(np.std(refs, ddof=1)) * math.sqrt(1.0 + 1.0 / b)
            z = (gap - float(np.mean(refs))) / max(spread, 1e-12)
            if b == n_references or abs(z) > early_bound(b, level):
                return z
    raise ValueError(f"n_references={n_references}: the test needs at least 2")

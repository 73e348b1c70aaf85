"""The covariance floor of shaped heads: how far a head's covariance may fall.

Every covariance is ``Sigma_h = M_h + D`` with ``D = diag(r_1..r_d)`` the floor
(:meth:`~attnclust.cluster.mixture.covariance.Covariance.update`), relative to each
feature's variance in the data (:func:`covariance_floor`). A head whose covariance sits at
the floor in some direction has a likelihood set by the floor, not by its rows
(:meth:`~attnclust.cluster.mixture.covariance.Covariance.floor_ratio`), except along a
feature the rows themselves do not spread on (:func:`spread_features`: a constant
column, where every head sits at the floor as the rows do), or along a feature the others
determine (:func:`full_rank_features`: a copy, a sum or a total of other columns, rows
embedded in more dimensions than they span), where every full head does.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.linalg.lapack import dpstrf

__all__ = ["FLOOR_RANGE", "covariance_floor", "spread_features", "full_rank_features",
           "spanned_features"]

FLOOR_RANGE = 1e-10   # a feature's variance counts down to this fraction of the mean's


def covariance_floor(variances: torch.Tensor, reg_covar: float) -> torch.Tensor:
    """The floor ``r_j = reg_covar * max(v_j, FLOOR_RANGE * v)``, ``v`` the mean of the
    data's variances ``v_j`` (1 if 0): relative to each feature's scale (scikit-learn's
    ``reg_covar`` is absolute), so that a feature on a scale far below the others keeps a
    floor below its clusters' spread; a constant feature gets a floor from the others.

    Examples
    --------
    >>> covariance_floor(torch.tensor([4.0, 1e-6, 0.0], dtype=torch.float64), 0.5)
    tensor([2.0000e+00, 5.0000e-07, 6.6667e-11], dtype=torch.float64)
    """
    mean = float(variances.mean()) if float(variances.mean()) > 0 else 1.0
    return float(reg_covar) * variances.clamp_min(FLOOR_RANGE * mean)


def spread_features(floor):
    """Which features the float64 floor ``floor`` ``(d,)`` (:func:`covariance_floor`) was not
    raised on, ``(d,)`` bool: those whose variance in the data is above ``FLOOR_RANGE``
    times the mean's (up to ``FLOOR_RANGE`` relative), every feature where none is. On the
    others (a constant column, or one below the floor's resolution) every head sits at the
    floor as the rows do: no degeneracy of a head's
    (:meth:`~attnclust.cluster.mixture.covariance.Covariance.floor_ratio`).

    Examples
    --------
    >>> floor = covariance_floor(torch.tensor([4.0, 1e-30, 2.0], dtype=torch.float64), 1e-6)
    >>> spread_features(floor).tolist()
    [True, False, True]
    """
    spread = floor > FLOOR_RANGE * floor.mean()
    return spread if bool(spread.any()) else ~spread


def full_rank_features(covariance, features, level: float) -> np.ndarray:
    """Of the ``features`` ``(d,)`` bool, a set the rows spread on beyond the others': the
    pivots of a Cholesky factorization of their correlation matrix with the largest
    variance left first (LAPACK's ``dpstrf``), stopped where the variance any of the others
    has left after a regression on the kept ones is at most ``level`` times its own
    (``level``: the floor's ``reg_covar``: below, every full head sits at the floor along
    that combination of features, as the rows do). ``covariance`` ``(d, d)``: the rows'
    (NumPy or torch, read as float64). Returns ``(d,)`` bool (NumPy); the ``features`` as
    given where the rows spread on none (one row), as :func:`spread_features` then reads
    every feature.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> X = np.c_[X, X[:, 0] + X[:, 2], X[:, 1]]             # a sum and a copy
    >>> int(full_rank_features(np.cov(X.T), np.ones(5, bool), 1e-6).sum())
    3
    >>> full_rank_features(np.cov(X.T), np.array([1, 0, 1, 0, 0], bool), 1e-6).tolist()
    [True, False, True, False, False]
    """
    C = np.asarray(covariance.cpu() if isinstance(covariance, torch.Tensor) else covariance,
                   dtype=np.float64)
    given = np.asarray(features.cpu() if isinstance(features, torch.Tensor) else features,
                       dtype=bool)
    read = np.flatnonzero(given & (np.diag(C) > 0))
    kept = np.zeros(len(C), dtype=bool)
    if len(read):
        sub = C[np.ix_(read, read)]
        root = np.sqrt(np.diag(sub))
        _, pivots, rank, _ = dpstrf(sub / root[:, None] / root, tol=level, lower=1)
        kept[read[pivots[:rank] - 1]] = True           # LAPACK's pivots count from 1
    return kept if kept.any() else given      # no spread at all (one row): every feature


def spanned_features(means, covariances, counts, floor, level: float) -> np.ndarray:
    """:func:`full_rank_features` of the rows a mixture of full heads was fitted on, read
    from the mixture: the heads' covariances less the floor, and their means' spread,
    weighted by their rows ``counts`` ``(K,)``, sum to the rows' covariance (after any
    M-step), so no other pass over the rows is needed. ``means`` ``(K, d)``,
    ``covariances`` ``(K, d, d)``, ``floor`` ``(d,)``; NumPy or torch."""
    def array(a):
        return np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a,
                          dtype=np.float64)
    m, C, c, r = array(means), array(covariances), array(counts), array(floor)
    c = c[:len(m)] / c[:len(m)].sum()
    shift = m - c @ m
    covariance = np.einsum("k,kij->ij", c, C - np.diag(r)) + (shift.T * c) @ shift
    return full_rank_features(covariance, spread_features(r), level)

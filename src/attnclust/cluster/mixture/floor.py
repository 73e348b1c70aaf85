"""The covariance floor of shaped heads: how far a head's covariance may fall.

Every covariance is ``Sigma_h = M_h + D`` with ``D = diag(r_1..r_d)`` the floor
(:meth:`~attnclust.cluster.mixture.covariance.Covariance.update`), relative to each
feature's variance in the data (:func:`covariance_floor`). A head whose covariance sits at
the floor in some direction has a likelihood set by the floor, not by its rows
(:meth:`~attnclust.cluster.mixture.covariance.Covariance.floor_ratio`), except along a
feature the rows themselves do not spread on (:func:`spread_features`: a constant
column, where every head sits at the floor as the rows do).
"""

from __future__ import annotations

import torch

__all__ = ["FLOOR_RANGE", "covariance_floor", "spread_features"]

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

"""The temperature path: heads followed from one cluster to many as ``lambda`` grows.

A cold start puts every head at the data's centre (the normalized mean on the sphere)
at an inverse temperature below the first critical value; ``lambda`` then grows on a
geometric grid and the heads are carried from each ``lambda`` to the next by a fixed
point. Heads that coincide (closer than ``merge_tol`` times the data's scale) form one
cluster; a cluster counts when at least ``min_cluster_size`` rows attend it most.

Two fixed points can be followed (``objective``):

``"free_energy"`` (default): deterministic annealing of the layer's attention weights.
    With weights ``p_h`` (the soft proportions, which make coincident heads act as one)
    the weights are ``a_h(x) = softmax_h(log p_h - lambda ||x - mu_h||^2 / 2)`` (Euclidean;
    ``log p_h + lambda <x, mu_h>`` on the sphere) and each head is the attention-weighted
    mean of the rows, ``mu_h = sum_i a_ih x_i / sum_i a_ih`` (normalized on the sphere):
    the stationarity condition of the soft k-means free energy. Linearizing this map at
    the all-at-the-mean configuration, a perturbation ``eps_h`` becomes ``lambda C eps_h``
    (``C`` the data covariance), so the heads split when ``lambda lambda_max(C) > 1``:
    the first critical inverse temperature is ``1 / lambda_max(C)`` for Euclidean heads,
    and ``||m|| / lambda_max(P C P)`` on the sphere (``m`` the mean, ``P`` the projection
    on the tangent space at ``m / ||m||``). Later splits are those of each cluster's own
    attention-weighted covariance.
``"risk"``: the minimizer of the layer's risk ``E||x - T(x)||^2``
    (:func:`attnclust.cluster.fixed_point.fixed_point_fit`). Its second variation at the
    all-at-the-mean configuration is ``-(4 lambda / K) C`` per centred perturbation (see
    ``docs/guide/temperature-path.md``): that configuration is a saddle at *every*
    ``lambda > 0``, the heads never merge, and this path shows all its heads apart from
    the first ``lambda`` on.

A perturbation breaks the symmetry of coincident heads (a fixed point keeps them
together): before each ``lambda`` the heads of a group are moved by ``+-1e-3`` times
the data's scale along the principal direction of the rows that attend the group
(deterministic: the path does not depend on any seed). After the fixed point the heads
of a group that did not split are set back to their (weighted) mean. Only a group
predicted to split (annealing: ``lambda lambda_max(C_g) > 1`` for its own weighted
covariance ``C_g``) gets two heads or more; a group of fewer than ``min_cluster_size``
rows never splits and gives its head up when a larger group needs one, so that a few
outlying rows do not hold the heads that later splits need.

With ``stride > 1`` the path steps that many grid values at once while nothing happens
(no group about to split, the fixed point converged, the counts unchanged) and goes
back to single steps across every change, so that it finds each change at the grid
value where single steps find it.

One grid value's moves (kick, fixed point, groups) are
:mod:`attnclust.cluster._path_step`; the path's plateaus and the number of clusters read
off them are :mod:`attnclust.cluster.choice.plateaus` (read off a path stopped early:
:mod:`attnclust.cluster.choice.path_choice`), and its picture :mod:`attnclust.plotting.path`.
Here: the path, its grid and predicted first split, and :func:`anneal_heads`
(``init="anneal"``).

Notation
--------
=============  ===================  =============================================
paper          code                 meaning
=============  ===================  =============================================
``lambda``     ``lam``              inverse temperature, on the grid
``mu_h``       ``heads``            heads, shape ``(K, d)`` with ``K = max_clusters``
``p_h``        ``weights``          soft proportions (``"free_energy"`` only)
``C``          ``cov``              covariance of the rows
``R``          ``risk``             ``mean_i ||x_i - T(x_i)||^2``, one head per cluster
=============  ===================  =============================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .._spectral import DENSE_FEATURES, leading_eigenpairs
from .._threads import torch_threads
from .._validation import as_tensor, check_finite, check_int, check_nonnegative
from ..layer.geometry import as_geometry
from ..plotting.path import plot_path
from ._path_step import Walk, step, unit_heads
from .choice.plateaus import (  # the plateaus' names stay importable from here too
    MIN_PLATEAU_WIDTH,
    ClusterChoice,
    Plateau,
    plateaus_of,
    widest_plateau,
)

__all__ = ["ClusterChoice", "Plateau", "TemperaturePath", "anneal_heads", "path_grid",
           "predicted_first_split", "temperature_path"]

OBJECTIVES = ("free_energy", "risk")
_KICK = 1e-3              # symmetry-breaking perturbation, relative to the data's scale
_PROBE = 5                # fixed-point iterations a stride may take (see _follow)
# init="anneal": the grid of choice.path_choice.FAST_SETTINGS, single steps and 100
# fixed-point iterations at tol 1e-4
ANNEAL_SETTINGS = {"grid_ratio": 1.12, "max_iter": 100, "tol": 1e-4}


@dataclass(frozen=True)
class TemperaturePath:
    """The result of :func:`temperature_path` (arrays indexed by the grid, length ``G``).

    Attributes
    ----------
    inverse_temperatures : ndarray (G,)
        The grid of ``lambda`` actually followed (it stops once all heads are apart; with
        a ``stride``, the values stepped over are left out).
    n_clusters : ndarray (G,)
        Clusters counted (distinct heads attended most by ``min_cluster_size`` rows or more).
    n_distinct : ndarray (G,)
        Distinct heads, whatever their size.
    risk : ndarray (G,)
        ``mean_i ||x_i - T(x_i)||^2`` of the layer with one head per distinct cluster.
    heads : ndarray (G, K, d)
        All ``max_clusters`` heads (coincident ones repeated), in data units.
    split_inverse_temperatures : ndarray
        The grid values at which the count of clusters grew.
    predicted_first_split : float
        The first critical ``lambda`` of the derivation (module docstring): ``1 /
        lambda_max(C)`` (``"free_energy"``, Euclidean), ``||m|| / lambda_max(P C P)``
        (sphere), ``0`` (``"risk"``: no merged phase).
    plateaus : tuple of Plateau
    """

    inverse_temperatures: np.ndarray
    n_clusters: np.ndarray
    n_distinct: np.ndarray
    risk: np.ndarray
    heads: np.ndarray
    split_inverse_temperatures: np.ndarray
    predicted_first_split: float
    plateaus: tuple[Plateau, ...]
    geometry: str = "euclidean"
    objective: str = "free_energy"
    min_cluster_size: int = 1
    settings: dict = field(default_factory=dict)

    def plateau(self, n_clusters: int) -> Plateau | None:
        """The widest plateau with ``n_clusters`` clusters, or ``None``."""
        found = [p for p in self.plateaus if p.n_clusters == n_clusters]
        return max(found, key=lambda p: p.width) if found else None

    def choose_n_clusters(self, *, min_width: float = MIN_PLATEAU_WIDTH) -> ClusterChoice:
        """The widest plateau in ``log lambda`` among ``K >= 2``, or ``K = 1``.

        The cold start's plateau (the first) is left out: its width only reflects where the
        grid begins. ``K = 1`` when no later plateau is at least ``min_width`` wide (one
        blob splits in a cascade of narrow plateaus); ties go to the smaller ``K``.
        """
        return widest_plateau(self.plateaus, self.min_cluster_size,
                              min_width=check_nonnegative(min_width, "min_width"))

    def to_dict(self) -> dict:
        """A JSON-ready summary (grid, counts, risk, splits, plateaus with their heads)."""
        return {
            "geometry": self.geometry, "objective": self.objective,
            "min_cluster_size": self.min_cluster_size, "settings": dict(self.settings),
            "predicted_first_split": self.predicted_first_split,
            "inverse_temperatures": self.inverse_temperatures.tolist(),
            "n_clusters": self.n_clusters.tolist(), "n_distinct": self.n_distinct.tolist(),
            "risk": self.risk.tolist(),
            "split_inverse_temperatures": self.split_inverse_temperatures.tolist(),
            "plateaus": [{"n_clusters": p.n_clusters, "start": p.start, "stop": p.stop,
                          "width": p.width, "closed": p.closed, "heads": p.heads.tolist(),
                          "sizes": p.sizes.tolist()} for p in self.plateaus],
        }

    def plot(self, ax=None):
        """Clusters and risk against ``lambda`` (log axis), splits marked; the figure.

        ``ax``: two matplotlib axes to draw on (clusters, risk); new ones by default
        (:func:`attnclust.plotting.path.plot_path`).
        """
        return plot_path(self, ax)


# -- the geometry-dependent pieces ---------------------------------------------------------
def _center(X: torch.Tensor, geometry: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The cold start ``(d,)`` and the rows the path works on (centred when Euclidean)."""
    mean = X.mean(0)
    if not unit_heads(geometry):
        return torch.zeros_like(mean), X - mean
    norm = torch.linalg.vector_norm(mean)
    if not float(norm) > 0:
        raise ValueError("the rows' mean is zero: the sphere's cold start needs a direction")
    return mean / norm, X


def _tangent_cov(cov: torch.Tensor, start: torch.Tensor, geometry: str) -> torch.Tensor:
    if not unit_heads(geometry):
        return cov
    proj = torch.eye(cov.shape[0], dtype=cov.dtype) - torch.outer(start, start)
    return proj @ cov @ proj


def predicted_first_split(X, *, geometry: str = "euclidean",
                          objective: str = "free_energy") -> float:
    """The first critical inverse temperature of the derivation (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[-1.0, 0.0], [1.0, 0.0]])
    >>> predicted_first_split(X)       # 1 / lambda_max(C), C = diag(1, 0)
    1.0
    """
    Xt = as_tensor(X, name="X", dtype=torch.float64)
    if _check_objective(objective) == "risk":
        return 0.0
    start, Xc = _center(Xt, as_geometry(geometry).name)
    # the spread in units of the largest entry: squares of rows at 1e155 overflow
    scale = float(Xc.abs().max()) if bool(torch.isfinite(Xc).all()) else 1.0
    Xc = Xc / (scale or 1.0)
    if Xt.shape[1] > DENSE_FEATURES:      # wide rows: no d x d matrix (attnclust._spectral)
        Y = (Xc - Xc.mean(0)).detach().cpu().numpy()
        if unit_heads(geometry):
            h = start.detach().cpu().numpy()
            Y = Y - np.outer(Y @ h, h)
        top = float(leading_eigenpairs(Y, 1)[0][0])
    else:
        cov = torch.cov(Xc.T, correction=0).reshape(Xt.shape[1], Xt.shape[1])
        top = float(torch.linalg.eigvalsh(_tangent_cov(cov, start, geometry))[-1])
    if not top > 0:
        return math.inf
    top = top * scale * scale                 # inf past float64's range: lambda_c is 0
    return (float(torch.linalg.vector_norm(Xt.mean(0))) if unit_heads(geometry) else 1.0) / top


def _check_objective(objective) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be 'free_energy' or 'risk', got {objective!r}")
    return objective


def _follow(walk: Walk, start, grid, K, stride, callback) -> list[tuple]:
    """The loop over the grid, one row per ``lambda`` followed (:func:`step`), until all
    ``K`` heads are apart. While the steps are quiet (no group about to split, the fixed
    point converged) and the count of clusters and of distinct heads stays the same, the
    path steps ``stride`` grid values at a time, with at most ``_PROBE`` fixed-point
    iterations; a stride that is not quiet or across which a count changes is taken again
    one value at a time from its start, so the changes are found at the grid values where
    a path of single steps finds them. A ``callback`` that returns ``True`` stops the
    path."""
    state = (np.repeat(start[None], K, 0),
             None if walk.objective == "risk" else np.full(K, 1.0 / K),
             np.zeros(K, dtype=int))
    rows, i, jump, retake = [], -1, 1, -1
    while i + 1 < len(grid):
        j = min(i + jump, len(grid) - 1)
        long = j > i + 1
        new, row, quiet = step(walk, state, float(grid[j]),
                               min(walk.max_iter, _PROBE) if long else walk.max_iter)
        changed = not rows or row[1:3] != rows[-1][1:3]
        if long and (changed or not quiet):
            jump, retake = 1, j                   # one value at a time up to j
            continue
        state, i = new, j
        jump = stride if i >= retake and not changed and quiet else 1
        rows.append(row)
        if (callback is not None and callback(j, row[0], row[1])) or row[2] == K:
            break
    return rows


_MAX_GRID = 100_000    # values of the default grid: about 0.8 MB, and as many fixed points


def path_grid(X, *, geometry: str = "euclidean", grid_ratio: float = 1.08,
              n_decades: float = 3.0) -> np.ndarray:
    """The default grid: ``0.5 lambda_c grid_ratio^j`` over ``n_decades`` decades.

    ``lambda_c`` is the annealing's predicted first split (:func:`predicted_first_split`).

    Examples
    --------
    >>> grid = path_grid([[-1.0, 0.0], [1.0, 0.0]], grid_ratio=10.0, n_decades=2)
    >>> grid.tolist()
    [0.5, 5.0, 50.0]
    """
    if not grid_ratio > 1 or not n_decades > 0:
        raise ValueError(f"grid_ratio must be > 1 and n_decades > 0, got {grid_ratio!r} and "
                         f"{n_decades!r}")
    size = n_decades * math.log(10) / math.log(grid_ratio) + 1
    if not size <= _MAX_GRID:
        raise ValueError(f"n_decades={n_decades!r} at grid_ratio={grid_ratio!r} is a grid of "
                         f"{size:.3g} inverse temperatures, more than {_MAX_GRID:,}; take "
                         "fewer decades or a larger ratio")
    lam_c = predicted_first_split(X, geometry=geometry)
    with np.errstate(over="ignore"):         # a grid past float64's range: checked by its user
        return 0.5 * lam_c * grid_ratio ** np.arange(int(size - 1 + 1e-9) + 1)


def temperature_path(
    X,
    max_clusters: int = 10,
    *,
    geometry: str = "euclidean",
    objective: str = "free_energy",
    inverse_temperatures=None,
    grid_ratio: float = 1.08,
    n_decades: float = 3.0,
    min_cluster_size: int | None = None,
    merge_tol: float = 1e-2,
    max_iter: int = 300,
    tol: float = 1e-7,
    stride: int = 1,
    callback: Callable[[int, float, int], bool | None] | None = None,
) -> TemperaturePath:
    """Follow the heads from one cluster to ``max_clusters`` as ``lambda`` grows.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Rows, finite, ``n >= 2``.
    max_clusters : int, default=10
        Number of heads; the path stops once they are all apart.
    geometry : {"euclidean", "sphere"}
    objective : {"free_energy", "risk"}
        The fixed point followed (module docstring): deterministic annealing, or the
        minimizer of the layer's risk (which never merges its heads).
    inverse_temperatures : array-like, optional
        The grid, strictly increasing; by default ``0.5 / lambda_c`` times ``grid_ratio ** j`` over
        ``n_decades`` decades, ``lambda_c`` the predicted first split of the annealing.
    grid_ratio, n_decades : float, default=1.08 and 3.0
        The default grid's ratio (``> 1``) and span (``> 0``), at most 100,000 values.
    min_cluster_size : int, optional
        Rows a cluster needs to be counted, at most ``n``; default ``max(5, n // 100)``,
        at most ``n // 2`` (so that two clusters of a few rows count).
    merge_tol : float
        Heads closer than ``merge_tol`` (``>= 0``) times the data's root-mean-square
        spread coincide.
    max_iter, tol :
        Fixed-point iterations per ``lambda`` (``>= 1``) and the head shift (relative to
        the spread, ``>= 0``) at which they stop.
    stride : int, default=1
        Grid values stepped at once while the count of clusters and of distinct heads
        stays the same. A stride across which either changes is taken again one value at
        a time from its start, so every change is found at the grid value where the path
        of single steps finds it; the values skipped are not in the result (a count that
        changes and changes back within one stride goes unseen). ``1``: every value.
    callback : callable, optional
        ``callback(index, lambda, n_clusters)`` after each grid value followed (progress
        bars; ``index`` in the grid); the path stops there when it returns ``True``.

    Returns
    -------
    TemperaturePath

    Examples
    --------
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.antipodal(d=2, sigma=0.2).sample(400, rng=0)
    >>> path = ac.temperature_path(X, max_clusters=4)
    >>> int(path.n_clusters[0]), path.plateau(2).width > 1.0
    (1, True)
    """
    Xt = as_tensor(X, name="X", dtype=torch.float64)
    if Xt.ndim != 2 or Xt.shape[0] < 2:
        raise ValueError(f"X must be an (n, d) array with n >= 2, got shape {tuple(Xt.shape)}")
    check_finite(Xt, "X")
    geometry, objective = as_geometry(geometry).name, _check_objective(objective)
    K = check_int(max_clusters, "max_clusters", 1)
    stride = check_int(stride, "stride", 1)
    n = Xt.shape[0]
    min_size = min(max(5, n // 100), n // 2) if min_cluster_size is None else check_int(
        min_cluster_size, "min_cluster_size", 1)
    if min_size > n:
        raise ValueError(f"min_cluster_size={min_size} is more than the {n} rows: no "
                         "cluster could be counted")
    max_iter = check_int(max_iter, "max_iter", 1)
    merge_tol, tol = check_nonnegative(merge_tol, "merge_tol"), check_nonnegative(tol, "tol")
    if inverse_temperatures is not None and np.ndim(inverse_temperatures) > 1:
        raise ValueError("inverse_temperatures must be one-dimensional, got shape "
                         f"{np.shape(inverse_temperatures)}")
    start, Xc = _center(Xt, geometry)
    peak = float(Xc.abs().max())          # the spread in units of the largest entry: its
    unit = Xc / peak if peak > 0 else Xc  # squares neither overflow nor underflow
    scale = peak * float(((unit - unit.mean(0)) ** 2).sum(1).mean().sqrt())
    if not scale > 0:
        raise ValueError("X has no spread: all rows are equal")
    if not 1e-150 < scale < 1e150:        # squared distances and lambda within float64
        raise ValueError(f"X's spread ({scale:.3g}) puts the path's inverse temperatures "
                         "out of float64's range; rescale the data")
    grid = (np.asarray(inverse_temperatures, dtype=float).ravel()
            if inverse_temperatures is not None else
            path_grid(Xt, geometry=geometry, grid_ratio=grid_ratio, n_decades=n_decades))
    if grid.size == 0 or not np.all(np.isfinite(grid) & (grid > 0)):
        raise ValueError("inverse_temperatures must be positive and finite"
                         if inverse_temperatures is not None else
                         f"the grid's inverse temperatures, {n_decades:g} decades from "
                         f"{grid[0]:.3g}, leave float64's range; take fewer decades")
    if np.any(np.diff(grid) <= 0):         # the path follows the heads as lambda grows
        raise ValueError("inverse_temperatures must increase strictly")
    walk = Walk(Xc.numpy(), Xc, geometry, objective, _KICK * scale, min_size,
                 merge_tol * scale, max_iter, tol * scale)
    with torch_threads(1):   # short (n, K) operations: one thread (see _threads)
        rows = _follow(walk, start.numpy(), grid, K, stride, callback)
    lam_, count_, distinct_, risk_, heads_, reps_ = zip(*rows, strict=True)
    offset = 0.0 if unit_heads(geometry) else Xt.mean(0).numpy()
    lams, counts = np.array(lam_), np.array(count_)
    grew = np.flatnonzero(np.diff(counts) > 0) + 1
    return TemperaturePath(
        lams, counts, np.array(distinct_), np.array(risk_), np.stack(heads_) + offset,
        lams[grew],
        predicted_first_split(Xt, geometry=geometry, objective=objective),
        plateaus_of(lams, counts, [(r + offset, z) for r, z in reps_]), geometry, objective,
        min_size,
        {"max_clusters": K, "grid_ratio": grid_ratio, "n_decades": n_decades,
         "merge_tol": merge_tol, "max_iter": max_iter, "tol": tol, "stride": stride})


def anneal_heads(X, n_clusters: int, *, geometry: str = "euclidean",
                 n_decades: float = 6.0) -> np.ndarray:
    """``n_clusters`` heads from the cold start: the annealing path followed until they are
    all apart (every group may split, whatever its size). No randomness: the same rows
    give the same heads.

    Returns
    -------
    ndarray of shape (n_clusters, d)
        The heads where the path stopped, just past the last split (the estimator's warm
        start carries them on); coincident heads remain only when ``lambda`` reached the
        end of the grid first.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[-1.0, 0.0], [-1.1, 0.1], [1.0, 0.0], [1.1, -0.1]])
    >>> np.sign(np.sort(anneal_heads(X, 2)[:, 0])).tolist()   # one head per pair of rows
    [-1.0, 1.0]
    """
    path = temperature_path(X, n_clusters, geometry=geometry, n_decades=n_decades,
                            min_cluster_size=1, **ANNEAL_SETTINGS)
    return path.heads[-1]



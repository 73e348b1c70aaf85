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
    (:func:`attnclust.fixed_point.fixed_point_fit`). Its second variation at the
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
from typing import NamedTuple

import numpy as np
import torch

from ._threads import torch_threads
from ._validation import as_generator, as_tensor, check_finite, check_int
from .fixed_point import fixed_point_fit
from .geometry import as_geometry

__all__ = ["FAST_SETTINGS", "ClusterChoice", "Plateau", "TemperaturePath", "anneal_heads",
           "choose_from_path", "path_grid",
           "predicted_first_split", "temperature_path"]

OBJECTIVES = ("free_energy", "risk")
MIN_PLATEAU_WIDTH = 1.0   # log-width a plateau of K >= 2 needs to be chosen over K = 1
_KICK = 1e-3              # symmetry-breaking perturbation, relative to the data's scale
_PROBE = 5                # fixed-point iterations a stride may take (see _follow)
_FLOOR = -700.0           # lowest shifted logit (see _attention)
# a coarser grid, looser fixed points and strides, for reading K off the path (the
# estimator's n_clusters="auto"): as accurate on benchmarks/bench_auto_k.py's 90
# mixtures (90/90), many times faster (docs/guide/temperature-path.md); init="anneal"
# keeps single steps and 100 iterations at tol 1e-4 on that grid
FAST_SETTINGS = {"grid_ratio": 1.12, "n_decades": 3.0, "max_iter": 20, "tol": 1e-3, "stride": 4}
ANNEAL_SETTINGS = {"grid_ratio": 1.12, "max_iter": 100, "tol": 1e-4}


@dataclass(frozen=True)
class Plateau:
    """A range of ``lambda`` over which the path counts the same number of clusters.

    ``start`` is the first grid value with this count, ``stop`` the first with another
    (the last grid value when the path ends on it, then ``closed`` is ``False``);
    ``width = log(stop / start)``. ``heads`` ``(k, d)`` and ``sizes`` ``(k,)`` are the
    counted clusters at ``start`` (their rows by largest attention).
    """

    n_clusters: int
    start: float
    stop: float
    width: float
    closed: bool
    heads: np.ndarray
    sizes: np.ndarray


class ClusterChoice(NamedTuple):
    """The number of clusters read off a path, the plateau that decided it, and why."""

    n_clusters: int
    plateau: Plateau | None
    reason: str


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
        found = [p for p in self.plateaus[1:] if p.n_clusters >= 2]
        if not found:
            return ClusterChoice(1, None, "the path never split into clusters of "
                                 f"{self.min_cluster_size} rows or more")
        best = max(found, key=lambda p: (p.width, -p.n_clusters))
        if best.width < min_width:
            return ClusterChoice(1, None, f"no plateau of K >= 2 spans lambda by a factor "
                                 f"{math.exp(min_width):.2f} (widest: K = {best.n_clusters}, "
                                 f"factor {math.exp(best.width):.2f})")
        return ClusterChoice(best.n_clusters, best, f"the widest plateau of the path: "
                             f"{best.n_clusters} clusters for lambda in [{best.start:.3g}, "
                             f"{best.stop:.3g}], a factor {math.exp(best.width):.2f}")

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

        ``ax``: two matplotlib axes to draw on (clusters, risk); new ones by default.
        """
        import matplotlib.pyplot as plt

        if ax is None:
            fig, ax = plt.subplots(2, 1, figsize=(6.4, 5.2), sharex=True,
                                   constrained_layout=True)
        fig = ax[0].figure
        lam = self.inverse_temperatures
        ax[0].step(lam, self.n_clusters, where="post", color="C0", label="clusters")
        ax[0].step(lam, self.n_distinct, where="post", color="C0", ls=":", alpha=0.7,
                   label="distinct heads")
        ax[1].plot(lam, self.risk, color="C1")
        for a in ax:
            a.set_xscale("log")
            for s in self.split_inverse_temperatures:
                a.axvline(s, color="0.6", lw=0.8)
            if self.predicted_first_split > 0:
                a.axvline(self.predicted_first_split, color="C3", ls="--", lw=1.0)
        ax[0].plot([], [], color="C3", ls="--", label="predicted first split")
        ax[0].set_ylabel("clusters")
        ax[0].legend(loc="upper left", fontsize=8)
        ax[1].set_ylabel(r"risk $\frac{1}{n}\sum_i \|x_i - T(x_i)\|^2$")
        ax[1].set_xlabel(r"inverse temperature $\lambda$")
        return fig


# -- the geometry-dependent pieces ---------------------------------------------------------
def _center(X: torch.Tensor, geometry: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The cold start ``(d,)`` and the rows the path works on (centred when Euclidean)."""
    mean = X.mean(0)
    if not _unit(geometry):
        return torch.zeros_like(mean), X - mean
    norm = torch.linalg.vector_norm(mean)
    if not float(norm) > 0:
        raise ValueError("the rows' mean is zero: the sphere's cold start needs a direction")
    return mean / norm, X


def _unit(geometry) -> bool:
    """Unit heads (the sphere): cold start at the mean's direction, tangent covariances."""
    return as_geometry(geometry).unit_heads


def _tangent_cov(cov: torch.Tensor, start: torch.Tensor, geometry: str) -> torch.Tensor:
    if not _unit(geometry):
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
    cov = torch.cov(Xc.T, correction=0).reshape(Xt.shape[1], Xt.shape[1])
    top = float(torch.linalg.eigvalsh(_tangent_cov(cov, start, geometry))[-1])
    if not top > 0:
        return math.inf
    return (float(torch.linalg.vector_norm(Xt.mean(0))) if _unit(geometry) else 1.0) / top


def _check_objective(objective) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be 'free_energy' or 'risk', got {objective!r}")
    return objective


def _groups(heads: np.ndarray, tol: float) -> np.ndarray:
    """Labels of coincident heads: single linkage at distance ``tol``, numbered by each
    group's first head (scipy's ``connected_components`` numbering). The transitive closure
    of the ``(K, K)`` adjacency by repeated squaring: 17 microseconds for 12 heads, where
    scipy's call costs 113 (its graph validation), once per ``lambda``."""
    reach = (((heads[:, None] - heads[None]) ** 2).sum(-1) <= tol * tol).astype(float)
    for _ in range(max(1, (len(heads) - 1).bit_length())):  # paths of 2, 4, ... edges
        reach = (reach @ reach > 0).astype(float)
    return np.unique(reach.argmax(1), return_inverse=True)[1].reshape(-1)


def _attention(X, heads, log_weights, lam, unit) -> np.ndarray:
    """``softmax_h(log p_h + lambda <x, mu_h> - b_h)`` of the rows ``X``, heads first:
    ``(K, n)`` (``b_h = lambda ||mu_h||^2 / 2`` for Euclidean heads, ``0`` on the sphere;
    ``log p_h = 0`` when ``None``).

    The shifted logits are floored at ``_FLOOR``: weights below ``e^-700`` are noise
    either way, and the subnormal numbers that ``exp`` returns below ``e^-708`` cost a
    hundred times a normal one on x86. In NumPy, heads first: at the path's sizes (``n``
    up to 5,000, ``K`` about 10) torch's cost per call dominates the arithmetic, and
    NumPy's max and sum over a short last axis cost several times those over the first
    (measured: 60 against 295 microseconds a fixed-point step, ``n = 2,000``, ``K = 8``,
    ``d = 2``)."""
    A = (lam * heads) @ X.T
    offset = np.zeros(len(heads)) if log_weights is None else log_weights.copy()
    if not unit:
        offset -= (0.5 * lam) * np.einsum("kd,kd->k", heads, heads)
    A += offset[:, None]
    A -= A.max(0)
    np.exp(np.maximum(A, _FLOOR, out=A), out=A)
    A /= A.sum(0)
    return A


def _project(heads: np.ndarray, geometry: str) -> np.ndarray:
    return as_geometry(geometry).projx(torch.from_numpy(heads)).numpy()


def _first_heads(labels: np.ndarray) -> np.ndarray:
    """The first head of each group ``0..G-1``."""
    return np.unique(labels, return_index=True)[1]


def _weighted_cov(X, w, mean) -> np.ndarray:
    """``sum_i w_i (x_i - m)(x_i - m)^T`` over the rows of weight above ``1e-12`` (the
    others change it by less than ``1e-12`` relative; with groups apart, each row counts
    for one group or a few, and the groups' covariances cost about one pass over ``X``)."""
    rows = np.flatnonzero(w > 1e-12)
    Xc = X[rows] - mean
    return (Xc.T * w[rows]) @ Xc


def _group_stats(X, heads, weights, labels, lam, geometry, objective, min_size):
    """Each group's split ratio ``(G,)``, principal direction ``(G, d)`` and size ``(G,)``:
    its attention-weighted covariance ``C_g`` (mean ``m_g``) makes the annealing map expand
    along the top eigenvector when ``lambda lambda_max(C_g) > 1`` (Euclidean; ``>
    ||m_g||`` on the sphere); the risk's map always expands. A group of fewer than
    ``min_size`` rows does not split (ratio 0)."""
    unit = _unit(geometry)
    A = _attention(X, heads, None if weights is None else np.log(weights), lam, unit)
    n_groups = int(labels.max()) + 1
    W = np.eye(n_groups)[labels].T @ A                            # (G, n) group attention
    sizes = np.bincount(labels[A.argmax(0)], minlength=n_groups)  # rows attending most
    total = W.sum(1)
    ratios, directions = np.zeros(n_groups), np.zeros((n_groups, X.shape[1]))
    grow = np.flatnonzero((total > 0) & (sizes >= min_size))
    if grow.size == 0:
        return ratios, directions, sizes
    means = (W[grow] @ X) / total[grow, None]
    cov = np.stack([_weighted_cov(X, W[g], m) / total[g] for g, m in zip(grow, means,
                                                                        strict=True)])
    norms = 1.0
    if unit:                                                      # tangent at the head
        h = heads[_first_heads(labels)[grow]]
        proj = np.eye(X.shape[1]) - h[:, :, None] * h[:, None, :]
        cov, norms = proj @ cov @ proj, np.linalg.norm(means, axis=1)
    vals, vecs = np.linalg.eigh(cov)
    top = vecs[:, :, -1]
    top *= np.sign(top[np.arange(len(grow)), np.abs(top).argmax(1)])[:, None]
    ratios[grow] = (math.inf if objective == "risk"
                    else lam * vals[:, -1] / np.maximum(norms, 1e-300))
    directions[grow] = top
    return ratios, directions, sizes


def _heads_per_group(ratios, sizes, n_heads, min_size):
    """The groups kept and the heads each gets: two or more for each group about to split
    (ratio > 1), round robin in order of decreasing ratio, the leftovers to the largest
    group. Spare heads come from groups that hold more than one, then from groups of fewer
    than ``min_size`` rows (whose rows other heads take over)."""
    keep = np.arange(len(ratios))
    splitting = np.flatnonzero(ratios > 1)
    spare = n_heads - len(keep)
    if spare < len(splitting):                   # free the heads of the smallest groups
        small = np.flatnonzero(sizes < min_size)
        small = small[np.argsort(sizes[small], kind="stable")][:len(splitting) - spare]
        keep = np.setdiff1d(keep, small)
        spare = n_heads - len(keep)
    ratios, sizes = ratios[keep], sizes[keep]
    order = np.argsort(-ratios, kind="stable")
    splitting = order[ratios[order] > 1]
    need = np.ones(len(keep), dtype=int)
    if len(splitting):                           # round robin over the splitting groups
        rounds, extra = divmod(spare, len(splitting))
        need[splitting] += rounds
        need[splitting[:extra]] += 1
        spare = 0
    need[np.argmax(sizes)] += spare              # leftovers
    return keep, need


def _kick(X, heads, weights, labels, lam, geometry, objective, step, min_size):
    """Give each group about to split two heads or more (:func:`_heads_per_group`) and
    move them by ``+-step`` along its principal direction; every head of a group that does
    not split sits at the group's head. Returns the heads, weights and groups, and whether
    any group was kicked."""
    ratios, directions, sizes = _group_stats(X, heads, weights, labels, lam, geometry,
                                             objective, min_size)
    keep, need = _heads_per_group(ratios, sizes, heads.shape[0], min_size)
    group = np.repeat(np.arange(len(keep)), need)                # new label of each head
    rank = np.arange(len(group)) - np.repeat(np.cumsum(need) - need, need)
    splits = (ratios[keep] > 1) & (need >= 2)
    sign = np.where(splits[group], np.where(rank % 2 == 0, 1.0, -1.0), 0.0)
    centres = heads[_first_heads(labels)[keep]]
    new_heads = centres[group] + (sign * step)[:, None] * directions[keep][group]
    new_weights = None
    if weights is not None:
        mass = np.bincount(labels, weights=weights, minlength=len(ratios))[keep]
        new_weights = (mass / need)[group]
    return _project(new_heads, geometry), new_weights, group, bool(splits.any())


def _annealing_fixed_point(X, heads, weights, lam, geometry, max_iter, tol):
    """Iterate ``mu_h = sum_i a_ih x_i / sum_i a_ih`` and ``p_h = mean_i a_ih``.

    Coincident heads (equal rows: the kick leaves each group at one or two points) stay
    together and keep their shares of the weight under this map, so it runs on the
    distinct points with their summed weights."""
    unit = _unit(geometry)
    points, where = np.unique(heads, axis=0, return_inverse=True)
    where = where.reshape(-1)
    total = np.bincount(where, weights=weights)
    share = weights / np.maximum(total, 1e-300)[where]
    logw, tiny = np.log(np.maximum(total, 1e-300)), np.finfo(X.dtype).tiny
    for _ in range(max_iter):
        A = _attention(X, points, logw, lam, unit)
        mass = A.sum(1)                                           # (k,)
        new = (A @ X) / np.maximum(mass, tiny)[:, None]
        if unit:                                                  # normalized on the sphere
            new = _project(new, geometry)
        new = np.where((mass > 0)[:, None], new, points)
        logw = np.log(np.maximum(mass / X.shape[0], 1e-300))
        shift = float(np.sqrt(((new - points) ** 2).sum(1)).max())
        points = new
        if shift <= tol:
            break
    return points[where], np.exp(logw)[where] * share, shift <= tol


def _snap(heads, weights, labels):
    """Heads of a group set to their (weighted) mean: a group that did not split is one."""
    w = np.ones(len(heads)) if weights is None else weights
    onehot = np.eye(int(labels.max()) + 1)[labels]                # (K, G)
    return ((onehot.T @ (w[:, None] * heads)) / (onehot.T @ w)[:, None])[labels]


def _summary(X, heads, labels, lam, geometry):
    """One head per group ``(G, d)``, the rows each attends most ``(G,)``, and the risk
    ``mean_i ||x_i - T(x_i)||^2`` of the layer with these heads."""
    reps = heads[_first_heads(labels)]
    A = _attention(X, reps, None, lam, _unit(geometry))
    sizes = np.bincount(A.argmax(0), minlength=len(reps))
    return reps, sizes, float(((X - A.T @ reps) ** 2).sum() / len(X))


def _plateaus(lams, counts, reps) -> tuple[Plateau, ...]:
    out, start = [], 0
    for i in range(1, len(lams) + 1):
        if i < len(lams) and counts[i] == counts[start]:
            continue
        stop = lams[i] if i < len(lams) else lams[-1]
        heads, sizes = reps[start]
        out.append(Plateau(int(counts[start]), float(lams[start]), float(stop),
                           float(math.log(stop / lams[start])), i < len(lams), heads, sizes))
        start = i
    return tuple(out)


class _Walk(NamedTuple):
    """What every step of a path needs: the rows (NumPy and torch views of the same
    memory) and the path's settings, tolerances in the data's units."""

    X: np.ndarray
    Xc: torch.Tensor
    geometry: str
    objective: str
    kick: float
    min_size: int
    merge_tol: float
    max_iter: int
    tol: float


def _step(walk: _Walk, state, lam: float, max_iter: int):
    """One grid value from ``state = (heads, weights, labels)``: kick, fixed point (at most
    ``max_iter`` iterations), groups, snap. Returns the new state, its row ``(lambda,
    clusters counted, distinct heads, risk, heads, (counted heads, their sizes))`` and
    whether it was quiet: no group kicked (none about to split) and the fixed point
    converged."""
    heads, weights, labels, kicked = _kick(walk.X, *state, lam, walk.geometry,
                                           walk.objective, walk.kick, walk.min_size)
    if walk.objective == "risk":
        fit = fixed_point_fit(walk.Xc, torch.from_numpy(heads), inverse_temperature=lam,
                              n_steps=max_iter, tol=walk.tol, geometry=walk.geometry)
        heads, converged = fit.heads.numpy(), fit.converged
    else:
        heads, weights, converged = _annealing_fixed_point(
            walk.X, heads, weights, lam, walk.geometry, max_iter, walk.tol)
    labels = _groups(heads, walk.merge_tol)
    heads = _snap(heads, weights, labels)
    reps, sizes, risk = _summary(walk.X, heads, labels, lam, walk.geometry)
    keep = sizes >= walk.min_size
    return (heads, weights, labels), (lam, int(keep.sum()), len(keep), risk, heads,
                                      (reps[keep], sizes[keep])), converged and not kicked


def _follow(walk: _Walk, start, grid, K, stride, callback) -> list[tuple]:
    """The loop over the grid, one row per ``lambda`` followed (:func:`_step`), until all
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
        new, row, quiet = _step(walk, state, float(grid[j]),
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
    lam_c = predicted_first_split(X, geometry=geometry)
    return 0.5 * lam_c * grid_ratio ** np.arange(
        int(n_decades * math.log(10) / math.log(grid_ratio) + 1e-9) + 1)


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
        The grid; by default ``0.5 / lambda_c`` times ``grid_ratio ** j`` over
        ``n_decades`` decades, ``lambda_c`` the predicted first split of the annealing.
    min_cluster_size : int, optional
        Rows a cluster needs to be counted; default ``max(5, n // 100)``.
    merge_tol : float
        Heads closer than ``merge_tol`` times the data's root-mean-square spread coincide.
    max_iter, tol :
        Fixed-point iterations per ``lambda`` and the head shift (relative to the
        spread) at which they stop.
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
    min_size = max(5, n // 100) if min_cluster_size is None else check_int(
        min_cluster_size, "min_cluster_size", 1)
    start, Xc = _center(Xt, geometry)
    scale = float(((Xc - Xc.mean(0)) ** 2).sum(1).mean().sqrt())
    if not scale > 0:
        raise ValueError("X has no spread: all rows are equal")
    grid = (np.asarray(inverse_temperatures, dtype=float).ravel()
            if inverse_temperatures is not None else
            path_grid(Xt, geometry=geometry, grid_ratio=grid_ratio, n_decades=n_decades))
    if grid.size == 0 or not np.all(np.isfinite(grid) & (grid > 0)):
        raise ValueError("inverse_temperatures must be positive and finite")
    walk = _Walk(Xc.numpy(), Xc, geometry, objective, _KICK * scale, min_size,
                 merge_tol * scale, max_iter, tol * scale)
    with torch_threads(1):   # short (n, K) operations: one thread (see _threads)
        rows = _follow(walk, start.numpy(), grid, K, stride, callback)
    lam_, count_, distinct_, risk_, heads_, reps_ = zip(*rows, strict=True)
    offset = 0.0 if _unit(geometry) else Xt.mean(0).numpy()
    lams, counts = np.array(lam_), np.array(count_)
    grew = np.flatnonzero(np.diff(counts) > 0) + 1
    return TemperaturePath(
        lams, counts, np.array(distinct_), np.array(risk_), np.stack(heads_) + offset,
        lams[grew],
        predicted_first_split(Xt, geometry=geometry, objective=objective),
        _plateaus(lams, counts, [(r + offset, z) for r, z in reps_]), geometry, objective,
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


class _Settled:
    """A :func:`temperature_path` callback that stops the path once
    :meth:`TemperaturePath.choose_n_clusters` can no longer change: the widest plateau so
    far (of ``K >= 2``, after the cold start's) is at least ``min_width`` wide, and wider
    than any later plateau can be (the rest of the grid) and than the current plateau can
    grow (to the end of the grid), unless that is the widest one itself. Widths are
    computed as :func:`_plateaus` computes them, and "wider" means by more than rounding,
    so that ties are broken on the cut path as on the whole one."""

    def __init__(self, grid, min_width: float):
        self.end, self.min_width = float(grid[-1]), min_width
        self.best = (-math.inf, 0)             # (width, -K) of the widest closed plateau
        self.count, self.start, self.plateaus = None, 0.0, 0

    def __call__(self, index: int, lam: float, n_clusters: int) -> bool:
        if n_clusters != self.count:
            if self.plateaus > 1 and self.count >= 2:
                self.best = max(self.best, (math.log(lam / self.start), -self.count))
            self.count, self.start, self.plateaus = n_clusters, lam, self.plateaus + 1
        current = (math.log(lam / self.start), -self.count)
        counts = self.plateaus > 1 and self.count >= 2
        best = max(self.best, current) if counts else self.best
        if best[0] < self.min_width:
            return False
        could = math.log(self.end / (lam if counts and best == current else self.start))
        return could < best[0] - 1e-9


def choose_from_path(rows: np.ndarray, max_clusters: int, *, geometry: str, random_state=None,
                     max_rows: int = 5_000) -> tuple[ClusterChoice, TemperaturePath]:
    """``n_clusters="auto"``: the :meth:`TemperaturePath.choose_n_clusters` of the path of
    preprocessed ``rows`` (a sample of ``max_rows`` drawn with ``random_state`` when there
    are more; at most ``max_clusters`` heads, :data:`FAST_SETTINGS`), and the path. The
    path stops once the choice is settled (no later plateau could be wider than the
    widest so far), so the chosen plateau may be the open last one.

    Examples
    --------
    >>> X = np.r_[np.full((20, 1), -1.0), np.full((20, 1), 1.0)]
    >>> X = X + np.random.default_rng(0).normal(0, 0.05, X.shape)
    >>> choice, path = choose_from_path(X, 4, geometry="euclidean")
    >>> choice.n_clusters
    2
    """
    if rows.shape[0] > max_rows:
        gen = as_generator(random_state, "random_state")
        rows = rows[np.sort(gen.choice(rows.shape[0], max_rows, replace=False))]
    rows = np.asarray(rows, dtype=np.float64)
    grid = path_grid(rows, geometry=geometry, grid_ratio=FAST_SETTINGS["grid_ratio"],
                     n_decades=FAST_SETTINGS["n_decades"])
    path = temperature_path(rows, min(max_clusters, rows.shape[0]), geometry=geometry,
                            inverse_temperatures=grid, callback=_Settled(grid, MIN_PLATEAU_WIDTH),
                            **FAST_SETTINGS)
    choice = path.choose_n_clusters()
    # the path also stops once all max_clusters heads are apart: when that left no plateau
    # wide enough, one blob splitting in a cascade looks like more clusters than heads
    # (12 blobs for 10 heads); nothing on the path tells them apart, so the reason says so
    if choice.plateau is None and max_clusters < rows.shape[0] and \
            path.n_distinct[-1] == max_clusters:
        choice = choice._replace(reason=f"{choice.reason}; the path stopped with all "
                                 f"max_clusters={max_clusters} heads apart, as it does for "
                                 "more clusters than that too: raise max_clusters if the "
                                 "rows may hold more")
    return choice, path

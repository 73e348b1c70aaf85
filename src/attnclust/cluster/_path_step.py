"""One grid value of the temperature path: symmetry breaking, fixed point, groups.

:func:`step` carries the heads of :func:`attnclust.temperature_path` from one inverse
temperature to the next (the module docstring of :mod:`attnclust.cluster.annealing` derives the
path); with the attention of row ``x_i`` to head ``h``

    a_ih = softmax_h(log p_h + lambda <x_i, mu_h> - b_h),   b_h = lambda ||mu_h||^2 / 2

(``b_h = 0`` on the sphere), it makes four moves:

1. **kick**: coincident heads form a group ``g``, attended with ``w_ig = sum_{h in g}
   a_ih``; its weighted mean ``m_g`` and covariance ``C_g`` give the split ratio ``r_g =
   lambda lambda_max(C_g)`` (on the sphere ``lambda lambda_max(P C_g P) / ||m_g||``, ``P``
   the projection on the tangent space at the group's head; ``0`` for a group of fewer
   than ``min_size`` rows). A group with ``r_g > 1`` (any group of ``min_size`` rows,
   for the risk) is about to split: it gets two heads or more, moved by ``+-kick``
   along the top eigenvector of ``C_g``; the other heads sit at their group's.
2. **fixed point**: ``mu_h = sum_i a_ih x_i / sum_i a_ih`` (normalized on the sphere) and
   ``p_h = mean_i a_ih`` (``"free_energy"``), or the layer's risk minimized by
   :func:`attnclust.cluster.fixed_point.fixed_point_fit` (``"risk"``);
3. **groups**: heads closer than ``merge_tol`` coincide (single linkage);
4. **snap**: the heads of a group are set to their (weighted) mean.

Notation
--------
=============  ===================  ==============================================
paper          code                 meaning
=============  ===================  ==============================================
``lambda``     ``lam``              inverse temperature, one value of the grid
``mu_h``       ``heads``            heads, shape ``(K, d)``
``p_h``        ``weights``          soft proportions (``"free_energy"`` only)
``a_ih``       ``A`` (heads first)  attention weights, shape ``(K, n)``
``g``          ``labels``           group of each head, numbered ``0..G-1``
``r_g``        ``ratios``           split ratio of each group
=============  ===================  ==============================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from .._spectral import DENSE_FEATURES, leading_eigenpairs
from ..layer.geometry import as_geometry
from .fixed_point import fixed_point_fit

__all__ = ["Walk", "step", "unit_heads"]

_FLOOR = -700.0           # lowest shifted logit (see _attention)


def unit_heads(geometry) -> bool:
    """Unit heads (the sphere): cold start at the mean's direction, tangent covariances.

    Examples
    --------
    >>> unit_heads("sphere"), unit_heads("euclidean")
    (True, False)
    """
    return as_geometry(geometry).unit_heads


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


def _wide_top(X, W, means, heads) -> tuple[np.ndarray, np.ndarray]:
    """The largest eigenvalue ``(G,)`` and its eigenvector ``(G, d)`` of each group's
    covariance (attention ``W`` ``(G, n)``, ``means`` ``(G, d)``; on the sphere projected
    on the tangent at ``heads``), from its rows, for wide ``X``
    (:func:`~attnclust._spectral.leading_eigenpairs`)."""
    vals, top = np.zeros(len(means)), np.zeros(means.shape)
    for g, (w, m) in enumerate(zip(W, means, strict=True)):
        rows = np.flatnonzero(w > 1e-12)                  # as _weighted_cov
        Y = X[rows] - m
        if heads is not None:
            Y -= np.outer(Y @ heads[g], heads[g])
        val, vec = leading_eigenpairs(Y, 1, w[rows])
        vals[g], top[g] = val[0], vec[:, 0]
    return vals, top


def _group_stats(X, heads, weights, labels, lam, geometry, objective, min_size):
    """Each group's split ratio ``(G,)``, principal direction ``(G, d)`` and size ``(G,)``:
    its attention-weighted covariance ``C_g`` (mean ``m_g``) makes the annealing map expand
    along the top eigenvector when ``lambda lambda_max(C_g) > 1`` (Euclidean; ``>
    ||m_g||`` on the sphere); the risk's map always expands. A group of fewer than
    ``min_size`` rows does not split (ratio 0)."""
    unit = unit_heads(geometry)
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
    h = heads[_first_heads(labels)[grow]] if unit else None          # tangent at the head
    norms = np.linalg.norm(means, axis=1) if unit else 1.0
    if X.shape[1] > DENSE_FEATURES:
        vals, top = _wide_top(X, W[grow], means, h)
    else:
        cov = np.stack([_weighted_cov(X, W[g], m) / total[g] for g, m in zip(grow, means,
                                                                            strict=True)])
        if unit:
            proj = np.eye(X.shape[1]) - h[:, :, None] * h[:, None, :]
            cov = proj @ cov @ proj
        vals, vecs = np.linalg.eigh(cov)
        vals, top = vals[:, -1], vecs[:, :, -1]
    top *= np.sign(top[np.arange(len(grow)), np.abs(top).argmax(1)])[:, None]
    ratios[grow] = (math.inf if objective == "risk"
                    else lam * vals / np.maximum(norms, 1e-300))
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
    unit = unit_heads(geometry)
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
    A = _attention(X, reps, None, lam, unit_heads(geometry))
    sizes = np.bincount(A.argmax(0), minlength=len(reps))
    return reps, sizes, float(((X - A.T @ reps) ** 2).sum() / len(X))


class Walk(NamedTuple):
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


def step(walk: Walk, state, lam: float, max_iter: int):
    """One grid value from ``state = (heads, weights, labels)``: kick, fixed point (at most
    ``max_iter`` iterations), groups, snap. Returns the new state, its row ``(lambda,
    clusters counted, distinct heads, risk, heads, (counted heads, their sizes))`` and
    whether it was quiet: no group kicked (none about to split) and the fixed point
    converged.

    Examples
    --------
    Two pairs of centred rows, both heads at the cold start: at ``lambda = 10`` the group
    splits, and the two clusters are counted.

    >>> X = np.array([[-1.0, 0.0], [-1.1, 0.1], [1.0, 0.0], [1.1, -0.1]])   # mean 0
    >>> walk = Walk(X, torch.from_numpy(X), "euclidean", "free_energy", kick=1e-3,
    ...             min_size=1, merge_tol=1e-2, max_iter=100, tol=1e-7)
    >>> start = (np.zeros((2, 2)), np.full(2, 0.5), np.zeros(2, dtype=int))
    >>> (heads, weights, labels), row, quiet = step(walk, start, 10.0, 100)
    >>> row[1], row[2], quiet            # clusters, distinct heads; kicked: not quiet
    (2, 2, False)
    """
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

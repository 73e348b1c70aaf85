"""EM of the shape choice's candidates on small data, in a few array operations per step.

The same EM as :func:`attnclust.cluster.shaped_fit.shaped_fit` at ``lambda = 1`` (its floor, its
start from a hard partition, its stopping rule and its safeguard against a step that
raises the objective), for rows held by one process and small enough to be read whole.
On such rows a step of the chunked solver costs its fixed overhead, not its arithmetic
(about 0.5 ms a step on 150 rows); here the E-step is two matrix products and the M-step
one, so the choice among shapes (:mod:`attnclust.cluster.shape_choice`) can fit two candidates
in the time of one chunked fit. The covariance's layout (scalar, per feature or full
matrix) is read off :meth:`~attnclust.cluster.covariance.Covariance.shape`. The quadratic forms
are ``x^T P_h x - 2 mu_h^T P_h x + mu_h^T P_h mu_h``, from the rows' second moments, on
rows centred and scaled to unit root-mean-square norm (the working space), where the
cancellation costs ``eps ||x||^2 / sigma^2`` of a head of spread ``sigma``.

With ``P_h = Sigma_h^{-1} = U_h U_h^T``, ``D`` the floor, the E-step's log-joint is

    l~_h(x) = log pi_h - d/2 log 2 pi + 1/2 log det P_h - 1/2 ||(x - mu_h) U_h||^2
              - 1/2 tr(P_h D),

and the M-step sets ``N_h = sum_i w_i q_ih``, ``pi_h = N_h / W``, ``mu_h`` the weighted
mean and ``Sigma_h`` the weighted covariance plus ``D`` (its diagonal for ``"diag"``).

Notation
--------
============  ==================  ==================================================
paper         code                meaning
============  ==================  ==================================================
``q_ih``      ``resp``            responsibilities ``(n, K)``
``D``         ``floor``           covariance floor ``(d,)``
``f``         ``loss``            minus the mean log-likelihood, per unit weight
============  ==================  ==================================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from .covariance import Covariance
from .shaped_fit import positive_factors

__all__ = ["LeanFit", "lean_em", "log_joint", "m_step", "row_moments"]

_LOG_2PI = math.log(2.0 * math.pi)


class LeanFit(NamedTuple):
    """The outcome of :func:`lean_em` (float64 NumPy arrays, working space)."""

    means: np.ndarray            # (K, d)
    covariances: np.ndarray      # shape of the covariance type, floor included
    weights: np.ndarray          # (K,)
    log_joint: np.ndarray        # (n, K) at the final parameters
    loss_curve: np.ndarray       # f at every accepted iterate
    counts: np.ndarray           # (K,) N_h of the final E-step
    n_iter: int
    converged: bool


def row_moments(X: np.ndarray, cov_layout: int) -> np.ndarray | None:
    """Per-row second moments in the layout of diagonal (``x * x``) or spherical
    (``||x||^2``) covariances, ``(n, m)``; full covariances take theirs head by head."""
    if cov_layout == 2:
        return X * X
    if cov_layout == 1:
        return (X * X).sum(1, keepdims=True)
    return None


def m_step(X, rw, cov_layout: int, floor, previous, total, moments):
    """The exact M-step of responsibilities times weights ``rw`` ``(n, K)``: moments
    about the origin of the (centred) rows, ``Sigma_h = E_h[x x^T] - mu_h mu_h^T + D``."""
    eps = np.finfo(np.float64).eps
    d = X.shape[1]
    counts = rw.sum(0)                                                      # (K,)
    alive = counts > 10 * eps * total
    n = np.maximum(counts, 10 * eps * total)
    means = (rw.T @ X) / n[:, None]                                         # (K, d)
    if cov_layout == 3:
        second = (rw.T[:, None, :] * X.T[None]) @ X / n[:, None, None]      # (K, d, d)
        covs = second - means[:, :, None] * means[:, None, :]
        covs = 0.5 * (covs + covs.transpose(0, 2, 1)) + np.diag(floor)
        covs = np.where(alive[:, None, None], covs, previous)
    elif cov_layout == 2:
        second = (rw.T @ moments) / n[:, None]                              # (K, d)
        covs = np.maximum(second - means * means, 0.0) + floor
        covs = np.where(alive[:, None], covs, previous)
    else:
        second = (rw.T @ moments)[:, 0] / n                                 # (K,)
        spread = np.maximum(second - (means * means).sum(1), 0.0) / d
        covs = np.where(alive, spread + floor.mean(), previous)
    return means, covs, np.log(n) - math.log(float(n.sum()))


def _inverse_cholesky(covs: np.ndarray, cov: Covariance) -> np.ndarray:
    """``L_h^{-1}`` with ``L_h L_h^T = Sigma_h`` ``(K, d, d)``; a covariance that rounding
    left not positive definite gets the jitter (and the warning) of
    :func:`attnclust.cluster.shaped_fit.shaped_fit`."""
    try:
        return np.linalg.inv(np.linalg.cholesky(covs))
    except np.linalg.LinAlgError:
        U = positive_factors(torch.from_numpy(np.ascontiguousarray(covs)), cov).numpy()
        return U.transpose(0, 2, 1)       # U U^T = Sigma^{-1}: U^T whitens as L^{-1} does


def log_joint(X, means, covs, log_w, cov: Covariance, cov_layout: int, floor, moments,
               blocks=None):
    """``l~_h(x)`` of the rows ``(n, K)``. Full: the whitened rows ``(x - mu_h) L_h^{-T}``
    of all heads in one matrix product ``(n, K d)``, their squares summed head by head by
    a second (``blocks``: ``(K d, K)`` block indicator); diag and spherical: the quadratic
    form from the rows' second moments, less the cross terms."""
    K, d = means.shape
    if cov_layout == 3:
        inv = _inverse_cholesky(covs, cov)                                  # (K, d, d)
        log_det = 2.0 * np.log(np.abs(np.diagonal(inv, axis1=1, axis2=2))).sum(1)
        trace = (inv * inv).sum(1) @ floor                 # (P_h)_jj = sum_k (L^{-1})_kj^2
        B = inv.transpose(2, 0, 1).reshape(d, K * d)       # column block h: L_h^{-T}
        Z = X @ B - np.einsum("kd,ked->ke", means, inv).reshape(1, K * d)
        blocks = np.kron(np.eye(K), np.ones((d, 1))) if blocks is None else blocks
        maha = (Z * Z) @ blocks                                             # (n, K)
    else:
        P = 1.0 / covs                                    # (K, d) or (K,)
        if cov_layout == 2:
            log_det, trace, quad = np.log(P).sum(1), P @ floor, moments @ P.T
            Pm = P * means
        else:
            log_det, trace, quad = d * np.log(P), P * floor.sum(), moments @ P[None]
            Pm = P[:, None] * means
        maha = quad - 2.0 * X @ Pm.T + (Pm * means).sum(1)                 # (n, K)
    bias = log_w - 0.5 * d * _LOG_2PI + 0.5 * log_det - 0.5 * trace
    return bias - 0.5 * maha


def lean_em(X: np.ndarray, labels: np.ndarray, n_clusters: int, cov: Covariance,
            floor: np.ndarray, *, sample_weight: np.ndarray | None = None, tol: float = 1e-3,
            max_iter: int = 300, start_scale: float = 1.0) -> LeanFit:
    """EM at ``lambda = 1`` from the hard partition ``labels`` (as
    :func:`~attnclust.cluster.shaped_fit.shaped_fit` from the partition of its start means).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows, float64.
    labels : ndarray of shape (n,)
        The starting partition (heads ``0..n_clusters-1``).
    cov : Covariance
        The covariance type.
    floor : ndarray of shape (d,)
        The covariance floor ``D``.
    sample_weight : ndarray of shape (n,), optional
    tol : float, default=1e-3
        Stop when a step lowers ``f`` by less than ``tol``.
    max_iter : int, default=300
    start_scale : float, default=1.0
        The covariance a head without rows starts from (times the identity).

    Examples
    --------
    >>> from attnclust.cluster.covariance import Full
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(size=(200, 2)) * [3.0, 0.3],
    ...                     rng.normal(size=(200, 2)) * [3.0, 0.3] + [0.0, 2.0]])
    >>> fit = lean_em(X, (X[:, 1] > 1).astype(int), 2, Full(), np.full(2, 1e-6))
    >>> fit.converged, fit.covariances.shape, bool(abs(fit.covariances[0, 0, 0] - 9) < 2)
    (True, (2, 2, 2), True)
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    K = int(n_clusters)
    layout = len(cov.shape(K, d))
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = float(n if w is None else w.sum())
    moments = row_moments(X, layout)
    blocks = np.kron(np.eye(K), np.ones((d, 1))) if layout == 3 else None

    def e_step(params):
        lj = log_joint(X, *params, cov, layout, floor, moments, blocks)
        top = lj.max(1, keepdims=True)
        e = np.exp(lj - top)
        s = e.sum(1, keepdims=True)
        lse = (top + np.log(s))[:, 0]
        loss = -float(lse.sum() if w is None else w @ lse) / total
        return lj, e / s, loss

    resp = np.zeros((n, K))
    resp[np.arange(n), labels] = 1.0
    rw = resp if w is None else resp * w[:, None]
    previous = {3: np.broadcast_to(np.eye(d), (K, d, d)), 2: np.ones((K, d)),
                1: np.ones(K)}[layout] * start_scale
    means, covs, log_w = m_step(X, rw, layout, floor, previous, total, moments)
    lj, resp, loss = e_step((means, covs, log_w))
    losses, n_iter = [loss], 0
    converged = False
    slack = 1e-12
    for _ in range(int(max_iter)):
        rw = resp if w is None else resp * w[:, None]
        new = m_step(X, rw, layout, floor, covs, total, moments)
        new_lj, new_resp, new_loss = e_step(new)
        n_iter += 1
        drop = loss - new_loss
        if drop < -slack * (1.0 + abs(loss)):     # rounding, or a dead head: stop here
            converged = True
            break
        means, covs, log_w = new
        lj, resp, loss = new_lj, new_resp, new_loss
        losses.append(loss)
        if drop < tol:
            converged = True
            break
    counts = (resp if w is None else resp * w[:, None]).sum(0)
    return LeanFit(means, covs, np.exp(log_w), lj, np.asarray(losses), counts, n_iter,
                   converged)

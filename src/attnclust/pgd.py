"""Projected gradient descent on the product of spheres (PGD_rho).

Minimizes the regularized risk ``R_rho(mu) = R(mu) + rho Pen(mu)`` over heads
``mu = (mu_1..mu_K)`` on ``S^{d-1}``, one step per iteration ``t``:

    g_h    = grad_{mu_h} R_rho(mu)                       (Euclidean, autograd)
    xi_h   = g_h - <g_h, mu_h> mu_h                      (Riemannian gradient)
    mu_h  <- normalize(mu_h - eta xi_h)                  (or eta g_h if not riemannian)

``R`` is the population risk of a :class:`~attnclust.GaussianMixture` (full batch;
exact quadrature for ``K <= 3``, QMC with common random numbers otherwise) or the
empirical risk of a data array (full batch, or mini-batch SGD with ``batch_size``).
For ``K = 2`` on the exact population risk with no penalty or the repulsion penalty,
the step uses a fused numpy evaluation of the risk and its analytic gradient (same
quadrature rule; checked against autograd in the tests), which makes 10,000 steps
take about a second.

Schedules (``t = 0..n_steps-1``):

- ``rho_schedule="constant"``: ``rho_t = rho``; ``"decay"``: ``rho_t = rho (1 - 2t/T)``
  for ``t < T/2`` and ``0`` afterwards, so the end point minimizes ``R`` itself.
- ``temperature_schedule=None``: ``lambda_t = lambda``; ``"anneal"``: geometric from
  ``lambda / 100`` to ``lambda`` over the first half of the steps, then constant.
- A callable ``t -> value`` for either.

**Data-parallel** (``reduce``, :func:`attnclust.distributed.pgd_distributed`): with the
rows split into shards ``X_r`` of ``n_r`` rows, ``R = sum_r (n_r / n) R_r`` and so
``g = sum_r (n_r / n) grad R_r``: one all-reduce of ``(R, g)`` per step, after which
every rank takes the same step. Mini-batches are stratified: shard ``r`` draws
``b n_r / n`` of the ``b`` rows.

On data, the iterate stays on the data's device (CUDA included); the host reads a
number only at recorded steps and, when ``tol > 0``, for the stopping test.

The stopping rule ``||xi|| < tol`` is checked only once the named schedules have
finished (from ``t = T/2`` for ``"decay"`` / ``"anneal"``; at every step for
callables, whose caller owns them).

Notes
-----
**Temperature bias.** At finite ``lambda`` the minimizer of ``R`` is not the set of
centroids: every token is pulled toward a *soft* mixture of the heads, so a head
sitting exactly on its centroid quantizes its own cluster toward the other head; the
heads move apart to compensate. Measured on the running example
(``GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)``, exact risk, PGD from an init
on ``M`` until ``||xi|| < 1e-10``; ``tests/test_pgd.py`` re-checks the direction):

    ==========  ==============  ==============  ====================
    lambda      distance max    angle (deg)     heads
    ==========  ==============  ==============  ====================
    0.847       0.2343          116.9           apart, symmetric
    1           0.2237          115.7           apart, symmetric
    3           0.0747          98.6            apart, symmetric
    10          0.00811         90.93           apart, symmetric
    30          0.00330         90.38           apart, symmetric
    ==========  ==============  ==============  ====================

(``0.847 = 1 / (1 + 2 sigma^2)``; the centroids are at 90 degrees; every seed tried
gives the same point, with ``mu_h = cos(t) mu*_h + sin(t) (-mu*_{1-h})``: the heads
rotate away from each other symmetrically, within the plane of the centroids. The
heads do *not* merge from an init on ``M``, even at ``lambda = 1 / (1 + 2 sigma^2)``.
The bias decays with ``lambda`` but not to zero: at ``lambda = 100`` it is still
``0.0019``, the bias of hard (Voronoi) quantization of a noisy mixture, whose cell
means sit further apart than the centroids.)

Below the table the bias is *not* monotone and the heads still do not merge: the
angle peaks near ``lambda = 0.7`` (117.5 degrees, distance 0.240) and returns toward
90 degrees as ``lambda -> 0`` (112.4 degrees at ``lambda = 0.3``, 100.9 at ``0.1``,
96.1 at ``0.05``; three seeds each, identical end points). So on the sphere and from
an init on ``M`` this example shows no split temperature: the heads are apart at
every ``lambda`` we tried, unlike unconstrained soft k-means, whose centers merge
below ``1 / (1 + 2 sigma^2)``.

Notation
--------
==============  ===================  ========================================
paper           code                 meaning
==============  ===================  ========================================
``mu_h``        ``heads[h]``         head ``h`` on ``S^{d-1}``
``eta``         ``step_size``        step size
``rho``         ``rho``              penalty weight
``lambda``      ``temperature``      inverse temperature
``M``           ``init_on_manifold``  heads in ``span(mu*_1..mu*_K)``
==============  ===================  ========================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from . import risk as _risk
from ._validation import as_generator, as_tensor, check_finite, check_int, check_temperature
from .heads import head_weights
from .metrics import centroid_distance
from .mixture import GaussianMixture
from .sphere import random_sphere

__all__ = ["PGDResult", "PGDHistory", "pgd", "init_on_manifold", "init_on_sphere"]

_PENALTIES = (None, "repulsion", "balance")
_RHO_SCHEDULES = ("constant", "decay")
_TEMPERATURE_SCHEDULES = (None, "anneal")
_ANNEAL_RATIO = 100.0  # "anneal" starts at lambda / _ANNEAL_RATIO
_SCHEDULE_FRACTION = 0.5  # "decay" and "anneal" finish after this fraction of the steps


class PGDHistory(NamedTuple):
    """Quantities recorded every ``record_every`` steps and at the last step."""

    step: np.ndarray
    """Iteration index ``t`` of each record, shape ``(T,)``."""
    risk: np.ndarray
    """Risk ``R`` (without the penalty) at the recorded heads."""
    distance_max: np.ndarray
    """Largest matched distance to the centroids (NaN when they are unknown)."""
    distance_rms: np.ndarray
    """Root-mean-square matched distance to the centroids."""
    gram: np.ndarray
    """Heads' Gram matrix, shape ``(T, K, K)``."""
    grad_norm: np.ndarray
    """Frobenius norm of the Riemannian gradient of ``R + rho_t Pen``."""
    temperature: np.ndarray
    """``lambda_t``."""
    rho: np.ndarray
    """``rho_t``."""


class PGDResult(NamedTuple):
    """Outcome of :func:`pgd`."""

    heads: torch.Tensor
    """Final heads, shape ``(K, d)``, float64, detached, on the device of the data (of
    ``heads0`` for a mixture)."""
    history: PGDHistory
    n_iter: int
    """Number of updates performed."""
    converged: bool
    """Whether the Riemannian gradient norm went below ``tol``."""


# --------------------------------------------------------------------------------------
# Initializations
# --------------------------------------------------------------------------------------
def init_on_manifold(mix: GaussianMixture, rng=None, *, n_heads: int | None = None):
    """Heads uniform on the unit sphere of ``span(mu*_1..mu*_K)`` (the manifold ``M``).

    An orthonormal basis of the span comes from an SVD of the centroids; each head is
    that basis times a normalized standard Gaussian vector of coefficients.

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2)
    >>> heads = ac.init_on_manifold(mix, rng=0)
    >>> heads.shape, float(heads[:, 1:9].abs().max())
    (torch.Size([2, 10]), 0.0)
    """
    _risk._check_mixture(mix)
    n_heads = check_int(mix.k if n_heads is None else n_heads, "n_heads", 1)
    _, sv, vt = np.linalg.svd(mix.centroids, full_matrices=False)
    basis = vt[sv > 1e-10 * sv[0]]  # (r, d) orthonormal rows
    coef = as_generator(rng).standard_normal((int(n_heads), basis.shape[0]))
    coef /= np.linalg.norm(coef, axis=1, keepdims=True)
    heads = coef @ basis
    heads /= np.linalg.norm(heads, axis=1, keepdims=True)
    return torch.from_numpy(heads)


def init_on_sphere(k: int, d: int, *, rng=None) -> torch.Tensor:
    """``k`` heads uniform on ``S^{d-1}`` ("random initialization").

    Examples
    --------
    >>> init_on_sphere(3, 5, rng=0).shape
    torch.Size([3, 5])
    """
    return random_sphere(check_int(k, "k", 1), check_int(d, "d", 1), rng=rng)


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------
def _rho_schedule(schedule, rho: float, n_steps: int) -> tuple[Callable[[int], float], float]:
    """The schedule ``t -> rho_t`` and the step from which it is finished."""
    half = _SCHEDULE_FRACTION * n_steps
    if callable(schedule):
        return (lambda t: float(schedule(t))), 0
    if schedule == "constant":
        return (lambda t: rho), 0
    if schedule == "decay":
        return (lambda t: rho * max(0.0, 1.0 - t / half) if half > 0 else 0.0), half
    raise ValueError(f"rho_schedule must be one of {_RHO_SCHEDULES} or a callable, "
                     f"got {schedule!r}")


def _temperature_schedule(schedule, lam: float, n_steps: int):
    span = _SCHEDULE_FRACTION * n_steps
    if callable(schedule):
        return (lambda t: check_temperature(schedule(t))), 0
    if schedule is None:
        return (lambda t: lam), 0
    if schedule == "anneal":
        def anneal(t: int) -> float:
            frac = min(1.0, t / span) if span > 0 else 1.0
            return lam * _ANNEAL_RATIO ** (frac - 1.0)
        return anneal, span
    raise ValueError(f"temperature_schedule must be one of {_TEMPERATURE_SCHEDULES} or a "
                     f"callable, got {schedule!r}")


# --------------------------------------------------------------------------------------
# PGD
# --------------------------------------------------------------------------------------
def pgd(
    objective,
    heads0,
    *,
    temperature: float,
    step_size: float = 0.1,
    n_steps: int = 1000,
    penalty=None,
    rho: float = 0.0,
    rho_schedule="constant",
    temperature_schedule=None,
    riemannian: bool = True,
    tol: float = 0.0,
    record_every: int = 10,
    batch_size: int | None = None,
    centroids=None,
    rng=None,
    method: str = "auto",
    n_samples: int = 2**14,
    callback: Callable[[int, torch.Tensor], None] | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> PGDResult:
    """Projected (Riemannian) gradient descent of ``R + rho Pen`` on the sphere.

    Parameters
    ----------
    objective : GaussianMixture or array-like of shape (n, d)
        Population risk of a mixture, or empirical risk of data.
    heads0 : array-like of shape (K, d)
        Initial heads (projected to the sphere).
    temperature : float
        Target inverse temperature ``lambda``.
    step_size : float, default=0.1
        ``eta > 0``.
    n_steps : int, default=1000
        Maximum number of updates.
    penalty : {None, "repulsion", "balance"} or callable, default=None
        ``Pen``; a callable maps a ``(K, d)`` tensor to a differentiable scalar.
    rho : float, default=0.0
        Penalty weight.
    rho_schedule : {"constant", "decay"} or callable, default="constant"
    temperature_schedule : {None, "anneal"} or callable, default=None
    riemannian : bool, default=True
        Step along the Riemannian gradient; ``False`` steps along the Euclidean one
        before projecting.
    tol : float, default=0.0
        Stop when the Riemannian gradient norm is below ``tol`` (schedules finished).
    record_every : int, default=10
    batch_size : int, optional
        Mini-batch size for data (stochastic steps; batches drawn with ``rng``).
    centroids : array-like of shape (K', d), optional
        Reference for the recorded distances (default: the mixture's centroids).
    rng : int or numpy Generator, optional
        Mini-batch sampling; seed of the QMC points for ``K > 3`` mixtures.
    method : {"auto", "exact", "qmc"}, default="auto"
        Population risk rule (see :func:`attnclust.population_risk`).
    n_samples : int, default=2**14
        QMC points.
    callback : callable ``(step, heads) -> None``, optional
        Called after each update with the new heads (on the device of the data, except
        on the fused ``K = 2`` population path, where they are on the CPU).
    reduce : callable ``tensor -> tensor``, optional
        Data-parallel hook: the sum of a tensor over the ranks of a process group, the
        same result on every rank (see :func:`attnclust.distributed.pgd_distributed`).
        ``objective`` is then this rank's rows; each step all-reduces the global risk
        and its gradient (``1 + K d`` numbers), so every rank takes the same step and
        records the global risk. With ``batch_size`` (the global batch), each rank
        draws ``round(batch_size n_r / n)`` rows of its shard with its own ``rng``
        (stratified sampling: the summed gradient is unbiased for the full one).

    Returns
    -------
    PGDResult

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> res = ac.pgd(mix, ac.init_on_manifold(mix, rng=0), temperature=30.0,
    ...              step_size=0.5, n_steps=1000)
    >>> ac.centroid_distance(res.heads, mix.centroids).max < 1e-2
    True
    """
    # -- inputs -----------------------------------------------------------------------
    is_mixture = isinstance(objective, GaussianMixture)
    if is_mixture:
        X = None
        d = objective.d
        if batch_size is not None:
            raise ValueError("batch_size applies to data arrays, not to a GaussianMixture")
    else:
        X = as_tensor(objective, name="objective", dtype=torch.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"objective must be a GaussianMixture or a non-empty (n, d) "
                             f"array, got shape {tuple(X.shape)}")
        check_finite(X, "objective")
        d = X.shape[1]
    # data-parallel: X is this rank's shard; n_total rows over all ranks, and the shard's
    # share n_r / n weighs its (mean) risk so that the shares sum to the global risk
    n_total = None if X is None else X.shape[0]
    if reduce is not None:
        if is_mixture:
            raise ValueError("reduce applies to data shards, not to a GaussianMixture")
        if not callable(reduce):
            raise ValueError(f"reduce must be a callable (sum over ranks), got {reduce!r}")
        n_total = int(reduce(torch.tensor([float(X.shape[0])], dtype=torch.float64)).item())
    share = 1.0 if X is None else X.shape[0] / n_total
    if batch_size is not None:
        batch_size = min(check_int(batch_size, "batch_size", 1), n_total)
        # each shard draws its proportional part of the global batch (stratified sampling)
        batch_size = min(X.shape[0], max(1, round(batch_size * share)))
    heads = as_tensor(heads0, name="heads0", dtype=torch.float64).detach().clone()
    if heads.ndim != 2 or heads.shape[0] < 1:
        raise ValueError(f"heads0 must have shape (K, d), got {tuple(heads.shape)}")
    if heads.shape[1] != d:
        raise ValueError(f"heads0 must have d={d} columns, got {heads.shape[1]}")
    check_finite(heads, "heads0")
    norms = heads.norm(dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError("heads0 has a zero row, which has no direction")
    # everything but the fused K = 2 path runs on the device of the data (else of
    # heads0), the (K, d) iterate included; the fused path is NumPy on the host
    device = X.device if X is not None else heads.device
    heads = (heads / norms).to(device)
    K = heads.shape[0]
    lam = check_temperature(temperature)
    step_size = float(step_size)
    if not np.isfinite(step_size) or step_size <= 0:
        raise ValueError(f"step_size must be a positive finite number, got {step_size!r}")
    n_steps = check_int(n_steps, "n_steps", 0)
    record_every = check_int(record_every, "record_every", 1)
    if not (callable(penalty) or penalty in _PENALTIES):
        raise ValueError(f"penalty must be one of {_PENALTIES} or a callable, got {penalty!r}")
    rho = float(rho)
    if not np.isfinite(rho) or rho < 0:
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    if method not in _risk._METHODS:
        raise ValueError(f"method must be one of {_risk._METHODS}, got {method!r}")
    rho_at, rho_done = _rho_schedule(rho_schedule, rho, n_steps)
    lam_at, lam_done = _temperature_schedule(temperature_schedule, lam, n_steps)
    stop_from = max(rho_done, lam_done)
    if centroids is None and is_mixture:
        centroids = objective.centroids
    if centroids is not None:
        centroids = as_tensor(centroids, name="centroids", dtype=torch.float64).cpu().numpy()
        if centroids.ndim != 2 or centroids.shape[1] != d:
            raise ValueError(f"centroids must have shape (K', {d}), got {centroids.shape}")
        if centroids.shape[0] > K:
            centroids = None  # fewer heads than centroids: no matching, distances NaN
    gen = as_generator(rng)
    qmc_seed = int(rng) if isinstance(rng, (int, np.integer)) else int(gen.integers(2**31))

    # -- the gradient of one step ---------------------------------------------------------
    # evaluate(heads, lam_t, rho_t, batch) -> (risk, Euclidean gradient of R + rho_t Pen),
    # NumPy on the fused path, tensors on the device otherwise (no host round trip)
    fast = (is_mixture and K == 2 and method in ("auto", "exact")
            and penalty in (None, "repulsion"))
    if fast:
        mix = objective
        second = _risk._second_moment(mix)
        rule = _risk._rule()
        cents, pi = mix.centroids.copy(), mix.weights.copy()
        heads = heads.cpu().numpy()

        def evaluate(h: np.ndarray, lam_t: float, rho_t: float, _batch):
            value, grad = _risk._risk_and_grad_k2(h, cents, pi, mix.sigma, lam_t, second, rule)
            if penalty == "repulsion" and rho_t > 0:
                g01 = h[0] @ h[1]
                grad = grad + rho_t * 2.0 * g01 * h[::-1]  # d <mu0, mu1>^2
            return value, grad
    else:
        def evaluate(h: torch.Tensor, lam_t: float, rho_t: float, batch):
            ht = h.detach().requires_grad_(True)
            xb = None if is_mixture else (X if batch is None else X[batch])
            if is_mixture:
                r = _risk.population_risk(ht, objective, temperature=lam_t, method=method,
                                          n_samples=n_samples, rng=qmc_seed)
            else:
                r = _risk.empirical_risk(ht, xb, temperature=lam_t)
            data_part = r * share  # this shard's part of the (global) risk
            pen = None
            if penalty is not None and rho_t > 0:
                if callable(penalty):
                    pen = penalty(ht)
                elif penalty == "repulsion":
                    pen = _risk.repulsion(ht)
                elif reduce is not None:
                    # Pen = |A - pi|^2 with A = sum_r share_r mean_{shard r} a: its gradient
                    # is sum_r grad <c, A_r>, c = 2 (A - pi) fixed (one more all-reduce, K numbers)
                    part = head_weights(xb, ht, temperature=lam_t).mean(0) * share  # (K,)
                    coef = 2.0 * (reduce(part.detach()) - 1.0 / K)
                    data_part = data_part + rho_t * (coef * part).sum()
                else:
                    pen = _risk.balance(ht, objective if is_mixture else xb, temperature=lam_t,
                                        n_samples=n_samples, rng=qmc_seed)
            if reduce is None:
                total = data_part if pen is None else data_part + rho_t * pen
                (grad,) = torch.autograd.grad(total, ht)
                return r.detach(), grad
            (grad,) = torch.autograd.grad(data_part, ht)
            # one all-reduce of 1 + K d numbers: the global risk and its gradient
            buf = reduce(torch.cat([(r * share).detach().reshape(1), grad.reshape(-1)]))
            value, grad = buf[0], buf[1:].view_as(grad)
            if pen is not None:  # the same on every rank: added after the sum
                grad = grad + rho_t * torch.autograd.grad(pen, ht)[0]
            return value, grad

    def full_risk(h: torch.Tensor, lam_t: float) -> float:
        with torch.no_grad():
            r = _risk.empirical_risk(h, X, temperature=lam_t, batch_size=65536) * share
            return float(r if reduce is None else reduce(r.reshape(1))[0])

    def host(a) -> np.ndarray:
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)

    # -- the loop ---------------------------------------------------------------------------
    # The update is written once for NumPy (fused path) and torch (the rest). On the torch
    # path the host sees a number only when it needs one: at recorded steps and, with tol,
    # for the stopping test (a scalar copy each step).
    records: dict[str, list] = {f: [] for f in PGDHistory._fields}
    on_host = isinstance(heads, np.ndarray)

    def permutation():
        perm = gen.permutation(X.shape[0])
        return perm if on_host else torch.from_numpy(perm).to(device)

    order = None if batch_size is None else permutation()
    cursor = 0

    def record(t, h, risk_value, gnorm, lam_t, rho_t):
        if batch_size is not None:
            risk_value = full_risk(h, lam_t)
        h = host(h)
        if centroids is not None:
            dist = centroid_distance(h, centroids)
            dmax, drms = dist.max, dist.rms
        else:
            dmax = drms = float("nan")
        for key, val in zip(PGDHistory._fields,
                            (t, float(risk_value), dmax, drms, h @ h.T, gnorm, lam_t, rho_t),
                            strict=True):
            records[key].append(val)

    converged = False
    t = 0
    for t in range(n_steps + 1):
        lam_t, rho_t = lam_at(t), rho_at(t)
        batch = None
        if batch_size is not None:
            if cursor + batch_size > len(order):
                order, cursor = permutation(), 0
            batch = order[cursor:cursor + batch_size]
            cursor += batch_size
        value, grad = evaluate(heads, lam_t, rho_t, batch)
        rgrad = grad - (grad * heads).sum(1)[:, None] * heads  # tangent part
        gnorm_sq = (rgrad * rgrad).sum()
        check_stop = tol > 0 and t >= stop_from
        due = t == n_steps or t % record_every == 0
        if on_host or check_stop or due:
            gnorm = float(gnorm_sq) ** 0.5
            if not np.isfinite(gnorm):
                raise ValueError(f"the gradient became non-finite at step {t}; "
                                 "lower step_size")
            stop = check_stop and gnorm < tol
            if stop or due:
                record(t, heads, value, gnorm, lam_t, rho_t)
            if stop:
                converged = True
                break
        if t == n_steps:
            break
        heads = heads - step_size * (rgrad if riemannian else grad)
        heads = heads / ((heads * heads).sum(1)[:, None]) ** 0.5
        if callback is not None:
            callback(t + 1, torch.from_numpy(heads.copy()) if on_host else heads.clone())

    history = PGDHistory(*(np.asarray(records[f], dtype=np.int64 if f == "step" else float)
                           for f in PGDHistory._fields))
    final = torch.from_numpy(heads.copy()).to(device) if on_host else heads.detach().clone()
    return PGDResult(final, history, int(t), converged)

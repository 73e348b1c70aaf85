"""Population and empirical risk of the K-head layer, and the penalties of ``R_rho``.

The risk of heads ``mu = (mu_1..mu_K)`` at inverse temperature ``lambda`` is

    R(mu) = E || X - T_mu(X) ||^2,     T_mu(x) = sum_h a_h(x) mu_h,
    a(x) = softmax(lambda P),          P_h = <x, mu_h>   (on the sphere).

Expanding the square, ``R = E||X||^2 - 2 E[a . P] + E[a^T G a]`` with ``G = mu mu^T``
the heads' Gram matrix, and ``E||X||^2 = sum_k pi_k ||mu*_k||^2 + d sigma^2``. Given
``Z = k`` the projections are Gaussian, ``P ~ N(mu mu*_k, sigma^2 G)``, so ``R`` is a
``K``-dimensional Gaussian integral whatever ``d`` is. Better still, the softmax only
sees the differences ``D_h = P_h - P_K = <X, mu_h - mu_K>`` (``h < K``), and
``a . P = P_K + sum_{h<K} a_h D_h`` with ``E[P_K] = <mu*_k, mu_K>``, so

    R = E||X||^2 + sum_k pi_k ( -2 <mu*_k, mu_K> + E_k[ -2 sum_{h<K} a_h D_h + a^T G a ] ),

an integral over ``K - 1`` variables ``D = W X`` (rows of ``W``: ``mu_h - mu_K``).

**Exact rule** (``K <= 3``). Write ``D = W mu*_k + sigma (W Q) z`` with ``z ~ N(0, I)``
and ``Q`` an orthonormal basis of the span of the rows of ``W`` (Householder QR, so
``W Q`` is lower triangular). The softmax is sharp, with width ``1 / (lambda sigma
||w||)`` in ``z``, across the lines where two logits tie; for ``K = 2`` there is one
such point per mixture component, for ``K = 3`` the first coordinate sees one point
and, for each outer node, the inner coordinate sees two. Each 1-D integral uses a
composite Gauss-Legendre rule on ``[-8.5, 8.5]`` (Gaussian mass outside: ``1e-17``)
whose breakpoints are the union of a uniform grid of width 1 and the points
``c +- eps * (1, 2, 4, ..., 32)`` graded toward each sharp point ``c`` of width
``eps``, with 6 nodes per panel: a fixed-size rule (so vectorized) whose panels
resolve the softmax at any ``lambda sigma`` (plain Gauss-Hermite does not). The
nodes are placed from detached values and the gradient is the integral of the
integrand's gradient (differentiation under the integral sign), which equals the
derivative of ``R`` to quadrature accuracy; the node-wise work runs in NumPy kernels
with that gradient written out (``_quadrature.k2_exact`` for ``K = 2``, batched over
runs, and ``_quadrature.k3_integral`` for ``K = 3``: each rule written once, shared with
:class:`attnclust.PopulationRisk` through ``_population``; an op-by-op autograd version
is the reference in the tests). ``sigma = 0`` is the finite sum over the centroids;
equal heads (singular ``G``) make ``D`` degenerate and the rule exact.

The rule's accuracy against a much finer one, at ``lambda sigma`` from 0.1 to 1000, is
tabled in ``docs/risk.md`` and re-measured by ``tests/test_risk.py`` (bound 1e-9); Monte
Carlo with 10^6 samples agrees within 4 standard errors (also tested).

**QMC rule** (any ``K``). ``P = mu mu*_k + sigma C z`` with ``C`` the Cholesky factor of
``G`` (for a singular ``G``: ``mu Q``, ``Q`` an orthonormal basis of the heads' span,
padded with zero columns to ``(K, K)`` when ``K > d``)
and ``z`` scrambled Sobol points mapped to normals; the same
points are reused for the same ``rng`` (common random numbers across PGD
iterations); the standard error comes from 4 independent scrambles (``_qmc``, the
one estimator and the one singular-``G`` fallback).

**Euclidean heads** (``geometry="euclidean"``). The logits ``lambda <x, mu_h> - lambda
||mu_h||^2 / 2`` are ``lambda (P_h + c_h)`` with the key offset ``c_h = -||mu_h||^2 / 2``:
the differences become ``D_h = P_h - P_K + c_h - c_K`` and, as ``sum_h a_h = 1``,
``-2 a.P + a^T G a = -2 P_K - 2 sum_{h<K} a_h D_h + a^T G~ a`` with ``G~ = G + e 1^T +
1 e^T``, ``e_h = c_h - c_K``: the same rules with shifted means and a modified ``G``,
exact for ``K <= 3`` with the same accuracy, for heads of any norm.

Notation
--------
================  =======================  ==========================================
paper             code                     meaning
================  =======================  ==========================================
``mu_h``          ``heads[h]``             head ``h``, shape ``(K, d)``
``lambda``        ``inverse_temperature``  inverse temperature
``G``             ``gram``                 ``heads @ heads.T``
``D_h``           ``D[h]``                 ``P_h - P_K`` (logits differ by ``lambda D_h``)
``R(mu)``         ``population_risk``      ``E||X - T_mu(X)||^2``
``Pen(mu)``       ``repulsion``,           penalties of ``R_rho = R + rho Pen``
                  ``balance``
``N_h``           ``mean_attention``       ``E[a_h(X)]``, the expectation of ``balance``
================  =======================  ==========================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .._deprecation import renamed_keywords
from .._validation import as_tensor, check_finite, check_int, check_inverse_temperature
from ..layer.geometry import as_geometry
from ..layer.heads import softmax_heads
from . import _population as _pop
from . import _quadrature as _q
from ._qmc import N_SCRAMBLES, gram_factor, qmc_seed, sobol_normals
from .mixture import GaussianMixture

__all__ = [
    "RiskEstimate",
    "population_risk",
    "qmc_risk",
    "empirical_risk",
    "repulsion",
    "balance",
    "mean_attention",
    "run_inverse_temperatures",
]


class RiskEstimate(NamedTuple):
    """A quasi-Monte Carlo estimate with its standard error."""

    value: torch.Tensor
    """The estimate, a 0-dim tensor differentiable w.r.t. the heads."""
    stderr: float
    """Standard error over independent scrambles."""


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------
def _check_heads(heads, d: int | None = None) -> torch.Tensor:
    heads = as_tensor(heads, name="heads")
    if heads.ndim != 2 or heads.shape[0] < 1:
        raise ValueError(f"heads must have shape (K, d), got {tuple(heads.shape)}")
    if d is not None and heads.shape[1] != d:
        raise ValueError(f"heads must have d={d} columns to match the data, got "
                         f"{heads.shape[1]}")
    check_finite(heads.detach(), "heads")       # with or without a gradient to follow
    return heads


def _check_mixture(mix) -> GaussianMixture:
    if not isinstance(mix, GaussianMixture):
        raise ValueError(f"mix must be an attnclust.GaussianMixture, got {type(mix).__name__}")
    return mix


def _softmax_weights(D: list[torch.Tensor], lam: float) -> list[torch.Tensor]:
    """Attention weights for logits ``lambda (D_0, .., D_{K-2}, 0)``, one tensor per head.

    Written out per head: a softmax over a last axis of size 2 or 3 is slow in torch.
    """
    if len(D) == 1:
        a0 = torch.sigmoid(lam * D[0])
        return [a0, 1.0 - a0]
    logits = [lam * x for x in D]
    top = torch.maximum(torch.maximum(logits[0], logits[1]), torch.zeros_like(logits[0]))
    e = [torch.exp(x - top) for x in logits] + [torch.exp(-top)]
    total = e[0] + e[1] + e[2]
    return [x / total for x in e]


def _qmc_value(heads, mix, lam, n_samples, seed, geometry) -> torch.Tensor:
    """The QMC risk of one run, differentiable (the batched estimator at ``R = 1``)."""
    lam_t = torch.tensor([lam], dtype=torch.float64)
    value, grad = _pop.evaluate(heads[None], _pop.Mixtures(mix), lam_t, method="qmc",
                                n_samples=n_samples, seed=seed, geometry=geometry)
    return _pop.with_grad(heads, value[0], grad[0])


def _qmc_mean_attention(heads, mix, lam, n_samples, seed, geometry) -> torch.Tensor:
    """``E[a_h]`` on the QMC points, differentiable in the heads, ``(K,)``."""
    z = sobol_normals(heads.shape[0], n_samples, seed).to(heads.device, heads.dtype)
    mean = _pop.constant(mix.centroids, heads) @ heads.T  # (k_mix, K)
    offset = _q.key_offset(heads, geometry)
    if offset is not None:
        mean = mean + offset
    P = mean[None, :, None, :]  # (S, k_mix, n', K)
    if mix.sigma > 0.0:
        P = P + mix.sigma * (z @ gram_factor(heads).T)[:, None]
    pi = _pop.constant(mix.weights, heads)
    a = softmax_heads(lam * P).mean(2)  # (S, k_mix, K)
    return torch.einsum("k,skh->h", pi, a) / a.shape[0]


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------
@renamed_keywords(temperature="inverse_temperature")
def population_risk(
    heads,
    mix: GaussianMixture,
    *,
    inverse_temperature: float,
    method: str = "auto",
    n_samples: int = 2**14,
    rng=0,
    geometry: str = "sphere",
) -> torch.Tensor:
    """Population risk ``R(mu) = E || X - T_mu(X) ||^2`` over a Gaussian mixture.

    Parameters
    ----------
    heads : Tensor of shape (K, d)
        Heads ``mu`` (any norm); may require grad (the result is differentiable).
    mix : GaussianMixture
    inverse_temperature : float
        Inverse temperature ``lambda > 0``.
    method : {"auto", "exact", "qmc"}, default="auto"
        ``"exact"``: graded composite Gauss-Legendre rule (``K <= 3``; relative error
        about 1e-11 or less for ``0.1 <= lambda sigma <= 1000``, see the module
        notes); ``"qmc"``:
        randomized quasi-Monte Carlo; ``"auto"``: exact for ``K <= 3``, else QMC.
    n_samples, rng :
        QMC sample size and seed (the same seed gives the same points).
    geometry : {"sphere", "euclidean"}, default="sphere"
        The layer's logits: ``lambda <x, mu_h>`` (the paper's), or ``lambda <x, mu_h> -
        lambda ||mu_h||^2 / 2`` (Euclidean heads, a soft Voronoi partition).

    Returns
    -------
    Tensor
        0-dim tensor.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.0)
    >>> heads = torch.tensor(mix.centroids)
    >>> float(ac.population_risk(heads, mix, inverse_temperature=50.0)) < 1e-20
    True

    Euclidean heads need not be unit vectors: heads at twice the centroids quantize each
    centroid to its nearest head, at squared distance 1.

    >>> r = ac.population_risk(2.0 * heads, mix, inverse_temperature=50.0, geometry="euclidean")
    >>> round(float(r), 6)
    1.0
    """
    mix = _check_mixture(mix)
    heads = _check_heads(heads, mix.d)
    lam = check_inverse_temperature(inverse_temperature)
    geometry = as_geometry(geometry)
    if _pop.resolve_method(method, heads.shape[0]) == "exact":
        return _pop.exact_risk(heads, mix, lam, _q.rule(), geometry)
    n_samples = check_int(n_samples, "n_samples", N_SCRAMBLES)
    return _qmc_value(heads, mix, lam, n_samples, qmc_seed(rng), geometry)


@renamed_keywords(temperature="inverse_temperature")
def qmc_risk(
    heads, mix: GaussianMixture, *, inverse_temperature: float, n_samples: int = 2**14, rng=0,
    geometry: str = "sphere",
) -> RiskEstimate:
    """Randomized quasi-Monte Carlo estimate of the population risk, any ``K``.

    ``n_samples`` scrambled Sobol points in ``K`` dimensions (split over 4 independent
    scrambles, which give the standard error) are mapped to normals and reused for
    every mixture component and, for the same integer ``rng``, for every call
    (common random numbers). ``geometry`` as in :func:`population_risk`.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> heads = torch.tensor(mix.centroids)
    >>> est = ac.qmc_risk(heads, mix, inverse_temperature=5.0)
    >>> exact = ac.population_risk(heads, mix, inverse_temperature=5.0, method="exact")
    >>> abs(float(est.value) - float(exact)) < 5 * est.stderr + 1e-9
    True
    """
    mix = _check_mixture(mix)
    heads = _check_heads(heads, mix.d)
    lam = check_inverse_temperature(inverse_temperature)
    geometry = as_geometry(geometry)
    n_samples, seed = check_int(n_samples, "n_samples", N_SCRAMBLES), qmc_seed(rng)
    value = _qmc_value(heads, mix, lam, n_samples, seed, geometry)
    stderr = _pop.qmc_stderr(heads, mix, lam, n_samples=n_samples, seed=seed, geometry=geometry)
    return RiskEstimate(value, stderr)


def run_inverse_temperatures(lam, n_runs: int) -> torch.Tensor:
    """``lambda`` of ``n_runs`` runs as ``(R,)`` float64 on the CPU, checked: a number or
    one per run, positive and finite (the batched paths' check, as
    :func:`~attnclust._validation.check_inverse_temperature` is one run's).

    Examples
    --------
    >>> run_inverse_temperatures(2.0, 3).tolist()
    [2.0, 2.0, 2.0]
    >>> run_inverse_temperatures([1.0, -1.0], 2)
    Traceback (most recent call last):
    ...
    ValueError: inverse_temperature must be positive and finite, got [1.0, -1.0]
    """
    value = np.asarray(lam.detach().cpu() if isinstance(lam, torch.Tensor) else lam)
    if value.dtype.kind not in "iuf" or value.ndim > 1 or value.size not in (1, n_runs):
        raise ValueError(f"inverse_temperature must be a number or one per run ({n_runs}), "
                         f"got {lam!r}")
    value = value.astype(np.float64, copy=False)      # NumPy: a few microseconds a step
    if not (np.isfinite(value).all() and (value > 0).all()):
        raise ValueError(f"inverse_temperature must be positive and finite, got "
                         f"{value.tolist()}")
    return torch.from_numpy(np.broadcast_to(value, (n_runs,)).copy())


def _row_mean(heads, X, inverse_temperature, batch_size, per_rows, *, name: str = "X",
              kind: str = "a non-empty (n, d) array", geometry: str = "sphere"):
    """``(1/n) sum_i f(x_i, a(x_i))`` over the rows of ``X``, ``batch_size`` rows at a time.

    One run: heads ``(K, d)``, ``X`` ``(n, d)``, a float ``lambda`` (all three checked).
    ``R`` runs at once (the objectives of :mod:`attnclust.study.objectives`): heads
    ``(R, K, d)``, ``X`` ``(n, d)`` shared or ``(R, n, d)``, ``lambda`` a float or ``(R,)``.
    ``per_rows(xb, a, heads)`` gets a chunk ``xb`` ``(b, d)`` or ``(R, b, d)``, its weights
    ``a = softmax(lambda xb mu^T)`` ``(R, b, K)`` and the heads ``(R, K, d)``, and returns
    its sum over the ``b`` rows, per run. ``geometry`` adds the heads' key offsets.
    """
    geometry = as_geometry(geometry)
    X = as_tensor(X, name=name)
    heads = as_tensor(heads, name="heads")
    single = heads.ndim != 3
    if single:
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"{name} must be {kind}, got shape {tuple(X.shape)}")
        check_finite(X, name)
        heads = _check_heads(heads, X.shape[1])[None]  # (1, K, d)
        lam = check_inverse_temperature(inverse_temperature)
    else:
        d = heads.shape[-1]
        if 0 in heads.shape:
            raise ValueError(f"heads must have shape (R, K, d), none of them 0, got "
                             f"{tuple(heads.shape)}")
        if X.ndim not in (2, 3) or X.shape[-2] == 0 or X.shape[-1] != d:
            raise ValueError(f"{name} must be a non-empty (n, {d}) or (R, n, {d}) array, got "
                             f"shape {tuple(X.shape)}")
        check_finite(X, name)
        lam = run_inverse_temperatures(inverse_temperature, heads.shape[0]).to(
            dtype=heads.dtype, device=heads.device)[:, None, None]  # (R, 1, 1)
    X = X.to(heads.dtype)
    n = X.shape[-2]
    step = n if batch_size is None else check_int(batch_size, "batch_size", 1)
    offset = _q.key_offset(heads, geometry)
    offset = None if offset is None else offset[:, None, :]  # (R, 1, K)
    total = 0.0
    for start in range(0, n, step):
        xb = X[..., start:start + step, :]  # (b, d) or (R, b, d)
        P = xb @ heads.transpose(1, 2)  # (R, b, K)
        a = softmax_heads(lam * (P if offset is None else P + offset))
        total = total + per_rows(xb, a, heads)
    total = total / n
    return total[0] if single else total


@renamed_keywords(temperature="inverse_temperature")
def empirical_risk(heads, X, *, inverse_temperature: float, batch_size: int | None = None,
                   geometry: str = "sphere"):
    """Empirical risk ``mean_i || x_i - T_mu(x_i) ||^2`` over the rows of ``X``.

    Parameters
    ----------
    heads : Tensor or array-like of shape (K, d) or (R, K, d)
        Heads ``mu``, or those of ``R`` runs; may require grad (the result is
        differentiable w.r.t. them).
    X : Tensor or array-like of shape (n, d), or (R, n, d) for runs
        Tokens, ``n >= 1``, finite; cast to the heads' dtype.
    inverse_temperature : float, or Tensor of shape (R,) for runs
        Inverse temperature ``lambda > 0``.
    batch_size : int, optional
        Rows per mini-batch of the accumulation (same value, less memory).
    geometry : {"sphere", "euclidean"}, default="sphere"
        As in :func:`population_risk`.

    Returns
    -------
    Tensor
        The empirical risk, 0-dim, or ``(R,)`` for runs.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> heads = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> float(ac.empirical_risk(heads, [[1.0, 0.0], [-1.0, 0.0]], inverse_temperature=40.0)) < 1e-30
    True
    """
    return _row_mean(heads, X, inverse_temperature, batch_size,
                     lambda xb, a, h: ((xb - a @ h) ** 2).sum((-1, -2)), geometry=geometry)


def repulsion(heads) -> torch.Tensor:
    """Repulsion penalty ``sum_{h < h'} <mu_h, mu_h'>^2``.

    Parameters
    ----------
    heads : Tensor or array-like of shape (K, d), or (R, K, d) for runs
        Heads ``mu``; may require grad.

    Returns
    -------
    Tensor
        0-dim tensor (``(R,)`` for runs), zero exactly when the heads are pairwise
        orthogonal.

    Examples
    --------
    >>> import torch
    >>> float(repulsion(torch.eye(3, dtype=torch.float64)))
    0.0
    """
    heads = as_tensor(heads, name="heads")
    if heads.ndim != 3:
        heads = _check_heads(heads)
    gram = heads @ heads.transpose(-1, -2)  # (..., K, K)
    off = gram - torch.diag_embed(torch.diagonal(gram, dim1=-2, dim2=-1))
    return 0.5 * (off**2).sum((-2, -1))


def mean_attention(heads, data, *, inverse_temperature: float, method: str = "auto",
                   n_samples: int = 2**14, rng=0, batch_size: int | None = None,
                   geometry: str = "sphere") -> torch.Tensor:
    """Soft proportions ``N_h = E[a_h(X)]``: the mean attention weight of each head.

    ``E`` is over a :class:`GaussianMixture` (the exact rule of this module for ``K <= 3``,
    QMC with common random numbers otherwise, or as ``method`` says) or the mean over the
    rows of a data array ``(n, d)``; the expectation of :func:`balance`.

    Parameters
    ----------
    heads : Tensor or array-like of shape (K, d), or (R, K, d) for runs on data
        Heads ``mu``; may require grad (the result is differentiable w.r.t. them).
    data : GaussianMixture or array-like of shape (n, d)
        Where the expectation is taken.
    inverse_temperature : float, or Tensor of shape (R,) for runs
        Inverse temperature ``lambda > 0``.
    method, n_samples, rng :
        For a mixture, as in :func:`population_risk`.
    batch_size : int, optional
        Rows per mini-batch for a data array (same value, less memory).
    geometry : {"sphere", "euclidean"}, default="sphere"
        As in :func:`population_risk`.

    Returns
    -------
    Tensor of shape (K,), or (R, K) for runs, summing to one.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> ac.study.risk.mean_attention(torch.tensor(mix.centroids), mix, inverse_temperature=10.0)
    tensor([0.5000, 0.5000], dtype=torch.float64)
    """
    if not isinstance(data, GaussianMixture):
        return _row_mean(heads, data, inverse_temperature, batch_size,
                         lambda xb, a, h: a.sum(-2), name="data",
                         kind="a GaussianMixture or a non-empty (n, d) array", geometry=geometry)
    lam = check_inverse_temperature(inverse_temperature)
    heads = _check_heads(heads, data.d)
    geometry = as_geometry(geometry)
    K = heads.shape[0]
    method = _pop.resolve_method(method, K)
    if K == 1:
        return heads.new_ones(1)
    if method == "qmc":
        n_samples = check_int(n_samples, "n_samples", N_SCRAMBLES)
        return _qmc_mean_attention(heads, data, lam, n_samples, qmc_seed(rng), geometry)
    order, D, weights = _pop.exact_samples(heads, data, lam, _q.rule(), geometry)
    a = torch.stack(_softmax_weights(D, lam), dim=-1)  # (k_mix, N, K)
    mean_perm = torch.einsum("k,kn,knh->h", _pop.constant(data.weights, heads), weights, a)
    mean_a = torch.empty_like(mean_perm)
    mean_a[order] = mean_perm
    return mean_a


@renamed_keywords(temperature="inverse_temperature")
def balance(
    heads,
    data,
    *,
    inverse_temperature: float,
    target=None,
    method: str = "auto",
    n_samples: int = 2**14,
    rng=0,
    batch_size: int | None = None,
    geometry: str = "sphere",
) -> torch.Tensor:
    """Balance penalty ``sum_h (E[a_h(X)] - pi_h)^2``: no knowledge of the centroids.

    ``E[a_h(X)]`` is :func:`mean_attention` (over a mixture or the rows of a data array);
    ``target`` defaults to the uniform proportions ``1 / K``.

    Parameters
    ----------
    heads, data, inverse_temperature, method, n_samples, rng, batch_size, geometry :
        As in :func:`mean_attention`.
    target : array-like of shape (K,), optional
        Target proportions ``pi``; uniform ``1 / K`` when omitted.

    Returns
    -------
    Tensor
        The penalty, 0-dim, or ``(R,)`` for runs.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> heads = torch.tensor(mix.centroids)
    >>> float(ac.balance(heads, mix, inverse_temperature=10.0)) < 1e-20
    True
    """
    mean_a = mean_attention(heads, data, inverse_temperature=inverse_temperature,
                            method=method, n_samples=n_samples, rng=rng, batch_size=batch_size,
                            geometry=geometry)
    K = mean_a.shape[-1]
    if target is None:
        tgt = torch.full((K,), 1.0 / K, dtype=mean_a.dtype, device=mean_a.device)
    else:
        tgt = as_tensor(target, name="target", dtype=mean_a.dtype, device=mean_a.device)
        if tgt.shape != (K,):
            raise ValueError(f"target must have shape ({K},), got {tuple(tgt.shape)}")
        total = float(tgt.sum())                # proportions: the mean attention's kind
        if not (bool(torch.isfinite(tgt).all()) and bool((tgt >= 0).all())
                and abs(total - 1.0) <= K * torch.finfo(tgt.dtype).eps):
            raise ValueError(f"target must be proportions (finite, >= 0, summing to 1), got "
                             f"{tgt.tolist()}")
    return ((mean_a - tgt) ** 2).sum(-1)

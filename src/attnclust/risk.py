"""Population and empirical risk of the K-head layer, and the penalties of ``R_rho``.

The risk of heads ``mu = (mu_1..mu_K)`` at inverse temperature ``lambda`` is

    R(mu) = E || X - T_mu(X) ||^2,     T_mu(x) = sum_h a_h(x) mu_h,
    a(x) = softmax(lambda P),          P_h = <x, mu_h>.

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
derivative of ``R`` to quadrature accuracy; the node-wise work runs in one numpy kernel
with that gradient written out (``_integral_np``, behind autograd; the batched
``K = 2`` kernel of :class:`attnclust.PopulationRisk`, ``_quadrature.k2_exact``, uses the
same nodes; an op-by-op autograd version is the reference in the tests). ``sigma = 0`` is
the finite sum over the centroids; equal heads (singular ``G``) make ``D`` degenerate
and the rule exact.

The rule's accuracy against a much finer one, at ``lambda sigma`` from 0.1 to 1000, is
tabled in ``docs/risk.md`` and re-measured by ``tests/test_risk.py`` (bound 1e-9); Monte
Carlo with 10^6 samples agrees within 4 standard errors (also tested).

**QMC rule** (any ``K``). ``P = mu mu*_k + sigma C z`` with ``C`` the Cholesky factor of
``G`` (for a singular ``G``: ``mu Q``, ``Q`` an orthonormal basis of the heads' span,
padded with zero columns to ``(K, K)`` when ``K > d``)
and ``z`` scrambled Sobol points mapped to normals; the same
points are reused for the same ``rng`` (common random numbers across PGD
iterations); the standard error comes from 4 independent scrambles.

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
from scipy.special import expit

from . import _quadrature as _q
from ._deprecation import renamed_keywords
from ._validation import as_generator, as_tensor, check_finite, check_int, check_inverse_temperature
from .heads import softmax_heads
from .mixture import GaussianMixture

__all__ = [
    "RiskEstimate",
    "population_risk",
    "qmc_risk",
    "empirical_risk",
    "repulsion",
    "balance",
    "mean_attention",
]

_METHODS = ("auto", "exact", "qmc")


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
    if not heads.requires_grad:
        check_finite(heads, "heads")
    return heads


def _check_mixture(mix) -> GaussianMixture:
    if not isinstance(mix, GaussianMixture):
        raise ValueError(f"mix must be an attnclust.GaussianMixture, got {type(mix).__name__}")
    return mix


def _const(x: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A constant array as a tensor with the heads' dtype and device (copied)."""
    return torch.tensor(x, dtype=like.dtype, device=like.device)


# --------------------------------------------------------------------------------------
# Expectations over the mixture of functions of the logit differences D
# --------------------------------------------------------------------------------------
def _exact_samples(heads: torch.Tensor, mix: GaussianMixture, lam: float, rule: _q.Rule):
    """Quadrature nodes in ``D`` space for ``K = 2, 3``.

    Returns ``order`` (head permutation: the last one is the reference ``mu_K``),
    ``D``, a list of ``K - 1`` differentiable tensors of shape ``(k_mix, N)``, and the
    weights ``(k_mix, N)`` (detached, each row summing to ~1).
    """
    order, delta, L, z, weights = _exact_nodes(heads, mix, lam, rule)
    K = heads.shape[0]
    z, weights = _const(z, heads), _const(weights, heads)
    # D_h = delta_h + sigma sum_j L_hj z_j, one (k_mix, N) tensor per difference
    D = [delta[:, h, None] + mix.sigma * sum(L[h, j] * z[j] for j in range(K - 1))
         for h in range(K - 1)]
    return order, D, weights


def _exact_nodes(heads: torch.Tensor, mix: GaussianMixture, lam: float, rule: _q.Rule):
    """Pieces of the exact rule: ``D = delta_k + sigma L z`` at nodes ``z``.

    Returns ``order``, ``delta`` ``(k_mix, K-1)`` and ``L`` ``(K-1, K-1)`` (both
    differentiable tensors), the nodes ``z`` ``(K-1, k_mix, N)`` and the weights
    ``(k_mix, N)`` (numpy arrays).
    """
    K = heads.shape[0]
    cents = _const(mix.centroids, heads)
    hd = heads.detach().cpu().double().numpy()
    # pivot: the pair of heads furthest apart gives the first difference, so that the
    # triangular factor below has its largest entry first
    dist = np.linalg.norm(hd[:, None] - hd[None], axis=-1)
    i, j = np.unravel_index(np.argmax(dist), dist.shape)
    if i == j:  # all heads equal
        i, j = 0, K - 1
    order = [int(i)] + [h for h in range(K) if h not in (i, j)] + [int(j)]
    W = heads[order[:-1]] - heads[order[-1]]  # (K-1, d)
    delta = cents @ W.T  # (k_mix, K-1)
    sigma = mix.sigma
    if sigma == 0.0:
        return order, delta, heads.new_zeros(K - 1, K - 1), np.zeros((K - 1, mix.k, 1)), \
            np.ones((mix.k, 1))
    Wd = W.detach().cpu().double().numpy()
    Q = np.linalg.qr(Wd.T)[0]  # (d, K-1) orthonormal, span contains the rows of W
    L = W @ _const(Q, heads)  # (K-1, K-1) lower
    Ld, dd = L.detach().cpu().double().numpy(), delta.detach().cpu().double().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        s0 = sigma * abs(Ld[0, 0])
        c0 = -dd[:, 0] / (sigma * Ld[0, 0])
        z0, w0 = _q.graded_nodes(c0[:, None], np.full((mix.k, 1), 1.0 / (lam * s0)), rule)
        if K == 2:
            z = z0[None]  # (1, k_mix, N)
            weights = w0
        else:
            # inner variable: sharp where D_1 = 0 and where D_1 = D_0
            D0 = dd[:, 0, None] + sigma * Ld[0, 0] * z0  # (k_mix, N0)
            base = dd[:, 1, None] + sigma * Ld[1, 0] * z0
            s1 = sigma * Ld[1, 1]
            centers = np.stack([-base / s1, (D0 - base) / s1], axis=-1)  # (k_mix, N0, 2)
            eps1 = np.full(centers.shape, 1.0 / (lam * abs(s1)))
            z1, w1 = _q.graded_nodes(centers, eps1, rule)  # (k_mix, N0, N1)
            z = np.stack([np.broadcast_to(z0[..., None], z1.shape).reshape(mix.k, -1),
                          z1.reshape(mix.k, -1)])  # (2, k_mix, N0 * N1)
            weights = (w0[..., None] * w1).reshape(mix.k, -1)
    return order, delta, L, z, weights


def _softmax_weights(D: list[torch.Tensor], lam: float) -> list[torch.Tensor]:
    """Attention weights for logits ``lambda (D_0, .., D_{K-2}, 0)``, one tensor per head.

    Written out per head: a softmax over a last axis of size 2 or 3 is slow in torch.
    Used by :func:`balance` and by the op-by-op autograd reference in the tests.
    """
    if len(D) == 1:
        a0 = torch.sigmoid(lam * D[0])
        return [a0, 1.0 - a0]
    logits = [lam * x for x in D]
    top = torch.maximum(torch.maximum(logits[0], logits[1]), torch.zeros_like(logits[0]))
    e = [torch.exp(x - top) for x in logits] + [torch.exp(-top)]
    total = e[0] + e[1] + e[2]
    return [x / total for x in e]


class _Integral(NamedTuple):
    value: float
    d_delta: np.ndarray | None  # (k_mix, K-1)
    d_L: np.ndarray | None  # (K-1, K-1)
    d_gram: np.ndarray | None  # (K, K)


def _integral_np(delta: np.ndarray, L: np.ndarray, gram: np.ndarray, z: np.ndarray,
                 pw: np.ndarray, sigma: float, lam: float, *, grad: bool = True) -> _Integral:
    """``I = sum_kn pw_kn F(D_kn)``, ``D = delta_k + sigma L z_kn``, and its gradient.

    The kernel of the exact rule (``K = 2, 3``) behind :class:`_FusedIntegral` (PGD's
    batched ``K = 2`` kernel is ``_quadrature.k2_exact``). ``F = -2 sum_{h<K} a_h D_h +
    a^T G a`` with ``a = softmax(lambda (D, 0))``; its gradient is written out: ``g = dF/da``
    (``2 G a - 2 D``, last entry ``2 (G a)_K``), ``dF/dD_h = lambda a_h (g_h - a.g) -
    2 a_h``. Shapes: ``delta`` ``(k_mix, K-1)``, ``L`` ``(K-1, K-1)``, ``gram``
    ``(K, K)``, nodes ``z`` ``(K-1, k_mix, N)``, weights ``pw`` ``(k_mix, N)``.
    """
    m, k_mix = z.shape[:2]
    D = delta.T[:, :, None] + sigma * (L @ z.reshape(m, -1)).reshape(z.shape)  # (m, k, N)
    u = lam * D
    if m == 1:
        a = np.empty((2, *D.shape[1:]))
        expit(u[0], out=a[0])
        np.subtract(1.0, a[0], out=a[1])
    else:  # shifted by the largest logit (0 included) against overflow
        top = np.maximum(u.max(0), 0.0)
        a = np.concatenate([np.exp(u - top), np.exp(-top)[None]])
        a /= a.sum(0)
    A, Dm, P = a.reshape(m + 1, -1), D.reshape(m, -1), pw.reshape(-1)  # (K, M), (m, M), (M,)
    g = 2.0 * (gram @ A)  # (K, M)
    aGa, aD = 0.5 * (A * g).sum(0), (A[:m] * Dm).sum(0)  # (M,) each
    value = float(P @ (aGa - 2.0 * aD))
    if not grad:
        return _Integral(value, None, None, None)
    g[:m] -= 2.0 * Dm
    gD = P * A[:m] * (lam * (g[:m] - 2.0 * (aGa - aD)) - 2.0)  # (m, M) pw dF/dD; a.g
    return _Integral(value, gD.reshape(m, k_mix, -1).sum(-1).T,
                     sigma * (gD @ z.reshape(m, -1).T), (A * P) @ A.T)


class _FusedIntegral(torch.autograd.Function):
    """``sum_k pi_k sum_n w_kn F(D_kn)`` as an autograd node, computed by :func:`_integral_np`.

    The node-wise work runs in numpy: a few dozen single-threaded passes, much faster
    than recording them for autograd, and immune to the thread oversubscription that
    slows torch's parallel elementwise kernels on a busy CPU. The op-by-op autograd
    reference for this gradient lives in ``tests/test_risk.py``.
    """

    @staticmethod
    def forward(ctx, delta, L, gram, z: np.ndarray, pw: np.ndarray, sigma: float, lam: float):
        # z: (K-1, k_mix, N) nodes, pw: (k_mix, N) weights times pi_k
        arrays = (t.detach().cpu().double().numpy() for t in (delta, L, gram))
        out = _integral_np(*arrays, z, pw, sigma, lam, grad=any(ctx.needs_input_grad[:3]))
        if out.d_delta is not None:
            ctx.grads = tuple(torch.as_tensor(x, dtype=delta.dtype, device=delta.device)
                              for x in out[1:])
        return torch.tensor(out.value, dtype=delta.dtype, device=delta.device)

    @staticmethod
    def backward(ctx, grad_out):
        gd, gl, gg = ctx.grads
        return grad_out * gd, grad_out * gl, grad_out * gg, None, None, None, None


def _exact_risk(heads, mix: GaussianMixture, lam: float, rule: _q.Rule) -> torch.Tensor:
    """Exact rule, differentiable in the heads through :class:`_FusedIntegral`."""
    K = heads.shape[0]
    cents = _const(mix.centroids, heads)
    pi = _const(mix.weights, heads)
    if K == 1:
        mean = pi @ cents
        return _q.second_moment(mix) - 2.0 * (mean @ heads[0]) + heads[0] @ heads[0]
    h_mean = pi @ (cents @ heads.T)  # (K,) E<X, mu_h>
    order, delta, L, z, weights = _exact_nodes(heads, mix, lam, rule)
    h = heads[order]
    integral = _FusedIntegral.apply(delta, L, h @ h.T, z, mix.weights[:, None] * weights,
                                    mix.sigma, lam)
    return _q.second_moment(mix) + integral - 2.0 * h_mean[order[-1]]


# --------------------------------------------------------------------------------------
# Quasi-Monte Carlo
# --------------------------------------------------------------------------------------
def _qmc_setup(heads, mix: GaussianMixture, n_samples: int, rng):
    """Means ``(k_mix, K)``, factor ``C`` ``(K, K)`` (``C C^T = G``) and normals ``z``.

    ``z`` is the cached ``(S, n/S, K)`` tensor of common random numbers; ``C`` is
    ``None`` for the Dirac mixture.
    """
    n_samples = check_int(n_samples, "n_samples", _q.N_SCRAMBLES)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        seed = int(rng)
    else:
        seed = int(as_generator(rng).integers(2**63))
    z = _q.sobol_normals(heads.shape[0], int(n_samples), seed)  # (S, n', K)
    mean = _const(mix.centroids, heads) @ heads.T  # (k_mix, K)
    if mix.sigma == 0.0:
        return mean, None, z
    # the Cholesky factor is smooth in the heads, so the estimator's autograd gradient
    # is its exact derivative; for a singular G, heads times a detached orthonormal
    # basis of their span (same law, same expected gradient)
    factor, info = torch.linalg.cholesky_ex(heads @ heads.T)
    if int(info) != 0 or float(torch.diagonal(factor).detach().min()) < 1e-6:
        K, d = heads.shape
        Q = np.linalg.qr(heads.detach().cpu().double().numpy().T)[0]  # (d, min(K, d))
        factor = heads @ _const(Q, heads)  # (K, min(K, d)), factor factor^T = G
        if factor.shape[1] < K:  # K > d: zero columns make it (K, K), same product
            factor = torch.cat([factor, factor.new_zeros(K, K - factor.shape[1])], dim=1)
    return mean, factor, z


def _qmc_points(heads, mix: GaussianMixture, n_samples: int, rng):
    """Projections ``P`` of shape ``(S, k_mix, n/S, K)`` on common random numbers."""
    mean, factor, z = _qmc_setup(heads, mix, n_samples, rng)
    if factor is None:
        return mean[None, :, None, :].expand(z.shape[0], -1, 1, -1)
    z = z.to(heads.device, heads.dtype)
    return mean[None, :, None, :] + mix.sigma * (z @ factor.T)[:, None]


def _qmc_risk(heads, mix, lam, n_samples, rng) -> RiskEstimate:
    P = _qmc_points(heads, mix, n_samples, rng)  # (S, k_mix, n', K)
    pi = _const(mix.weights, heads)
    a = softmax_heads(lam * P)
    f = -2.0 * (a * P).sum(-1) + ((a @ (heads @ heads.T)) * a).sum(-1)
    per_scramble = _q.second_moment(mix) + f.mean(-1) @ pi  # (S,)
    value = per_scramble.mean()
    stderr = float(per_scramble.detach().std() / per_scramble.numel() ** 0.5)
    return RiskEstimate(value, stderr)


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
) -> torch.Tensor:
    """Population risk ``R(mu) = E || X - T_mu(X) ||^2`` over a Gaussian mixture.

    Parameters
    ----------
    heads : Tensor of shape (K, d)
        Heads ``mu``; may require grad (the result is differentiable).
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
    """
    mix = _check_mixture(mix)
    heads = _check_heads(heads, mix.d)
    lam = check_inverse_temperature(inverse_temperature)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    K = heads.shape[0]
    if method == "auto":
        method = "exact" if K <= 3 else "qmc"
    if method == "exact":
        if K > 3:
            raise ValueError(f"method='exact' needs K <= 3 heads, got K={K}; use 'qmc'")
        return _exact_risk(heads, mix, lam, _q.rule())
    return _qmc_risk(heads, mix, lam, n_samples, rng).value


@renamed_keywords(temperature="inverse_temperature")
def qmc_risk(
    heads, mix: GaussianMixture, *, inverse_temperature: float, n_samples: int = 2**14, rng=0
) -> RiskEstimate:
    """Randomized quasi-Monte Carlo estimate of the population risk, any ``K``.

    ``n_samples`` scrambled Sobol points in ``K`` dimensions (split over 4 independent
    scrambles, which give the standard error) are mapped to normals and reused for
    every mixture component and, for the same integer ``rng``, for every call
    (common random numbers).

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
    return _qmc_risk(heads, mix, lam, n_samples, rng)


def _row_mean(heads, X, inverse_temperature, batch_size, per_rows, *, name: str = "X",
              kind: str = "a non-empty (n, d) array"):
    """``(1/n) sum_i f(x_i, a(x_i))`` over the rows of ``X``, ``batch_size`` rows at a time.

    One run: heads ``(K, d)``, ``X`` ``(n, d)``, a float ``lambda`` (all three checked).
    ``R`` runs at once (the objectives of :mod:`attnclust.objectives`): heads
    ``(R, K, d)``, ``X`` ``(n, d)`` shared or ``(R, n, d)``, ``lambda`` a float or ``(R,)``.
    ``per_rows(xb, a, heads)`` gets a chunk ``xb`` ``(b, d)`` or ``(R, b, d)``, its weights
    ``a = softmax(lambda xb mu^T)`` ``(R, b, K)`` and the heads ``(R, K, d)``, and returns
    its sum over the ``b`` rows, per run.
    """
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
        if X.ndim not in (2, 3) or X.shape[-2] == 0 or X.shape[-1] != d:
            raise ValueError(f"{name} must be a non-empty (n, {d}) or (R, n, {d}) array, got "
                             f"shape {tuple(X.shape)}")
        check_finite(X, name)
        lam = torch.as_tensor(inverse_temperature, dtype=heads.dtype, device=heads.device)
        lam = lam.expand(heads.shape[0])[:, None, None]  # (R, 1, 1)
    X = X.to(heads.dtype)
    n = X.shape[-2]
    step = n if batch_size is None else check_int(batch_size, "batch_size", 1)
    total = 0.0
    for start in range(0, n, step):
        xb = X[..., start:start + step, :]  # (b, d) or (R, b, d)
        a = softmax_heads(lam * (xb @ heads.transpose(1, 2)))  # (R, b, K)
        total = total + per_rows(xb, a, heads)
    total = total / n
    return total[0] if single else total


@renamed_keywords(temperature="inverse_temperature")
def empirical_risk(heads, X, *, inverse_temperature: float, batch_size: int | None = None):
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

    Returns
    -------
    Tensor
        0-dim tensor, or ``(R,)`` for runs.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> heads = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> float(ac.empirical_risk(heads, [[1.0, 0.0], [-1.0, 0.0]], inverse_temperature=40.0)) < 1e-30
    True
    """
    return _row_mean(heads, X, inverse_temperature, batch_size,
                     lambda xb, a, h: ((xb - a @ h) ** 2).sum((-1, -2)))


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
                   n_samples: int = 2**14, rng=0, batch_size: int | None = None) -> torch.Tensor:
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

    Returns
    -------
    Tensor of shape (K,), or (R, K) for runs, summing to one.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> ac.risk.mean_attention(torch.tensor(mix.centroids), mix, inverse_temperature=10.0)
    tensor([0.5000, 0.5000], dtype=torch.float64)
    """
    if not isinstance(data, GaussianMixture):
        return _row_mean(heads, data, inverse_temperature, batch_size,
                         lambda xb, a, h: a.sum(-2), name="data",
                         kind="a GaussianMixture or a non-empty (n, d) array")
    lam = check_inverse_temperature(inverse_temperature)
    heads = _check_heads(heads, data.d)
    K = heads.shape[0]
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "exact" and K > 3:
        raise ValueError(f"method='exact' needs K <= 3 heads, got K={K}; use 'qmc'")
    pi = _const(data.weights, heads)
    if K == 1:
        return heads.new_ones(1)
    if method == "qmc" or (method == "auto" and K > 3):
        P = _qmc_points(heads, data, n_samples, rng)  # (S, k_mix, n', K)
        return torch.einsum("k,skh->h", pi, softmax_heads(lam * P).mean(2)) / P.shape[0]
    order, D, weights = _exact_samples(heads, data, lam, _q.rule())
    a = torch.stack(_softmax_weights(D, lam), dim=-1)  # (k_mix, N, K)
    mean_perm = torch.einsum("k,kn,knh->h", pi, weights, a)
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
) -> torch.Tensor:
    """Balance penalty ``sum_h (E[a_h(X)] - pi_h)^2``: no knowledge of the centroids.

    ``E[a_h(X)]`` is :func:`mean_attention`: over a :class:`GaussianMixture` (the exact
    rule of this module for ``K <= 3``, QMC with common random numbers otherwise, or as
    ``method`` says) or the mean over the rows of a data array ``(n, d)``. ``target``
    defaults to the uniform proportions ``1 / K``.

    Parameters
    ----------
    heads : Tensor or array-like of shape (K, d), or (R, K, d) for runs on data
        Heads ``mu``; may require grad (the result is differentiable w.r.t. them).
    data : GaussianMixture or array-like of shape (n, d)
        Where the expectation of the attention weights is taken.
    inverse_temperature : float, or Tensor of shape (R,) for runs
        Inverse temperature ``lambda > 0``.
    target : array-like of shape (K,), optional
        Target proportions ``pi``; uniform ``1 / K`` when omitted.
    method : {"auto", "exact", "qmc"}, default="auto"
        For a mixture, as in :func:`population_risk`.
    n_samples, rng :
        QMC sample size and seed (mixture with ``method="qmc"``).
    batch_size : int, optional
        Rows per mini-batch for a data array (same value, less memory).

    Returns
    -------
    Tensor
        0-dim tensor, or ``(R,)`` for runs.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> heads = torch.tensor(mix.centroids)
    >>> float(ac.balance(heads, mix, inverse_temperature=10.0)) < 1e-20
    True
    """
    mean_a = mean_attention(heads, data, inverse_temperature=inverse_temperature,
                            method=method, n_samples=n_samples, rng=rng, batch_size=batch_size)
    K = mean_a.shape[-1]
    if target is None:
        tgt = torch.full((K,), 1.0 / K, dtype=mean_a.dtype, device=mean_a.device)
    else:
        tgt = as_tensor(target, name="target", dtype=mean_a.dtype, device=mean_a.device)
        if tgt.shape != (K,):
            raise ValueError(f"target must have shape ({K},), got {tuple(tgt.shape)}")
    return ((mean_a - tgt) ** 2).sum(-1)

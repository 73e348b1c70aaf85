"""Quadrature and quasi-Monte Carlo kernels of the population risk, batched over runs.

Private engine behind :mod:`attnclust.risk` and :mod:`attnclust.objectives`: the graded
composite Gauss-Legendre rule (nodes placed from detached values), the scrambled Sobol
normals of the QMC rule, and two NumPy kernels that return a value *and* its gradient
for ``R`` independent runs at once (no autograd: a few dozen vectorized passes):

- :func:`k2_exact`: the exact ``K = 2`` rule. With ``w = mu_0 - mu_1``, the softmax
  sees ``D = <X, w>`` only; given ``Z = k``, ``D = delta_k + s z`` with ``delta_k =
  <mu*_k, w>``, ``s = sigma ||w||``, ``z ~ N(0, 1)``, so each run is a few hundred nodes.
  It gives the risk ``R`` and the balance penalty from the same nodes.
- :func:`qmc_kernel`: the QMC rule for any ``K``, ``P = mu mu*_k + sigma C z`` on common
  random numbers ``z``, with the gradient in the means, the noise and ``G``.

Shapes: ``R`` runs, ``K`` heads, ``k`` mixture components, ``N`` nodes or points.
The names without a leading underscore are the engine's interface to those two modules.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch
from scipy.special import expit

N_SCRAMBLES = 4  # independent scrambles of the QMC rule (they give its standard error)


def second_moment(mix) -> float:
    """``E||X||^2 = sum_k pi_k ||mu*_k||^2 + d sigma^2`` of a :class:`GaussianMixture`."""
    return float(mix.weights @ (mix.centroids**2).sum(1) + mix.d * mix.sigma**2)


# --------------------------------------------------------------------------------------
# Composite Gauss-Legendre rule graded toward sharp points (numpy; nodes are detached)
# --------------------------------------------------------------------------------------
class Rule(NamedTuple):
    gl_x: np.ndarray  # (m,) Gauss-Legendre nodes on [-1, 1]
    gl_w: np.ndarray  # (m,)
    grid: np.ndarray  # (U,) uniform breakpoints on [-trunc, trunc]
    offsets: np.ndarray  # (O,) graded offsets in units of eps, both signs and 0
    trunc: float


@functools.lru_cache(maxsize=8)
def rule(n_gauss: int = 6, width: float = 1.0, trunc: float = 8.5, ratio: float = 2.0,
          first: float = 1.0, last: float = 32.0) -> Rule:
    """Fixed pieces of the rule, computed once per setting (module-level cache)."""
    gl_x, gl_w = np.polynomial.legendre.leggauss(n_gauss)
    n_panels = int(np.ceil(2 * trunc / width))
    grid = np.linspace(-trunc, trunc, n_panels + 1)
    n_graded = int(np.floor(np.log(last / first) / np.log(ratio) + 1e-9)) + 1
    pos = first * ratio ** np.arange(n_graded)
    offsets = np.concatenate([-pos[::-1], [0.0], pos])
    return Rule(gl_x, gl_w, grid, offsets, trunc)


_EPS_MAX = 1e6  # wider than this, a "sharp" point is flat on [-trunc, trunc]


def graded_nodes(center: np.ndarray, eps: np.ndarray, rule: Rule):
    """Nodes and Gaussian-weighted weights of the rule for N(0, 1).

    ``center``, ``eps`` have shape ``(..., F)``: ``F`` sharp points per integral.
    Returns ``z`` and ``w`` of shape ``(..., N)`` with ``sum w ~ 1``.
    """
    # a degenerate direction gives center = nan or +-inf and eps = inf: any finite
    # placement is then right, the integrand being flat there
    if not (np.isfinite(center).all() and np.isfinite(eps).all()):
        center = np.nan_to_num(center)
        eps = np.nan_to_num(eps, nan=_EPS_MAX, posinf=_EPS_MAX)
    center = np.minimum(np.maximum(center, -_EPS_MAX), _EPS_MAX)
    eps = np.minimum(eps, _EPS_MAX)
    graded = center[..., None] + eps[..., None] * rule.offsets  # (..., F, O)
    graded = graded.reshape(*center.shape[:-1], -1)
    grid = np.broadcast_to(rule.grid, (*center.shape[:-1], rule.grid.size))
    bp = np.concatenate([grid, graded], axis=-1)
    np.clip(bp, -rule.trunc, rule.trunc, out=bp)
    bp.sort(axis=-1)
    half = 0.5 * (bp[..., 1:] - bp[..., :-1])  # (..., P)
    mid = 0.5 * (bp[..., 1:] + bp[..., :-1])
    z = (half[..., None] * rule.gl_x).reshape(*mid.shape[:-1], -1)
    z += np.repeat(mid, rule.gl_x.size, axis=-1)
    w = np.square(z)
    w *= -0.5
    np.exp(w, out=w)
    w *= (half[..., None] * (rule.gl_w / np.sqrt(2 * np.pi))).reshape(z.shape)
    return z, w


@functools.lru_cache(maxsize=32)
def sobol_normals(dim: int, n: int, seed: int) -> torch.Tensor:
    """``(S, n // S, dim)`` normals from ``S`` independent scrambled Sobol sequences."""
    seeds = np.random.SeedSequence(seed).generate_state(N_SCRAMBLES)
    per = max(n // N_SCRAMBLES, 1)
    out = []
    for s in seeds:
        engine = torch.quasirandom.SobolEngine(dim, scramble=True, seed=int(s))
        u = engine.draw(per, dtype=torch.float64).clamp(1e-16, 1 - 1e-16)
        out.append(torch.special.ndtri(u))
    return torch.stack(out)


# --------------------------------------------------------------------------------------
# Exact K = 2 rule, batched over runs: value and analytic gradient
# --------------------------------------------------------------------------------------
class K2Nodes(NamedTuple):
    """The ``K = 2`` rule at the current heads of ``R`` runs."""

    w: np.ndarray  # (R, d) mu_0 - mu_1
    nw: np.ndarray  # (R,) ||w||
    D: np.ndarray  # (R, k, N) logit difference at the nodes
    z: np.ndarray  # (R, k, N) standard normal nodes
    P: np.ndarray  # (R, k, N) weights times pi_k
    a0: np.ndarray  # (R, k, N) attention on head 0


def k2_nodes(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
             lam: np.ndarray, rule: Rule) -> K2Nodes:
    """Nodes of the exact rule for heads ``(R, 2, d)``, centroids ``(R, k, d)``."""
    w = heads[:, 0] - heads[:, 1]  # (R, d)
    nw = np.sqrt((w * w).sum(-1))
    delta = np.einsum("rkd,rd->rk", cents, w)  # (R, k)
    s = sigma * nw
    flat = s == 0.0  # D = delta exactly: one node of weight 1
    if flat.all():
        z = np.zeros((*delta.shape, 1))
        wt = np.ones_like(z)
    else:
        safe = np.where(flat, 1.0, s)
        center = (-delta / safe[:, None])[..., None]  # (R, k, 1)
        eps = np.broadcast_to((1.0 / (lam * safe))[:, None, None], center.shape)
        z, wt = graded_nodes(center, eps, rule)
        if flat.any():
            z[flat] = 0.0
            wt[flat] = 0.0
            wt[flat, :, 0] = 1.0
    D = delta[..., None] + s[:, None, None] * z
    a0 = expit(lam[:, None, None] * D)
    return K2Nodes(w, nw, D, z, pi[..., None] * wt, a0)


def _k2_chain(nodes: K2Nodes, gD: np.ndarray, cents: np.ndarray, sigma: np.ndarray):
    """Gradient in ``w`` of a function of ``D``, given ``sum-weighted dF/dD`` ``(R, k, N)``."""
    d_delta = gD.sum(-1)  # (R, k)
    d_L = sigma * (gD * nodes.z).sum((1, 2))  # (R,) derivative in ||w||
    inv = np.divide(d_L, nodes.nw, out=np.zeros_like(d_L), where=nodes.nw > 0)
    return np.einsum("rk,rkd->rd", d_delta, cents) + inv[:, None] * nodes.w


def k2_exact(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
             lam: np.ndarray, second: np.ndarray, rule: Rule, nodes: K2Nodes | None = None):
    """Exact ``K = 2`` risk ``(R,)`` and its Euclidean gradient ``(R, 2, d)``.

    At each node ``F = -2 a_0 D + a^T G a`` with ``a = (a_0, 1 - a_0)``, so
    ``a^T G a = G_11 + 2 c_1 a_0 + c_2 a_0^2`` (``c_1 = G_01 - G_11``, ``c_2 = G_00 -
    2 G_01 + G_11``) and ``dF/dD = 2 lambda a_0 a_1 (c_1 + c_2 a_0 - D) - 2 a_0``. The
    integral needs four weighted sums of ``1, a_0, a_0^2, a_0 D``; the chain rule through
    ``w`` and ``G = mu mu^T`` gives the gradient.
    """
    nodes = k2_nodes(heads, cents, pi, sigma, lam, rule) if nodes is None else nodes
    D, P, a0 = nodes.D, nodes.P, nodes.a0
    G = heads @ heads.transpose(0, 2, 1)  # (R, 2, 2)
    g00, g01, g11 = G[:, 0, 0], G[:, 0, 1], G[:, 1, 1]
    c1, c2 = g01 - g11, g00 - 2.0 * g01 + g11
    Pa0 = P * a0
    S0, S1 = P.sum((1, 2)), Pa0.sum((1, 2))
    S2, SD = (Pa0 * a0).sum((1, 2)), (Pa0 * D).sum((1, 2))
    mean_c = np.einsum("rk,rkd->rd", pi, cents)  # (R, d) E[X]
    value = second + g11 * S0 + 2.0 * c1 * S1 + c2 * S2 - 2.0 * SD \
        - 2.0 * (mean_c * heads[:, 1]).sum(-1)
    gD = c2[:, None, None] * a0
    gD += c1[:, None, None]
    gD -= D
    gD *= 1.0 - a0
    gD *= 2.0 * lam[:, None, None]
    gD -= 2.0
    gD *= Pa0  # P dF/dD
    dw = _k2_chain(nodes, gD, cents, sigma)
    d_gram = np.empty((len(S0), 2, 2))
    d_gram[:, 0, 0], d_gram[:, 1, 1] = S2, S0 - 2.0 * S1 + S2
    d_gram[:, 0, 1] = d_gram[:, 1, 0] = S1 - S2
    grad = 2.0 * (d_gram @ heads)
    grad[:, 0] += dw
    grad[:, 1] -= dw + 2.0 * mean_c
    return value, grad


def k2_balance(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
               lam: np.ndarray, target: np.ndarray, rule: Rule,
               nodes: K2Nodes | None = None):
    """Balance penalty ``sum_h (E a_h - t_h)^2`` ``(R,)`` and its gradient, ``K = 2``.

    ``E a_h`` is the same quadrature as the risk; ``d a_0 / dD = lambda a_0 a_1``.
    """
    nodes = k2_nodes(heads, cents, pi, sigma, lam, rule) if nodes is None else nodes
    P, a0 = nodes.P, nodes.a0
    A0, A1 = (P * a0).sum((1, 2)), (P * (1.0 - a0)).sum((1, 2))
    e0, e1 = A0 - target[:, 0], A1 - target[:, 1]
    coef = 2.0 * (e0 - e1) * lam  # (R,)
    gD = coef[:, None, None] * P * a0 * (1.0 - a0)
    dw = _k2_chain(nodes, gD, cents, sigma)
    grad = np.stack([dw, -dw], axis=1)
    return e0 * e0 + e1 * e1, grad


# --------------------------------------------------------------------------------------
# QMC rule, batched over runs: value and gradient in (means, noise, G)
# --------------------------------------------------------------------------------------
class QMCGrad(NamedTuple):
    value: np.ndarray  # (R,) the integral part (without E||X||^2)
    d_mean: np.ndarray  # (R, K, k)
    d_noise: np.ndarray  # (R, K, N)
    d_gram: np.ndarray | None  # (R, K, K)


def qmc_kernel(mean: np.ndarray, noise: np.ndarray, G: np.ndarray, lam: np.ndarray,
               pi: np.ndarray, *, balance: np.ndarray | None = None) -> QMCGrad:
    """``sum_k pi_k mean_n F(P_kn)`` with ``P_kn = mean_k + noise_n``, and its gradient.

    Risk (``balance=None``): ``F = -2 a.P + a^T G a``, ``dF/dP = lambda a (g - a.g) -
    2 a`` with ``g = 2 G a - 2 P``. Balance (``balance`` the targets ``(R, K)``): the
    value is ``sum_h (E a_h - t_h)^2`` and ``dF/dP = lambda a (b - a.b)``,
    ``b = 2 (E a - t)``. Heads-first layout ``(R, K, k, N)`` keeps every pass contiguous.
    """
    R, K, k = mean.shape
    N = noise.shape[-1]
    P = mean[..., None] + noise[:, :, None, :]  # (R, K, k, N)
    lam4 = lam[:, None, None, None]
    a = P * lam4
    a -= a.max(1, keepdims=True)
    np.exp(a, out=a)
    a *= 1.0 / a.sum(1, keepdims=True)  # softmax over the heads
    W = (pi / N)[:, None, :, None]  # (R, 1, k, 1)
    if balance is not None:
        A = (a * W).sum((2, 3))  # (R, K)
        b = 2.0 * (A - balance)
        ab = np.einsum("rh,rhkn->rkn", b, a)[:, None]
        gP = lam4 * a * (b[:, :, None, None] - ab) * W
        return QMCGrad(((A - balance) ** 2).sum(-1), gP.sum(-1), gP.sum(2), None)
    # g - a.g with g = 2 (G a - P): Q = G a - P, then dF/dP = 2 a (lambda (Q - a.Q) - 1)
    Q = (G @ a.reshape(R, K, -1)).reshape(a.shape)
    Q -= P
    aQ = (a * Q).sum(1, keepdims=True)  # a^T G a - a.P, (R, 1, k, N)
    P *= a
    aP = P.sum(1, keepdims=True)
    value = ((aQ - aP) * W).sum((1, 2, 3))  # F = a^T G a - 2 a.P
    Q -= aQ
    Q *= lam4
    Q -= 1.0
    Q *= a
    Q *= 2.0 * W  # W dF/dP
    aW = (a * W).reshape(R, K, -1)
    d_gram = aW @ a.reshape(R, K, -1).transpose(0, 2, 1)
    return QMCGrad(value, Q.sum(-1), Q.sum(2), d_gram)

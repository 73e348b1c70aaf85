"""The exact rules of the population risk (``K <= 3``): the one definition of each.

Private engine behind :mod:`attnclust.study.risk`, :mod:`attnclust.study._population` and
:mod:`attnclust.study.objectives`: the graded composite Gauss-Legendre rule (nodes placed from
detached values) and NumPy kernels that return a value *and* its gradient (no autograd:
a few dozen vectorized passes):

- :func:`k2_exact`, :func:`k2_balance`: the exact ``K = 2`` rule for ``R`` runs at once.
  With ``w = mu_0 - mu_1``, the softmax sees ``D = <X, w>`` only; given ``Z = k``,
  ``D = delta_k + s z`` with ``delta_k = <mu*_k, w>``, ``s = sigma ||w||``, ``z ~ N(0,
  1)``, so each run is a few hundred nodes. It gives the risk ``R`` and the balance
  penalty from the same nodes.
- :func:`k3_nodes`, :func:`k3_integral`: the exact ``K = 3`` rule for one run, over the
  two logit differences ``D = delta_k + sigma L z`` (``L`` lower triangular).

Key offsets (logits ``lambda (P_h + c_h)``; Euclidean heads: ``c_h = -||mu_h||^2 / 2``)
shift ``D`` by ``c_h - c_K`` and, since ``sum_h a_h = 1``, turn ``-2 a.P + a^T G a`` into
``-2 a.P_K - 2 sum_{h<K} a_h D_h + a^T G~ a`` with ``G~ = G + e 1^T + 1 e^T``, ``e_h =
c_h - c_K``: the same integrals with ``delta`` and ``G`` changed.

Shapes: ``R`` runs, ``K`` heads, ``k`` mixture components, ``N`` nodes.
The names without a leading underscore are the engine's interface to those modules.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch
from scipy.special import expit


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
    weights: np.ndarray  # (R, k, N) weights of the rule (each (r, k) row sums to ~1)


def k2_nodes(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
             lam: np.ndarray, rule: Rule, offset: np.ndarray | None = None) -> K2Nodes:
    """Nodes of the exact rule for heads ``(R, 2, d)``, centroids ``(R, k, d)`` and
    optional key offsets ``(R, 2)`` (``D = <X, w> + c_0 - c_1``)."""
    w = heads[:, 0] - heads[:, 1]  # (R, d)
    nw = np.sqrt((w * w).sum(-1))
    delta = np.einsum("rkd,rd->rk", cents, w)  # (R, k)
    if offset is not None:
        delta = delta + (offset[:, 0] - offset[:, 1])[:, None]
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
    return K2Nodes(w, nw, D, z, pi[..., None] * wt, a0, wt)


def _k2_chain(nodes: K2Nodes, gD: np.ndarray, cents: np.ndarray, sigma: np.ndarray):
    """Gradient in ``w`` of a function of ``D``, given ``sum-weighted dF/dD`` ``(R, k, N)``."""
    d_delta = gD.sum(-1)  # (R, k)
    d_L = sigma * (gD * nodes.z).sum((1, 2))  # (R,) derivative in ||w||
    inv = np.divide(d_L, nodes.nw, out=np.zeros_like(d_L), where=nodes.nw > 0)
    return np.einsum("rk,rkd->rd", d_delta, cents) + inv[:, None] * nodes.w


def k2_exact(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
             lam: np.ndarray, second: np.ndarray, rule: Rule, nodes: K2Nodes | None = None,
             offset: np.ndarray | None = None):
    """Exact ``K = 2`` risk ``(R,)``, its gradient ``(R, 2, d)`` in the heads (offsets held
    fixed) and its gradient ``(R, 2)`` in the key offsets (zero without them).

    At each node ``F = -2 a_0 D + a^T G a`` with ``a = (a_0, 1 - a_0)``, so
    ``a^T G a = G_11 + 2 c_1 a_0 + c_2 a_0^2`` (``c_1 = G_01 - G_11``, ``c_2 = G_00 -
    2 G_01 + G_11``) and ``dF/dD = 2 lambda a_0 a_1 (c_1 + c_2 a_0 - D) - 2 a_0``. The
    integral needs four weighted sums of ``1, a_0, a_0^2, a_0 D``; the chain rule through
    ``w`` and ``G = mu mu^T`` gives the gradient. Key offsets (logits ``lambda (P_h +
    c_h)``) shift ``D`` by ``e = c_0 - c_1`` and ``G`` to ``G + e 1^T + 1 e^T`` with ``e =
    (e, 0)`` (since ``a_0 + a_1 = 1``), which adds ``e`` to ``c_1``.
    """
    nodes = k2_nodes(heads, cents, pi, sigma, lam, rule, offset) if nodes is None else nodes
    D, P, a0 = nodes.D, nodes.P, nodes.a0
    G = heads @ heads.transpose(0, 2, 1)  # (R, 2, 2)
    g00, g01, g11 = G[:, 0, 0], G[:, 0, 1], G[:, 1, 1]
    c1, c2 = g01 - g11, g00 - 2.0 * g01 + g11
    if offset is not None:
        c1 = c1 + (offset[:, 0] - offset[:, 1])
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
    return value, grad, _k2_offset_grad(gD, 2.0 * S1 if offset is not None else None)


def _k2_offset_grad(gD: np.ndarray, through_gram: np.ndarray | None) -> np.ndarray:
    """``d/d(c_0, c_1)`` ``(R, 2)`` from ``P dF/dD`` (``D`` moves with ``e = c_0 - c_1``)
    and the part through ``G + e 1^T + 1 e^T`` (``None``: no offsets, zeros)."""
    if through_gram is None:
        return np.zeros((gD.shape[0], 2))
    de = gD.sum((1, 2)) + through_gram
    return np.stack([de, -de], axis=1)


def k2_balance(heads: np.ndarray, cents: np.ndarray, pi: np.ndarray, sigma: np.ndarray,
               lam: np.ndarray, target: np.ndarray, rule: Rule,
               nodes: K2Nodes | None = None, offset: np.ndarray | None = None):
    """Balance penalty ``sum_h (E a_h - t_h)^2`` ``(R,)`` and its gradients (heads,
    offsets), ``K = 2``, as :func:`k2_exact` returns them.

    ``E a_h`` is the same quadrature as the risk; ``d a_0 / dD = lambda a_0 a_1``.
    """
    nodes = k2_nodes(heads, cents, pi, sigma, lam, rule, offset) if nodes is None else nodes
    P, a0 = nodes.P, nodes.a0
    A0, A1 = (P * a0).sum((1, 2)), (P * (1.0 - a0)).sum((1, 2))
    e0, e1 = A0 - target[:, 0], A1 - target[:, 1]
    coef = 2.0 * (e0 - e1) * lam  # (R,)
    gD = coef[:, None, None] * P * a0 * (1.0 - a0)
    dw = _k2_chain(nodes, gD, cents, sigma)
    grad = np.stack([dw, -dw], axis=1)
    zero = None if offset is None else np.zeros(len(A0))
    return e0 * e0 + e1 * e1, grad, _k2_offset_grad(gD, zero)


# --------------------------------------------------------------------------------------
# Exact K = 3 rule (one run): nodes in the plane of the two logit differences
# --------------------------------------------------------------------------------------
def k3_nodes(delta: np.ndarray, L: np.ndarray, sigma: float, lam: float, rule: Rule):
    """Nodes ``z`` ``(2, k, N)`` and weights ``(k, N)`` for ``D = delta_k + sigma L z``.

    ``delta`` ``(k, 2)``, ``L`` ``(2, 2)`` lower triangular. The first coordinate sees one
    sharp point (``D_0 = 0``); for each of its nodes the inner one sees two (``D_1 = 0``
    and ``D_1 = D_0``).
    """
    k = delta.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        s0 = sigma * abs(L[0, 0])
        c0 = -delta[:, 0] / (sigma * L[0, 0])
        eps0 = np.full((k, 1), 1.0 / (lam * s0))
        z0, w0 = graded_nodes(c0[:, None], eps0, rule)  # (k, N0)
        D0 = delta[:, 0, None] + sigma * L[0, 0] * z0
        base = delta[:, 1, None] + sigma * L[1, 0] * z0
        s1 = sigma * L[1, 1]
        centers = np.stack([-base / s1, (D0 - base) / s1], axis=-1)  # (k, N0, 2)
        z1, w1 = graded_nodes(centers, np.full(centers.shape, 1.0 / (lam * abs(s1))), rule)
    z = np.stack([np.broadcast_to(z0[..., None], z1.shape).reshape(k, -1),
                  z1.reshape(k, -1)])  # (2, k, N0 * N1)
    return z, (w0[..., None] * w1).reshape(k, -1)


class K3Integral(NamedTuple):
    value: float
    d_delta: np.ndarray | None  # (k, 2)
    d_L: np.ndarray | None  # (2, 2)
    d_gram: np.ndarray | None  # (3, 3)


def k3_integral(delta: np.ndarray, L: np.ndarray, gram: np.ndarray, z: np.ndarray,
                pw: np.ndarray, sigma: float, lam: float, *, grad: bool = True) -> K3Integral:
    """``I = sum_kn pw_kn F(D_kn)``, ``D = delta_k + sigma L z_kn``, and its gradient.

    ``F = -2 sum_{h<K} a_h D_h + a^T G a`` with ``a = softmax(lambda (D, 0))``; its
    gradient is written out: ``g = dF/da`` (``2 G a - 2 D``, last entry ``2 (G a)_K``),
    ``dF/dD_h = lambda a_h (g_h - a.g) - 2 a_h``. Shapes: ``delta`` ``(k, 2)``, ``L``
    ``(2, 2)``, ``gram`` ``(3, 3)``, nodes ``z`` ``(2, k, N)``, weights ``pw`` ``(k, N)``.
    """
    m, k_mix = z.shape[:2]
    D = delta.T[:, :, None] + sigma * (L @ z.reshape(m, -1)).reshape(z.shape)  # (m, k, N)
    u = lam * D
    top = np.maximum(u.max(0), 0.0)  # shifted by the largest logit (0 included)
    a = np.concatenate([np.exp(u - top), np.exp(-top)[None]])
    a /= a.sum(0)
    A, Dm, P = a.reshape(m + 1, -1), D.reshape(m, -1), pw.reshape(-1)  # (K, M), (m, M), (M,)
    g = 2.0 * (gram @ A)  # (K, M)
    aGa, aD = 0.5 * (A * g).sum(0), (A[:m] * Dm).sum(0)  # (M,) each
    value = float(P @ (aGa - 2.0 * aD))
    if not grad:
        return K3Integral(value, None, None, None)
    g[:m] -= 2.0 * Dm
    gD = P * A[:m] * (lam * (g[:m] - 2.0 * (aGa - aD)) - 2.0)  # (m, M) pw dF/dD; a.g
    return K3Integral(value, gD.reshape(m, k_mix, -1).sum(-1).T,
                      sigma * (gD @ z.reshape(m, -1).T), (A * P) @ A.T)


# --------------------------------------------------------------------------------------
# Key offsets of a geometry (logits lambda (P_h + c_h), c_h = -b_h / lambda)
# --------------------------------------------------------------------------------------
def key_offset(heads, geometry):
    """``c_h`` of heads ``(..., K, d)`` (array or tensor) for a
    :class:`~attnclust.layer.geometry.Geometry`: ``None`` where it has no key bias (the
    sphere), ``-||mu_h||^2 / 2`` for Euclidean heads."""
    bias = geometry.key_bias(heads, 1.0)
    return None if bias is None else -bias


def chain_offset(grad, d_offset, heads, geometry):
    """The gradient in the heads once the offsets' own dependence on them is added:
    ``grad + (dc/dmu)^T d_offset`` (:meth:`~attnclust.layer.geometry.Geometry.offset_vjp`;
    tensors or arrays, returned as given)."""
    if d_offset is None:
        return grad
    extra = geometry.offset_vjp(torch.as_tensor(heads, dtype=torch.float64),
                                torch.as_tensor(d_offset, dtype=torch.float64))
    if extra is None:
        return grad
    return grad + (extra if isinstance(grad, torch.Tensor) else extra.numpy())

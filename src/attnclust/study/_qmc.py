"""The quasi-Monte Carlo rule of the population risk, batched over runs: the one definition.

Private engine behind :func:`attnclust.qmc_risk`, :func:`attnclust.population_risk`
(``K > 3`` or ``method="qmc"``) and the objects of :mod:`attnclust.study.objectives`. Given
``Z = k`` the projections ``P_h = <X, mu_h>`` are Gaussian, ``N(mu mu*_k, sigma^2 G)``, so

    P_kn = mu mu*_k + sigma C z_n,       C C^T = G = mu mu^T,

with ``z_n`` scrambled Sobol points mapped to normals (``S`` independent scrambles, the
same points for the same seed: common random numbers across PGD iterations). ``C`` is
the Cholesky factor of ``G``; for a singular ``G`` (equal heads, ``K > d``) it is ``mu Q``
with ``Q`` a detached orthonormal basis of the heads' span, padded with zero columns to
``(K, K)`` (same law, same expected gradient): :func:`gram_factor`, the one fallback.

Heads with a key offset (logits ``lambda (P_h + c_h)``, e.g. Euclidean heads, ``c_h =
-||mu_h||^2 / 2``) need no other rule: with ``P' = P + c`` and ``G~ = G + c 1^T + 1 c^T``,
``-2 a.P + a^T G a = -2 a.P' + a^T G~ a`` since ``sum_h a_h = 1``.

Notation
--------
==========  ============  ========================================================
paper       code          meaning
==========  ============  ========================================================
``mu``      ``heads``     ``(R, K, d)``: ``K`` heads for each of ``R`` runs
``C``       ``factor``    ``(R, K, K)``, ``C C^T = G``
``z``       ``Z``         ``(K, N)`` normals (all scrambles side by side)
``c``       ``offset``    ``(R, K)`` key offsets, projection units
==========  ============  ========================================================
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch

from .._validation import as_generator

N_SCRAMBLES = 4  # independent scrambles of the QMC rule (they give its standard error)
_SINGULAR = 1e-6  # a Cholesky pivot below this: G is treated as singular
CHUNK = 2**18  # node-evaluations per kernel call: arrays stay in cache


def qmc_seed(rng) -> int:
    """The QMC seed of ``rng`` (an integer is its own seed)."""
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return int(rng)
    return int(as_generator(rng).integers(2**63))


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
# The factor C of G, with its fallback for a singular G
# --------------------------------------------------------------------------------------
def _singular(factor: torch.Tensor, info: torch.Tensor) -> torch.Tensor:
    """Which Cholesky factors ``(..., K, K)`` are unusable (failed, or a tiny pivot)."""
    pivots = torch.diagonal(factor, dim1=-2, dim2=-1).detach()
    return (info != 0) | (pivots.min(-1).values < _SINGULAR)


def _span_factor(h: torch.Tensor) -> torch.Tensor:
    """``mu Q`` with ``Q`` a detached orthonormal basis of the heads' span, ``(K, K)``."""
    K = h.shape[0]
    Q = np.linalg.qr(h.detach().cpu().double().numpy().T)[0]  # (d, min(K, d))
    f = h @ torch.as_tensor(Q, dtype=h.dtype, device=h.device)
    if f.shape[1] < K:  # K > d: zero columns make it (K, K), same product
        f = torch.cat([f, f.new_zeros(K, K - f.shape[1])], dim=1)
    return f


def gram_factor(h: torch.Tensor) -> torch.Tensor:
    """``C`` with ``C C^T = mu mu^T`` for one run's heads ``(K, d)``, differentiable in them.

    Cholesky where it exists, else :func:`_span_factor` (a singular Cholesky must stay
    out of the graph: its backward is NaN).
    """
    factor, info = torch.linalg.cholesky_ex(h @ h.T)
    return _span_factor(h) if bool(_singular(factor, info)) else factor


def _batch_factor(heads: torch.Tensor, gram: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """:func:`gram_factor` of every run, from ``gram`` (which may require grad); and
    whether every run had its Cholesky factor (then autograd runs on ``(R, K, K)`` only)."""
    factor, info = torch.linalg.cholesky_ex(gram)
    bad = _singular(factor, info)
    if not bool(bad.any()):
        return factor, True
    factor = factor.detach().clone()  # the gradient goes through _factor_grad
    for r in torch.nonzero(bad)[:, 0].tolist():
        factor[r] = _span_factor(heads[r].detach())
    return factor, False


def _factor_grad(heads: torch.Tensor, d_factor: torch.Tensor) -> torch.Tensor:
    """Gradient in the heads of ``<d_factor, C(heads)>``, run by run."""
    grads = []
    for r in range(heads.shape[0]):
        h = heads[r].detach().clone().requires_grad_(True)
        grads.append(torch.autograd.grad(gram_factor(h), h, d_factor[r])[0])
    return torch.stack(grads)


# --------------------------------------------------------------------------------------
# The kernel: value and gradient in (means, noise, G)
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


# --------------------------------------------------------------------------------------
# The estimator, batched over runs, with the chain rule to the heads
# --------------------------------------------------------------------------------------
class Estimate(NamedTuple):
    value: np.ndarray  # (R,) risk (E||X||^2 included) or balance penalty
    grad: torch.Tensor  # (R, K, d) gradient in the heads, offsets held fixed
    d_offset: np.ndarray | None  # (R, K) gradient in the key offsets (None without them)


def estimate(heads: torch.Tensor, cents: torch.Tensor, pi: np.ndarray, sigma: np.ndarray,
             lam: np.ndarray, Z: np.ndarray, *, second: np.ndarray | None = None,
             target: np.ndarray | None = None, offset: np.ndarray | None = None,
             dtype=np.float64) -> Estimate:
    """The QMC risk (``target=None``; ``second`` the ``E||X||^2`` per run) or balance
    penalty (``target`` ``(R, K)``) of ``R`` runs, and its gradient.

    ``heads`` ``(R, K, d)`` and ``cents`` ``(R, k, d)`` are float64 CPU tensors; ``Z``
    ``(K, N)`` the normals; ``offset`` ``(R, K)`` optional key offsets. The kernel runs
    on chunks of runs in ``dtype`` (float32 halves its memory traffic); the chain rule
    through ``P = mu mu*_k + c + sigma C z`` is written out, autograd only for ``C``.
    """
    R, K, _ = heads.shape
    values, grads, d_offs = [], [], []
    size = max(1, CHUNK // max(K * cents.shape[1] * Z.shape[1], 1))
    for start in range(0, R, size):
        sl = slice(start, start + size)
        h, ct = heads[sl], cents[sl]
        mean = (h @ ct.transpose(1, 2)).numpy()  # (r, K, k)
        gram = (h @ h.transpose(1, 2)).requires_grad_(True)
        factor, regular = _batch_factor(h, gram)
        sig = sigma[sl][:, None, None]
        noise = sig * (factor.detach().numpy() @ Z)  # (r, K, N)
        G = gram.detach().numpy()
        if offset is not None:  # P' = P + c, G~ = G + c 1^T + 1 c^T
            c = offset[sl]
            mean = mean + c[:, :, None]
            G = G + c[:, :, None] + c[:, None, :]
        out = qmc_kernel(mean.astype(dtype), noise.astype(dtype), G.astype(dtype),
                         lam[sl].astype(dtype), pi[sl].astype(dtype),
                         balance=None if target is None else target[sl].astype(dtype))
        out = QMCGrad(*(None if x is None else np.asarray(x, dtype=np.float64) for x in out))
        d_factor = torch.from_numpy(sig * (out.d_noise @ Z.T))
        if regular:  # Cholesky: G -> C by autograd, (r, K, K) only
            (d_gram,) = torch.autograd.grad(factor, gram, d_factor)
            g = 0.0
        else:  # some G singular: C = mu Q there, Q detached; autograd in the heads
            d_gram = torch.zeros_like(gram)
            g = _factor_grad(h, d_factor)
        if out.d_gram is not None:
            d_gram = d_gram + torch.from_numpy(out.d_gram)
        g = g + torch.from_numpy(out.d_mean) @ ct + (d_gram + d_gram.transpose(1, 2)) @ h
        if offset is not None:
            d_off = out.d_mean.sum(-1)
            if out.d_gram is not None:
                d_off = d_off + out.d_gram.sum(-1) + out.d_gram.sum(-2)
            d_offs.append(d_off)
        values.append(out.value + (0.0 if second is None else second[sl]))
        grads.append(g)
    return Estimate(np.concatenate(values), torch.cat(grads),
                    np.concatenate(d_offs) if offset is not None else None)

"""The population risk of ``R`` runs, value and gradient: the one definition.

Private engine behind :func:`attnclust.population_risk`, :func:`attnclust.qmc_risk`,
:func:`attnclust.study.risk.mean_attention` and :class:`attnclust.PopulationRisk`. Each rule
is written once, in :mod:`attnclust.study._quadrature` (exact, ``K <= 3``) and
:mod:`attnclust.study._qmc` (QMC, any ``K``); this module picks the rule, holds the mixtures
of a batch of runs and applies the chain rule of the heads' key offsets (logits
``lambda (P_h + c_h)``; ``c_h = -||mu_h||^2 / 2`` for Euclidean heads, none on the sphere).

Notation
--------
===========  ==============  ==========================================================
paper        code            meaning
===========  ==============  ==========================================================
``mu``       ``heads``       ``(R, K, d)``: ``K`` heads for each of ``R`` runs
``lambda``   ``lam``         inverse temperature, ``(R,)``
``mu*_k``    ``cents``       centroids ``(M, k, d)``, ``M = 1`` or ``R``
``c_h``      ``offset``      key offset of head ``h`` (projection units)
``D_h``      ``D[h]``        ``P_h - P_K + c_h - c_K``: the logits differ by ``lambda D``
===========  ==============  ==========================================================
"""

from __future__ import annotations

import numpy as np
import torch

from ..layer.geometry import as_geometry
from . import _qmc
from . import _quadrature as _q
from .mixture import GaussianMixture

METHODS = ("auto", "exact", "qmc")


def resolve_method(method: str, K: int) -> str:
    """``"exact"`` or ``"qmc"`` for ``K`` heads, or a ``ValueError`` naming the method."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "exact" if K <= 3 else "qmc"
    if method == "exact" and K > 3:
        raise ValueError(f"method='exact' needs K <= 3 heads, got K={K}; use 'qmc'")
    return method


def qmc_normals(K: int, n_samples: int, seed: int) -> np.ndarray:
    """The QMC rule's normals for ``K`` heads, all scrambles side by side, ``(K, N)``."""
    return _qmc.sobol_normals(K, n_samples, seed).reshape(-1, K).T.contiguous().numpy()


class Mixtures:
    """Centroids ``(M, k, d)``, weights ``(M, k)``, sigma ``(M,)`` of one (``M = 1``,
    shared by every run) or ``R`` mixtures with the same ``k`` and ``d``."""

    def __init__(self, mix):
        mixes = [mix] if isinstance(mix, GaussianMixture) else list(mix)
        if not mixes or not all(isinstance(m, GaussianMixture) for m in mixes):
            raise ValueError("mix must be a GaussianMixture or a non-empty sequence of them")
        if len({(m.k, m.d) for m in mixes}) != 1:
            raise ValueError("the mixtures of a batch must share k and d")
        self.mixtures = mixes
        self.cents = np.stack([m.centroids for m in mixes])
        self.pi = np.stack([m.weights for m in mixes])
        self.sigma = np.array([m.sigma for m in mixes])
        self.second = np.array([_q.second_moment(m) for m in mixes])
        self.d = mixes[0].d
        self._cents_t, self._runs = None, {}

    def __len__(self) -> int:
        return len(self.mixtures)

    def tensor(self) -> torch.Tensor:
        """The centroids as a float64 tensor ``(M, k, d)`` (made once)."""
        if self._cents_t is None:
            self._cents_t = torch.from_numpy(self.cents)
        return self._cents_t

    def runs(self, n_runs: int):
        """The arrays broadcast to ``n_runs`` runs (views, cached: called every step)."""
        if n_runs not in self._runs:
            if len(self) not in (1, n_runs):
                raise ValueError(f"{len(self)} mixtures for {n_runs} runs")
            self._runs[n_runs] = tuple(np.broadcast_to(x, (n_runs, *x.shape[1:]))
                                       for x in (self.cents, self.pi, self.sigma, self.second))
        return self._runs[n_runs]

    def mixture(self, r: int) -> GaussianMixture:
        return self.mixtures[0 if len(self) == 1 else r]

    def take(self, index) -> Mixtures:
        """The mixtures of the runs ``index`` (arrays sliced, nothing recomputed)."""
        if len(self) == 1:
            return self
        index = np.asarray(index)
        new = object.__new__(Mixtures)
        new.__dict__.update(self.__dict__, mixtures=[self.mixtures[i] for i in index],
                            cents=self.cents[index], pi=self.pi[index],
                            sigma=self.sigma[index], second=self.second[index], _cents_t=None,
                            _runs={})
        return new


def by_run(heads: torch.Tensor, lam: torch.Tensor, fn):
    """Values ``(R,)`` and autograd gradients ``(R, K, d)`` of ``fn(heads_r, r, lam_r)``,
    one run at a time (``K = 3`` exact rule, ``K = 1`` balance, users' callables)."""
    values, grads = [], []
    for r in range(heads.shape[0]):
        ht = heads[r].detach().clone().requires_grad_(True)
        v = fn(ht, r, float(lam[r]))
        values.append(v.detach())
        grads.append(torch.autograd.grad(v, ht)[0] if v.requires_grad
                     else torch.zeros_like(ht))
    return torch.stack(values).to(heads.device), torch.stack(grads)


# --------------------------------------------------------------------------------------
# The exact rule of one run, differentiable (K = 1, 2, 3)
# --------------------------------------------------------------------------------------
def constant(x: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A constant array as a tensor with the heads' dtype and device (copied)."""
    return torch.tensor(x, dtype=like.dtype, device=like.device)


def _k3_nodes(heads: torch.Tensor, mix: GaussianMixture, lam: float, rule: _q.Rule,
              offset: torch.Tensor | None):
    """Pieces of the ``K = 3`` rule: ``D = delta_k + sigma L z``, ``(k, 2)`` and ``(2, 2)``
    differentiable tensors, with the head order (the last one is the reference ``mu_K``),
    the nodes ``z`` ``(2, k, N)`` and the weights ``(k, N)`` (numpy)."""
    cents = constant(mix.centroids, heads)
    hd = heads.detach().cpu().double().numpy()
    # pivot: the pair of heads furthest apart gives the first difference, so that the
    # triangular factor below has its largest entry first
    dist = np.linalg.norm(hd[:, None] - hd[None], axis=-1)
    i, j = np.unravel_index(np.argmax(dist), dist.shape)
    if i == j:  # all heads equal
        i, j = 0, 2
    order = [int(i)] + [h for h in range(3) if h not in (i, j)] + [int(j)]
    W = heads[order[:-1]] - heads[order[-1]]  # (2, d)
    delta = cents @ W.T  # (k, 2)
    if offset is not None:
        delta = delta + (offset[order[:-1]] - offset[order[-1]])
    if mix.sigma == 0.0:
        return order, delta, heads.new_zeros(2, 2), np.zeros((2, mix.k, 1)), np.ones((mix.k, 1))
    Q = np.linalg.qr(W.detach().cpu().double().numpy().T)[0]  # (d, 2), rows of W in its span
    L = W @ constant(Q, heads)  # (2, 2) lower
    z, weights = _q.k3_nodes(delta.detach().cpu().double().numpy(),
                             L.detach().cpu().double().numpy(), mix.sigma, lam, rule)
    return order, delta, L, z, weights


class _K3Integral(torch.autograd.Function):
    """``sum_k pi_k sum_n w_kn F(D_kn)`` as an autograd node, computed by
    :func:`attnclust.study._quadrature.k3_integral` (a few dozen single-threaded NumPy passes,
    much faster than recording them for autograd)."""

    @staticmethod
    def forward(ctx, delta, L, gram, z: np.ndarray, pw: np.ndarray, sigma: float, lam: float):
        arrays = (t.detach().cpu().double().numpy() for t in (delta, L, gram))
        out = _q.k3_integral(*arrays, z, pw, sigma, lam, grad=any(ctx.needs_input_grad[:3]))
        if out.d_delta is not None:
            ctx.grads = tuple(torch.as_tensor(x, dtype=delta.dtype, device=delta.device)
                              for x in out[1:])
        return torch.tensor(out.value, dtype=delta.dtype, device=delta.device)

    @staticmethod
    def backward(ctx, grad_out):
        gd, gl, gg = ctx.grads
        return grad_out * gd, grad_out * gl, grad_out * gg, None, None, None, None


def exact_risk(heads: torch.Tensor, mix: GaussianMixture, lam: float, rule: _q.Rule,
               geometry: str = "sphere") -> torch.Tensor:
    """The exact rule for one run's heads ``(K, d)``, ``K <= 3``, differentiable in them
    (``K = 2``: :func:`attnclust.study._quadrature.k2_exact` with its gradient; ``K = 3``:
    :class:`_K3Integral`)."""
    K, geometry = heads.shape[0], as_geometry(geometry)
    cents, pi = constant(mix.centroids, heads), constant(mix.weights, heads)
    if K == 1:
        mean = pi @ cents
        return _q.second_moment(mix) - 2.0 * (mean @ heads[0]) + heads[0] @ heads[0]
    if K == 2:
        value, grad = _k2(heads.detach().cpu().double()[None], Mixtures(mix),
                          np.array([lam]), rule, geometry)
        return with_grad(heads, value[0], grad[0])
    offset = _q.key_offset(heads, geometry)
    order, delta, L, z, weights = _k3_nodes(heads, mix, lam, rule, offset)
    h = heads[order]
    gram = h @ h.T
    if offset is not None:  # G~ = G + e 1^T + 1 e^T, e_h = c_h - c_K
        e = offset[order] - offset[order[-1]]
        gram = gram + e[:, None] + e[None, :]
    h_mean = pi @ (cents @ heads.T)  # (K,) E<X, mu_h>
    integral = _K3Integral.apply(delta, L, gram, z, mix.weights[:, None] * weights,
                                 mix.sigma, lam)
    return _q.second_moment(mix) + integral - 2.0 * h_mean[order[-1]]


class _Precomputed(torch.autograd.Function):
    """A value whose gradient in the heads a kernel computed with it."""

    @staticmethod
    def forward(ctx, heads, value, grad):
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return grad_out * grad, None, None


def with_grad(heads: torch.Tensor, value, grad) -> torch.Tensor:
    """``value`` as a 0-dim tensor of the heads' dtype and device, with gradient ``grad``."""
    value = torch.as_tensor(value, dtype=heads.dtype, device=heads.device)
    grad = torch.as_tensor(grad, dtype=heads.dtype, device=heads.device)
    return _Precomputed.apply(heads, value, grad) if heads.requires_grad else value


def exact_samples(heads: torch.Tensor, mix: GaussianMixture, lam: float, rule: _q.Rule,
                  geometry: str = "sphere"):
    """The nodes of the exact rule as differentiable logit differences (``K = 2, 3``).

    Returns ``order`` (head permutation: the last one is the reference ``mu_K``), ``D``,
    a list of ``K - 1`` tensors ``(k, N)``, and the weights ``(k, N)`` (detached, each
    row summing to ~1): what :func:`attnclust.study.risk.mean_attention` integrates, and the
    tests' op-by-op autograd reference of the kernels.
    """
    K, geometry = heads.shape[0], as_geometry(geometry)
    offset = _q.key_offset(heads, geometry)
    if K == 2:
        off = None if offset is None else offset.detach().cpu().double().numpy()[None]
        nodes = _q.k2_nodes(heads.detach().cpu().double().numpy()[None], mix.centroids[None],
                            mix.weights[None], np.array([mix.sigma]), np.array([lam]), rule,
                            off)
        w = heads[0] - heads[1]
        delta = constant(mix.centroids, heads) @ w
        if offset is not None:
            delta = delta + (offset[0] - offset[1])
        D = delta[:, None] + mix.sigma * torch.linalg.vector_norm(w) * constant(nodes.z[0], heads)
        return [0, 1], [D], constant(nodes.weights[0], heads)
    order, delta, L, z, weights = _k3_nodes(heads, mix, lam, rule, offset)
    z = constant(z, heads)
    D = [delta[:, h, None] + mix.sigma * (L[h, 0] * z[0] + L[h, 1] * z[1]) for h in range(2)]
    return order, D, constant(weights, heads)


# --------------------------------------------------------------------------------------
# R runs at once
# --------------------------------------------------------------------------------------
def _k2(h: torch.Tensor, mix: Mixtures, lam: np.ndarray, rule: _q.Rule, geometry: str):
    """The exact ``K = 2`` kernel on chunks of runs: values ``(R,)``, gradients ``(R, 2, d)``."""
    R = h.shape[0]
    cents, pi, sigma, second = mix.runs(R)
    hn = h.numpy()
    offset = _q.key_offset(hn, geometry)
    n_nodes = cents.shape[1] * (rule.grid.size + rule.offsets.size) * rule.gl_x.size
    size = max(1, _qmc.CHUNK // n_nodes)
    parts = [_q.k2_exact(hn[sl], cents[sl], pi[sl], sigma[sl], lam[sl], second[sl], rule,
                         offset=None if offset is None else offset[sl])
             for sl in (slice(s, s + size) for s in range(0, R, size))]
    value = np.concatenate([p[0] for p in parts])
    grad = np.concatenate([p[1] for p in parts])
    return value, _q.chain_offset(grad, np.concatenate([p[2] for p in parts]), hn, geometry)


def evaluate(heads: torch.Tensor, mix: Mixtures, lam: torch.Tensor, *, method: str = "auto",
             n_samples: int = 2**14, seed: int = 0, qmc_dtype=np.float64,
             geometry: str = "sphere"):
    """Population risk ``(R,)`` and its gradient ``(R, K, d)`` of heads ``(R, K, d)`` at
    inverse temperatures ``lam`` ``(R,)`` (float64 CPU): exact for ``K <= 3`` (or as
    ``method`` says), QMC with common random numbers otherwise."""
    R, K, _ = heads.shape
    method, geometry = resolve_method(method, K), as_geometry(geometry)
    h = heads.detach().cpu().double()
    cents, pi, sigma, second = mix.runs(R)
    if method == "qmc":
        hn = h.numpy()
        offset = _q.key_offset(hn, geometry)
        est = _qmc.estimate(h, mix.tensor().expand(R, -1, -1), pi, sigma, lam.numpy(),
                            qmc_normals(K, n_samples, seed), second=second, offset=offset,
                            dtype=qmc_dtype)
        grad = _q.chain_offset(est.grad, est.d_offset, h, geometry)
        return est.value, grad
    if K == 1:
        hn = h.numpy()
        mean = np.einsum("rk,rkd->rd", pi, cents)  # E[X]
        value = second - 2.0 * (mean * hn[:, 0]).sum(-1) + (hn[:, 0] ** 2).sum(-1)
        return value, (2.0 * (hn[:, 0] - mean))[:, None]
    if K == 2:
        return _k2(h, mix, lam.numpy(), _q.rule(), geometry)
    return by_run(h, lam, lambda ht, r, lam_r: exact_risk(ht, mix.mixture(r), lam_r, _q.rule(),
                                                           geometry))


def qmc_stderr(heads: torch.Tensor, mix: GaussianMixture, lam: float, *, n_samples: int,
               seed: int, geometry: str = "sphere") -> float:
    """Standard error of the QMC risk of one run's heads ``(K, d)``, over its scrambles."""
    h, geometry = heads.detach().cpu().double()[None], as_geometry(geometry)
    K = h.shape[1]
    many = Mixtures(mix)
    cents, pi, sigma, second = many.runs(1)
    Z = _qmc.sobol_normals(K, n_samples, seed)  # (S, n', K)
    offset = _q.key_offset(h.numpy(), geometry)
    values = [_qmc.estimate(h, many.tensor(), pi, sigma, np.array([lam]), z.T.contiguous().numpy(),
                            second=second, offset=offset).value[0] for z in Z]
    return float(np.std(values, ddof=1) / np.sqrt(len(values)))

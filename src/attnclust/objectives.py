"""Objectives of PGD as objects: each gives its value and Euclidean gradient for ``R`` runs.

An objective maps heads ``mu`` of shape ``(R, K, d)`` (``R`` independent runs) and one
inverse temperature per run, ``lambda`` of shape ``(R,)``, to

    value_r = f_r(mu_r)           (R,)
    grad_r  = d f_r / d mu_r      (R, K, d)

where run ``r`` may have its own mixture or data. Runs never interact, so a batch of
``R`` runs gives, to rounding, the values of ``R`` separate calls (tested to 1e-12).

- :class:`PopulationRisk` ``R(mu) = E||X - T_mu(X)||^2`` over a mixture (one shared, or
  one per run): for ``K = 2`` the exact rule's NumPy kernel with its gradient written
  out; for ``K > 3`` (or ``method="qmc"``) the QMC rule's kernel, on common random
  numbers; ``K = 3`` exact goes run by run through the autograd integral.
- :class:`EmpiricalRisk` ``mean_i ||x_i - T_mu(x_i)||^2`` on data ``(n, d)`` (shared) or
  ``(R, n, d)``, full batch or mini-batches, optionally one shard of a data-parallel
  group (``reduce``).
- :class:`Repulsion` ``sum_{h<h'} <mu_h, mu_h'>^2`` and :class:`Balance`
  ``sum_h (E a_h(X) - pi_h)^2``, the penalties of ``R_rho = R + rho Pen``.

Notation
--------
============  =============  ==============================================
paper         code           meaning
============  =============  ==============================================
``mu``        ``heads``      ``(R, K, d)``: ``K`` heads for each of ``R`` runs
``lambda``    ``lam``        inverse temperature, ``(R,)``
``R(mu)``     ``value``      the objective, ``(R,)``
============  =============  ==============================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from . import _quadrature as _q
from . import risk as _risk
from ._validation import as_generator, as_tensor, check_finite, check_int
from .mixture import GaussianMixture

__all__ = ["ValueAndGrad", "Objective", "PopulationRisk", "EmpiricalRisk", "Repulsion",
           "Balance", "CallablePenalty"]

_METHODS = ("auto", "exact", "qmc")
_CHUNK = 2**18  # node-evaluations per kernel call: arrays stay in cache


class ValueAndGrad(NamedTuple):
    """Per-run values ``(R,)`` and Euclidean gradients ``(R, K, d)``."""

    value: torch.Tensor
    grad: torch.Tensor


def _lam(lam, heads: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(lam, dtype=torch.float64).expand(heads.shape[0]).cpu()


def _chunks(n_runs: int, per_run: int):
    size = max(1, _CHUNK // max(per_run, 1))
    return [slice(s, s + size) for s in range(0, n_runs, size)]


def _seed(rng) -> int:
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return int(rng)
    return int(as_generator(rng).integers(2**63))


class _Mixtures:
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

    def __len__(self) -> int:
        return len(self.mixtures)

    def tensor(self) -> torch.Tensor:
        """The centroids as a float64 tensor ``(M, k, d)`` (made once)."""
        if getattr(self, "_cents_t", None) is None:
            self._cents_t = torch.from_numpy(self.cents)
        return self._cents_t

    def runs(self, n_runs: int):
        """The arrays broadcast to ``n_runs`` runs (views, cached: called every step)."""
        cache = self.__dict__.setdefault("_runs", {})
        if n_runs not in cache:
            if len(self) not in (1, n_runs):
                raise ValueError(f"{len(self)} mixtures for {n_runs} runs")
            cache[n_runs] = tuple(np.broadcast_to(x, (n_runs, *x.shape[1:]))
                                  for x in (self.cents, self.pi, self.sigma, self.second))
        return cache[n_runs]

    def mixture(self, r: int) -> GaussianMixture:
        return self.mixtures[0 if len(self) == 1 else r]

    def take(self, index) -> _Mixtures:
        """The mixtures of the runs ``index`` (arrays sliced, nothing recomputed)."""
        if len(self) == 1:
            return self
        index = np.asarray(index)
        new = object.__new__(_Mixtures)
        new.__dict__.update(self.__dict__, mixtures=[self.mixtures[i] for i in index],
                            cents=self.cents[index], pi=self.pi[index],
                            sigma=self.sigma[index], second=self.second[index], _cents_t=None,
                            _runs={})
        return new


class Objective:
    """What :func:`attnclust.pgd` needs of an objective or penalty."""

    sharded = False
    """Whether the gradient is one shard's part, to be summed over ranks."""

    def take(self, index) -> Objective:
        """The objective of the runs ``index`` only (itself when shared by all runs)."""
        return self

    def value_and_grad(self, heads: torch.Tensor, lam, *, batch=None) -> ValueAndGrad:
        raise NotImplementedError


def _resolve(method: str, K: int) -> str:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "auto":
        return "exact" if K <= 3 else "qmc"
    if method == "exact" and K > 3:
        raise ValueError(f"method='exact' needs K <= 3 heads, got K={K}; use 'qmc'")
    return method


class _MixtureObjective(Objective):
    """Shared pieces of the population objectives: mixtures, rule and QMC points."""

    def __init__(self, mix, *, method: str = "auto", n_samples: int = 2**14, rng=0,
                 qmc_dtype="float64"):
        self.mix = mix if isinstance(mix, _Mixtures) else _Mixtures(mix)
        _resolve(method, 1)
        self.method = method
        self.n_samples = check_int(n_samples, "n_samples", _q.N_SCRAMBLES)
        self.seed = _seed(rng)
        self.qmc_dtype = np.dtype(qmc_dtype)
        if self.qmc_dtype not in (np.float32, np.float64):
            raise ValueError(f"qmc_dtype must be float32 or float64, got {qmc_dtype!r}")

    def _copy(self, mix: _Mixtures):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, mix=mix)
        return new

    def take(self, index):
        return self if len(self.mix) == 1 else self._copy(self.mix.take(index))

    def _qmc(self, heads: torch.Tensor, lam: torch.Tensor, target=None) -> ValueAndGrad:
        """The QMC kernel on chunks of runs; the chain rule through ``P = mu mu*_k +
        sigma C z`` written out, autograd only for the Cholesky factor ``C`` of ``G``."""
        R, K, _ = heads.shape
        cents, pi, sigma, second = self.mix.runs(R)
        cents_t = self.mix.tensor().expand(R, -1, -1)
        Z = _q.sobol_normals(K, self.n_samples, self.seed).reshape(-1, K).T.contiguous()
        Zn = Z.numpy()
        values, grads = [], []
        for sl in _chunks(R, K * cents.shape[1] * Z.shape[1]):
            h, ct = heads[sl].detach().cpu().double(), cents_t[sl]
            mean = h @ ct.transpose(1, 2)  # (r, K, k)
            gram = (h @ h.transpose(1, 2)).requires_grad_(True)
            factor, regular = _factor(h, gram)
            sig = sigma[sl][:, None, None]
            noise = sig * (factor.detach().numpy() @ Zn)  # (r, K, N)
            dt = self.qmc_dtype  # float32 halves the memory traffic of the kernel
            out = _q.qmc_kernel(mean.numpy().astype(dt), noise.astype(dt),
                                gram.detach().numpy().astype(dt), lam[sl].numpy().astype(dt),
                                pi[sl].astype(dt),
                                balance=None if target is None else target[sl].astype(dt))
            out = _q.QMCGrad(*(None if x is None else np.asarray(x, dtype=np.float64)
                               for x in out))
            d_factor = torch.from_numpy(sig * (out.d_noise @ Zn.T))
            if regular:  # Cholesky: G -> C by autograd, (r, K, K) only
                (d_gram,) = torch.autograd.grad(factor, gram, d_factor)
                g = 0.0
            else:  # some G singular: C = mu Q there, Q detached; autograd in the heads
                d_gram = torch.zeros_like(gram)
                g = _singular_factor_grad(h, d_factor)
            if out.d_gram is not None:
                d_gram = d_gram + torch.from_numpy(out.d_gram)
            g = g + torch.from_numpy(out.d_mean) @ ct + (d_gram + d_gram.transpose(1, 2)) @ h
            values.append(out.value + (0.0 if target is not None else second[sl]))
            grads.append(g)
        return _pack(np.concatenate(values), torch.cat(grads), heads)


def _singular_factor_grad(heads: torch.Tensor, d_factor: torch.Tensor) -> torch.Tensor:
    """Gradient in the heads of ``<d_factor, C(heads)>`` for the factor of
    :func:`_factor`, run by run (Cholesky where it exists, else ``mu Q``: a singular
    Cholesky must stay out of the graph, its backward is NaN)."""
    grads = []
    for r in range(heads.shape[0]):
        h = heads[r].detach().clone().requires_grad_(True)
        factor, info = torch.linalg.cholesky_ex(h @ h.T)
        if int(info) != 0 or float(torch.diagonal(factor).detach().min()) < 1e-6:
            factor = _qr_factor(h)
        grads.append(torch.autograd.grad(factor, h, d_factor[r])[0])
    return torch.stack(grads)


def _qr_factor(h: torch.Tensor) -> torch.Tensor:
    """``mu Q`` with ``Q`` a detached orthonormal basis of the heads' span, ``(K, K)``."""
    K = h.shape[0]
    Q = np.linalg.qr(h.detach().numpy().T)[0]  # (d, min(K, d))
    f = h @ torch.from_numpy(Q)
    if f.shape[1] < K:  # K > d: zero columns make it (K, K), same product
        f = torch.cat([f, f.new_zeros(K, K - f.shape[1])], dim=1)
    return f


def _factor(heads: torch.Tensor, gram: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``C`` with ``C C^T = G`` per run: Cholesky, or heads times a detached orthonormal
    basis of their span where ``G`` is singular (as :func:`attnclust.qmc_risk`); and
    whether every run had its Cholesky factor."""
    factor, info = torch.linalg.cholesky_ex(gram)
    bad = (info != 0) | (torch.diagonal(factor, dim1=1, dim2=2).detach().min(1).values < 1e-6)
    if not bool(bad.any()):
        return factor, True
    factor = factor.detach().clone()  # the gradient goes through _singular_factor_grad
    for r in torch.nonzero(bad)[:, 0].tolist():
        factor[r] = _qr_factor(heads[r].detach())
    return factor, False


def _pack(value: np.ndarray, grad, heads: torch.Tensor) -> ValueAndGrad:
    grad = torch.as_tensor(grad, dtype=torch.float64)
    return ValueAndGrad(torch.as_tensor(value, dtype=torch.float64).to(heads.device),
                        grad.to(heads.device))


def _check_runs(heads, d: int) -> torch.Tensor:
    heads = torch.as_tensor(heads)
    if heads.ndim != 3 or heads.shape[-1] != d:
        raise ValueError(f"heads must have shape (R, K, {d}), got {tuple(heads.shape)}")
    return heads


class PopulationRisk(_MixtureObjective):
    """Population risk ``R(mu) = E||X - T_mu(X)||^2`` of ``R`` runs at once.

    Parameters
    ----------
    mix : GaussianMixture or sequence of GaussianMixture
        One mixture for every run, or one per run (same ``k`` and ``d``).
    method : {"auto", "exact", "qmc"}, default="auto"
        As in :func:`attnclust.population_risk`.
    n_samples : int, default=2**14
        QMC points per mixture component (common random numbers).
    rng : int or Generator, default=0
        Seed of the QMC points.
    qmc_dtype : {"float64", "float32"}, default="float64"
        Precision of the QMC kernel (the heads and the gradient stay float64); float32
        is about twice as fast, with relative errors near 1e-7.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> heads = torch.stack([ac.init_on_manifold(mix, rng=r) for r in range(3)])  # (3, 2, 10)
    >>> value, grad = PopulationRisk(mix).value_and_grad(heads, 10.0)
    >>> value.shape, grad.shape
    (torch.Size([3]), torch.Size([3, 2, 10]))
    >>> one = ac.population_risk(heads[1], mix, inverse_temperature=10.0)
    >>> abs(float(value[1] - one)) < 1e-12
    True
    """

    def value_and_grad(self, heads, lam, *, batch=None) -> ValueAndGrad:
        heads = _check_runs(heads, self.mix.d)
        lam = _lam(lam, heads)
        R, K, _ = heads.shape
        method = _resolve(self.method, K)
        if method == "qmc":
            return self._qmc(heads, lam)
        cents, pi, sigma, second = self.mix.runs(R)
        h = heads.detach().cpu().double().numpy()
        if K == 1:
            mean = np.einsum("rk,rkd->rd", pi, cents)  # E[X]
            value = second - 2.0 * (mean * h[:, 0]).sum(-1) + (h[:, 0] ** 2).sum(-1)
            return _pack(value, (2.0 * (h[:, 0] - mean))[:, None], heads)
        if K == 2:
            rule = _q.rule()
            n_nodes = cents.shape[1] * (rule.grid.size + rule.offsets.size) * rule.gl_x.size
            parts = [_q.k2_exact(h[sl], cents[sl], pi[sl], sigma[sl], lam[sl].numpy(),
                                 second[sl], rule) for sl in _chunks(R, n_nodes)]
            return _pack(np.concatenate([p[0] for p in parts]),
                         np.concatenate([p[1] for p in parts]), heads)
        return _by_run(heads, lam, lambda ht, r, lam_r: _risk.population_risk(
            ht, self.mix.mixture(r), inverse_temperature=lam_r, method="exact"))


def _by_run(heads: torch.Tensor, lam: torch.Tensor, fn) -> ValueAndGrad:
    """Autograd, one run at a time (``K = 3`` exact rule, ``K = 1`` balance, callables)."""
    values, grads = [], []
    for r in range(heads.shape[0]):
        ht = heads[r].detach().clone().requires_grad_(True)
        v = fn(ht, r, float(lam[r]))
        values.append(v.detach())
        grads.append(torch.autograd.grad(v, ht)[0] if v.requires_grad
                     else torch.zeros_like(ht))
    return ValueAndGrad(torch.stack(values).to(heads.device), torch.stack(grads))


class Balance(_MixtureObjective):
    """Balance penalty ``sum_h (E[a_h(X)] - pi_h)^2``: no knowledge of the centroids.

    Parameters
    ----------
    data : GaussianMixture, sequence of GaussianMixture, or array of shape (n, d)
        Where the expectation is taken (data: the mean over the rows, or over the
        current mini-batch that :func:`attnclust.pgd` passes).
    target : array-like of shape (K,), optional
        Target proportions (uniform when omitted).
    method, n_samples, rng, qmc_dtype :
        As in :class:`PopulationRisk`.
    reduce : callable, optional
        Data-parallel hook (sum over ranks); ``data`` is then this rank's rows and the
        gradient is this rank's part (``sharded``).

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> heads = torch.tensor(mix.centroids)[None]  # (1, 2, 3)
    >>> float(Balance(mix).value_and_grad(heads, 10.0).value[0]) < 1e-20
    True
    """

    def __init__(self, data, *, target=None, method: str = "auto", n_samples: int = 2**14,
                 rng=0, qmc_dtype="float64", reduce=None, share: float = 1.0):
        self.target = None if target is None else np.asarray(target, dtype=np.float64)
        self.X = None
        if isinstance(data, (GaussianMixture, _Mixtures)) or (
                isinstance(data, Sequence) and data and isinstance(data[0], GaussianMixture)):
            super().__init__(data, method=method, n_samples=n_samples, rng=rng,
                             qmc_dtype=qmc_dtype)
            return
        self.X = as_tensor(data, name="data", dtype=torch.float64)
        if self.X.ndim != 2 or self.X.shape[0] == 0:
            raise ValueError(f"data must be a GaussianMixture or a non-empty (n, d) array, "
                             f"got shape {tuple(self.X.shape)}")
        self.reduce, self.share = reduce, share
        self.sharded = reduce is not None

    def take(self, index):
        return self if self.X is not None else super().take(index)

    def _targets(self, R: int, K: int) -> np.ndarray:
        t = np.full(K, 1.0 / K) if self.target is None else self.target
        if t.shape != (K,):
            raise ValueError(f"target must have shape ({K},), got {t.shape}")
        return np.broadcast_to(t, (R, K))

    def value_and_grad(self, heads, lam, *, batch=None) -> ValueAndGrad:
        if self.X is not None:
            return self._data(heads, lam, batch)
        heads = _check_runs(heads, self.mix.d)
        lam = _lam(lam, heads)
        R, K, _ = heads.shape
        target = self._targets(R, K)
        method = _resolve(self.method, K)
        if method == "qmc" and K > 1:
            return self._qmc(heads, lam, np.ascontiguousarray(target))
        if method == "exact" and K == 2:
            cents, pi, sigma, _ = self.mix.runs(R)
            value, grad = _q.k2_balance(heads.detach().cpu().double().numpy(), cents, pi,
                                        sigma, lam.numpy(), target, _q.rule())
            return _pack(value, grad, heads)
        # K = 1 (a constant) and K = 3 exact: the definition, risk.balance, by autograd
        return _by_run(heads, lam, lambda ht, r, lam_r: _risk.balance(
            ht, self.mix.mixture(r), inverse_temperature=lam_r, target=self.target))

    def _data(self, heads: torch.Tensor, lam, batch) -> ValueAndGrad:
        xb = self.X.to(heads.device)
        xb = xb if batch is None else xb[batch]
        ht = heads.detach().requires_grad_(True)
        lam_t = torch.as_tensor(lam, dtype=ht.dtype, device=ht.device).expand(ht.shape[0])
        # the penalty of risk.balance with E a_h(X) summed over ranks: A = sum_r share_r A_r,
        # A_r this rank's mean attention; the gradient of |A - t|^2 is sum_r grad <c, A_r>
        # with c = 2 (A - t) fixed (one all-reduce of K numbers per run)
        part = _risk.mean_attention(ht, xb, inverse_temperature=lam_t) * self.share  # (R, K)
        R, K = part.shape
        target = torch.tensor(self._targets(R, K), dtype=ht.dtype, device=ht.device)
        total = part.detach() if self.reduce is None else \
            self.reduce(part.detach().reshape(-1)).view_as(part)
        (grad,) = torch.autograd.grad((2.0 * (total - target) * part).sum(), ht)
        return ValueAndGrad(((total - target) ** 2).sum(-1), grad)


class Repulsion(Objective):
    """Repulsion penalty ``sum_{h<h'} <mu_h, mu_h'>^2`` (:func:`attnclust.repulsion`), with
    its gradient ``2 sum_{h' != h} G_{hh'} mu_h'`` written out.

    Examples
    --------
    >>> import torch
    >>> value, grad = Repulsion().value_and_grad(torch.eye(3, dtype=torch.float64)[None], 1.0)
    >>> float(value[0]), float(grad.abs().max())
    (0.0, 0.0)
    """

    def value_and_grad(self, heads, lam=None, *, batch=None) -> ValueAndGrad:
        heads = torch.as_tensor(heads)
        gram = heads @ heads.transpose(1, 2)  # (R, K, K)
        off = gram - torch.diag_embed(torch.diagonal(gram, dim1=1, dim2=2))
        return ValueAndGrad(_risk.repulsion(heads), 2.0 * (off @ heads))


class CallablePenalty(Objective):
    """A user's penalty ``(K, d) tensor -> scalar``, differentiated by autograd per run."""

    def __init__(self, fn):
        self.fn = fn

    def value_and_grad(self, heads, lam, *, batch=None) -> ValueAndGrad:
        heads = torch.as_tensor(heads)
        return _by_run(heads, _lam(lam, heads), lambda ht, r, lam_r: self.fn(ht))


class EmpiricalRisk(Objective):
    """Empirical risk ``mean_i ||x_i - T_mu(x_i)||^2`` of ``R`` runs at once.

    Parameters
    ----------
    X : array-like or tensor of shape (n, d) or (R, n, d)
        Data shared by every run, or one data set per run. A tensor keeps its device.
    batch_size : int, optional
        Mini-batch size: :meth:`next_batch` draws rows without replacement (a fresh
        permutation each epoch) with ``rng``, the same rows for every run.
    reduce : callable, optional
        Data-parallel hook, the sum of a tensor over ranks: ``X`` is this rank's shard,
        its risk is weighted by its share ``n_r / n`` and its gradient is one part of the
        global one (``sharded``); ``batch_size`` is the global batch, of which each rank
        draws ``round(batch_size n_r / n)`` rows (stratified sampling).
    rng : int or Generator, optional
        Mini-batch sampling.

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> heads = X[None]  # one run, heads on the two points
    >>> float(EmpiricalRisk(X).value_and_grad(heads, 40.0).value[0]) < 1e-30
    True
    """

    def __init__(self, X, *, batch_size: int | None = None, reduce=None, rng=None):
        self.X = as_tensor(X, name="objective", dtype=torch.float64)
        if self.X.ndim not in (2, 3) or self.X.shape[-2] == 0:
            raise ValueError(f"objective must be a GaussianMixture or a non-empty (n, d) "
                             f"array, got shape {tuple(self.X.shape)}")
        check_finite(self.X, "objective")
        n = self.X.shape[-2]
        self.reduce = reduce
        self.sharded = reduce is not None
        if reduce is not None and not callable(reduce):
            raise ValueError(f"reduce must be a callable (sum over ranks), got {reduce!r}")
        n_total = n if reduce is None else int(
            reduce(torch.tensor([float(n)], dtype=torch.float64)).item())
        self.share = n / n_total
        self.batch_size = None
        if batch_size is not None:
            b = min(check_int(batch_size, "batch_size", 1), n_total)
            self.batch_size = min(n, max(1, round(b * self.share)))
        self._gen = as_generator(rng)
        self._order, self._cursor = None, 0

    @property
    def d(self) -> int:
        return self.X.shape[-1]

    def next_batch(self):
        """Row indices of the next mini-batch (``None`` in full batch)."""
        if self.batch_size is None:
            return None
        if self._order is None or self._cursor + self.batch_size > len(self._order):
            perm = self._gen.permutation(self.X.shape[-2])
            self._order, self._cursor = torch.from_numpy(perm).to(self.X.device), 0
        batch = self._order[self._cursor:self._cursor + self.batch_size]
        self._cursor += self.batch_size
        return batch

    def take(self, index):
        if self.X.ndim == 2:
            return self
        new = object.__new__(EmpiricalRisk)
        new.__dict__.update(self.__dict__, X=self.X[torch.as_tensor(index)])
        return new

    def value_and_grad(self, heads, lam, *, batch=None) -> ValueAndGrad:
        heads = torch.as_tensor(heads)
        xb = self.X if batch is None else self.X[..., batch, :]
        ht = heads.detach().requires_grad_(True)
        lam_t = torch.as_tensor(lam, dtype=ht.dtype, device=ht.device).expand(ht.shape[0])
        r = _risk.empirical_risk(ht, xb, inverse_temperature=lam_t) * self.share
        return ValueAndGrad(r.detach(), torch.autograd.grad(r.sum(), ht)[0])

    def full_value(self, heads, lam) -> torch.Tensor:
        """The risk on every row (the global risk with ``reduce``), without gradient."""
        with torch.no_grad():
            lam_t = torch.as_tensor(lam, dtype=heads.dtype, device=heads.device)
            r = _risk.empirical_risk(heads, self.X,
                                     inverse_temperature=lam_t.expand(heads.shape[0]),
                                     batch_size=65536) * self.share
            return r if self.reduce is None else self.reduce(r)

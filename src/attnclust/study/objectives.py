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

from .._validation import as_generator, as_tensor, check_finite, check_int
from ..layer.geometry import as_geometry
from . import _population as _pop
from . import _qmc
from . import _quadrature as _q
from . import risk as _risk
from .mixture import GaussianMixture

__all__ = ["ValueAndGrad", "Objective", "PopulationRisk", "EmpiricalRisk", "Repulsion",
           "Balance", "CallablePenalty"]


class ValueAndGrad(NamedTuple):
    """Per-run values ``(R,)`` and Euclidean gradients ``(R, K, d)``."""

    value: torch.Tensor
    grad: torch.Tensor


def _lam(lam, heads: torch.Tensor) -> torch.Tensor:
    return _risk.run_inverse_temperatures(lam, heads.shape[0])


class Objective:
    """What :func:`attnclust.pgd` needs of an objective or penalty.

    Only :meth:`value_and_grad` must be written; the rest has defaults that fit an
    objective of the heads alone (as :class:`Repulsion`): any number of features, the
    heads' own device, full batch, not sharded.
    """

    sharded = False
    """Whether the gradient is one shard's part, to be summed over ranks."""
    d: int | None = None
    """The number of features the heads must have (``None``: any)."""
    device: torch.device | None = None
    """Where the iterate lives (``None``: where ``heads0`` is)."""
    stochastic = False
    """Whether :meth:`next_batch` draws mini-batches (then :meth:`full_value` is recorded)."""
    geometry: str | None = None
    """The heads' geometry the objective assumes (``None``: any)."""

    def take(self, index) -> Objective:
        """The objective of the runs ``index`` only (itself when shared by all runs)."""
        return self

    def value_and_grad(self, heads: torch.Tensor, lam, *, batch=None) -> ValueAndGrad:
        """Values ``(R,)`` and Euclidean gradients ``(R, K, d)`` at heads ``(R, K, d)`` and
        inverse temperatures ``lam`` ``(R,)`` (on the rows ``batch`` when stochastic)."""
        raise NotImplementedError

    def next_batch(self):
        """Row indices of the next mini-batch (``None``: full batch)."""
        return None

    def full_value(self, heads: torch.Tensor, lam) -> torch.Tensor:
        """The value on the whole objective (not a mini-batch), without gradient."""
        return self.value_and_grad(heads, lam).value


class _MixtureObjective(Objective):
    """Shared pieces of the population objectives: mixtures, rule and QMC points."""

    def __init__(self, mix, *, method: str = "auto", n_samples: int = 2**14, rng=0,
                 qmc_dtype="float64", geometry: str = "sphere"):
        self.mix = mix if isinstance(mix, _pop.Mixtures) else _pop.Mixtures(mix)
        _pop.resolve_method(method, 1)
        self.method = method
        self.n_samples = check_int(n_samples, "n_samples", _qmc.N_SCRAMBLES)
        self.seed = _qmc.qmc_seed(rng)
        self.qmc_dtype = np.dtype(qmc_dtype)
        if self.qmc_dtype not in (np.float32, np.float64):
            raise ValueError(f"qmc_dtype must be float32 or float64, got {qmc_dtype!r}")
        self.geometry = as_geometry(geometry)

    @property
    def d(self) -> int:
        return self.mix.d

    def _copy(self, mix: _pop.Mixtures):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, mix=mix)
        return new

    def take(self, index):
        return self if len(self.mix) == 1 else self._copy(self.mix.take(index))


def _pack(value, grad, heads: torch.Tensor) -> ValueAndGrad:
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
    geometry : {"sphere", "euclidean"}, default="sphere"
        The layer's logits, as in :func:`attnclust.population_risk` (Euclidean heads:
        key bias ``lambda ||mu_h||^2 / 2``, heads of any norm).

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
        value, grad = _pop.evaluate(heads, self.mix, _lam(lam, heads), method=self.method,
                                    n_samples=self.n_samples, seed=self.seed,
                                    qmc_dtype=self.qmc_dtype, geometry=self.geometry)
        return _pack(value, grad, heads)


class Balance(_MixtureObjective):
    """Balance penalty ``sum_h (E[a_h(X)] - pi_h)^2``: no knowledge of the centroids.

    Parameters
    ----------
    data : GaussianMixture, sequence of GaussianMixture, or array of shape (n, d)
        Where the expectation is taken (data: the mean over the rows, or over the
        current mini-batch that :func:`attnclust.pgd` passes).
    target : array-like of shape (K,), optional
        Target proportions (uniform when omitted).
    method, n_samples, rng, qmc_dtype, geometry :
        As in :class:`PopulationRisk`.
    reduce : callable, optional
        Data-parallel hook (sum over ranks); ``data`` is then this rank's rows and the
        gradient is this rank's part (``sharded``).
    share : float, optional
        This rank's part ``n_r / n`` of all rows (default: counted through ``reduce``,
        one all-reduce at construction; ``1`` without ``reduce``).

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.3)
    >>> heads = torch.tensor(mix.centroids)[None]  # (1, 2, 3)
    >>> float(Balance(mix).value_and_grad(heads, 10.0).value[0]) < 1e-20
    True
    """

    def __init__(self, data, *, target=None, method: str = "auto", n_samples: int = 2**14,
                 rng=0, qmc_dtype="float64", reduce=None, share: float | None = None,
                 geometry: str = "sphere"):
        self.target = None if target is None else np.asarray(target, dtype=np.float64)
        self.X = None
        if isinstance(data, (GaussianMixture, _pop.Mixtures)) or (
                isinstance(data, Sequence) and data and isinstance(data[0], GaussianMixture)):
            super().__init__(data, method=method, n_samples=n_samples, rng=rng,
                             qmc_dtype=qmc_dtype, geometry=geometry)
            return
        self.X = as_tensor(data, name="data", dtype=torch.float64)
        if self.X.ndim != 2 or self.X.shape[0] == 0:
            raise ValueError(f"data must be a GaussianMixture or a non-empty (n, d) array, "
                             f"got shape {tuple(self.X.shape)}")
        self.reduce, self.sharded = reduce, reduce is not None
        n = self.X.shape[0]
        self.share = n / _n_total(n, reduce) if share is None else float(share)
        self.geometry = as_geometry(geometry)

    @property
    def d(self) -> int:
        return self.mix.d if self.X is None else self.X.shape[-1]

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
        method = _pop.resolve_method(self.method, K)
        if K == 1 or (method == "exact" and K == 3):
            # K = 1 (a constant) and K = 3 exact: the definition, risk.balance, by autograd
            value, grad = _pop.by_run(heads, lam, lambda ht, r, lam_r: _risk.balance(
                ht, self.mix.mixture(r), inverse_temperature=lam_r, target=self.target,
                geometry=self.geometry))
            return ValueAndGrad(value, grad)
        h = heads.detach().cpu().double()
        offset = _q.key_offset(h.numpy(), self.geometry)
        cents, pi, sigma, _ = self.mix.runs(R)
        if method == "qmc":
            value, grad, d_offset = _qmc.estimate(
                h, self.mix.tensor().expand(R, -1, -1), pi, sigma, lam.numpy(),
                _pop.qmc_normals(K, self.n_samples, self.seed),
                target=np.ascontiguousarray(target), offset=offset, dtype=self.qmc_dtype)
            h_chain = h
        else:
            value, grad, d_offset = _q.k2_balance(h.numpy(), cents, pi, sigma, lam.numpy(),
                                                  target, _q.rule(), offset=offset)
            h_chain = h.numpy()
        return _pack(value, _q.chain_offset(grad, d_offset, h_chain, self.geometry), heads)

    def _data(self, heads: torch.Tensor, lam, batch) -> ValueAndGrad:
        xb = self.X.to(heads.device)
        xb = xb if batch is None else xb[batch]
        ht = heads.detach().requires_grad_(True)
        lam_t = torch.as_tensor(lam, dtype=ht.dtype, device=ht.device).expand(ht.shape[0])
        # the penalty of risk.balance with E a_h(X) summed over ranks: A = sum_r share_r A_r,
        # A_r this rank's mean attention; the gradient of |A - t|^2 is sum_r grad <c, A_r>
        # with c = 2 (A - t) fixed (one all-reduce of K numbers per run)
        part = _risk.mean_attention(ht, xb, inverse_temperature=lam_t,
                                    geometry=self.geometry) * self.share  # (R, K)
        R, K = part.shape
        target = torch.tensor(self._targets(R, K), dtype=ht.dtype, device=ht.device)
        total = part.detach() if self.reduce is None else \
            self.reduce(part.detach().reshape(-1)).view_as(part)
        (grad,) = torch.autograd.grad((2.0 * (total - target) * part).sum(), ht)
        return ValueAndGrad(((total - target) ** 2).sum(-1), grad)


def _n_total(n: int, reduce) -> int:
    """The rows of all ranks, this shard having ``n`` (``n`` itself without ``reduce``)."""
    if reduce is None:
        return n
    if not callable(reduce):
        raise ValueError(f"reduce must be a callable (sum over ranks), got {reduce!r}")
    return int(reduce(torch.tensor([float(n)], dtype=torch.float64)).item())


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
        return ValueAndGrad(*_pop.by_run(heads, _lam(lam, heads),
                                         lambda ht, r, lam_r: self.fn(ht)))


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
    geometry : {"sphere", "euclidean"}, default="sphere"
        The layer's logits, as in :func:`attnclust.empirical_risk`.

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> heads = X[None]  # one run, heads on the two points
    >>> float(EmpiricalRisk(X).value_and_grad(heads, 40.0).value[0]) < 1e-30
    True
    """

    def __init__(self, X, *, batch_size: int | None = None, reduce=None, rng=None,
                 geometry: str = "sphere"):
        self.X = as_tensor(X, name="objective", dtype=torch.float64)
        if self.X.ndim not in (2, 3) or self.X.shape[-2] == 0:
            raise ValueError(f"objective must be a GaussianMixture or a non-empty (n, d) "
                             f"array, got shape {tuple(self.X.shape)}")
        check_finite(self.X, "objective")
        n = self.X.shape[-2]
        self.reduce = reduce
        self.sharded = reduce is not None
        n_total = _n_total(n, reduce)
        self.share = n / n_total
        self.batch_size = None
        if batch_size is not None:
            b = min(check_int(batch_size, "batch_size", 1), n_total)
            self.batch_size = min(n, max(1, round(b * self.share)))
        self._gen = as_generator(rng)
        self._order, self._cursor = None, 0
        self.geometry = as_geometry(geometry)

    @property
    def d(self) -> int:
        return self.X.shape[-1]

    @property
    def device(self) -> torch.device:
        return self.X.device

    @property
    def stochastic(self) -> bool:
        return self.batch_size is not None

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
        r = _risk.empirical_risk(ht, xb, inverse_temperature=lam_t,
                                 geometry=self.geometry) * self.share
        return ValueAndGrad(r.detach(), torch.autograd.grad(r.sum(), ht)[0])

    def full_value(self, heads, lam) -> torch.Tensor:
        """The risk on every row (the global risk with ``reduce``), without gradient."""
        with torch.no_grad():
            lam_t = torch.as_tensor(lam, dtype=heads.dtype, device=heads.device)
            r = _risk.empirical_risk(heads, self.X,
                                     inverse_temperature=lam_t.expand(heads.shape[0]),
                                     batch_size=65536, geometry=self.geometry) * self.share
            return r if self.reduce is None else self.reduce(r)

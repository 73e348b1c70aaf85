"""Fitting shaped heads: tempered EM, a safeguarded fixed point on sums over rows.

The layer is :mod:`attnclust.cluster.mixture.shaped`'s, ``a_h(x) = softmax_h lambda l_h(x)`` with
``l_h(x) = log pi_h + log N(x; mu_h, P_h^{-1})``. Its reconstruction risk ``E||x -
T(x)||^2`` is no objective for the metrics ``P_h`` (``docs/guide/shaped-heads.md``
derives and measures why: for given heads the risk prefers nearest-head cells, so a
metric learnt on it stays isotropic). The objective here is the **tempered
log-likelihood** of the mixture, with the data known up to a resolution ``D =
diag(r_1..r_d)`` (the covariance floor):

    F_lambda(theta) = (1/W) sum_i w_i (1/lambda) log sum_h exp( lambda l~_h(x_i) ),
    l~_h(x) = E_{e ~ N(0, D)} l_h(x + e) = l_h(x) - (1/2) tr(P_h D),

and the solver minimizes ``f = -F_lambda`` (``loss`` below). Since ``(1/lambda) log
sum_h exp(lambda l_h) = max_q sum_h q_h l_h + H(q)/lambda`` over distributions ``q``,
``F_lambda`` is the maximum over ``q`` of a function that is concave in ``q`` and, for
fixed ``q``, a weighted Gaussian log-likelihood; coordinate ascent is

- E-step: ``q_ih = softmax_h lambda l~_h(x_i)``: the layer's attention (with the floor's
  ``-(1/2) tr(P_h D)`` in the bias, negligible unless a head has no spread);
- M-step (exact): ``N_h = sum_i w_i q_ih``, ``pi_h = N_h / W``, ``mu_h = sum_i w_i q_ih
  x_i / N_h``, ``Sigma_h = sum_i w_i q_ih (x_i - mu_h)(x_i - mu_h)^T / N_h + D`` (the
  ``+ D`` is what maximizes the floor's term ``-(1/2) N_h tr(P_h D)``); ``"diag"`` keeps
  the diagonal, ``"spherical"`` its mean.

so ``f`` never increases (deterministic-annealing EM, Ueda and Nakano 1998). At
``lambda = 1`` and ``D = 0`` this is exactly the EM of
``sklearn.mixture.GaussianMixture``; ``lambda < 1`` flattens the posteriors (heads merge,
the annealing of the K-head layer), ``lambda > 1`` sharpens them (classification EM as
``lambda -> infinity``). ``lambda`` is dimensionless here: log-densities change by a
constant under a change of units.

Safeguards: ``r_j = reg_covar * max(v_j, 1e-10 v)`` with ``v_j`` the data's variance
along feature ``j`` and ``v`` their mean (a floor relative to the data's scale, feature by
feature, where scikit-learn's ``reg_covar`` is absolute: it follows a change of units of
any feature, and a constant feature gets a floor from the others), so no covariance is
singular; a head whose covariance sits at the floor in some
direction (a constant column, a cluster of repeated rows) or that holds (almost) no row
is reported by a :class:`~attnclust.DegenerateFitWarning` (the dead head keeps its last
mean and covariance); every step's objective is checked, and a step that would increase
it beyond rounding is not taken. The statistics of a pass are sums over rows of ``q``,
``q (x - mu)`` and ``q (x - mu)(x - mu)^T`` (``K d x d`` second moments, centred on the
current heads for accuracy), read in chunks and summed over ranks by ``reduce``.

Notation
--------
============  =========================  ==============================================
paper         code                       meaning
============  =========================  ==============================================
``lambda``    ``inverse_temperature``    tempering exponent of the likelihood
``D``         ``floor``                  covariance floor ``diag(r_1..r_d)``, ``(d,)``
``w_i``       ``sample_weight``          weight of row ``i`` (default 1), ``W = sum w_i``
``q_ih``      (responsibilities)         attention of row ``i`` on head ``h``
``N_h``       ``counts``                 soft (weighted) count of head ``h``
``f``         ``loss``                   ``-F_lambda``, per unit weight
============  =========================  ==============================================
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ...layer.results import IterationInfo
from ...layer.schedules import Schedule, as_schedule
from ..degenerate import DegenerateFitWarning, user_stacklevel
from .covariance import Covariance, as_covariance, positive_factors
from .em import EMSteps
from .floor import covariance_floor, spanned_features

__all__ = ["ShapedFitResult", "ShapedFitted", "shaped_fit", "tempered_objective",
           "tempered_log_joint", "precisions_cholesky_of", "check_degenerate",
           "data_variance", "covariance_floor"]

_LOG_2PI = math.log(2.0 * math.pi)
_CHUNK_NUMBERS = 1 << 21        # at most this many numbers per (K, rows, d) block


class ShapedFitResult(NamedTuple):
    """Outcome of :func:`shaped_fit` (tensors in the dtype of the data)."""

    means: torch.Tensor
    """``(K, d)``."""
    covariances: torch.Tensor
    """``(K, d, d)``, ``(K, d)`` or ``(K,)`` by ``covariance_type`` (floor included)."""
    precisions_cholesky: torch.Tensor
    """``U_h`` with ``Sigma_h^{-1} = U_h U_h^T``, shapes as ``covariances``."""
    weights: torch.Tensor
    """``(K,)`` mixing weights ``pi_h``."""
    floor: torch.Tensor
    """The covariance floor ``(r_1..r_d)``, added to every covariance's diagonal."""
    loss_curve: np.ndarray
    """``f`` at every iterate (the first of each stage at its own ``lambda``)."""
    inverse_temperature_curve: np.ndarray
    n_iter: int
    converged: bool


def tempered_objective(X: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                       weights: torch.Tensor, *, inverse_temperature: float = 1.0,
                       covariance_type: str | Covariance = "full",
                       floor: torch.Tensor | None = None,
                       sample_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``f = -(1/W) sum_i w_i (1/lambda) log sum_h exp(lambda l~_h(x_i))``, differentiable.

    At ``inverse_temperature=1`` and ``floor=None`` (no floor): minus the mean log-likelihood of the
    mixture (``-GaussianMixture.score``).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal as mvn
    >>> X = torch.tensor([[0.0, 1.0], [2.0, 0.5]], dtype=torch.float64)
    >>> m, u = torch.zeros(1, 2, dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64)
    >>> f = tempered_objective(X, m, u, torch.ones(1, dtype=torch.float64),
    ...                        covariance_type="spherical")
    >>> bool(np.isclose(float(f), -mvn([0, 0], 4 * np.eye(2)).logpdf(X.numpy()).mean()))
    True
    """
    lam = float(inverse_temperature)
    logits = tempered_log_joint(X, means, precisions_cholesky, weights.log(),
                                inverse_temperature=lam, covariance_type=covariance_type,
                                floor=floor)
    per_row = -torch.logsumexp(logits, dim=-1) / lam
    if sample_weight is None:
        return per_row.mean()
    return (sample_weight * per_row).sum() / sample_weight.sum()


def tempered_log_joint(x: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                       log_weights: torch.Tensor, *, inverse_temperature: float = 1.0,
                       covariance_type: str | Covariance = "full",
                       floor: torch.Tensor | None = None) -> torch.Tensor:
    """``lambda l~_h(x)`` of tokens ``(..., d)``: ``(..., K)``, the E-step's logits.

    The layer's logits (:func:`attnclust.cluster.mixture.shaped.shaped_logits`) with the density's
    constant ``-d/2 log 2 pi`` and the floor's ``-(1/2) tr(P_h D)`` in the bias: their
    softmax is the fit's attention, their log-sum-exp over ``lambda`` the tempered
    log-likelihood of ``x``.

    Examples
    --------
    >>> from scipy.stats import norm
    >>> x = torch.tensor([[0.5]], dtype=torch.float64)
    >>> lj = tempered_log_joint(x, torch.zeros(1, 1, dtype=torch.float64),
    ...                         torch.ones(1, dtype=torch.float64),
    ...                         torch.zeros(1, dtype=torch.float64), covariance_type="spherical")
    >>> bool(torch.isclose(lj[0, 0], torch.tensor(norm.logpdf(0.5), dtype=torch.float64)))
    True
    """
    return as_covariance(covariance_type).log_joint(x, means, precisions_cholesky, log_weights,
                                                    inverse_temperature, floor)


def precisions_cholesky_of(covariances: torch.Tensor, covariance_type: str | Covariance
                           ) -> torch.Tensor:
    """``U_h`` (upper triangular, ``U_h U_h^T = Sigma_h^{-1}``) of covariances.

    ``ValueError`` when a covariance is not positive definite.

    Examples
    --------
    >>> c = torch.tensor([[[4.0, 2.0], [2.0, 2.0]]], dtype=torch.float64)
    >>> u = precisions_cholesky_of(c, "full")
    >>> torch.allclose(u @ u.mT, torch.linalg.inv(c))
    True
    """
    return as_covariance(covariance_type).factors(covariances)


def _chunks(X, chunk: int, row_map, sample_weight):
    """``(rows, weights or None)`` of each chunk of ``X``."""
    for s in range(0, X.shape[0], chunk):
        rows = X[s:s + chunk]
        rows = rows if row_map is None else row_map(rows)
        yield rows, None if sample_weight is None else sample_weight[s:s + chunk].to(rows.dtype)


def data_variance(X, center: torch.Tensor, *, chunk: int, reduce=None, row_map=None,
                  sample_weight=None) -> tuple[float, torch.Tensor]:
    """``(W, v)``: total weight and variance of each feature ``(d,)`` (all ranks' rows).

    Sums are centred on ``center`` (any point near the data) for accuracy.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [2.0, 4.0]], dtype=torch.float64)
    >>> data_variance(X, torch.zeros(2, dtype=torch.float64), chunk=1)
    (2.0, tensor([1., 4.], dtype=torch.float64))
    """
    d = X.shape[1]
    acc = torch.zeros(2 * d + 1, dtype=torch.float64, device=X.device)
    for rows, w in _chunks(X, chunk, row_map, sample_weight):
        diff = (rows - center.to(rows.dtype)).double()                      # (n_c, d)
        w = torch.ones(rows.shape[0], dtype=torch.float64, device=X.device) if w is None \
            else w.double()
        acc += torch.cat([w.sum()[None], w @ diff, w @ (diff * diff)])
    acc = acc if reduce is None else reduce(acc)
    total = float(acc[0])
    shift = acc[1:d + 1] / total
    return total, (acc[d + 1:] / total - shift * shift).clamp_min(0.0)


class _Params(NamedTuple):
    means: torch.Tensor          # (K, d) float64
    covariances: torch.Tensor    # float64, shape of the covariance type, floor included
    factors: torch.Tensor        # precisions_cholesky, float64
    log_weights: torch.Tensor    # (K,) float64


class _Stats(NamedTuple):
    loss: float
    counts: torch.Tensor         # (K,)  N_h
    first: torch.Tensor          # (K, d) sum q w (x - mu_h)
    second: torch.Tensor         # centred second moments, shape of the covariance type


def _head_bias(params: _Params, lam: float, cov: Covariance, floor) -> torch.Tensor:
    """``lambda (log pi_h + 1/2 log det P_h - d/2 log 2 pi - 1/2 tr(P_h D))``, ``(K,)``."""
    d = params.means.shape[1]
    bias = params.log_weights - 0.5 * d * _LOG_2PI + 0.5 * cov.log_det_precision(
        params.factors, d)
    if floor is not None:
        bias = bias - 0.5 * cov.precision_trace(params.factors, floor)
    return lam * bias


def _pass(X, params: _Params, lam: float, cov: Covariance, floor, *, chunk, reduce, row_map,
          sample_weight, total: float, hard: bool = False) -> _Stats:
    """One pass over the rows: the objective at ``params`` and the sums of the M-step.

    ``hard``: responsibilities one-hot on the nearest mean (the k-means start).
    """
    K, d = params.means.shape
    shape = cov.shape(K, d)
    acc = torch.zeros(1 + K + K * d + math.prod(shape), dtype=torch.float64, device=X.device)
    bias = None if hard else _head_bias(params, lam, cov, floor)
    for rows, w in _chunks(X, chunk, row_map, sample_weight):
        dtype = rows.dtype
        diff = rows.unsqueeze(0) - params.means.to(dtype)[:, None]          # (K, n_c, d)
        if hard:
            nearest = (diff * diff).sum(-1).argmin(0)
            q = torch.nn.functional.one_hot(nearest, K).T.to(dtype)         # (K, n_c)
            loss = rows.new_zeros(())
        else:   # the E-step: a softmax over heads of lambda l~_h, and its log-sum-exp
            logits = bias.to(dtype)[:, None] - (0.5 * lam) * cov.whitened_norms(
                diff, params.factors.to(dtype))                             # (K, n_c)
            top = logits.amax(0)
            e = (logits - top).exp()
            total_e = e.sum(0)
            q = e / total_e
            lse = top + total_e.log()                                       # (n_c,)
            loss = -(lse if w is None else w * lse).double().sum() / lam
        qw = q if w is None else q * w                                      # (K, n_c)
        first, second = cov.moments(diff, qw)
        acc += torch.cat([loss.double().reshape(1), qw.double().sum(1), first.reshape(-1),
                          second.reshape(-1)])
    acc = acc if reduce is None else reduce(acc)
    return _Stats(float(acc[0]) / total, acc[1:1 + K], acc[1 + K:1 + K + K * d].reshape(K, d),
                  acc[1 + K + K * d:].reshape(shape))


def _m_step(stats: _Stats, params: _Params, cov: Covariance, floor: torch.Tensor,
            total: float) -> _Params:
    """The exact maximizer of the M-step; a head with (almost) no weight keeps its shape."""
    K, d = params.means.shape
    eps = torch.finfo(torch.float64).eps
    alive = stats.counts > 10 * eps * total                                 # (K,)
    n = stats.counts.clamp_min(10 * eps * total)
    shift = stats.first / n[:, None]                                        # (K, d)
    means = torch.where(alive[:, None], params.means + shift, params.means)
    covs = cov.update(stats.second, n, shift, floor, alive, params.covariances)
    log_weights = n.log() - math.log(float(n.sum()))
    return _Params(means, covs, positive_factors(covs, cov), log_weights)


class _ChunkedEM(EMSteps):
    """Tempered EM over chunks of torch rows at ``lambda`` (:meth:`temper`): one pass
    (:func:`_pass`) per E-step, the exact maximizer (:func:`_m_step`) per M-step."""

    def __init__(self, X, params: _Params, lam: float, cov: Covariance, floor, common: dict,
                 *, tol: float, slack: float):
        self.X, self.lam, self.cov, self.floor, self.common = X, lam, cov, floor, common
        super().__init__(params, tol=tol, slack=slack)

    def temper(self, lam: float) -> None:
        """The objective at ``lambda = lam`` from the current parameters."""
        self.lam = lam
        self.restart()

    def _e_step(self, params):
        return _pass(self.X, params, self.lam, self.cov, self.floor, **self.common)

    def _m_step(self, state, params):
        return _m_step(state, params, self.cov, self.floor, self.common["total"])


def check_degenerate(covariances: torch.Tensor, counts: torch.Tensor, cov: Covariance,
                     floor: torch.Tensor, total: float, n_rows: int,
                     means: torch.Tensor | None = None, reg_covar: float = 1e-6) -> None:
    """Warn for heads with (almost) no weight, or at the floor in some direction; for full
    heads with their ``means``, not along the directions the rows do not spread in
    (:func:`~attnclust.cluster.mixture.floor.spanned_features`: a column the others
    determine), where every head is, as the rows are."""
    per_row = total / max(n_rows, 1)
    dead = torch.nonzero(counts < 0.5 * per_row).flatten().tolist()
    if dead:
        warnings.warn(f"head(s) {dead} hold less than one row's weight: the fit found fewer "
                      "clusters than heads; try another start or fewer clusters",
                      DegenerateFitWarning, stacklevel=user_stacklevel())
    if not bool((floor > 0).all()):
        return
    features = None
    if cov.joint and means is not None:
        features = torch.as_tensor(spanned_features(means, covariances, counts, floor,
                                                    reg_covar), device=floor.device)
    ratio = cov.floor_ratio(covariances, floor, features)
    flat = [h for h in torch.nonzero(ratio <= 2.0).flatten().tolist() if h not in dead]
    if flat:
        warnings.warn(f"head(s) {flat} have (nearly) no spread in some direction: their "
                      "covariance there is held at the floor (reg_covar times the data's "
                      "variance along it); a column constant within a cluster, or repeated "
                      "rows?",
                      DegenerateFitWarning, stacklevel=user_stacklevel())


class ShapedFitted(NamedTuple):
    """The fitted attributes of shaped heads, in the data's units (named as on the
    estimator)."""

    cluster_centers_: np.ndarray
    covariances_: np.ndarray
    precisions_cholesky_: np.ndarray
    precisions_: np.ndarray
    weights_: np.ndarray
    covariance_floor_: np.ndarray
    inverse_temperature_: float
    loss_curve_: np.ndarray
    inverse_temperature_curve_: np.ndarray
    n_iter_: int
    converged_: bool
    labels_: np.ndarray


def shaped_fit(
    X: torch.Tensor,
    means0: torch.Tensor,
    *,
    covariance_type: str | Covariance = "full",
    covariances0: torch.Tensor | None = None,
    weights0: torch.Tensor | None = None,
    inverse_temperature: float | Schedule = 1.0,
    n_steps: int = 100,
    tol: float = 1e-3,
    reg_covar: float = 1e-6,
    sample_weight: torch.Tensor | None = None,
    chunk_size: int | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    row_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
    callback: Callable[[IterationInfo], None] | None = None,
) -> ShapedFitResult:
    """Fit shaped heads by tempered EM, a fixed point that never increases its objective.

    Parameters
    ----------
    X : Tensor of shape (n, d)
        Rows (this rank's, with ``reduce``), float32 or float64.
    means0 : Tensor of shape (K, d)
        Initial means.
    covariance_type : {"full", "diag", "spherical"}, default="full"
    covariances0, weights0 : Tensor, optional
        Initial covariances (shapes of ``covariance_type``) and weights. ``None``
        (covariances): start from the moments of the nearest-mean partition (the k-means
        start of ``GaussianMixture``); ``None`` (weights): equal weights, or the
        partition's proportions when it is used.
    inverse_temperature : float or Schedule, default=1.0
        ``lambda``, or its schedule (:mod:`attnclust.layer.schedules`, e.g. ``Stages`` for an
        annealing plan), read stage by stage as the fixed-point solver reads it.
    n_steps : int, default=100
        At most this many EM steps; a stage stops early when it settles (``tol``).
    tol : float, default=1e-3
        Stop a stage when a step lowers ``f`` (per unit weight) by less than ``tol``.
    reg_covar : float, default=1e-6
        Covariance floor relative to each feature's variance (:func:`covariance_floor`).
    sample_weight : Tensor of shape (n,), optional
        Non-negative row weights.
    chunk_size : int, optional
        Rows per chunk (memory: blocks of ``K x chunk x d`` numbers).
    reduce : callable, optional
        ``t -> sum of t over ranks`` for data-parallel fitting (as in
        :func:`attnclust.cluster.fixed_point.fixed_point_fit`): one reduction per pass.
    row_map : callable, optional
        Applied to each chunk of rows as it is read.
    callback : callable, optional
        Called with an :class:`~attnclust.layer.results.IterationInfo` after each step
        (``heads``: the means).

    Returns
    -------
    ShapedFitResult

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> tilt = np.array([[3.0, 0.0], [2.9, 0.3]])
    >>> X = np.concatenate([rng.standard_normal((300, 2)) @ tilt,
    ...                     rng.standard_normal((300, 2)) @ tilt + [0.0, 2.0]])
    >>> res = shaped_fit(torch.tensor(X), torch.tensor([[0.0, -1.0], [0.0, 3.0]]))
    >>> res.converged, bool(res.weights.min() > 0.4)
    (True, True)
    """
    cov = as_covariance(covariance_type)
    K, d = means0.shape
    chunk = int(chunk_size) if chunk_size else max(256, _CHUNK_NUMBERS // max(K * d, 1))
    means = means0.to(X.device, torch.float64)
    total, variances = data_variance(X, means.mean(0), chunk=chunk, reduce=reduce,
                                     row_map=row_map, sample_weight=sample_weight)
    floor = covariance_floor(variances, reg_covar)
    s2 = float(variances.mean()) if float(variances.mean()) > 0 else 1.0
    common = dict(chunk=chunk, reduce=reduce, row_map=row_map, sample_weight=sample_weight,
                  total=total)
    if covariances0 is None:   # the M-step of the nearest-mean partition
        empty = _Params(means, cov.unit(K, d, dtype=means.dtype, device=means.device) * s2,
                        None, None)
        params = _m_step(_pass(X, empty, 1.0, cov, floor, hard=True, **common), empty, cov,
                         floor, total)
        if weights0 is not None:
            params = params._replace(log_weights=_as64(weights0, X).log())
    else:
        covs = _as64(covariances0, X)
        log_w = (torch.full((K,), -math.log(K), dtype=torch.float64, device=X.device)
                 if weights0 is None else _as64(weights0, X).log())
        params = _Params(means, covs, cov.factors(covs), log_w)
    stages = as_schedule(inverse_temperature).stages(n_steps)
    first = float(stages[0][0]) if stages else 1.0
    em = _ChunkedEM(X, params, first, cov, floor, common, tol=tol,
                    slack=1e-12 if X.dtype == torch.float64 else 1e-5)
    lams = []
    for stage, (lam, stage_steps) in enumerate(stages):
        if stage:
            em.temper(float(lam))
        lams.append(float(lam))
        for _ in range(stage_steps):
            before = em.params.means
            going = em.step()
            if em.accepted:
                lams.append(float(lam))
                if callback is not None:
                    shift = torch.linalg.vector_norm(em.params.means - before, dim=1).max()
                    callback(IterationInfo(em.n_iter, em.loss, float(lam), float(shift),
                                           em.params.means.to(X.dtype).clone()))
            if not going:
                break
    converged = em.converged          # of the last stage's steps
    params = em.params
    check_degenerate(params.covariances, em.state.counts, cov, floor, total, _rows(X, reduce),
                     params.means, reg_covar)
    dtype = X.dtype
    return ShapedFitResult(params.means.to(dtype), params.covariances.to(dtype),
                           params.factors.to(dtype), params.log_weights.exp().to(dtype), floor,
                           np.asarray(em.losses), np.asarray(lams), em.n_iter, converged)


def _as64(t, X) -> torch.Tensor:
    return torch.as_tensor(t).to(X.device, torch.float64)


def _rows(X, reduce) -> int:
    n = torch.tensor([float(X.shape[0])], dtype=torch.float64, device=X.device)
    return int((n if reduce is None else reduce(n)).item())

"""EM of the shape choice's candidates on small data, in a few array operations per step.

The same EM as :func:`attnclust.cluster.mixture.tempered.shaped_fit` at ``lambda = 1`` (its
floor, its start from a hard partition, its stopping rule and its safeguard against a step that
raises the objective), for rows held by one process and small enough to be read whole.
On such rows a step of the chunked solver costs its fixed overhead, not its arithmetic;
here the E-step is two matrix products and the M-step one. What depends on the
covariance type (the per-row moments, the second moments, the quadratic forms and the
update) is the :class:`~attnclust.cluster.mixture.covariance.Covariance` object's. The quadratic
forms are ``x^T P_h x - 2 mu_h^T P_h x + mu_h^T P_h mu_h``, from the rows' second moments,
on rows centred and scaled to unit root-mean-square norm (the working space), where the
cancellation costs ``eps ||x||^2 / sigma^2`` of a head of spread ``sigma``. Arrays per head
and row are laid out heads by rows, ``(K, n)``: the E-step's reductions over the heads
then add ``K`` rows of length ``n``, which NumPy does far faster than reducing ``n`` rows
of length ``K`` for a few heads.

With ``P_h = Sigma_h^{-1} = U_h U_h^T``, ``D`` the floor, the E-step's log-joint is

    l~_h(x) = log pi_h - d/2 log 2 pi + 1/2 log det P_h - 1/2 ||(x - mu_h) U_h||^2
              - 1/2 tr(P_h D),

and the M-step sets ``N_h = sum_i w_i q_ih``, ``pi_h = N_h / W``, ``mu_h`` the weighted
mean and ``Sigma_h`` the weighted covariance plus ``D`` (its diagonal for ``"diag"``).

Notation
--------
============  ==================  ==================================================
paper         code                meaning
============  ==================  ==================================================
``q_ih``      ``resp``            responsibilities ``(K, n)``
``D``         ``floor``           covariance floor ``(d,)``
``f``         ``loss``            minus the mean log-likelihood, per unit weight
============  ==================  ==================================================
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
import torch

from .covariance import Covariance

__all__ = ["EMSteps", "LeanEM", "LeanFit", "RowProducts", "lean_em", "log_joint", "log_sum_heads",
           "m_step"]

_LOG_2PI = math.log(2.0 * math.pi)
BACKGROUND_START = 0.05      # the background head's weight at the start from a partition


class LeanFit(NamedTuple):
    """The outcome of :func:`lean_em` (float64 NumPy arrays, working space)."""

    means: np.ndarray            # (K, d)
    covariances: np.ndarray      # shape of the covariance type, floor included
    weights: np.ndarray          # (K,)
    log_joint: np.ndarray        # (K, n) at the final parameters, heads by rows
    log_sum: np.ndarray          # (n,) log sum_h exp l~_h(x_i) there
    top: np.ndarray              # (n,) max_h l~_h(x_i) there
    loss_curve: np.ndarray       # f at every accepted iterate
    counts: np.ndarray           # (K,) N_h of the final E-step
    n_iter: int
    converged: bool


class RowProducts:
    """Rows read whole, ``(n, d)`` float64, with what every EM on them reuses for
    ``n_clusters`` heads: ``X.T`` in C order and each covariance type's per-row second
    moments (:meth:`~attnclust.cluster.mixture.covariance.Covariance.row_moments`), each made once
    (the shape choice runs up to four EMs and a score on the same rows).

    Examples
    --------
    >>> from attnclust.cluster.mixture.covariance import Diag
    >>> P = RowProducts(np.array([[1.0, 2.0], [3.0, 4.0]]), 2)
    >>> P.moments(Diag()).tolist(), P.moments(Diag()) is P.moments(Diag())
    ([[1.0, 4.0], [9.0, 16.0]], True)
    """

    def __init__(self, X: np.ndarray, n_clusters: int):
        self.X = X = np.asarray(X, dtype=np.float64)
        self.XT = np.ascontiguousarray(X.T)
        self.n_clusters = int(n_clusters)
        self._moments: dict[Covariance, np.ndarray | None] = {}

    def moments(self, cov: Covariance) -> np.ndarray | None:
        """The rows' per-row second moments in ``cov``'s layout."""
        try:
            return self._moments[cov]
        except KeyError:
            return self._moments.setdefault(cov, cov.row_moments(self.X, self.n_clusters))


def m_step(X, rw, cov: Covariance, floor, previous, total, moments):
    """The exact M-step of responsibilities times weights ``rw`` ``(K, n)`` (a background
    head's last, ``(K + 1, n)``, when ``previous`` holds ``K`` covariances): moments about
    the origin of the (centred) rows, ``Sigma_h = E_h[x x^T] - mu_h mu_h^T + D``."""
    eps = np.finfo(np.float64).eps
    K = previous.shape[0]
    counts = rw.sum(1)                                                      # (K [+ 1],)
    n = np.maximum(counts, 10 * eps * total)
    heads = rw[:K]
    means = (heads @ X) / n[:K, None]                                       # (K, d)
    covs = cov.update(cov.second_moments(heads, X, moments), n[:K], means, floor,
                      counts[:K] > 10 * eps * total, previous)
    return means, covs, np.log(n) - math.log(float(n.sum()))


def log_joint(X, means, covs, log_w, cov: Covariance, floor, moments, XT=None):
    """``l~_h(x)`` of the rows, heads by rows ``(K, n)``, from the covariance type's
    quadratic forms on rows read whole
    (:meth:`~attnclust.cluster.mixture.covariance.Covariance.whole_quadratic`). ``XT``: ``X.T`` in
    C order (made when not given)."""
    d = means.shape[1]
    XT = np.ascontiguousarray(X.T) if XT is None else XT
    maha, log_det, trace = cov.whole_quadratic(X, XT, moments, means, covs, floor)
    bias = log_w - 0.5 * d * _LOG_2PI + 0.5 * log_det - 0.5 * trace
    maha *= -0.5
    maha += bias[:, None]
    return maha


def log_sum_heads(lj: np.ndarray):
    """Of a log-joint heads by rows ``(K, n)``: per row the largest ``top``, ``lse = log
    sum_h exp l~_h``, and the exponentials ``e = exp(l~ - top)`` ``(K, n)`` with their
    sums ``s`` (``e / s``: the responsibilities)."""
    top = lj.max(0)
    e = lj - top
    np.exp(e, out=e)
    s = e.sum(0)
    return top, top + np.log(s), e, s


class EMSteps(ABC):
    """One EM loop, stepped by :meth:`step`, over the E-step and M-step of a subclass
    (the rows read whole, :class:`LeanEM`; chunks of torch rows,
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit`): the steps, the stopping rule and the
    safeguard are the same for both.

    ``_e_step(params)`` gives the state of the parameters (with the objective ``f`` to
    lower as ``state.loss``), ``_m_step(state, params)`` the next parameters. A step is
    kept when it lowers ``f`` or raises it by at most ``slack`` of its size (rounding);
    a step that raises it more (rounding beyond that, or a dead head) is refused and
    stops the loop, and so does a kept step that lowers ``f`` by less than ``tol``.
    """

    def __init__(self, params, *, tol: float, slack: float = 1e-12):
        self.tol, self.slack = tol, slack
        self.params, self.state = params, self._e_step(params)
        self.losses, self.n_iter, self.converged, self.accepted = [self.loss], 0, False, False

    @abstractmethod
    def _e_step(self, params):
        """The state of ``params`` (``.loss``: the objective)."""

    @abstractmethod
    def _m_step(self, state, params):
        """The parameters that maximize the M-step's bound at ``state``."""

    @property
    def loss(self) -> float:
        return self.state.loss

    def restart(self) -> None:
        """The E-step again at the current parameters (after a change of the objective,
        e.g. of ``lambda``), and the loop open again."""
        self.state, self.converged = self._e_step(self.params), False
        self.losses.append(self.loss)

    def step(self) -> bool:
        """One EM step; ``False`` once the stopping rule holds (``accepted``: whether the
        step was kept)."""
        self.accepted = False
        if self.converged:
            return False
        new = self._m_step(self.state, self.params)
        state = self._e_step(new)
        self.n_iter += 1
        drop = self.loss - state.loss
        if drop < -self.slack * (1.0 + abs(self.loss)):  # rounding, or a dead head: stop here
            self.converged = True
            return False
        self.params, self.state, self.accepted = new, state, True
        self.losses.append(state.loss)
        if drop < self.tol:
            self.converged = True
        return not self.converged


class _Whole(NamedTuple):
    """The E-step's state on rows read whole."""

    lj: np.ndarray              # (K [+ 1], n) log-joint, heads by rows
    resp: np.ndarray            # (K [+ 1], n) responsibilities
    loss: float                 # f
    lse: np.ndarray             # (n,) log sum_h exp l~_h(x_i)
    top: np.ndarray             # (n,) max_h l~_h(x_i)


class LeanEM(EMSteps):
    """EM at ``lambda = 1`` on rows read whole, one step at a time (:func:`lean_em` runs
    it to its stopping rule; :mod:`attnclust.cluster.mixture.shape_choice` steps its candidates).

    Starts from a hard partition ``labels`` (as
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit` from the partition of its start means),
    or from the parameters ``start``, ``(means, covariances, log_weights)`` (of a fit on
    other rows: the E-step comes first). ``products``: the rows'
    :class:`RowProducts` (for ``n_clusters`` heads), when several EMs share them; ``X`` is
    then ``products.X``. ``log_likelihood``
    is ``sum_i w_i log sum_h exp l~_h(x_i)`` times ``n / sum_i w_i`` at the current
    parameters.

    ``log_background``: the log-density of a uniform background head beside the Gaussian
    ones (:mod:`attnclust.cluster.mixture.noise_head`): its log-joint, ``log pi_0 +
    log_background``, is the last row of ``lj`` and of the responsibilities, its weight
    the last of the log-weights (started at ``BACKGROUND_START`` from a partition, the
    Gaussian heads' scaled by ``1 - BACKGROUND_START``), fitted as theirs are.
    """

    def __init__(self, X: np.ndarray, n_clusters: int, cov: Covariance, floor: np.ndarray,
                 labels: np.ndarray | None, *, sample_weight: np.ndarray | None = None,
                 tol: float = 1e-3, start_scale: float = 1.0, start: tuple | None = None,
                 products: RowProducts | None = None, log_background: float | None = None):
        products = RowProducts(X, n_clusters) if products is None else products
        self.X = X = products.X
        n, d = X.shape
        K = self.K = int(n_clusters)
        self.cov, self.floor = cov, floor
        self.w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        self.total = float(n if self.w is None else self.w.sum())
        self.XT = products.XT
        self.moments = products.moments(cov)
        self.log_background = log_background
        if start is None:
            resp = np.zeros((K, n))
            resp[labels, np.arange(n)] = 1.0
            previous = start_scale * cov.unit(K, d, dtype=torch.float64).numpy()
            start = self._maximize(resp, previous)
            if log_background is not None:
                means, covs, log_w = start
                start = (means, covs, np.append(log_w + math.log1p(-BACKGROUND_START),
                                                math.log(BACKGROUND_START)))
        super().__init__(start, tol=tol)

    def _m_step(self, state, params):
        return self._maximize(state.resp, params[1])

    def _maximize(self, resp, previous):
        """:func:`m_step` of the responsibilities ``resp`` (times the rows' weights)."""
        rw = resp if self.w is None else resp * self.w
        return m_step(self.X, rw, self.cov, self.floor, previous, self.total, self.moments)

    def _e_step(self, params):
        means, covs, log_w = params
        K = self.K
        lj = log_joint(self.X, means, covs, log_w[:K], self.cov, self.floor, self.moments,
                       self.XT)
        if self.log_background is not None:
            lj = np.concatenate((lj, np.full((1, lj.shape[1]), log_w[K] + self.log_background)))
        top, lse, e, s = log_sum_heads(lj)
        loss = -float(lse.sum() if self.w is None else self.w @ lse) / self.total
        e /= s
        return _Whole(lj, e, loss, lse, top)

    @property
    def lj(self) -> np.ndarray:
        return self.state.lj

    @property
    def log_likelihood(self) -> float:
        return -self.loss * self.X.shape[0]

    def result(self) -> LeanFit:
        means, covs, log_w = self.params
        st = self.state
        counts = (st.resp if self.w is None else st.resp * self.w).sum(1)
        return LeanFit(means, covs, np.exp(log_w), st.lj, st.lse, st.top,
                       np.asarray(self.losses), counts, self.n_iter, self.converged)


def lean_em(X: np.ndarray, labels: np.ndarray, n_clusters: int, cov: Covariance,
            floor: np.ndarray, *, sample_weight: np.ndarray | None = None, tol: float = 1e-3,
            max_iter: int = 300, start_scale: float = 1.0) -> LeanFit:
    """EM at ``lambda = 1`` from the hard partition ``labels`` (as
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit` from the partition of its start means).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows, float64.
    labels : ndarray of shape (n,)
        The starting partition (heads ``0..n_clusters-1``).
    cov : Covariance
        The covariance type.
    floor : ndarray of shape (d,)
        The covariance floor ``D``.
    sample_weight : ndarray of shape (n,), optional
    tol : float, default=1e-3
        Stop when a step lowers ``f`` by less than ``tol``.
    max_iter : int, default=300
    start_scale : float, default=1.0
        The covariance a head without rows starts from (times the identity).

    Examples
    --------
    >>> from attnclust.cluster.mixture.covariance import Full
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(size=(200, 2)) * [3.0, 0.3],
    ...                     rng.normal(size=(200, 2)) * [3.0, 0.3] + [0.0, 2.0]])
    >>> fit = lean_em(X, (X[:, 1] > 1).astype(int), 2, Full(), np.full(2, 1e-6))
    >>> fit.converged, fit.covariances.shape, bool(abs(fit.covariances[0, 0, 0] - 9) < 2)
    (True, (2, 2, 2), True)
    """
    em = LeanEM(X, n_clusters, cov, floor, labels, sample_weight=sample_weight, tol=tol,
                start_scale=start_scale)
    for _ in range(int(max_iter)):
        if not em.step():
            break
    return em.result()

"""Candidate fits on rows read whole: the lean EM's rows, runs, criteria and attributes.

The shape choice (:mod:`attnclust.cluster.mixture.shape_choice`) and the noise head
(:mod:`attnclust.cluster.mixture.noise_head`) fit their candidates on rows held whole by one
process on the CPU with :class:`~attnclust.cluster.mixture.em.LeanEM`. This module holds
what both read: the rows as float64 NumPy with their covariance floor
(:class:`LeanRows`), a candidate's run to its stopping rule or early stop and its
criteria (:func:`lean_run`, :class:`ShapeScore`: the log-likelihood, the entropy of the
MAP labels, the parameters; ICL and BIC of them), the floor test (:func:`head_at_floor`) and
the estimator's attributes of a lean fit (:func:`lean_attributes`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..estimator_fits import ShapedFitted
from ..rows import WorkingRows
from .candidate_em import run_or_stop
from .covariance import Covariance, Diag, Spherical, covariance_floor, positive_factors
from .em import LeanEM, RowProducts, log_joint, log_sum_heads, m_step
from .tempered import check_degenerate

if TYPE_CHECKING:
    from ..plan import FitPlan

__all__ = ["AT_FLOOR", "REG_COVAR", "LeanRows", "LeanRun", "ShapeScore", "bic", "box_log_volume",
           "head_at_floor", "held_whole", "icl", "lean_attributes", "lean_run", "score_lean"]

AT_FLOOR = 1.01             # a covariance within 1% of the floor: no spread of its own
REG_COVAR = 1e-6            # the shaped fits' floor (attnclust.cluster.mixture.tempered.shaped_fit)


class ShapeScore(NamedTuple):
    """One candidate shape's criteria on the rows of the choice (data units)."""

    covariance: Covariance
    log_likelihood: float
    entropy: float
    n_parameters: int
    n_rows: int
    at_floor: bool = False
    stopped: bool = False       # EM stopped early: its ICL cannot reach the least one

    @property
    def eligible(self) -> bool:
        """Neither at the floor nor stopped early: a fit that may be chosen."""
        return not (self.at_floor or self.stopped)

    @property
    def bic(self) -> float:
        """``-2 L + p log n`` (:func:`bic`)."""
        return bic(self.log_likelihood, self.n_parameters, self.n_rows)

    @property
    def icl(self) -> float:
        """``BIC + 2 E`` (:func:`icl`)."""
        return icl(self.log_likelihood, self.entropy, self.n_parameters, self.n_rows)

    def as_dict(self) -> dict:
        """The criteria by name (``covariance_type_criteria_`` of the estimator)."""
        return {"log_likelihood": float(self.log_likelihood), "entropy": float(self.entropy),
                "n_parameters": int(self.n_parameters), "n_rows": int(self.n_rows),
                "at_floor": bool(self.at_floor), "stopped": bool(self.stopped),
                "bic": float(self.bic),
                "icl": float(self.icl)}


def bic(log_likelihood: float, n_parameters: int, n_rows: int) -> float:
    """Schwarz's ``BIC = -2 L + p log n``.

    Examples
    --------
    >>> round(bic(-100.0, 3, 50), 3)
    211.736
    """
    return -2.0 * log_likelihood + n_parameters * math.log(n_rows)


def icl(log_likelihood: float, entropy: float, n_parameters: int, n_rows: int) -> float:
    """``ICL = -2 L + p log n + 2 E``.

    Examples
    --------
    >>> round(icl(-100.0, 5.0, 3, 50), 3)
    221.736
    """
    return bic(log_likelihood, n_parameters, n_rows) + 2.0 * entropy


def held_whole(rows: WorkingRows) -> bool:
    """Rows held whole by one process on the CPU (the lean EM's)."""
    return rows.rows.shape[0] == rows.n_total and rows.rows.device.type == "cpu"


class LeanRows:
    """Working rows read whole as float64 NumPy, their products for ``n_clusters`` heads
    (:class:`~attnclust.cluster.mixture.em.RowProducts`), weights, total weight and the
    shaped fits' covariance floor."""

    def __init__(self, rows: WorkingRows, n_clusters: int):
        self.rows = rows
        self.products = RowProducts(rows.read(0, rows.rows.shape[0]).double().cpu().numpy(),
                                    n_clusters)
        self.X = X = self.products.X
        w = self.w = None if rows.weights is None else rows.weights.double().cpu().numpy()
        self.total = total = float(X.shape[0] if w is None else w.sum())
        center = X.mean(0) if w is None else (w @ X) / total
        squares = self.products.moments(Diag())   # x * x, which diagonal heads read too
        variances = squares.mean(0) - center * center if w is None else \
            (w @ squares) / total - center * center
        self.variances = np.maximum(variances, 0.0)
        self.floor_t = covariance_floor(torch.from_numpy(self.variances), REG_COVAR)
        self.floor = self.floor_t.numpy()

    def background_log_density(self) -> float:
        """``-log V`` of a uniform background head over the box of the rows of positive
        weight (:func:`box_log_volume`, working space)."""
        X = self.X if self.w is None else self.X[self.w > 0]
        return -box_log_volume(X, self.floor)

    def em(self, cov: Covariance, plan: FitPlan, labels: np.ndarray | None,
           start: tuple | None = None, log_background: float | None = None) -> LeanEM:
        return LeanEM(self.X, plan.n_clusters, cov, self.floor, labels,
                      sample_weight=self.w, tol=plan.shaped_tol,
                      start_scale=float(self.variances.mean()) or 1.0, start=start,
                      products=self.products, log_background=log_background)

    def fit(self, cov: Covariance, plan: FitPlan, start: tuple, log_scale: float
            ) -> tuple[ShapedFitted, ShapeScore]:
        """The estimator's attributes of EM from the parameters ``start`` (``(means,
        covariances, log_weights)``), run to its stopping rule, and its criteria."""
        run, score = lean_run(self, cov, plan, None, log_scale, math.inf, params=start)
        return run.attributes(self.rows), score

    def spherical_score(self, labels: np.ndarray, n_clusters: int, log_scale: float
                        ) -> ShapeScore:
        """The criteria of the one-variance-per-head mixture of the partition ``labels``."""
        X, w, K = self.X, self.w, n_clusters
        n, d = X.shape
        sph = Spherical()
        onehot = np.zeros((K, n))
        onehot[labels, np.arange(n)] = 1.0
        moments = self.products.moments(sph)
        means, covs, log_w = m_step(X, onehot if w is None else onehot * w, sph, self.floor,
                                    np.ones(K), self.total, moments)
        top, lse, _, _ = log_sum_heads(log_joint(X, means, covs, log_w, sph, self.floor,
                                                 moments, self.products.XT))
        return score_lean(lse, top, w, sph, sph.n_parameters(K, d), d, log_scale)


class LeanRun(NamedTuple):
    """A lean candidate's EM, the rows it ran on, and whether it ran from the density
    core's start (:func:`~attnclust.cluster.mixture.candidate_em.core_start`)."""

    em: LeanEM
    rows: LeanRows
    from_core: bool = False

    def attributes(self, crows: WorkingRows) -> ShapedFitted:
        r = self.rows
        return lean_attributes(crows, self.em.result(), self.em.cov, r.floor_t, r.total)


def box_log_volume(X: np.ndarray, floor: np.ndarray) -> float:
    """``log V`` of the box of the rows ``X`` ``(n, d)``: the sum over features of the log
    of each one's range, at least ``sqrt(2 pi e r_j)`` with ``r_j`` the feature's
    covariance floor ``floor`` ``(d,)``: the width of the uniform whose entropy is that of
    a Gaussian of variance ``r_j``. A constant feature then adds to the background's
    log-density what it adds to a Gaussian head's log-joint at the floor (``-log(2 pi r_j)
    / 2 - 1/2``, the floor's trace term included), so it moves no row to the background.

    Examples
    --------
    >>> X = np.array([[0.0, 1.0, 5.0], [2.0, 4.0, 5.0]])
    >>> side = np.sqrt(2 * np.pi * np.e * 1e-4)                    # the constant feature's
    >>> round(box_log_volume(X, np.full(3, 1e-4)), 6) == round(float(np.log(2 * 3 * side)), 6)
    True
    """
    side = np.maximum(np.ptp(X, axis=0), np.sqrt(2.0 * np.pi * np.e * floor))
    return float(np.log(side).sum())


def lean_run(lr: LeanRows, cov: Covariance, plan: FitPlan, start: np.ndarray | None,
             log_scale: float, least: float, params: tuple | None = None,
             log_background: float | None = None) -> tuple[LeanRun, ShapeScore]:
    """EM of ``cov`` from the partition ``start`` (or the parameters ``params``) to its
    stopping rule or its early stop (:func:`~attnclust.cluster.mixture.candidate_em.run_or_stop`
    against the ICL ``least``; ``inf``: none), and its criteria; ``log_background``: with
    a uniform background head of that log-density (its weight one parameter more)."""
    K, (n, d) = plan.n_clusters, lr.X.shape
    em = lr.em(cov, plan, start, params, log_background)
    n_parameters = cov.n_parameters(K, d) + (log_background is not None)
    penalty = n_parameters * math.log(n) + 2.0 * n * d * log_scale
    stopped = run_or_stop(em, plan.max_iter, penalty, least, settings=plan.settings)
    fit = em.result()
    score = score_lean(fit.log_sum, fit.top, lr.w, cov, n_parameters, d, log_scale,
                       head_at_floor(cov, fit.covariances, lr.floor))
    return LeanRun(em, lr), score._replace(stopped=stopped)


def head_at_floor(cov: Covariance, covariances: np.ndarray, floor: np.ndarray) -> bool:
    """Whether a head's covariance sits at the floor in some direction (the degeneracy
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit` warns of): its likelihood is then the
    floor's."""
    return bool((cov.floor_ratio(np.asarray(covariances), floor) <= AT_FLOOR).any())


def score_lean(lse: np.ndarray, top: np.ndarray, w, cov: Covariance, n_parameters: int,
               d: int, log_scale: float, at_floor: bool = False) -> ShapeScore:
    """The criteria of a mixture of ``n_parameters`` free parameters from its rows' ``log
    sum_h exp l~_h`` and ``max_h l~_h`` (:func:`~attnclust.cluster.mixture.em.log_sum_heads`)."""
    n = lse.shape[0]
    if w is None:
        ll, ent = float(lse.sum()), float((lse - top).sum())
    else:
        ll, ent = n * float(w @ lse) / float(w.sum()), n * float(w @ (lse - top)) / float(w.sum())
    return ShapeScore(cov, ll - n * d * log_scale, ent, n_parameters, n, at_floor)


def lean_attributes(crows: WorkingRows, fit, cov: Covariance, floor: torch.Tensor,
                     total: float) -> ShapedFitted:
    """The estimator's attributes of a :class:`~attnclust.cluster.mixture.em.LeanFit` of the rows
    ``crows`` (working space), in the data's units; the degeneracy warnings of
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit`."""
    s, d = crows.scale, fit.means.shape[1]
    covs_t = torch.from_numpy(np.ascontiguousarray(fit.covariances))
    factors_t = positive_factors(covs_t, cov)
    check_degenerate(covs_t, torch.from_numpy(fit.counts), cov, floor.cpu(), total,
                     crows.n_total)
    factors = factors_t.numpy() / s
    return ShapedFitted(
        cluster_centers_=crows.heads_out(torch.from_numpy(fit.means)),
        covariances_=fit.covariances * s * s, precisions_cholesky_=factors,
        precisions_=cov.precisions(factors), weights_=fit.weights,
        covariance_floor_=floor.cpu().numpy() * s * s, inverse_temperature_=1.0,
        loss_curve_=fit.loss_curve + d * math.log(s),
        inverse_temperature_curve_=np.ones(len(fit.loss_curve)), n_iter_=int(fit.n_iter),
        converged_=bool(fit.converged), labels_=fit.log_joint.argmax(0).astype(np.int64))

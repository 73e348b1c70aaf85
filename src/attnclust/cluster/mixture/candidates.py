"""The shape choice's candidates: their rows, EM runs, criteria and attributes.

The shape choice (:mod:`attnclust.cluster.mixture.shape_choice`) and the noise head
(:mod:`attnclust.cluster.mixture.noise_head`) fit their candidates on rows held whole by one
process on the CPU with :class:`~attnclust.cluster.mixture.em.LeanEM`. This module holds
what both read: the rows as float64 NumPy with their covariance floor
(:class:`LeanRows`), a candidate's run to its stopping rule or early stop and its
criteria (:func:`lean_run`, :class:`ShapeScore`: the log-likelihood, the entropy of the
MAP labels, the parameters; ICL and BIC of them), the floor test (:func:`head_at_floor`),
the estimator's attributes of a lean fit (:func:`lean_attributes`), and where a candidate
starts and when it stops early (:func:`core_start`, :func:`merges_cells`,
:func:`run_or_stop`).

:mod:`attnclust.cluster.mixture.shape_choice` fits each shaped candidate by EM on the rows of the
choice. EM climbs to the local optimum nearest its start, so the start matters:

**The default partition.** Every candidate starts from the default fit's partition (as
``GaussianMixture`` starts from k-means).

**The density core.** Voronoi cells cut a cluster nested in another (a ball in a shell, a
blob inside a ring) into halves, and EM from the halves keeps them, although the nested
mixture (a narrow head inside a wide one) has a far higher likelihood. A second start puts
one head on the densest region:

1. the peak: of ``settings.peak_candidates`` rows of a seeded sample of
   ``settings.peak_rows`` (:class:`~attnclust.cluster.settings.FitSettings`), the one
   whose ball holding a fraction ``k / m`` of the sample's weight is smallest (the
   ``k``-nearest-neighbour radius in the sample of ``m`` rows, ``k = ceil(sqrt(m))``;
   the sample keeps the search's cost independent of the rows);
2. the core: the rows nearest the peak holding ``1 / K`` of the weight, head 0;
3. the other rows: the default partition's cells, the cell that holds most of the core's
   weight dissolved into the nearest of the others (by their means).

The shaped candidate of least ICL from the default partition then runs EM from this
start too, and keeps that fit if its ICL is lower, with three guards:

- the second start is tried only where it moves at least ``settings.min_moved`` of the
  weight out of the default partition's cells (named as in the start: the core 0, the
  kept cells ``1..K-1``): a start closer than that is the default partition up to the
  rows near its boundaries. On the 59 sets of the development and held-out batteries
  (seed 0) the nested traps move 34-36%; 23 of the 46 sets where the start is computed
  move less than 5%, and among those it changed the fit only on four blobs over noise,
  for the worse (the third guard); skipping them keeps the choice's cost where the second
  start did not help;
- and only where the candidate has at least ``settings.rows_per_parameter`` rows per free
  parameter (by default 10, a common rule of thumb for a model's identifiability). With
  fewer rows, a local optimum of higher likelihood mostly fits noise: on the 569 rows of
  the breast-cancer table (30 features, 991 parameters of full heads) the core's start
  reached an ICL 567 lower and an ARI of 0.62 against the labels, where the default
  partition's start has 0.81;
- a fit from the second start is not kept where it merges two of the default partition's
  cells: one head holds at least ``settings.merge_share`` of the weight of each. The start
  is there to split what the Voronoi cells halved, not to spend a head elsewhere: on four
  blobs over 10% uniform noise its fit of lowest ICL (400-700 lower) covered the noise
  with one wide head and two blobs with one head (ARI 0.79 against 0.91), the traps'
  order of gain, so no margin of ICL tells them apart, but the merge does.

On a ball in a shell (800 rows in 3-D) the core's start gave an ICL 1,300 lower and an
ARI of 0.89 against 0.04; on a blob inside a ring over 10% outliers, 0.85 against 0.00.

**The early stop.** A candidate stops early when it cannot win: at ``settings.stop_steps``
steps in a row, the limit of its log-likelihood projected by Aitken's acceleration (the
EM stopping rule of Boehning et al. 1994 and McNicholas et al. 2010), ``L_inf = L_t + g_t
a_t / (1 - a_t)`` with ``g_t = L_t - L_{t-1}`` and ``a_t = g_t / g_{t-1}`` in ``(0, 1)``,
leaves even ``-2 L_inf + p_c log n`` (the ICL without its entropy, which is ``>= 0``)
above the least ICL of the fits scored so far. EM can speed up again after a slow
stretch, so the projection is not a bound; two steps in a row are asked for because one
step stopped "full" wrongly on one set of 59 (core, ring, corners, 4 of its 5 seeds), two
stopped none wrongly (and cut the candidates' EM steps by a fifth).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..rows import WorkingRows
from ..settings import FitSettings
from .covariance import Covariance, Diag, Spherical, positive_factors
from .em import LeanEM, RowProducts, log_joint, log_sum_heads, m_step
from .floor import covariance_floor, full_rank_features, spread_features
from .tempered import ShapedFitted, check_degenerate

if TYPE_CHECKING:
    from ..plan import FitPlan

__all__ = ["AT_FLOOR", "REG_COVAR", "LeanRows", "LeanRun", "ShapeScore", "bic", "box_log_volume",
           "core_start", "head_at_floor", "heads_at_floor", "held_whole", "icl",
           "lean_attributes", "lean_run", "merges_cells", "run_or_stop", "score_lean"]

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
        # the criteria read the features with spread beyond the others': along a constant
        # column every shaped head sits at the floor (a likelihood set by it), and along a
        # column the others determine every full head does, which no other head can
        Xc = X - center
        covariance = (Xc.T @ Xc if w is None else (Xc.T * w) @ Xc) / total
        self.spread = full_rank_features(covariance, spread_features(self.floor), REG_COVAR)
        self.spread_products = self.products if self.spread.all() else \
            RowProducts(np.ascontiguousarray(X[:, self.spread]), n_clusters)
        self.Xs = self.spread_products.X

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
        """The criteria of the one-variance-per-head mixture of the partition ``labels``
        (on the features with spread)."""
        X, w, K, floor = self.Xs, self.w, n_clusters, self.floor[self.spread]
        n, d = X.shape
        sph = Spherical()
        onehot = np.zeros((K, n))
        onehot[labels, np.arange(n)] = 1.0
        moments = self.spread_products.moments(sph)
        means, covs, log_w = m_step(X, onehot if w is None else onehot * w, sph, floor,
                                    np.ones(K), self.total, moments)
        top, lse, _, _ = log_sum_heads(log_joint(X, means, covs, log_w, sph, floor, moments,
                                                 self.spread_products.XT))
        return score_lean(lse, top, w, sph, sph.n_parameters(K, d), d, log_scale)

    def spread_log_sums(self, cov: Covariance, fit) -> tuple[np.ndarray, np.ndarray]:
        """``max_h l~_h`` and ``log sum_h exp l~_h`` of the rows under the mixture ``fit``
        (:class:`~attnclust.cluster.mixture.em.LeanFit`) read on the features with spread
        (its marginal)."""
        keep = self.spread
        lj = log_joint(self.Xs, fit.means[:, keep], cov.marginal(fit.covariances, keep),
                       np.log(fit.weights), cov, self.floor[keep],
                       self.spread_products.moments(cov), self.spread_products.XT)
        top, lse, _, _ = log_sum_heads(lj)
        return top, lse


class LeanRun(NamedTuple):
    """A lean candidate's EM, the rows it ran on, and whether it ran from the density
    core's start (:func:`~attnclust.cluster.mixture.candidates.core_start`)."""

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
    stopping rule or its early stop (:func:`~attnclust.cluster.mixture.candidates.run_or_stop`
    against the ICL ``least``; ``inf``: none), and its criteria; ``log_background``: with
    a uniform background head of that log-density (its weight one parameter more)."""
    K, (n, d) = plan.n_clusters, lr.X.shape
    em = lr.em(cov, plan, start, params, log_background)
    n_parameters = cov.n_parameters(K, d) + (log_background is not None)
    penalty = n_parameters * math.log(n) + 2.0 * n * d * log_scale
    # the criteria read the features with spread as the spherical one does (not with a
    # background, which no spherical one is beside); the early stop reads all: none then
    spread = log_background is None and not lr.spread.all()
    stopped = run_or_stop(em, plan.max_iter, penalty, math.inf if spread else least,
                          settings=plan.settings)
    fit = em.result()
    top, lse = fit.top, fit.log_sum
    if spread:
        (top, lse), d = lr.spread_log_sums(cov, fit), lr.Xs.shape[1]
        n_parameters = cov.n_parameters(K, d)
    score = score_lean(lse, top, lr.w, cov, n_parameters, d, log_scale,
                       head_at_floor(cov, fit.covariances, lr.floor,
                                     None if log_background is not None else lr.spread))
    return LeanRun(em, lr), score._replace(stopped=stopped)


def head_at_floor(cov: Covariance, covariances: np.ndarray, floor: np.ndarray,
                  features=None) -> bool:
    """Whether a head's covariance sits at the floor in some direction of the ``features``
    (:meth:`~attnclust.cluster.mixture.covariance.Covariance.floor_ratio`; the degeneracy
    :func:`~attnclust.cluster.mixture.tempered.shaped_fit` warns of): its likelihood is then the
    floor's."""
    return bool(heads_at_floor(cov, covariances, floor, features).any())


def heads_at_floor(cov: Covariance, covariances: np.ndarray, floor: np.ndarray,
                   features=None) -> np.ndarray:
    """Which heads' covariances sit at the floor in some direction, ``(K,)``."""
    return cov.floor_ratio(np.asarray(covariances), floor, features) <= AT_FLOOR


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
                     crows.n_total, torch.from_numpy(fit.means), REG_COVAR)
    factors = factors_t.numpy() / s
    return ShapedFitted(
        cluster_centers_=crows.heads_out(torch.from_numpy(fit.means)),
        covariances_=fit.covariances * s * s, precisions_cholesky_=factors,
        precisions_=cov.precisions(factors), weights_=fit.weights,
        covariance_floor_=floor.cpu().numpy() * s * s, inverse_temperature_=1.0,
        loss_curve_=fit.loss_curve + d * math.log(s),
        inverse_temperature_curve_=np.ones(len(fit.loss_curve)), n_iter_=int(fit.n_iter),
        converged_=bool(fit.converged), labels_=fit.log_joint.argmax(0).astype(np.int64))


def run_or_stop(em: LeanEM, max_iter: int, penalty: float, least: float, *,
                settings: FitSettings | None = None) -> bool:
    """Step ``em`` to its stopping rule; ``True`` if it stopped early instead, at
    ``settings.stop_steps`` (``None``: ``FitSettings()``'s) steps in a row where ``-2 (L +
    g a / (1 - a)) + penalty > least`` (``L`` in the working space; ``penalty``: ``p log
    n`` plus ``2 n d log s``, which brings ``-2 L`` to the data's units)."""
    stop_steps = (settings or FitSettings()).stop_steps
    history = [em.log_likelihood]
    hits = 0
    for _ in range(max_iter):
        if not em.step():
            return False
        history.append(em.log_likelihood)
        if len(history) < 3:
            continue
        gain, before = history[-1] - history[-2], history[-2] - history[-3]
        if 0.0 < gain < before:
            a = gain / before
            bound = -2.0 * (history[-1] + gain * a / (1.0 - a)) + penalty
            hits = hits + 1 if bound > least else 0
        else:
            hits = 0
        if hits >= stop_steps:
            return True
    return False


def core_start(X: np.ndarray, labels: np.ndarray, n_clusters: int, gen: np.random.Generator,
               weights: np.ndarray | None = None, *, settings: FitSettings | None = None
               ) -> np.ndarray | None:
    """The density core's start partition of the rows ``X`` ``(n, d)``, or ``None`` where
    it moves less than ``settings.min_moved`` of the weight out of the cells of the default
    partition ``labels`` (or ``n_clusters < 2``); ``settings``: its
    ``peak_rows``, ``peak_candidates`` and ``min_moved`` (``None``: ``FitSettings()``).

    Examples
    --------
    A small dense ball inside a wide shell: the default partition's halves cut both, the
    core is the ball.

    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(300, 3))
    >>> shell = 4 * u / np.linalg.norm(u, axis=1, keepdims=True)
    >>> X = np.r_[rng.normal(0, 0.5, (300, 3)), shell]
    >>> halves = (X[:, 0] > 0).astype(int)
    >>> start = core_start(X, halves, 2, np.random.default_rng(0))
    >>> bool((start[:300] == 0).all()), bool((start[300:] == 1).mean() > 0.95)
    (True, True)
    """
    K, n = int(n_clusters), X.shape[0]
    settings = settings or FitSettings()
    if K < 2 or n <= K:
        return None
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    total = float(w.sum())
    ref = gen.choice(n, min(n, settings.peak_rows), replace=False)
    picks = ref[:settings.peak_candidates]
    m, wr = ref.size, w[ref]
    sq = np.einsum("ij,ij->i", X, X)
    dist = np.maximum(sq[picks, None] + sq[ref] - 2.0 * X[picks] @ X[ref].T, 0.0)
    k = math.ceil(math.sqrt(m))
    if weights is None:     # the k-th nearest row's distance
        radius = np.partition(dist, k, axis=1)[:, k]
    else:                   # the nearest row past k / m of the weight (at unit weights: the k-th)
        order = np.argsort(dist, axis=1)
        reach = (np.cumsum(wr[order], axis=1) <= wr.sum() * k / m).sum(1, keepdims=True)
        radius = np.take_along_axis(dist, np.take_along_axis(order, reach.clip(max=m - 1), 1),
                                    1)[:, 0]
    peak = picks[int(radius.argmin())]
    to_peak = np.maximum(sq + sq[peak] - 2.0 * X @ X[peak], 0.0)
    if weights is None:     # the ceil(n / K) rows nearest the peak
        core = np.argpartition(to_peak, -(-n // K) - 1)[:-(-n // K)]
    else:                   # the rows nearest the peak up to 1 / K of the weight
        nearest = np.argsort(to_peak)
        core = nearest[:int((np.cumsum(w[nearest]) < total / K).sum()) + 1]
    in_core = np.zeros(n, dtype=bool)
    in_core[core] = True
    core_weight = np.bincount(labels[core], weights=w[core], minlength=K)
    dissolved = int(core_weight.argmax())
    # the weight that changes cell: the core's rows from other cells, the dissolved cell's
    # rows outside the core
    moved = float(core_weight.sum() - core_weight[dissolved]
                  + w[labels == dissolved].sum() - core_weight[dissolved]) / total
    if moved < settings.min_moved:
        return None
    kept = np.array([h for h in range(K) if h != dissolved])
    out = np.zeros(n, dtype=np.int64)
    rest = ~in_core
    for new, h in enumerate(kept, start=1):
        out[rest & (labels == h)] = new
    orphans = np.flatnonzero(rest & (labels == dissolved))
    if orphans.size:
        means = []
        for h in kept:
            cell = rest & (labels == h)
            means.append((w[cell] @ X[cell]) / w[cell].sum() if w[cell].sum() > 0
                         else X[rest].mean(0))
        means = np.asarray(means)
        out[orphans] = 1 + (((X[orphans, None, :] - means[None]) ** 2).sum(2)).argmin(1)
    return out


def merges_cells(default: np.ndarray, labels: np.ndarray, n_clusters: int,
                 weights: np.ndarray | None = None, *, settings: FitSettings | None = None
                 ) -> bool:
    """Whether one head of the partition ``labels`` holds at least ``settings.merge_share``
    (``None``: ``FitSettings()``'s) of the weight of each of two cells of the partition
    ``default`` (both into ``n_clusters``).

    Examples
    --------
    >>> merges_cells(np.array([0, 0, 1, 1, 2, 2]), np.array([0, 0, 0, 0, 1, 2]), 3)
    True
    >>> merges_cells(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), 2)
    False
    """
    K = int(n_clusters)
    table = np.zeros((K, K))
    np.add.at(table, (default, labels), 1.0 if weights is None else weights)
    share = table / np.maximum(table.sum(1, keepdims=True), np.finfo(float).tiny)
    return bool(((share >= (settings or FitSettings()).merge_share).sum(0) >= 2).any())

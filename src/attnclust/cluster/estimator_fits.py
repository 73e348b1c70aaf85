"""The solver runs of :class:`~attnclust.AttentionClustering`'s ``fit``, in the data's units.

Each function runs one ending of a fit on :class:`~attnclust.cluster.rows.WorkingRows` (the working
space: Euclidean rows centred and scaled by ``s``) from the warm start, for the fit's
resolved settings (a :class:`~attnclust.cluster.plan.FitPlan`), and returns what the estimator
stores; the estimator keeps the order of the steps, the fitted attributes and the
warnings. The callbacks report in the preprocessed space's units.

The fit
-------
1. Initial heads (:func:`attnclust.cluster.plan.estimator_warm_start`): k-means++ seeding
   (scikit-learn's), random directions, or given, on a seeded sample of at most
   ``settings.warm_sample`` rows (:class:`~attnclust.cluster.settings.FitSettings`); with
   ``inverse_temperature="auto"``, hard Lloyd steps to a stable partition and ``lambda =
   1 / s^2``, ``s^2`` the within-cluster variance across each cluster's nearest boundary
   (a seeding is replaced by the Lloyd heads: a warm start).
2. Safeguarded, extrapolated fixed-point steps on the risk (:mod:`attnclust.cluster.fixed_point`;
   ``solver="pgd"``: plain PGD on the sphere), optionally annealed ``lambda/8, lambda/4,
   lambda/2, lambda``; on more rows than the sample, the sample is fitted first.
   The default (Euclidean heads, ``init="kmeans++"``, ``inverse_temperature="auto"``)
   ends instead in the layer's hard limit (:mod:`attnclust.cluster.kmeans.ending`): its warm start
   is the best k-means of the sample (``n_init`` seedings, :mod:`attnclust.cluster.kmeans.batch`),
   then single swaps with ten heads or more, and Lloyd steps over all rows when there
   are more than the sample (which is then ``settings.per_head`` times ``K`` rows, at most
   ``settings.warm_sample``). At the ``"auto"`` temperature the soft fixed point moves the
   boundaries between overlapping clusters away from the nearest-head partition that the
   labels read; why this ending, and the measurements, are in
   ``docs/guide/default-estimator.md``.
3. Checks that no fit fails silently: a head that wins no row, ``lambda`` at the floor of
   ``s^2`` (no spread) or so small that the attention is nearly uniform (the risk then
   pins down only the mean of the heads) warn with a :class:`~attnclust.DegenerateFitWarning`; not
   converging warns with a ``ConvergenceWarning``.

The endings here
----------------

    fixed point    fixed-point steps of the risk, the annealing stages as one
                   :class:`~attnclust.layer.schedules.Stages` (the sample first, when smaller)
    pgd            :func:`attnclust.pgd` on the sphere: the stages as one schedule without
                   stopping rule, then the target ``lambda``
    hard limit     :func:`attnclust.cluster.kmeans.ending.fit_to_hard_limit`, with the cluster sizes
                   and the attention's sharpness that the degeneracy checks read
    shaped         tempered EM of shaped heads (:mod:`attnclust.cluster.mixture.tempered`),
                   its fitted attributes in the data's units
    merge          more heads than clusters, joined by their overlap
                   (:mod:`attnclust.cluster.merge`), after the default's fit

Notation
--------
=============  ================  ===============================================
paper          code              meaning
=============  ================  ===============================================
``lambda``     ``lam``           inverse temperature in the working space
``s``          ``rows.scale``    scale of the working rows (data = s * working)
``l~_h(x)``    ``log_joint``     shaped head's log-joint (see ``shaped_fit``)
=============  ================  ===============================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..layer.heads import softmax_heads
from ..layer.results import History, SolverResult
from ..layer.schedules import Stages
from ..study.descent import pgd
from .degenerate import warn_if_empty
from .fixed_point import fixed_point_fit
from .head_graph import squared_distances
from .kmeans.ending import fit_to_hard_limit
from .merge import HeadMerge, cluster_labels, merge_heads, sample_rows, weights_in_rows
from .mixture.covariance import Covariance, Spherical
from .mixture.tempered import ShapedFitted, shaped_fit
from .rows import WorkingRows
from .settings import MergeSettings
from .warm_start import WarmStart, kmeans_lambda

if TYPE_CHECKING:
    from .plan import FitPlan

__all__ = ["Reporter", "Ending", "RiskFitted", "ShapedFitted", "solve", "risk_attributes",
           "fit_fixed_point", "fit_pgd", "fit_hard_limit", "fit_shaped", "shaped_log_joint",
           "with_deferred_lambda", "MergedFitted", "fit_merge", "merge_into", "SHAPED_ARRAYS",
           "in_data_dtype"]

# the shaped heads' fitted arrays, which a fit of round heads (a merge of heads) drops
SHAPED_ARRAYS = ("covariances_", "precisions_", "precisions_cholesky_", "weights_",
                 "covariance_floor_")

_logger = logging.getLogger("attnclust")


class Reporter(NamedTuple):
    """The user's ``callback`` and the ``verbose`` log of a fit.

    Examples
    --------
    >>> Reporter(None, 0).for_rows(None) is None
    True
    """

    callback: Callable | None
    verbose: int

    def for_rows(self, rows: WorkingRows, offset: int = 0):
        """The callback in the preprocessed space's units (iterations counted from
        ``offset``), or ``None`` when there is nothing to report."""
        if self.callback is None and not self.verbose:
            return None
        out = rows.info_out(offset)

        def call(info) -> None:
            info = out(info)
            if self.verbose:
                _logger.info("iter %d  lambda %.4g  loss %.8g  shift %.2e", info.iteration,
                             info.inverse_temperature, info.loss, info.shift)
            if self.callback is not None:
                self.callback(info)
        return call

    def for_shaped(self, rows: WorkingRows):
        """The callback of shaped heads: the log-likelihood shifts by ``d log(s)`` and
        ``lambda`` is a pure number (:meth:`for_rows` converts a risk's units)."""
        base = self.for_rows(rows)
        if base is None:
            return None
        s2, offset = rows.scale**2, rows.rows.shape[1] * np.log(rows.scale)

        def call(info) -> None:
            base(info._replace(loss=(info.loss + offset) / s2,
                               inverse_temperature=info.inverse_temperature * s2))
        return call


def solve(S, Sw, rows: WorkingRows, start, lam, plan: FitPlan, *, gen,
          report: Reporter) -> Ending:
    """The heads of the risk from the warm ``start`` (sample ``S``, weights ``Sw``), for the
    resolved settings ``plan``: the hard-limit ending of the default, or the stages of the
    annealing plan by PGD or fixed-point steps, then the labels, sizes and sharpness of the
    attention at ``lam`` over all rows."""
    geometry, n_clusters = plan.geometry, plan.n_clusters
    if plan.hard:
        return fit_hard_limit(S, Sw, rows, start, lam, n_clusters=n_clusters, geometry=geometry,
                              max_iter=plan.max_iter, tol=plan.tol, report=report)
    temps, steps = plan.stages_at(lam)
    common = dict(tol=plan.tol, penalty=plan.penalty, rho=plan.rho, report=report)
    if plan.solver == "pgd":
        res = fit_pgd(rows, start.heads, temps, steps, max_iter=plan.max_iter,
                      step_size=float(plan.step_size), batch_size=plan.batch_size, gen=gen,
                      **common)
    else:
        res = fit_fixed_point(S, Sw, rows, start.heads, temps, steps, geometry=geometry,
                              **common)
    labels, stats = rows.assign(lambda chunk: geometry.logits(chunk, res.heads, lam),
                                n_clusters)
    return Ending(res, labels, stats[:n_clusters], float(stats[n_clusters]))


def fit_fixed_point(S, Sw, rows: WorkingRows, heads0, temps, steps, *, tol, geometry,
                    penalty, rho, report: Reporter) -> SolverResult:
    """Fixed-point steps through the stages ``(temps, steps)``: on the sample ``S``
    (weights ``Sw``) first when it is smaller than the data, then on all rows from there
    (at the last stage only).

    Examples
    --------
    >>> import torch
    >>> from attnclust.layer.geometry import as_geometry
    >>> X = torch.tensor([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [1.0, 0.1]], dtype=torch.float64)
    >>> rows = WorkingRows.prepare(X.numpy(), geometry=as_geometry("sphere"), comm=None,
    ...                            device="cpu", dtype="auto", chunk_size=None)
    >>> res = fit_fixed_point(rows.rows, None, rows, rows.rows[[0, 2]], [10.0], [50],
    ...                       tol=1e-8, geometry=as_geometry("sphere"), penalty=None, rho=0.0,
    ...                       report=Reporter(None, 0))
    >>> res.converged
    True
    """
    common = dict(tol=tol, geometry=geometry, penalty=penalty, rho=rho)
    n_iter = 0
    if S.shape[0] < rows.n_total:   # the curves are those of the steps over all rows
        res = fixed_point_fit(S, heads0, inverse_temperature=Stages(temps, steps),
                              n_steps=sum(steps), callback=report.for_rows(rows),
                              chunk_size=rows.chunk, workers=rows.workers, weights=Sw, **common)
        heads0, n_iter = res.heads, res.n_iter
        temps, steps = temps[-1:], steps[-1:]
    res = fixed_point_fit(rows.rows, heads0, inverse_temperature=Stages(temps, steps),
                          n_steps=sum(steps), callback=report.for_rows(rows, n_iter),
                          **rows.solver_args(), **common)
    return res._replace(n_iter=n_iter + res.n_iter,
                        history=res.history._replace(step=res.history.step + n_iter))


def fit_pgd(rows: WorkingRows, heads0, temps, steps, *, max_iter: int, tol: float,
            step_size: float, penalty, rho: float, batch_size, gen,
            report: Reporter) -> SolverResult:
    """Plain PGD (:func:`attnclust.pgd`, float64 on the data's device): the annealing
    stages (all but the last of ``temps, steps``) as one schedule without stopping rule,
    then ``max_iter`` steps at the target ``temps[-1]``."""
    Xt = rows.rows
    common = dict(step_size=step_size, penalty=penalty, rho=rho, record_every=1,
                  batch_size=batch_size, rng=gen)
    n_anneal = sum(steps[:-1])
    first = None
    if n_anneal:
        first = pgd(Xt, heads0, inverse_temperature=Stages(temps[:-1], steps[:-1]),
                    n_steps=n_anneal, tol=0.0, callback=report.for_rows(rows), **common)
        heads0 = first.heads
    res = pgd(Xt, heads0, inverse_temperature=temps[-1], n_steps=max_iter, tol=tol,
              callback=report.for_rows(rows, n_anneal), **common)
    heads = torch.as_tensor(res.heads, dtype=Xt.dtype, device=Xt.device)
    if first is None:
        return res._replace(heads=heads)
    # the last record of the annealing (after its last update) is the first of the
    # final phase, at lambda: kept once, from the final phase
    final = res.history._replace(step=res.history.step + first.n_iter)
    history = History(*(np.concatenate([a[:-1], b]) for a, b in zip(
        first.history, final, strict=True)))
    return SolverResult(heads, history, first.n_iter + res.n_iter, res.converged)


class Ending(NamedTuple):
    """A fit of the risk's heads: the solver's result (ended in the hard limit: ``n_iter``
    counting Lloyd's steps and passes), this rank's labels, the (weighted)
    cluster sizes over all ranks and the attention's sharpness (mean largest weight times
    the total size), which the degeneracy checks read (``None`` in a fit that chooses its
    shape, until it chooses the spherical heads: :func:`with_deferred_lambda`)."""

    result: SolverResult
    labels: np.ndarray
    sizes: np.ndarray
    sharpness: float | None


def fit_hard_limit(S, Sw, rows: WorkingRows, start, lam, *, n_clusters: int, geometry,
                   max_iter: int, tol: float, report: Reporter) -> Ending:
    """:func:`~attnclust.cluster.kmeans.ending.fit_to_hard_limit` from the warm ``start``: its
    curve is the risk at ``lambda = infinity`` (the k-means objective over all rows), the
    attention's sharpness is read at ``lam`` on the sample (:func:`_sharpness`; not with
    ``lam=None``); sizes weighted by the sample weights, when given; ``tol``:
    scikit-learn's ``KMeans`` tolerance of the steps over all rows."""
    end = fit_to_hard_limit(S, rows, start.kmeans, geometry=geometry, max_iter=max_iter,
                            callback=report.for_rows(rows), weights=Sw, tol=tol)
    steps = end.history
    T = len(steps.objective)
    history = History(step=steps.step, risk=steps.objective, grad_norm=np.full(T, np.nan),
                      inverse_temperature=np.full(T, np.inf), rho=np.zeros(T),
                      heads=steps.heads.cpu().double().numpy())
    res = SolverResult(end.heads, history, end.n_iter, end.converged)
    w = None if rows.weights is None else rows.weights.cpu().double().numpy()
    sizes = rows.comm.sum_array(np.bincount(end.labels, minlength=n_clusters, weights=w)
                                .astype(np.float64))
    return Ending(res, end.labels, sizes,
                  None if lam is None else _sharpness(S, Sw, end.heads, lam, geometry, sizes))


def _sharpness(S, Sw, heads, lam: float, geometry, sizes: np.ndarray) -> float:
    """The attention's mean largest weight at ``lam`` on the sample ``S`` (weighted by
    ``Sw``), times the total size ``sizes.sum()``."""
    best = softmax_heads(geometry.logits(S, heads, lam)).max(1).values.double()
    mean_best = float(best.mean()) if Sw is None else \
        float((best * Sw.double()).sum() / Sw.double().sum())
    return mean_best * float(sizes.sum())


def with_deferred_lambda(S, Sw, start: WarmStart, end: Ending, geometry):
    """``(start, lam, end)`` of a hard-limit fit that chose the spherical heads, its
    ``"auto"`` lambda read now (:func:`~attnclust.cluster.warm_start.kmeans_lambda`) and
    the attention's sharpness at it."""
    start = kmeans_lambda(S, Sw, start, geometry)
    lam = start.inverse_temperature
    return start, lam, end._replace(
        sharpness=_sharpness(S, Sw, end.result.heads, lam, geometry, end.sizes))


class RiskFitted(NamedTuple):
    """The fitted attributes of the risk's heads, mapped back from the working space to
    the preprocessed one (named as on the estimator)."""

    inverse_temperature_: float
    cluster_centers_: np.ndarray
    loss_curve_: np.ndarray
    inverse_temperature_curve_: np.ndarray
    n_iter_: int
    converged_: bool
    labels_: np.ndarray


def risk_attributes(end: Ending, lam: float, rows: WorkingRows) -> RiskFitted:
    """The :class:`RiskFitted` of a fit of the risk at ``lam`` (working space)."""
    res, scale2 = end.result, rows.scale * rows.scale
    return RiskFitted(inverse_temperature_=rows.inverse_temperature_out(lam),
                      cluster_centers_=rows.heads_out(res.heads),
                      loss_curve_=res.history.risk * scale2,
                      inverse_temperature_curve_=res.history.inverse_temperature / scale2,
                      n_iter_=int(res.n_iter), converged_=bool(res.converged),
                      labels_=end.labels)


def fit_shaped(rows: WorkingRows, heads0, plan: FitPlan, *, report: Reporter,
               start: tuple | None = None) -> ShapedFitted:
    """Tempered EM of shaped heads (:func:`~attnclust.cluster.mixture.tempered.shaped_fit`) from the
    Lloyd heads ``heads0``, for the resolved settings ``plan``: through the stages of the
    annealing plan at ``lambda`` (``"auto"``: 1), to ``tol`` (``"auto"``: 1e-3,
    ``GaussianMixture``'s); a pass holds ``(K, rows, d)`` blocks, so its chunks are ``K``
    times fewer rows than the risk's unless ``chunk_size`` is given. ``start``: ``(means,
    covariances, weights)`` of the working space to start from instead of ``heads0``'s
    partition."""
    lam, n_clusters, covariance = plan.inverse_temperature, plan.n_clusters, plan.covariance
    temps, steps = plan.stages_at(lam)
    scale, d = rows.scale, rows.rows.shape[1]
    chunk = rows.chunk if plan.chunk_size_given else max(256, rows.chunk // n_clusters)
    means0, covariances0, weights0 = (heads0, None, None) if start is None else \
        (torch.as_tensor(a) for a in start)
    res = shaped_fit(rows.rows, means0, covariance_type=covariance, covariances0=covariances0,
                     weights0=weights0,
                     inverse_temperature=Stages(temps, steps), n_steps=sum(steps), tol=plan.tol,
                     chunk_size=chunk,
                     reduce=rows.comm.reduce, row_map=rows.row_map, sample_weight=rows.weights,
                     callback=report.for_shaped(rows))
    factors = res.precisions_cholesky.cpu().double().numpy() / scale
    args = (res.means, res.precisions_cholesky, res.weights.log())
    labels, _ = rows.assign(lambda c: covariance.log_joint(c, *args, lam, res.floor),
                            n_clusters)
    return ShapedFitted(
        cluster_centers_=rows.heads_out(res.means),
        covariances_=res.covariances.cpu().double().numpy() * scale**2,
        precisions_cholesky_=factors,
        precisions_=covariance.precisions(factors),
        weights_=res.weights.cpu().double().numpy(),
        covariance_floor_=res.floor.cpu().numpy() * scale**2,
        inverse_temperature_=lam,
        # log-densities of the data's units: the working rows are the data over ``scale``
        loss_curve_=res.loss_curve + d * np.log(scale),
        inverse_temperature_curve_=res.inverse_temperature_curve,
        n_iter_=int(res.n_iter), converged_=bool(res.converged), labels_=labels)


def shaped_log_joint(X: torch.Tensor, fitted, covariance: Covariance) -> torch.Tensor:
    """``lambda l~_h(x)`` of rows ``(n, d)`` (float64) under a fitted estimator's shaped
    heads of type ``covariance``, rows and means centred on the means' mean for precision
    far from the origin."""
    def tensor(a):
        return torch.as_tensor(a, dtype=torch.float64, device=X.device)
    means = tensor(fitted.cluster_centers_)
    center = means.mean(0)
    return covariance.log_joint(X - center, means - center,
                                tensor(fitted.precisions_cholesky_),
                                tensor(fitted.weights_).log(), fitted.inverse_temperature_,
                                tensor(fitted.covariance_floor_))


class MergedFitted(NamedTuple):
    """The fitted attributes of merged heads, in the preprocessed space (named as on the
    estimator)."""

    labels_: np.ndarray
    cluster_centers_: np.ndarray
    heads_: np.ndarray
    head_labels_: np.ndarray
    inverse_temperature_: float


def fit_merge(rows: WorkingRows, labels: np.ndarray, n_clusters: int, setting, *,
              gen: np.random.Generator,
              logits: Callable[[np.ndarray], torch.Tensor] | None = None,
              count_up_to: int = 0, sample_weight: np.ndarray | None = None
              ) -> tuple[HeadMerge, MergedFitted | None]:
    """:func:`~attnclust.cluster.merge.merge_heads` on at most ``max_rows`` working rows drawn
    with ``gen`` (rows held by one process), against the fit's ``labels``; with weights,
    ``max_rows`` rows of their total counted in rows
    (:func:`~attnclust.cluster.merge.weights_in_rows` of ``sample_weight``, the weights as
    given to ``fit``, else of the rows' own: an integer weight is that many copies of its
    row; :func:`~attnclust.cluster.merge.sample_rows`); ``setting``: the
    estimator's ``merge_heads`` (``True`` forces the merge). ``logits``: the fit's attention
    logits of preprocessed rows ``(n, K)``; their softmax on the sampled rows lets the merge
    be skipped, before any head is tiled, where the ``K`` clusters barely overlap
    (:func:`~attnclust.cluster.merge.posterior_cut` below ``skip_cut``); with ``count_up_to``
    (``n_clusters="auto"``), the heads may hold from 2 to ``max(n_clusters, count_up_to)``
    clusters (:func:`~attnclust.cluster.merge.merge_heads`).
    When merged, every row's label is its cluster of largest summed attention and each
    cluster's centre the (weighted) mean of its rows within the merge's reach (of its heads,
    for a cluster that has none), in one pass over the rows; else ``None``. The reach is
    twice the largest distance of a sampled row (of positive weight) to its nearest head: a
    row farther from every head (a far outlier the sample missed, which the ``K``-head fit
    may have given a cluster of its own) keeps its label but does not move its cluster's
    centre, while the clusters' tails, a little beyond the sample's farthest row, count."""
    settings = setting if isinstance(setting, MergeSettings) else MergeSettings()
    K, n = int(n_clusters), rows.rows.shape[0]
    weights = None if rows.weights is None else rows.weights.cpu().double().numpy()
    held = np.arange(n) if weights is None else np.flatnonzero(weights > 0)  # 0: no row
    given = weights if sample_weight is None else np.asarray(sample_weight, np.float64)
    # equal weights are no weights: the rows' draws, as without them
    copies = None if given is None else weights_in_rows(given[held])
    picked, sampled_weights = sample_rows(len(held), copies, settings.max_rows, gen)
    take = held[picked]
    sample = rows.take(torch.as_tensor(take)).cpu().double().numpy()
    proba = None if logits is None or setting is True or not (settings.skip_cut > 0
                                                               or count_up_to > 0) \
        else softmax_heads(logits(rows.heads_out(torch.from_numpy(sample)))).cpu().numpy()
    merge = merge_heads(sample, labels[take], K, rng=gen, weights=sampled_weights,
                        settings=settings, force=setting is True, proba=proba,
                        count_up_to=count_up_to)
    if not merge.merged:
        return merge, None
    K = int(merge.head_labels.max()) + 1

    reach = 4.0 * float(squared_distances(sample, merge.heads).min(1).max(initial=0.0))

    def chunk_sums(start: int, chunk: torch.Tensor):
        x = chunk.cpu().double().numpy()
        z, nearest = cluster_labels(x, merge)
        member = np.eye(K)[z]                                    # (rows, K)
        member[nearest > reach] = 0.0
        if weights is not None:
            member *= weights[start:start + len(x), None]
        return z, member.T @ x, member.sum(0)
    parts = rows.map_chunks(chunk_sums)
    counts = sum(p[2] for p in parts)
    head_means = np.stack([merge.heads[merge.head_labels == c].mean(0) for c in range(K)])
    means = np.where(counts[:, None] > 0,
                     sum(p[1] for p in parts) / np.maximum(counts, 1e-300)[:, None],
                     head_means)
    return merge, MergedFitted(
        labels_=np.concatenate([p[0] for p in parts]).astype(np.int64),
        cluster_centers_=rows.heads_out(torch.from_numpy(means)),
        heads_=rows.heads_out(torch.from_numpy(merge.heads)),
        head_labels_=merge.head_labels,
        inverse_temperature_=rows.inverse_temperature_out(1.0 / merge.variance))


def merge_into(est, rows: WorkingRows, gen: np.random.Generator, setting,
               sample_weight: np.ndarray | None = None) -> None:
    """The fitted estimator ``est``'s heads merged into clusters (:func:`fit_merge` of its
    rows and ``sample_weight`` as given to ``fit``; ``setting``: ``merge_heads`` as a
    flag). Where they merge, the fitted attributes become the clusters' and the heads'
    (round heads: the shaped arrays are dropped), and a cluster that wins no row warns
    with a :class:`~attnclust.DegenerateFitWarning` for the caller of ``fit``, as a head
    of the ``K``-head fit does."""
    counts = est._plan.max_clusters if est.n_clusters == "auto" else 0
    merge, fitted = fit_merge(rows, est.labels_, len(est.cluster_centers_), setting,
                              gen=gen, logits=est._logits, count_up_to=counts,
                              sample_weight=sample_weight)
    est.merge_heads_, est.merge_heads_reason_ = merge.merged, merge.reason
    if fitted is None:
        return
    count = len(fitted.cluster_centers_)
    if count != len(est.cluster_centers_):          # n_clusters="auto": the heads' count
        est.n_clusters_reason_ = (f"{count} clusters of the heads ({merge.reason}), from "
                                  f"the choice of K: "
                                  f"{est.n_clusters_reason_}")
        est._plan = est._plan.with_clusters(count)
    est.__dict__.update(fitted._asdict())
    for name in SHAPED_ARRAYS:                      # the shaped heads' arrays: none now
        est.__dict__.pop(name, None)
    est._plan = est._plan.with_covariance(Spherical())
    est.covariance_type_reason_ = (f"heads merged ({merge.reason}); the K-head fit chose "
                                   f"{est.covariance_type_reason_}")
    est.covariance_type_ = "spherical"
    # the clusters' rows (sums of weights): one of no row is a cluster the fit did not find
    sizes = np.bincount(fitted.labels_, minlength=count, weights=None if rows.weights is None
                        else rows.weights.cpu().double().numpy()).astype(np.float64)
    warn_if_empty(sizes, what="cluster(s)")


def in_data_dtype(est, names, dtype) -> None:
    """The fitted arrays ``names`` of ``est`` (those it has, floating) in the data's
    ``dtype``, as ``KMeans`` and ``GaussianMixture`` keep them; where one overflows it
    (float32 rows at 1e20: covariances of 1e40), a ``ValueError``, and ``est`` left
    unfitted (no attribute of this fit, nor of an earlier one, kept)."""
    cast = {}
    for name in names:
        value = getattr(est, name, None)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            cast[name] = value.astype(dtype, copy=False)
            if np.isfinite(value).all() and not np.isfinite(cast[name]).all():
                for fitted in [k for k in vars(est) if k.endswith("_") and k[0] != "_"]:
                    delattr(est, fitted)
                raise ValueError(f"the fitted {name} overflow {np.dtype(dtype)} (at most "
                                 f"{np.finfo(dtype).max:.3g}): pass float64 rows")
    for name, value in cast.items():
        setattr(est, name, value)

"""Noise rows: the shaped heads beside a uniform background head (``noise_head=True``).

Rows scattered over the data's range (measurement noise, outliers) have no cluster of
their own; a Gaussian mixture still has to explain them, and either widens a head over
them or spends a head on them. Here, beside the ``K`` Gaussian heads, a **background
head** of constant density ``1 / V`` (``V`` the volume of the working rows' box, each side
the range of one feature, at least ``sqrt(2 pi e)`` times the root of its covariance
floor: :func:`~attnclust.cluster.mixture.candidates.box_log_volume`)
takes them, with its own weight ``pi_0`` (one free parameter more), as in mclust's noise
component (Fraley and Raftery 1998; Banfield and Raftery 1993):

    p(x) = pi_0 / V + sum_h pi_h N(x; mu_h, Sigma_h).

It is fitted by EM (:class:`~attnclust.cluster.mixture.em.LeanEM` with a background: its
responsibilities are a row more, its weight the sum of them), from the default fit's
partition with ``pi_0 = 0.05`` (the Gaussian heads' weights scaled by 0.95). The heads'
shape is chosen as ``covariance_type="auto"`` chooses it, by ICL (with the background's
parameter), between diagonal and full heads, the second start from the density core
included (:func:`attnclust.cluster.mixture.shape_choice.choose_lean`); not spherical heads: the
spherical fit is the layer's hard limit, which has no background. Rows whose most
probable head is the background get the label ``-1`` (scikit-learn's label of noise, as
in ``DBSCAN``); ``predict`` does the same, and ``score`` is the mean log-likelihood of the
mixture with the background. ``predict_proba`` and ``transform`` stay over the ``K``
heads (the attention given that a row is not noise).

On more than ``settings.choice_rows`` rows (the fit's
:class:`~attnclust.cluster.settings.FitSettings`) the shape is chosen on a seeded sample, with the
sample's box, and the chosen shape is fitted on all rows, with theirs, by EM from the
sample's fit. Every row is read whole by one process on the CPU (the lean EM: about
``50 (K + 1)`` bytes a row beyond the rows, 0.6 GB for a million rows and ten heads): a
fit on a device or over several ranks raises, and so does one where both shapes are too
costly (:func:`check_noise_head`), before any work. With ``n_clusters="auto"``, ``K`` is
chosen first (:mod:`attnclust.cluster.choice.k_choice`, whose BIC has a background of its own);
over much noise and few clusters it may find no structure (``K = 1``).

Notation
--------
============  =======================  ===========================================
paper         code                     meaning
============  =======================  ===========================================
``pi_0``      ``noise_weight_``        the background head's weight
``1 / V``     ``noise_log_density_``   its density (log, preprocessed units)
============  =======================  ===========================================
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..head_graph import distinct_rows
from ..rows import WorkingRows
from ..settings import FitSettings
from .candidates import LeanRows, LeanRun, lean_attributes, lean_run
from .shape_choice import ShapeChoice, choice_rows, choose_lean, shaped_candidates
from .tempered import ShapedFitted

if TYPE_CHECKING:
    from ..estimator_fits import Ending
    from ..plan import FitPlan

__all__ = ["NOISE_LABEL", "NoiseFit", "check_noise_head", "fit_noise_head"]

NOISE_LABEL = -1    # the label of rows the background head takes


class NoiseFit(NamedTuple):
    """A fit with a noise head: the shaped heads' attributes, the background's weight
    and log-density (preprocessed units), and the shape's choice."""

    fitted: ShapedFitted
    noise_weight: float
    noise_log_density: float
    choice: ShapeChoice


def fit_noise_head(rows: WorkingRows, end: Ending, plan: FitPlan, *,
                   gen: np.random.Generator) -> NoiseFit:
    """The shaped heads and the background head fitted from the default fit ``end`` on the
    working ``rows`` (module docstring), the shape of least ICL. The estimator checks,
    before its fit starts, that the rows are held whole by one process on the CPU
    (:func:`~attnclust.cluster.estimator_params.check_params`) and the cost
    (:func:`check_noise_head`).

    Examples
    --------
    Three blobs over 15% uniform noise: the background takes most of the noise rows, and
    the blobs keep their heads.

    >>> import numpy as np, attnclust as ac
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.concatenate([rng.normal(c, 0.5, (200, 2)) for c in ((0, 0), (4, 0), (0, 4))])
    >>> X = np.concatenate([blobs, rng.uniform(-6, 10, (100, 2))])
    >>> est = ac.AttentionClustering(3, noise_head=True, random_state=0).fit(X)
    >>> round(float(est.noise_weight_), 1), bool((est.labels_[600:] == -1).mean() > 0.7)
    (0.1, True)
    >>> ac.adjusted_rand_index(np.repeat([0, 1, 2], 200), est.labels_[:600]) > 0.95
    True
    """
    K, log_scale = plan.n_clusters, math.log(rows.scale)
    crows, labels = choice_rows(rows, end.result.heads, end.labels, gen, settings=plan.settings)
    choice, run = choose_lean(crows, labels, plan, log_scale, rows.n_total, gen, noise=True)
    d = crows.rows.shape[1]
    start = _without_tiny_cells(crows.read(0, crows.rows.shape[0]).double().cpu().numpy(),
                                labels, K, d + 2, gen)
    if start is not None:        # a head on a few far rows: they start beside another head
        again, rerun = choose_lean(crows, start, plan, log_scale, rows.n_total, gen, noise=True)
        floored = _chosen(choice).at_floor
        if _chosen(again).eligible and (not _chosen(choice).eligible
                                        or _chosen(again).icl < _chosen(choice).icl):
            why = ("from the default fit's cells a head sat at the covariance floor" if floored
                   else f"a lower ICL than from the default fit's cells, {_chosen(choice).icl:g}"
                   if _chosen(choice).eligible else "the run from the default fit's cells "
                   "stopped early")
            choice, run = again._replace(reason=again.reason + (
                f"; started with the rows of the default fit's cells of fewer than {d + 2} "
                f"rows joined to the nearest of k-means cells of the others, for the "
                f"background to take them ({why})")), rerun
    choice = choice._replace(reason=choice.reason + "; each beside a uniform background "
                             "head (noise_head=True)")
    if crows is not rows:       # all rows, with their box, from the sample's fit
        lr = LeanRows(rows, K)
        run, _ = lean_run(lr, choice.covariance, plan, None, log_scale, math.inf,
                          params=run.em.params, log_background=lr.background_log_density())
    return _noise_fit(rows, run, K, choice)


def check_noise_head(n_total: int, n_features: int, n_clusters: int, *,
                     settings: FitSettings | None = None) -> None:
    """``ValueError`` where both diagonal and full heads are too costly to fit on these
    rows (:func:`~attnclust.cluster.mixture.shape_choice.shaped_candidates`, by the cost guards of
    ``settings``; ``None``: ``FitSettings()``): checked before the fit starts.

    Examples
    --------
    >>> check_noise_head(10**7, 784, 10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: noise_head=True fits diagonal or full heads, and both are too costly here ...
    >>> check_noise_head(5000, 8, 4)      # fits
    """
    if not shaped_candidates(n_total, n_features, n_clusters,
                             settings=settings or FitSettings())[0]:
        raise ValueError(f"noise_head=True fits diagonal or full heads, and both are too "
                         f"costly here ({n_total:,} rows, {n_clusters} heads, "
                         f"{n_features} features): fit without it")


def _chosen(choice: ShapeChoice):
    """The criteria of the chosen candidate."""
    return next(s for s in choice.scores if s.covariance.name == choice.covariance.name)


def _without_tiny_cells(X: np.ndarray, labels: np.ndarray, K: int, min_rows: int,
                        gen: np.random.Generator) -> np.ndarray | None:
    """A start partition of the rows ``X`` ``(n, d)`` where the cells of ``labels`` with
    fewer than ``min_rows`` rows (a head on a far outlier, at the covariance floor) give
    their rows to the nearest other cell (whose head the background then relieves of
    them), the ``K`` cells being k-means' of the other rows; where k-means cuts off a few
    far rows again (a far row a cell held), they join the nearest cell too and k-means
    runs again (at most ``K`` times). ``None`` where no cell is that small, every one is,
    or the other rows leave none but small cells.

    Examples
    --------
    >>> X = np.r_[np.zeros((5, 1)), np.ones((5, 1)), [[100.0]], [[-90.0]]]
    >>> start = _without_tiny_cells(X, np.r_[[0] * 10, 1, 0], 2, 3, np.random.default_rng(0))
    >>> len(set(start[:5])), len(set(start[5:10])), bool(start[5] != start[0])
    (1, 1, True)
    >>> bool(start[10] == start[5] and start[11] == start[0])    # each to its nearest cell
    True
    """
    from ..kmeans.batch import best_of_seedings

    counts = np.bincount(labels, minlength=K)
    if not (counts < min_rows).any() or (counts < min_rows).all():
        return None
    own = ~np.isin(labels, np.flatnonzero(counts < min_rows))     # the rows the cells split
    for _ in range(K):
        if own.sum() < K * min_rows or distinct_rows(X[own]) < K:
            return None
        cells = np.asarray(best_of_seedings(X[own], K, 3, gen).labels)
        small = np.bincount(cells, minlength=K) < min_rows
        if not small.any():
            break
        own[np.flatnonzero(own)[small[cells]]] = False
    else:
        return None
    start = np.empty(len(X), dtype=np.int64)
    start[own] = cells
    means = np.stack([X[own][cells == k].mean(0) for k in range(K)])
    far = np.flatnonzero(~own)
    start[far] = ((X[far, None] - means[None]) ** 2).sum(-1).argmin(1)
    return start


def _noise_fit(rows: WorkingRows, run: LeanRun, K: int, choice: ShapeChoice) -> NoiseFit:
    """The :class:`NoiseFit` of a lean run with a background (its last head)."""
    fit = run.em.result()
    heads = fit._replace(weights=fit.weights[:K], counts=fit.counts[:K])
    fitted = lean_attributes(rows, heads, run.em.cov, run.rows.floor_t, run.rows.total)
    labels = fitted.labels_
    labels[labels == K] = NOISE_LABEL
    d = fit.means.shape[1]
    return NoiseFit(fitted, float(fit.weights[K]),
                    run.em.log_background - d * math.log(rows.scale), choice)

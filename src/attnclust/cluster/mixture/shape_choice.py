"""The heads' shape chosen from the data: ``covariance_type="auto"``.

Each candidate shape ``c``
(:attr:`attnclust.cluster.mixture.covariance.ShapeChoiceMarker.candidates`) is
a Gaussian mixture fitted to the rows; its integrated completed likelihood (ICL,
Biernacki, Celeux and Govaert 2000, in its MAP form) is

    L_c   = sum_i log sum_h exp l~_h(x_i)                  (log-likelihood)
    E_c   = sum_i ( log sum_h exp l~_h(x_i) - max_h l~_h(x_i) )
          = -sum_i log max_h t_ih                          (entropy of the MAP labels)
    ICL_c = -2 L_c + p_c log n + 2 E_c,

with ``l~_h`` the heads' log-joint (:mod:`attnclust.cluster.mixture.tempered`, the covariance
floor in it), ``t_ih`` the posterior of head ``h`` (the layer's attention at ``lambda =
1``), ``p_c`` the mixture's free parameters
(:meth:`~attnclust.cluster.mixture.covariance.Covariance.n_parameters`) and ``n`` the rows.
``BIC_c = -2 L_c + p_c log n`` is ICL without ``2 E_c``: ICL also charges a shape for
the overlap of its components, which is what a likelihood gains when a flexible mixture
covers one non-Gaussian cluster (a ring, a curved band) with several overlapping
components. The shape of lowest ICL is chosen (ties: the one of fewer parameters).

The candidates:

- ``"spherical"``: the default fit (the layer's hard limit, k-means) read as a mixture:
  weights ``n_h / n``, means and one variance per head ``s_h^2 = sum_{i in h} ||x_i -
  mu_h||^2 / (n_h d)`` (plus the floor's mean) of its partition, the model whose
  classification EM with equal variances is k-means; it is never refitted;
- ``"diag"``, ``"full"``: shaped heads fitted by EM
  (:func:`attnclust.cluster.estimator_fits.fit_shaped`) from the default fit's heads, as
  ``GaussianMixture`` starts from a k-means partition.

On at most ``settings.choice_rows`` rows (the fit's
:class:`~attnclust.cluster.settings.FitSettings`, ``plan.settings``) every candidate is
fitted on all of them and the chosen fit is the estimator's; on more, the choice is made
on a seeded sample of ``settings.choice_rows`` rows (every rank draws the same, labelled
by the default fit's nearest head) and only a chosen shaped candidate is then fitted on
all rows, by EM from the sample's fit where the choice's EM was the lean one (the lean
EM on at most ``settings.lean_rows`` rows held whole, the chunked one otherwise; about
one step from the sample's optimum, and a nested optimum of the second start carries
over), else from the default fit's heads.
That fit is kept only if its ICL on all rows is below the spherical partition's there
and no head is at the floor; else the spherical fit is (the reason says why): a sample
can miss the few rows that sink a shaped fit (one row at 1e6 beside blobs gets a head of
its own at the floor, the blobs merging into the other heads). Why 2,000 by default: the criteria's
differences between shapes grow with the rows (``n`` times a difference per row) faster
than their sampling noise (``sqrt(n)`` times a spread per row), so a clear choice is the
same on a sample; on the development and held-out batteries (59 sets, 355 fits) the
choice on 2,000 rows was that on all rows in 117 of the 120 fits with more than 2,000
rows (on 1,000 rows: 248 of 260), the three others near-ties. A candidate whose EM would
handle more than ``settings.choice_numbers`` numbers per pass (rows x heads x covariance
entries per head), or whose fit on all rows would handle more than
``settings.fit_numbers``, is not tried
(the reason says so): a cost guard for wide and for large data, where a full covariance
has ``d (d + 1) / 2`` entries per head and the chunked EM on all rows costs many times
the spherical fit (on wide image-like rows, a single diagonal pass costs more than the
whole spherical fit); pass ``covariance_type`` to fit a shape there.

On rows read whole (one process, the CPU) the shaped candidates' EM
(:class:`~attnclust.cluster.mixture.em.LeanEM`) runs diag, then full, each from the default
partition and, where it has enough rows per parameter, from a second start with one head
on the densest region (which finds a cluster nested in another), each run to its
stopping rule unless it cannot win (:mod:`attnclust.cluster.mixture.candidates`: the starts, the
early stop, and why a run from the second start that merges two of the default
partition's cells is not kept). A stopped run is recorded as ``stopped`` and is not
chosen; a candidate keeps its run of lower ICL. (Rows on several ranks or a device run
every candidate from the default partition to its stopping rule.)

**Cores against tails.** On rows read whole, a shaped choice whose partition disagrees
with the spherical one (ARI below 0.5) while the two closest spherical cells are
separated by a valley of density is turned down for the spherical fit
(:func:`~attnclust.cluster.mixture.valley.cores_from_tails`): there a narrow head on the clusters'
cores and a wide one on their tails beat two clusters on likelihood (two clusters of
rows at a Gaussian-distributed distance from their centres, d >= 8), where nested
clusters have their density peak between the spherical cells and keep the shaped fit.

With sample weights the criteria's sums are the weighted means times ``n``.

Notation
--------
============  ======================  ==============================================
paper         code                    meaning
============  ======================  ==============================================
``L_c``       ``log_likelihood``      mixture log-likelihood, data units
``E_c``       ``entropy``             ``-sum_i log max_h t_ih``
``p_c``       ``n_parameters``        free parameters of the mixture
``n``         ``n_rows``              rows the choice is made on
============  ======================  ==============================================
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..communicator import Communicator
from ..estimator_fits import Reporter, fit_shaped
from ..rows import WorkingRows
from ..settings import FitSettings
from .candidates import (
    REG_COVAR,
    LeanRows,
    ShapeScore,
    core_start,
    head_at_floor,
    held_whole,
    icl,
    lean_run,
    merges_cells,
)
from .covariance import AUTO, Covariance, Spherical, positive_factors
from .floor import covariance_floor, full_rank_features, spread_features
from .tempered import data_variance
from .valley import cores_from_tails

if TYPE_CHECKING:
    from ..estimator_fits import Ending
    from ..plan import FitPlan

__all__ = ["REG_COVAR", "ShapeChoice", "ShapeScore", "choice_rows", "choose_lean",
           "choose_shape", "fit_chosen_shape", "given_shape", "icl", "score_log_joint",
           "shaped_candidates"]


class ShapeChoice(NamedTuple):
    """The chosen shape, why, and the criteria of every candidate tried."""

    covariance: Covariance
    reason: str
    scores: tuple[ShapeScore, ...]


def choose_shape(scores: list[ShapeScore], skipped: tuple[Covariance, ...] = (), *,
                 settings: FitSettings | None = None) -> ShapeChoice:
    """The candidate of lowest ICL (ties: fewer parameters), with its reason (which names
    the cost guards of ``settings`` when candidates were ``skipped``; ``None``:
    ``FitSettings()``).

    Examples
    --------
    >>> from attnclust.cluster.mixture.covariance import Full
    >>> a = ShapeScore(Spherical(), -120.0, 2.0, 5, 100)
    >>> b = ShapeScore(Full(), -100.0, 9.0, 9, 100)
    >>> choose_shape([a, b]).covariance
    Full()
    """
    eligible = [s for s in scores if s.eligible] or scores
    best = min(eligible, key=lambda s: (s.icl, s.n_parameters))
    listed = ", ".join(f"{s.covariance.name} {s.icl:.6g}" for s in scores)
    reason = (f"{best.covariance.name}: lowest ICL (-2 log-likelihood + parameters x "
              f"log n + 2 x entropy of the MAP labels) on {best.n_rows} rows: {listed}")
    if not any(s.eligible for s in scores):
        reason += ("; every candidate is at the covariance floor or stopped early, so the "
                   "least ICL of all is kept")
    floored = [s.covariance.name for s in scores if s.at_floor]
    if floored:
        reason += (f"; {' and '.join(floored)} left out: a head at the covariance floor in "
                   "some direction (a likelihood set by the floor, not by the clusters)")
    stopped = [s.covariance.name for s in scores if s.stopped]
    if stopped:
        reason += (f"; {' and '.join(stopped)} stopped before convergence: the limit of "
                   "its log-likelihood projected by Aitken's acceleration left its ICL "
                   "above the least one")
    if skipped:
        settings = settings or FitSettings()
        reason += (f"; not tried ({' and '.join(c.name for c in skipped)}): more than "
                   f"{settings.choice_numbers:.0e} numbers per pass on the rows of the "
                   f"choice or {settings.fit_numbers:.0e} on all rows")
    return ShapeChoice(best.covariance, reason, tuple(scores))


def given_shape(plan: FitPlan) -> ShapeChoice:
    """The shape of a fit that does not choose it: the given one, or ``"spherical"`` for
    ``"auto"`` where shaped heads cannot replace the fit (the reason says why)."""
    cov = plan.covariance
    if not getattr(cov, "automatic", False):
        return ShapeChoice(cov, "given", ())
    return ShapeChoice(Spherical(), "spherical: shapes are chosen for the default fit only "
                       "(Euclidean heads, the fixed-point solver, 'auto' inverse_temperature, "
                       "a k-means++ or 'anneal' init, no penalty)", ())


def score_log_joint(rows: WorkingRows, log_joint, covariance: Covariance, n_clusters: int,
                    *, log_scale: float = 0.0, keep=None) -> ShapeScore:
    """The :class:`ShapeScore` of a mixture whose log-joint of working rows ``(n, d) ->
    (n, K)`` is ``log_joint``; ``log_scale``: ``log s`` of the working space (data = ``s``
    x working), so that the log-likelihood is the data's; ``keep`` ``(d,)`` bool: the
    features the mixture reads (``log_joint`` gets those columns), all when ``None``."""
    w = rows.weights

    def sums(start: int, chunk: torch.Tensor) -> np.ndarray:
        lj = log_joint(chunk if keep is None else chunk[:, keep]).double()   # (n_c, K)
        lse = torch.logsumexp(lj, dim=1)
        ent = lse - lj.max(1).values
        if w is not None:
            wc = w[start:start + chunk.shape[0]].double()
            return np.array([float(wc.sum()), float(wc @ lse), float(wc @ ent)])
        return np.array([float(chunk.shape[0]), float(lse.sum()), float(ent.sum())])
    total, ll, ent = rows.comm.sum_array(np.sum(rows.map_chunks(sums), axis=0))
    n, d = rows.n_total, rows.rows.shape[1] if keep is None else int(keep.sum())
    ll, ent = n * ll / total, n * ent / total   # with weights: the weighted means times n
    return ShapeScore(covariance, ll - n * d * log_scale, ent,
                      covariance.n_parameters(n_clusters, d), n)


def _floor(rows: WorkingRows, center: torch.Tensor) -> torch.Tensor:
    """The shaped fits' covariance floor of the working rows (float64, ``(d,)``)."""
    _, variances = data_variance(rows.rows, center.double(), chunk=rows.chunk,
                                 reduce=rows.comm.reduce, row_map=rows.row_map,
                                 sample_weight=rows.weights)
    return covariance_floor(variances, REG_COVAR)


def _partition_mixture(rows: WorkingRows, labels: np.ndarray, n_clusters: int,
                       floor: torch.Tensor, keep: torch.Tensor):
    """``(means, factors, log_weights)`` of the one-variance-per-head mixture of a hard
    partition on the features ``keep`` (working space, float64)."""
    K, d = n_clusters, int(keep.sum())
    w = rows.weights

    def sums(start: int, chunk: torch.Tensor) -> torch.Tensor:
        x = chunk.double()[:, keep]
        z = torch.as_tensor(labels[start:start + x.shape[0]], device=x.device)
        wc = torch.ones(x.shape[0], dtype=torch.float64, device=x.device) if w is None \
            else w[start:start + x.shape[0]].double()
        acc = torch.zeros(K, d + 2, dtype=torch.float64, device=x.device)
        part = torch.cat([wc[:, None], wc[:, None] * x, (wc * (x * x).sum(1))[:, None]], 1)
        return acc.index_add_(0, z, part).cpu().numpy()
    acc = torch.as_tensor(rows.comm.sum_array(np.sum(rows.map_chunks(sums), axis=0)),
                          device=floor.device)
    counts = acc[:, 0]
    n = counts.clamp_min(torch.finfo(torch.float64).tiny)
    means = acc[:, 1:d + 1] / n[:, None]
    spread = (acc[:, d + 1] / n - (means * means).sum(1)).clamp_min(0.0) / d
    variances = spread + floor[keep].mean()
    return means, Spherical().factors(variances), counts.log() - math.log(float(counts.sum()))


def choice_rows(rows: WorkingRows, heads: torch.Tensor, labels: np.ndarray,
                gen: np.random.Generator, *, settings: FitSettings
                ) -> tuple[WorkingRows, np.ndarray]:
    """The rows of the choice and their labels: all rows, or a sample of
    ``settings.choice_rows`` (the same on every rank) labelled by the nearest head."""
    if rows.n_total <= settings.choice_rows:
        return rows, labels
    sample, weights = rows.weighted_sample(gen, settings.choice_rows)
    local = WorkingRows(sample, comm=Communicator.local(sample.shape[0]), chunk=rows.chunk,
                        weights=weights)
    h = heads.to(sample.dtype)
    nearest = ((sample * sample).sum(1, keepdim=True) - 2 * sample @ h.T
               + (h * h).sum(1)).argmin(1)
    return local, nearest.cpu().numpy()


def _entries(covariance: Covariance, d: int) -> int:
    return math.prod(covariance.shape(1, d))


def _too_costly(n_choice: int, n_features: int, covariance: Covariance, n_clusters: int,
                n_total: int, settings: FitSettings) -> bool:
    per_row = n_clusters * _entries(covariance, n_features)
    return n_choice * per_row > settings.choice_numbers or \
        n_total * per_row > settings.fit_numbers


def shaped_candidates(n_total: int, n_features: int, n_clusters: int, *,
                      settings: FitSettings):
    """The shaped candidates to fit on ``n_total`` rows of ``n_features``, and those left
    out as too costly (more than ``settings.choice_numbers`` numbers per pass on the rows
    of the choice, at most ``settings.choice_rows``, or ``settings.fit_numbers`` fitted on
    all rows)."""
    shaped = [cov for cov in AUTO.candidates if cov.shaped]
    n_choice = min(n_total, settings.choice_rows)
    costly = [_too_costly(n_choice, n_features, cov, n_clusters, n_total, settings)
              for cov in shaped]
    return ([cov for cov, out in zip(shaped, costly, strict=True) if not out],
            tuple(cov for cov, out in zip(shaped, costly, strict=True) if out))


def fit_chosen_shape(rows: WorkingRows, end: Ending, plan: FitPlan, *,
                     gen: np.random.Generator, report: Reporter):
    """``covariance_type="auto"``: from the default fit ``end``, the candidates' criteria
    and the chosen fit.

    Returns ``(fitted, choice)``: the chosen shaped fit's attributes
    (:class:`~attnclust.cluster.estimator_fits.ShapedFitted`; ``None`` when ``"spherical"``
    is chosen: the default fit is then the estimator's) and the :class:`ShapeChoice`. Rows
    held whole by one process on the CPU are fitted by
    :class:`attnclust.cluster.mixture.em.LeanEM` (the same EM in a few array operations per
    step); others by the chunked :func:`~attnclust.cluster.estimator_fits.fit_shaped`.

    Examples
    --------
    Three Gaussian sticks on the sides of a triangle: spherical heads' round cells cut
    across them, full heads follow them.

    >>> import numpy as np, attnclust as ac
    >>> rng = np.random.default_rng(0)
    >>> def stick(t, c):
    ...     turn = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
    ...     return rng.normal(size=(300, 2)) * [3.0, 0.3] @ turn + c
    >>> X = np.concatenate([stick(0.0, [0, 0]), stick(np.pi / 3, [5, 0]),
    ...                     stick(2 * np.pi / 3, [2.5, 4.3])])
    >>> y = np.repeat([0, 1, 2], 300)
    >>> est = ac.AttentionClustering(3, covariance_type="auto", random_state=0).fit(X)
    >>> est.covariance_type_, est.covariances_.shape
    ('full', (3, 2, 2))
    >>> ac.adjusted_rand_index(y, est.labels_) > 0.85
    True
    >>> spherical = ac.AttentionClustering(3, covariance_type="spherical", random_state=0).fit(X)
    >>> ac.adjusted_rand_index(y, spherical.labels_) < 0.6
    True
    """
    heads = end.result.heads
    crows, labels = choice_rows(rows, heads, end.labels, gen, settings=plan.settings)
    lean = held_whole(crows)
    K, log_scale = plan.n_clusters, math.log(rows.scale)
    choice, fitted = choose_lean(crows, labels, plan, log_scale, rows.n_total, gen) \
        if lean else _choose_chunked(crows, labels, heads, plan, log_scale, rows.n_total)
    if not choice.covariance.shaped:
        return None, choice
    if crows is rows:
        return (fitted.attributes(crows) if lean else fitted), choice
    # all rows: EM from the sample's fit (a few steps from its optimum) where the choice
    # was lean, else from the default fit's heads
    start = fitted.em.params if lean else None
    if start is not None and held_whole(rows) and rows.n_total <= plan.settings.lean_rows:
        lr = LeanRows(rows, K)
        fitted, shaped = lr.fit(choice.covariance, plan, start, log_scale)
        spherical = lr.spherical_score(end.labels, K, log_scale)
    else:
        fitted = fit_shaped(rows, heads, plan.with_covariance(choice.covariance), report=report,
                            start=None if start is None else
                            (start[0], start[1], np.exp(start[2])))
        floor, read = _criteria_basis(rows, heads)
        shaped = _score_fitted(rows, fitted, choice.covariance, read, K, log_scale)
        spherical = _partition_score(rows, end.labels, floor, read, K, log_scale)
    return _confirmed(fitted, choice, shaped, spherical)


def _confirmed(fitted, choice: ShapeChoice, shaped: ShapeScore, spherical: ShapeScore):
    """``(fitted, choice)`` if the shape chosen on the sample, fitted on all rows (its
    criteria ``shaped``), has a lower ICL there than the spherical fit's partition
    (``spherical``) and no head at the floor; else ``(None, "spherical")`` with the reason.
    A sample can miss the few rows (a far outlier) that sink a shaped fit on all of them."""
    if shaped.icl < spherical.icl and not shaped.at_floor:
        return fitted, choice
    why = "a head at the covariance floor" if shaped.at_floor else \
        f"ICL {shaped.icl:.6g} against spherical {spherical.icl:.6g}"
    return None, ShapeChoice(Spherical(), f"spherical: {choice.covariance.name} was chosen on "
                             f"a sample of {choice.scores[0].n_rows} rows, but its fit on all "
                             f"{shaped.n_rows} rows has {why} there; on the sample: "
                             f"{choice.reason}", choice.scores)


def choose_lean(crows: WorkingRows, labels: np.ndarray, plan: FitPlan, log_scale: float,
                n_total: int, gen: np.random.Generator | None = None, *, noise: bool = False):
    """The choice on rows read whole (:class:`attnclust.cluster.mixture.em.LeanEM`); the
    chosen shaped candidate's run (``None`` for ``"spherical"``).

    The shaped candidates run in turn from the partition ``labels``, each to its stopping
    rule unless, at ``settings.stop_steps`` steps in a row, even the limit of its
    log-likelihood projected by Aitken's acceleration, with no entropy, leaves its ICL
    above the least ICL scored so far: it then stops and cannot be chosen. Given ``gen``,
    the shaped candidate of least ICL then runs again from the density core's start where
    it has ``settings.rows_per_parameter`` rows per parameter, and keeps that run if it is
    eligible, of a lower ICL and merges no two cells of ``labels``
    (:mod:`attnclust.cluster.mixture.candidates`; ``settings``: ``plan.settings``). ``noise``:
    every candidate beside a uniform background head (:mod:`attnclust.cluster.mixture.noise_head`),
    and no spherical one."""
    K, settings = plan.n_clusters, plan.settings
    lr = LeanRows(crows, K)
    n, d = (lr.X if noise else lr.Xs).shape      # the features the criteria read
    log_background = lr.background_log_density() if noise else None
    scores = {} if noise else {Spherical(): lr.spherical_score(labels, K, log_scale)}
    least = min((score.icl for score in scores.values()), default=math.inf)
    runs = {}
    tried, skipped = shaped_candidates(n_total, crows.rows.shape[1], K, settings=settings)
    for cov in tried:
        runs[cov], scores[cov] = lean_run(lr, cov, plan, labels, log_scale, least,
                                          log_background=log_background)
        if scores[cov].eligible:
            least = min(least, scores[cov].icl)
    best = min(tried, key=lambda cov: scores[cov].icl, default=None)
    if gen is not None and best is not None and \
            n >= settings.rows_per_parameter * (best.n_parameters(K, d) + noise):
        core = core_start(lr.X, labels, K, gen, lr.w, settings=settings)
        if core is not None:
            run, score = lean_run(lr, best, plan, core, log_scale, least,
                                  log_background=log_background)
            if score.eligible and score.icl < scores[best].icl and \
                    not merges_cells(labels, run.em.lj[:K].argmax(0), K, lr.w,
                                     settings=settings):
                runs[best], scores[best] = run._replace(from_core=True), score
    choice = choose_shape(list(scores.values()), skipped, settings=settings)
    if not choice.covariance.shaped:
        return choice, None
    if not noise and cores_from_tails(lr.X, labels, runs[choice.covariance].em.lj[:K].argmax(0),
                                      lr.w):
        return ShapeChoice(Spherical(), f"spherical: {choice.covariance.name} had the least "
                           "ICL, but its partition parts cores from tails: it disagrees with "
                           "the spherical cells, which a valley of density separates "
                           "(attnclust.cluster.mixture.valley)", choice.scores), None
    if runs[choice.covariance].from_core:
        choice = choice._replace(reason=choice.reason + (
            f"; {choice.covariance.name} from the density core's start (one head on the "
            "densest rows): a lower ICL than from the default partition"))
    return choice, runs[choice.covariance]


def _choose_chunked(crows: WorkingRows, labels: np.ndarray, heads: torch.Tensor,
                    plan: FitPlan, log_scale: float, n_total: int):
    """The choice on rows shared by ranks or on a device (the chunked
    :func:`~attnclust.cluster.estimator_fits.fit_shaped`, criteria by passes over the rows)."""
    K = plan.n_clusters
    floor, read = _criteria_basis(crows, heads)
    scores = [_partition_score(crows, labels, floor, read, K, log_scale)]
    fits = {}
    tried, skipped = shaped_candidates(n_total, crows.rows.shape[1], K,
                                       settings=plan.settings)
    for cov in tried:
        fitted = fit_shaped(crows, heads, plan.with_covariance(cov), report=Reporter(None, 0))
        fits[cov] = fitted
        scores.append(_score_fitted(crows, fitted, cov, read, K, log_scale))
    choice = choose_shape(scores, skipped, settings=plan.settings)
    return choice, fits.get(choice.covariance)


def _score_fitted(crows: WorkingRows, fitted, cov: Covariance, read: torch.Tensor, K: int,
                  log_scale: float) -> ShapeScore:
    """The :class:`ShapeScore` of shaped heads fitted on ``crows`` (their attributes in the
    units of ``crows``' preprocessed rows), evaluated in the working space on the features
    ``read`` (:func:`_criteria_features`), and whether a head is at the floor along them."""
    def tensor(a):
        return torch.as_tensor(a, dtype=torch.float64, device=crows.rows.device)
    s = crows.scale
    floor = tensor(fitted.covariance_floor_) / (s * s)
    means = tensor(crows.heads_in(fitted.cluster_centers_))[:, read]
    factors = tensor(fitted.precisions_cholesky_) * s if bool(read.all()) else \
        positive_factors(cov.marginal(tensor(fitted.covariances_) / (s * s), read), cov)
    log_w = tensor(fitted.weights_).log()
    at_floor = head_at_floor(cov, fitted.covariances_ / (s * s),
                             fitted.covariance_floor_ / (s * s), read.cpu().numpy())
    return score_log_joint(
        crows, lambda c: cov.log_joint(c.double(), means, factors, log_w, 1.0, floor[read]),
        cov, K, log_scale=log_scale, keep=read)._replace(at_floor=at_floor)


def _partition_score(rows: WorkingRows, labels: np.ndarray, floor: torch.Tensor,
                     read: torch.Tensor, K: int, log_scale: float) -> ShapeScore:
    """The criteria of the one-variance-per-head mixture of the partition ``labels`` on the
    features ``read``, by passes over the rows (:meth:`LeanRows.spherical_score` on rows
    read whole); ``floor``: the shaped fits' (:func:`_floor`)."""
    means, factors, log_w = _partition_mixture(rows, labels, K, floor, read)
    sph = Spherical()
    return score_log_joint(
        rows, lambda c: sph.log_joint(c.double(), means, factors, log_w, 1.0, floor[read]),
        sph, K, log_scale=log_scale, keep=read)


def _criteria_basis(rows: WorkingRows, heads: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The shaped fits' floor of the rows (:func:`_floor`) and the features every criterion
    reads (:func:`_criteria_features`), about the heads' mean."""
    center = heads.double().mean(0)
    floor = _floor(rows, center)
    return floor, _criteria_features(rows, floor, center)


def _criteria_features(rows: WorkingRows, floor: torch.Tensor, center: torch.Tensor
                       ) -> torch.Tensor:
    """The features the criteria read, ``(d,)`` bool on the floor's device: those the rows
    spread on (:func:`~attnclust.cluster.mixture.floor.spread_features`), less those the
    others determine (:func:`~attnclust.cluster.mixture.floor.full_rank_features`, from the
    rows' covariance about ``center``, summed over ranks by passes)."""
    w, d = rows.weights, rows.rows.shape[1]
    c = center.double()

    def sums(start: int, chunk: torch.Tensor) -> np.ndarray:
        x = chunk.double() - c.to(chunk.device)
        wc = torch.ones(x.shape[0], dtype=torch.float64, device=x.device) if w is None \
            else w[start:start + x.shape[0]].double()
        wx = wc[:, None] * x
        return torch.cat([wc.sum()[None], wx.sum(0), (wx.T @ x).reshape(-1)]).cpu().numpy()
    acc = rows.comm.sum_array(np.sum(rows.map_chunks(sums), axis=0))
    mean = acc[1:d + 1] / acc[0]
    covariance = acc[d + 1:].reshape(d, d) / acc[0] - np.outer(mean, mean)
    kept = full_rank_features(covariance, spread_features(floor).cpu().numpy(), REG_COVAR)
    return torch.as_tensor(kept, device=floor.device)

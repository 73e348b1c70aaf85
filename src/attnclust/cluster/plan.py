"""The settings of a fit, resolved once: :class:`FitPlan`.

``AttentionClustering.fit`` checks its parameters (:mod:`attnclust.cluster.estimator_params`)
and resolves them here into one immutable plan; the solvers
(:mod:`attnclust.cluster.estimator_fits`, the warm start,
:mod:`attnclust.cluster.mixture.tempered`'s driver, :mod:`attnclust.cluster.streaming`) read
the plan and the :class:`~attnclust.cluster.rows.WorkingRows`, never the estimator's parameters.
Every ``"auto"`` value is resolved in this module:

=======================  ===============================================================
parameter                ``"auto"`` resolves to
=======================  ===============================================================
``normalize``            the geometry's (``"rows"`` on the sphere, ``None`` in R^d)
``anneal``               the geometry's: the stages ``lambda/8, lambda/4, lambda/2``
                         (``ANNEAL_STEPS`` steps each), then ``lambda`` for ``max_iter``
``n_init``               1 for ``init="anneal"`` and shaped heads, else the geometry's
                         (10 for seeded Euclidean heads, at most
                         ``settings.shape_choice_seedings`` where the fit chooses its
                         heads' shape; fewer on large data for a fit that ends in the
                         hard limit, :mod:`attnclust.cluster.warm_start`)
``settings``             ``None``: the defaults of the choices' tuning settings,
                         ``FitSettings()`` (:mod:`attnclust.cluster.settings`)
``inverse_temperature``  ``None`` (``1 / s^2`` of the warm start) for the risk's heads;
                         1 (the likelihood itself) for shaped heads
``tol``                  the ending's: ``KMEANS_TOL`` (scikit-learn's ``KMeans`` rule)
                         for a fit that ends in the hard limit, ``SHAPED_TOL`` for shaped
                         heads, the geometry's otherwise
``covariance_type``      :data:`~attnclust.cluster.mixture.covariance.AUTO`: the plan
                         of ``"spherical"`` until the fit has chosen the shape
                         (:mod:`attnclust.cluster.mixture.shape_choice`),
                         then :meth:`FitPlan.with_covariance` of the chosen one
=======================  ===============================================================

A fit ends in the hard limit (:mod:`attnclust.cluster.kmeans.ending`) when it is the default:
``"auto"`` lambda, fixed-point solver, a geometry whose hard limit is k-means, k-means++
seeding or the annealing path's heads, heads without a shape of their own.

The plan is also the seam of :mod:`attnclust.cluster.streaming`: :meth:`FitPlan.learn_center`,
:meth:`FitPlan.preprocess`, :meth:`FitPlan.working_rows` and :meth:`FitPlan.warm_start`
are the steps ``fit`` takes before its solver.

Notation
--------
==========  =======================  ==========================================
paper       code                     meaning
==========  =======================  ==========================================
``lambda``  ``inverse_temperature``  inverse temperature of the last stage
``K``       ``n_clusters``           heads
``s``       ``rows.scale``           scale of the working rows
==========  =======================  ==========================================
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._deprecation import REMOVED_IN
from .._validation import check_inverse_temperature
from ..layer.geometry import Geometry, as_geometry
from .communicator import Communicator
from .degenerate import user_stacklevel
from .kmeans import SWAP_HEADS
from .kmeans.batch import KMEANS_TOL
from .mixture.covariance import Covariance, as_covariance_type
from .rows import WorkingRows, center_scale, preprocess
from .settings import FitSettings
from .warm_start import warm_start

__all__ = ["ANNEAL_FACTORS", "ANNEAL_STEPS", "SHAPED_TOL", "FitPlan", "anneal_stages",
           "estimator_warm_start", "resolve"]

ANNEAL_FACTORS = (1 / 8, 1 / 4, 1 / 2)   # the annealing plan: fractions of lambda ...
ANNEAL_STEPS = 5                         # ... and fixed-point steps at each of them
SHAPED_TOL = 1e-3   # shaped heads: change of the mean log-likelihood (GaussianMixture's)


@dataclasses.dataclass(frozen=True, eq=False)
class FitPlan:
    """The resolved settings of one fit (see the module docstring for the ``"auto"``
    values); made by :func:`resolve`, never changed (:meth:`with_clusters` makes a copy).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> plan = resolve(AttentionClustering(3, geometry="sphere").get_params())
    >>> plan.geometry, plan.normalize, plan.tol, plan.hard, plan.chooses_shape
    (Sphere(), 'rows', 1e-06, False, False)
    >>> plan.anneal
    ((0.125, 5), (0.25, 5), (0.5, 5), (1.0, None))
    """

    geometry: Geometry
    covariance: Covariance
    n_clusters: int | None          # None: "auto" (attnclust.cluster.choice.k_choice)
    max_clusters: int
    init: Any                       # "kmeans++", "sphere", "anneal" or an array (K, d)
    n_init: int
    n_init_auto: bool               # n_init was "auto": large data may take fewer seedings
    normalize: str | None
    inverse_temperature: float | None   # None: "auto", 1 / s^2 of the warm start
    anneal: tuple[tuple[float, int | None], ...]   # (fraction of lambda, steps or None)
    max_iter: int
    tol: float                      # the stopping rule of the plan's ending
    tol_auto: bool                  # tol was "auto": a shape chosen later takes its own
    kmeans_tol: float               # the warm start's k-means (scikit-learn's rule)
    hard: bool                      # the fit ends in the hard limit
    solver: str
    penalty: str | None
    rho: float
    step_size: float
    batch_size: int | None          # mini-batch of solver="pgd"
    chunk_size: int | None          # rows per chunk (None: the default)
    chunk_size_given: bool          # chunk_size was given (shaped heads' chunks otherwise)
    device: str
    dtype: Any                      # "auto", a name or a torch dtype
    random_state: Any
    callback: Callable | None
    verbose: int
    settings: FitSettings           # the choices' tuning settings (None: the defaults)
    noise_head: bool = False         # a uniform background head beside the shaped ones

    def with_clusters(self, n_clusters: int) -> FitPlan:
        """This plan for ``n_clusters`` heads (``n_clusters="auto"``, once chosen)."""
        return dataclasses.replace(self, n_clusters=int(n_clusters))

    def with_covariance(self, covariance: Covariance) -> FitPlan:
        """This plan for heads of the (chosen) ``covariance`` type, its ``"auto"`` values
        resolved as :func:`resolve` resolves them for that type (``covariance_type="auto"``,
        once the shape is chosen; the warm start is done by then).

        Examples
        --------
        >>> from attnclust import AttentionClustering
        >>> from attnclust.cluster.mixture.covariance import Full
        >>> plan = resolve(AttentionClustering(3, covariance_type="auto").get_params())
        >>> plan.hard, plan.inverse_temperature, plan.tol, plan.chooses_shape
        (True, None, 0.0001, True)
        >>> full = plan.with_covariance(Full())
        >>> full.covariance, full.hard, full.inverse_temperature, full.tol
        (Full(), False, 1.0, 0.001)
        """
        if not covariance.shaped:
            return dataclasses.replace(self, covariance=covariance)
        lam = 1.0 if self.inverse_temperature is None else self.inverse_temperature
        return dataclasses.replace(self, covariance=covariance, hard=False,
                                   inverse_temperature=lam, tol=self.shaped_tol)

    @property
    def shaped_tol(self) -> float:
        """The stopping rule of this plan's fit with shaped heads: ``tol``, or
        ``SHAPED_TOL`` where it was ``"auto"``."""
        return SHAPED_TOL if self.tol_auto else self.tol

    @property
    def chooses_shape(self) -> bool:
        """Whether the fit chooses the heads' shape (``covariance_type="auto"``): for the
        default's fit, ending in the hard limit, where shaped heads can be fitted instead
        (Euclidean heads, the fixed-point solver, no penalty, ``"auto"`` lambda)."""
        return _chooses_shape(self.covariance, self.hard, self.penalty)

    def stages_at(self, lam: float) -> tuple[list[float], list[int]]:
        """The annealing stages at ``lam``: their inverse temperatures and steps.

        Examples
        --------
        >>> from attnclust import AttentionClustering
        >>> resolve(AttentionClustering(max_iter=50).get_params()).stages_at(2.0)
        ([2.0], [50])
        """
        return ([lam * f for f, _ in self.anneal],
                [self.max_iter if n is None else n for _, n in self.anneal])

    # -- the steps before the solver (fit, partial_fit) ------------------------------------
    def learn_center(self, X: np.ndarray, comm: Communicator,
                     weights: np.ndarray | None = None) -> tuple[np.ndarray | None, Any]:
        """``(mean_, scale_)`` of ``normalize="center-scale"`` learned on the validated
        rows ``X`` (this rank's; weighted by the sample ``weights`` when given), ``(None,
        None)`` for the other preprocessings."""
        if self.normalize == "center-scale":
            return center_scale(X, comm, "normalize='center-scale'", weights)
        return None, None

    def preprocess(self, X: np.ndarray, center=(None, None), *, comm: Communicator | None = None,
                   offset: int = 0) -> np.ndarray:
        """``normalize`` applied to validated rows (``center``: the learned ``(mean_,
        scale_)``; ``comm``: in a fit, where the sphere's scale is checked; ``offset``: the
        index of ``X``'s first row, for messages)."""
        return preprocess(X, self.normalize, unit_heads=self.geometry.unit_heads, comm=comm,
                          center=center, offset=offset)

    def working_rows(self, Xp: np.ndarray, comm: Communicator, *, workers: int = 1,
                     weights: np.ndarray | None = None) -> WorkingRows:
        """The :class:`~attnclust.cluster.rows.WorkingRows` of preprocessed rows for the plan's
        heads."""
        return WorkingRows.prepare(
            Xp, geometry=self.geometry, comm=comm, device=self.device, dtype=self.dtype,
            chunk_size=self.chunk_size, n_clusters=self.n_clusters, workers=workers,
            weights=weights)

    def warm_start(self, rows: WorkingRows, gen: np.random.Generator, *,
                   hard: bool | None = None):
        """:func:`estimator_warm_start`: the sample, its weights, the warm start and
        ``lambda`` (``hard``: whether the warm start serves the hard-limit
        ending; default: the plan's). A hard-limit fit that chooses its shape gets
        ``lambda=None``: it reads it once it chooses the spherical heads
        (:func:`~attnclust.cluster.warm_start.kmeans_lambda`).

        Examples
        --------
        The steps ``fit`` and ``partial_fit`` take before their solver:

        >>> from attnclust import AttentionClustering
        >>> X = np.random.default_rng(0).standard_normal((200, 3))
        >>> plan = resolve(AttentionClustering(2, random_state=0).get_params())
        >>> local = Communicator.local(len(X))
        >>> center = plan.learn_center(X, local)
        >>> rows = plan.working_rows(plan.preprocess(X, center, comm=local), local)
        >>> S, Sw, start, lam = plan.warm_start(rows, np.random.default_rng(0))
        >>> tuple(start.heads.shape), lam
        ((2, 3), None)
        >>> spherical = resolve(AttentionClustering(2, covariance_type="spherical").get_params())
        >>> S, Sw, start, lam = spherical.warm_start(rows, np.random.default_rng(0))
        >>> lam > 0
        True
        """
        return estimator_warm_start(rows, gen, self, hard=self.hard if hard is None else hard)


# -- the warm start of a fit of the plan ------------------------------------------------------
def estimator_warm_start(rows: WorkingRows, gen, plan: FitPlan, *, hard: bool = False):
    """The warm start of an :class:`~attnclust.AttentionClustering` fit of the resolved
    settings ``plan`` (:class:`FitPlan`, for ``plan.n_clusters`` heads): the sample ``S`` of
    the working rows and its weights ``Sw``, the
    :func:`~attnclust.cluster.warm_start.warm_start` on it and ``lam``, the risk's inverse
    temperature (``None`` for shaped heads). The sample has at most
    ``settings.warm_sample`` rows (``plan.settings``,
    :class:`~attnclust.cluster.settings.FitSettings`); for a fit that ends in the hard
    limit (``hard``) on more rows, ``settings.per_head`` rows per head and, with
    ``n_init="auto"`` and at least ``SWAP_HEADS`` heads, one seeding per
    ``settings.seeding_rows`` times the sample's rows (the seedings then cost no more row
    visits than the passes, and the swaps search between partitions; with fewer heads the
    seedings are the only search, and ten of them on ``settings.per_head`` rows per head
    cost little)."""
    K, geometry, settings = plan.n_clusters, plan.geometry, plan.settings
    size = settings.warm_sample if not hard or rows.n_total <= settings.warm_sample else \
        min(settings.warm_sample, settings.per_head * K)
    S, Sw = rows.weighted_sample(gen, size)
    if Sw is not None and not float(Sw.sum()) > 0:
        raise ValueError(f"the warm-start sample ({S.shape[0]:,} of {rows.n_total:,} rows, "
                         "drawn uniformly) holds no row of positive sample_weight; drop the "
                         "rows of weight zero before fitting")
    if plan.covariance.shaped:
        # shaped heads start from Lloyd's heads, those of the seedings (n_init > 1) or
        # those the "auto" inverse temperature computes
        start = warm_start(S, rows, init=plan.init, n_clusters=K, gen=gen, n_init=plan.n_init,
                           geometry=geometry, auto=plan.n_init == 1, weights=Sw,
                           tol=plan.kmeans_tol)
        return S, Sw, start, None
    n_init = plan.n_init
    if hard and plan.n_init_auto and S.shape[0] < rows.n_total and K >= SWAP_HEADS:
        n_init = max(1, min(n_init, rows.n_total // (settings.seeding_rows * S.shape[0])))
    # a fit that chooses its shape reads its "auto" lambda only where the spherical heads
    # are chosen (kmeans_lambda then): lambda is None until then (a stream has no choice)
    deferred = hard and plan.chooses_shape
    auto = plan.inverse_temperature is None and not deferred
    start = warm_start(S, rows, init=plan.init, n_clusters=K, gen=gen, n_init=n_init,
                       geometry=geometry, auto=auto, weights=Sw, max_iter=plan.max_iter,
                       tol=plan.kmeans_tol)
    if deferred:
        return S, Sw, start, None
    lam = start.inverse_temperature if start.inverse_temperature is not None else \
        rows.inverse_temperature_in(plan.inverse_temperature)
    return S, Sw, start, lam



def anneal_stages(anneal, geometry) -> list[tuple[float, int | None]]:
    """Stages of a fit: ``(fraction of lambda, steps)``; ``None`` steps: ``max_iter``
    (``anneal``: the parameter, ``"auto"`` read off the ``geometry``).

    Examples
    --------
    >>> anneal_stages(True, "euclidean")
    [(0.125, 5), (0.25, 5), (0.5, 5), (1.0, None)]
    >>> anneal_stages("auto", "euclidean")
    [(1.0, None)]
    """
    if isinstance(anneal, str):
        anneal = as_geometry(geometry).anneal
    stages = [(f, ANNEAL_STEPS) for f in ANNEAL_FACTORS] if anneal else []
    return stages + [(1.0, None)]


def _is(value, name: str) -> bool:
    return isinstance(value, str) and value == name


def _ends_in_hard_limit(p: dict, geometry: Geometry, covariance: Covariance) -> bool:
    return (not covariance.shaped and isinstance(p["inverse_temperature"], str)
            and p["solver"] == "fixed-point" and geometry.kmeans_limit
            and (_is(p["init"], "kmeans++") or _is(p["init"], "anneal")))


def _chooses_shape(covariance: Covariance, hard: bool, penalty) -> bool:
    return bool(getattr(covariance, "automatic", False) and hard and penalty is None)


def _n_init(p: dict, geometry: Geometry, covariance: Covariance, hard: bool) -> int:
    if not _is(p["n_init"], "auto"):
        return int(p["n_init"])
    if covariance.shaped or _is(p["init"], "anneal"):
        # shaped: one seeding, as GaussianMixture's one k-means start (three gain 0.008
        # mean ARI on benchmarks/bench_shaped.py's battery for ~1.7x the time);
        # "anneal": deterministic, once is enough
        return 1
    seedings = geometry.n_init(isinstance(p["init"], str))
    if _chooses_shape(covariance, hard, p["penalty"]):
        # its EM candidates start from the seedings' partition, so fewer seedings lose
        # little (both batteries: mean ARI within 0.001 of ten, in 0.7x their time)
        return min(seedings, _settings(p).shape_choice_seedings)
    return seedings


def _settings(p: dict) -> FitSettings:
    return FitSettings() if p["settings"] is None else p["settings"]


def _tol(p: dict, geometry: Geometry, covariance: Covariance, hard: bool) -> float:
    if not _is(p["tol"], "auto"):
        return float(p["tol"])
    if covariance.shaped:
        return SHAPED_TOL
    return KMEANS_TOL if hard else float(geometry.tol)


def _inverse_temperature(p: dict, covariance: Covariance) -> float | None:
    if not _is(p["inverse_temperature"], "auto"):
        return check_inverse_temperature(p["inverse_temperature"])
    return 1.0 if covariance.shaped else None


def _rows_per_chunk(p: dict) -> int | None:
    """``chunk_size``, or ``batch_size`` in its old meaning for the fixed-point solver (a
    ``FutureWarning`` for the caller of ``fit`` or ``partial_fit``, which reach
    ``resolve`` through the estimator's ``_resolve``)."""
    if p["batch_size"] is None or p["solver"] == "pgd":
        return p["chunk_size"]
    warnings.warn("batch_size as the rows per chunk of the fixed-point solver is "
                  f"deprecated and will be removed in {REMOVED_IN}: pass chunk_size "
                  "(batch_size is the mini-batch of solver='pgd')", FutureWarning,
                  stacklevel=user_stacklevel())
    return p["batch_size"] if p["chunk_size"] is None else p["chunk_size"]


def resolve(p: dict) -> FitPlan:
    """The :class:`FitPlan` of checked parameters ``p`` (the estimator's, by name; see
    :func:`attnclust.cluster.estimator_params.check_params`): every ``"auto"`` resolved.

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> plan = resolve(AttentionClustering(5).get_params())
    >>> plan.hard, plan.n_init, plan.tol, plan.inverse_temperature, plan.normalize
    (True, 7, 0.0001, None, None)
    >>> resolve(AttentionClustering(5, covariance_type="spherical").get_params()).n_init
    10
    >>> shaped = resolve(AttentionClustering(5, covariance_type="full").get_params())
    >>> shaped.hard, shaped.n_init, shaped.tol, shaped.inverse_temperature
    (False, 1, 0.001, 1.0)
    """
    geometry, covariance = as_geometry(p["geometry"]), as_covariance_type(p["covariance_type"])
    hard = _ends_in_hard_limit(p, geometry, covariance)
    tol = _tol(p, geometry, covariance, hard)
    return FitPlan(
        geometry=geometry, covariance=covariance,
        n_clusters=None if _is(p["n_clusters"], "auto") else int(p["n_clusters"]),
        max_clusters=int(p["max_clusters"]), init=p["init"],
        n_init=_n_init(p, geometry, covariance, hard), n_init_auto=_is(p["n_init"], "auto"),
        normalize=geometry.normalize if _is(p["normalize"], "auto") else p["normalize"],
        inverse_temperature=_inverse_temperature(p, covariance),
        anneal=tuple(anneal_stages(p["anneal"], geometry)), max_iter=int(p["max_iter"]),
        tol=tol, tol_auto=_is(p["tol"], "auto"), kmeans_tol=tol if hard else KMEANS_TOL,
        hard=hard, solver=p["solver"],
        penalty=p["penalty"], rho=float(p["rho"]), step_size=p["step_size"],
        batch_size=p["batch_size"], chunk_size=_rows_per_chunk(p),
        chunk_size_given=p["chunk_size"] is not None, device=p["device"], dtype=p["dtype"],
        random_state=p["random_state"], callback=p["callback"], verbose=p["verbose"],
        settings=_settings(p), noise_head=bool(p["noise_head"]))

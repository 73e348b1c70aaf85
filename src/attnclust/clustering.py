"""Clustering with the trained K-head attention layer: the ``AttentionClustering`` estimator.

The model is the K-head layer of :mod:`attnclust.heads`,

    a_h(x)  = softmax_h( lambda <x, mu_h> - b_h ),      T_mu(x) = sum_h a_h(x) mu_h,

fitted by minimizing the empirical risk ``f(mu) = (1/n) sum_i ||x_i - T_mu(x_i)||^2``
(plus ``rho * Pen(mu)`` when a penalty is asked for). A point is assigned to its
most-attended head, ``argmax_h a_h(x)``.

Geometry
--------
``geometry="euclidean"`` (the default): free heads with the key bias ``b_h = lambda
||mu_h||^2 / 2``, i.e. ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)``: a soft Voronoi
partition, k-means cells in the hard limit. ``geometry="sphere"``: the paper's layer, unit
heads and no bias: a partition into cones from the origin (spherical k-means in the hard
limit), the choice for directional data (embeddings compared by cosine), usually with
``normalize="rows"``. The Euclidean layer is equivariant under translations and
scalings of the data (``lambda`` scaling by the inverse square), so the fit runs on rows
centred and scaled to unit root-mean-square norm (a working copy, for conditioning) and
maps the heads, ``lambda`` and the loss back.

Fit
---
1. Initial heads: k-means++ seeding (scikit-learn's), uniform random directions, or
   given; on a seeded sample of at most ``_WARM_SAMPLE`` rows.
2. ``inverse_temperature="auto"``: hard Lloyd steps on that sample to a stable partition, then
   ``lambda = 1 / s^2`` with ``s^2`` the within-cluster variance across each cluster's
   nearest boundary (:mod:`attnclust.warm_start`); a seeding is replaced by the Lloyd
   heads (a warm start).
3. Safeguarded, extrapolated fixed-point steps on the risk
   (:mod:`attnclust.fixed_point`; ``solver="pgd"``: plain PGD on the sphere), optionally
   annealed ``lambda/8, lambda/4, lambda/2, lambda``. On more rows than the sample the
   sample is fitted first and the steps on all rows start from its heads.
4. Checks that no fit fails silently: a head that wins no row, ``lambda`` at the floor of
   ``s^2`` (clusters without spread) or so small that the attention is nearly uniform
   (the risk then pins down only the mean of the heads) warn with a
   :class:`DegenerateFitWarning`; not converging warns with a ``ConvergenceWarning``.

Data-parallel fitting
---------------------
Every statistic of the fit is a sum over rows, so with each rank holding a shard of the
rows, summing these over ranks (see :mod:`attnclust.distributed`) gives every rank the
numbers of one process on all rows, up to the order of floating-point additions; the
sample of step 1 is assembled from the ranks' rows by a sum over ranks, so every rank
seeds and warm-starts from the same rows.

Notation
--------
=============  ========================  =============================================
paper          code                      meaning
=============  ========================  =============================================
``mu_h``       ``cluster_centers_``      heads, shape ``(K, d)``
``lambda``     ``inverse_temperature_``  inverse temperature
``a_h(x)``     ``predict_proba``         attention of ``x`` on head ``h``
``T_mu(x)``    ``transform``             output of the layer
``R(mu)``      ``-score``                empirical risk
=============  ========================  =============================================
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from ._deprecation import RenamedAttribute, renamed_keywords
from ._threads import map_chunks, torch_threads
from ._validation import (
    as_generator,
    as_numpy_input,
    as_torch_dtype,
    check_device,
    check_int,
    check_inverse_temperature,
    check_nonnegative,
)
from .communicator import Communicator
from .fixed_point import fixed_point_fit
from .geometry import Geometry, as_geometry
from .heads import softmax_heads
from .results import History, IterationInfo, SolverResult
from .temperature_path import FAST_SETTINGS, anneal_heads, temperature_path
from .warm_start import auto_inverse_temperature, boundary_variance, hard_lloyd

__all__ = ["AttentionClustering", "DegenerateFitWarning", "auto_inverse_temperature"]

_logger = logging.getLogger("attnclust")

_NORMALIZE = ("auto", "rows", "center-scale", None)
_PENALTIES = (None, "repulsion", "balance")
ANNEAL_FACTORS = (1 / 8, 1 / 4, 1 / 2)   # the annealing plan: fractions of lambda ...
ANNEAL_STEPS = 5                         # ... and fixed-point steps at each of them
_LLOYD_STEPS = 20         # hard Lloyd steps before "auto" (stops when stable)
_WARM_SAMPLE = 20_000     # seeding, warm start and first fit on at most this many rows
_CHUNK = 16_384           # rows per chunk of a pass when batch_size is None, at most ...
_CHUNK_NUMBERS = 1 << 19  # ... and at most this many numbers per (rows, d or K) block
_PATH_SAMPLE = 5_000      # n_clusters="auto": the path of at most this many rows
_UNIFORM = 0.1            # mean max attention below 1/K + _UNIFORM (1 - 1/K): "uniform"


def _kmeans_plusplus(S, K, gen, geometry) -> np.ndarray:
    """k-means++ seeding (scikit-learn's) of ``K`` heads on the rows ``S``."""
    seed = int(gen.integers(2**31 - 1))
    return kmeans_plusplus(S.cpu().double().numpy(), K, random_state=seed)[0]


def _random_directions(S, K, gen, geometry) -> np.ndarray:
    """``K`` uniform random directions, as the geometry starts from them."""
    return geometry.init_directions(gen.standard_normal((K, S.shape[1])))


def _anneal_seeding(S: torch.Tensor, K: int, gen, geometry: Geometry) -> np.ndarray:
    """The annealing path's heads at ``K`` (cold start, no randomness; ``gen`` unused)."""
    return anneal_heads(S.double().cpu().numpy(), K, geometry=geometry.name)


_SEEDINGS = {"kmeans++": _kmeans_plusplus, "sphere": _random_directions,   # init="..."
             "anneal": _anneal_seeding}


class DegenerateFitWarning(ConvergenceWarning):
    """A fit ended somewhere its clusters cannot be trusted (dead head, degenerate lambda)."""


# -- helpers of the estimator ------------------------------------------------------------
def _torch_dtype(dtype, data_dtype) -> torch.dtype:
    """The computation's dtype: ``"auto"`` keeps float32 data in float32, else float64."""
    if isinstance(dtype, str) and dtype == "auto":
        return torch.float32 if data_dtype == np.float32 else torch.float64
    return as_torch_dtype(dtype)


def _normalize_rows(X: np.ndarray, offset: int = 0) -> np.ndarray:
    """Rows divided by their norm; an all-zero row is an error naming it.

    Rows are first divided by their largest absolute entry, so that no square overflows
    (entries ~1e200) or underflows (~1e-200): the result is a unit vector for every
    non-zero finite row.
    """
    big = np.abs(X).max(axis=1, initial=0.0)                 # (n,)
    zero = np.flatnonzero(big == 0)
    if zero.size:
        raise ValueError(f"row {offset + zero[0]} (0-based) of X is all zeros and has no "
                         "direction; normalize='rows' needs non-zero rows")
    Y = X / big[:, None]                                     # entries in [-1, 1], one is +-1
    return Y / np.linalg.norm(Y, axis=1)[:, None]


def _squared_norms(X: np.ndarray, how: str, offset: int = 0) -> np.ndarray:
    """Squared row norms ``(n,)``; ``ValueError`` when one overflows float64."""
    with np.errstate(over="ignore"):
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)   # (n,)
    bad = np.flatnonzero(~np.isfinite(sq))
    if bad.size:
        raise ValueError(f"{how}: the squared norm of row {offset + bad[0]} (0-based) of X "
                         f"overflows float64 (largest entry {np.abs(X[bad[0]]).max():.3g}); "
                         "rescale the data or use normalize='rows'")
    return sq


def _center_scale(X: np.ndarray, comm: Communicator, what: str) -> tuple[np.ndarray, float]:
    """Column means and root-mean-square norm of the centred rows, overflow-safe, in chunks.

    The norm is computed on rows divided by their largest centred entry so that no square
    overflows; rows are read ``_CHUNK`` at a time (a memory-mapped ``X`` is never copied
    whole); every sum is taken over the ranks' rows.
    """
    n = comm.n_total
    chunks = [X[s:s + _CHUNK] for s in range(0, X.shape[0], _CHUNK)]
    with np.errstate(over="ignore", invalid="ignore"):       # checked just below
        mean = comm.sum_array(sum((c.sum(0, dtype=np.float64) for c in chunks),
                                  np.zeros(X.shape[1]))) / n
        big = max((float(np.abs(c - mean).max(initial=0.0)) for c in chunks), default=0.0)
    # a unit common to all ranks, between the largest entry and R times it
    big = float(comm.sum_array(big))
    if not np.isfinite(big) or not np.all(np.isfinite(mean)):
        raise ValueError(f"{what}: the column sums or X - mean overflow (entries near the "
                         "largest float); rescale the data")
    unit = big if big > 0 else 1.0
    dev = float(comm.sum_array(sum(float(np.sum(((c - mean) / unit) ** 2)) for c in chunks)))
    scale = unit * float(np.sqrt(dev / n))
    return mean, (scale if scale > 0 else 1.0)


class _Working(NamedTuple):
    """The rows of a fit: the preprocessed rows and the affine map ``(x - shift) / scale``
    to the fit's space (Euclidean heads), applied chunk by chunk or already applied."""

    rows: torch.Tensor                  # (n, d)
    row_map: Callable | None            # chunk of rows -> chunk of the fit's rows, or None
    scale: float
    shift: np.ndarray | None            # (d,), None: the sphere's fit runs as preprocessed

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of the fit."""
        chunk = self.rows[start:stop]
        return chunk if self.row_map is None else self.row_map(chunk)

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        """The fit's rows at the indices ``idx``."""
        picked = self.rows[idx]
        return picked if self.row_map is None else self.row_map(picked)


class AttentionClustering(ClusterMixin, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Clustering by a trained K-head attention layer.

    Fits the heads ``mu_h`` of ``T_mu(x) = sum_h softmax_h(lambda <x, mu_h> - b_h) mu_h``
    (Euclidean heads, ``b_h = lambda ||mu_h||^2 / 2``, or unit heads, ``b_h = 0``) by
    minimizing the empirical risk ``mean ||x - T_mu(x)||^2`` (see the module docstring
    for the geometry, the solver, the ``"auto"`` inverse temperature and the warnings).

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        Number of heads ``K``; ``"auto"``: read off the temperature path of the rows
        (:func:`attnclust.temperature_path`, at most ``max_clusters`` heads): the widest
        plateau in ``log lambda`` among ``K >= 2``, or ``K = 1`` when no plateau spans a
        factor ``e`` (``docs/guide/temperature-path.md``; the rule and its measured
        accuracy).
    geometry : {"euclidean", "sphere"}, default="euclidean"
        Free heads whose attention is ``softmax_h(-lambda ||x - mu_h||^2 / 2)`` (soft
        k-means cells), or the paper's unit heads, ``softmax_h(lambda <x, mu_h>)`` (cones
        from the origin: for directions, such as embeddings compared by cosine).
    inverse_temperature : float or "auto", default="auto"
        Inverse temperature ``lambda`` (in the units of the preprocessed rows); ``"auto"``
        is ``1 / s^2`` with ``s^2`` the within-cluster variance across each cluster's
        nearest boundary, after hard Lloyd steps from the initialization.
    init : {"kmeans++", "sphere", "anneal"} or array of shape (n_clusters, n_features)
        Initial heads: k-means++ seeding (scikit-learn's, on a seeded sample of 100,000
        rows when there are more), ``"anneal"``: the heads of the annealing path from the
        cold start where ``K`` of them are apart (:func:`attnclust.temperature_path.anneal_heads`;
        no randomness, one init), random directions (uniform on the sphere; for
        Euclidean heads scaled to the data's root-mean-square distance from its mean,
        around the mean), or given heads (normalized on the sphere). With
        ``inverse_temperature="auto"`` a seeding is replaced by the hard Lloyd heads that estimate
        ``lambda`` (a warm start); given heads are only used to estimate ``lambda`` that
        way and the fit starts from them as given.
    n_init : int or "auto", default="auto"
        Seedings tried (each on the sample of at most 100,000 rows, followed by hard Lloyd
        steps); the one of lowest k-means objective starts the fit. ``"auto"``: 3 for
        Euclidean heads seeded by ``init``, 1 otherwise (the sphere's fit as before).
    normalize : {"auto", "rows", "center-scale"} or None, default="auto"
        Preprocessing, applied in ``fit`` and to every later input: ``"rows"`` projects
        each row on the unit sphere (an all-zero row is an error); ``"center-scale"``
        subtracts the column means and divides by the root-mean-square row norm, both
        learned in ``fit`` (``mean_``, ``scale_``); ``None`` uses the rows as given (on the
        sphere it warns when their mean squared norm is outside ``[1/4, 4]``: unit heads
        cannot follow the data's scale). ``"auto"``: ``"rows"`` on the sphere, ``None``
        for Euclidean heads.
    penalty : {None, "repulsion", "balance"}, default=None
        Regularizer added with weight ``rho`` (sphere only): ``sum_{h<h'} <mu_h, mu_h'>^2``,
        or ``sum_h (N_h - 1/K)^2`` with ``N_h`` the mean attention of head ``h``.
    rho : float, default=0.0
    anneal : bool or "auto", default="auto"
        Start at ``lambda/8`` and double it up to ``lambda``; ``"auto"``:
        on the sphere only (from a Lloyd warm start Euclidean heads need no annealing,
        and at ``lambda/8`` nearby heads merge).
    solver : {"fixed-point", "pgd"}, default="fixed-point"
        Safeguarded fixed-point steps (fast) or plain projected gradient descent (sphere).
    max_iter : int, default=300
        Steps at the final inverse temperature.
    tol : float or "auto", default="auto"
        Stop when no head moves by more than ``tol`` in one step (for Euclidean heads,
        relative to the root-mean-square distance of the rows from their mean).
        ``"auto"``: ``1e-6`` on the sphere, ``1e-4`` for Euclidean heads (overlapping
        clusters converge slowly, and the labels stop changing long before ``1e-6``).
    batch_size : int, optional
        Rows per chunk of each pass (memory only: steps stay full-batch; default: 16,384,
        fewer for wide data, about 2 MB per block);
        for ``solver="pgd"``, the mini-batch size of stochastic steps.
    step_size : float, default=0.5
        Step of ``solver="pgd"`` (ignored by the fixed-point solver).
    device : str, default="cpu"
        Torch device of the computation; fitted attributes are NumPy arrays.
    dtype : {"auto", "float64", "float32"}, default="auto"
        Floating type of the computation; ``"auto"`` keeps float32 data in float32 and
        computes everything else in float64.
    random_state : int, Generator or None
        Seeds the initialization.
    verbose : int, default=0
        ``> 0`` logs each step on the ``"attnclust"`` logger (level INFO).
    callback : callable, optional
        Called with an :class:`~attnclust.results.IterationInfo` after each step (progress
        bars), in the data's units; steps are counted over the whole fit.
    max_clusters : int, default=10
        With ``n_clusters="auto"``: the heads the temperature path follows, the largest
        ``K`` it can choose.

    Attributes
    ----------
    n_clusters_ : int
        The number of heads fitted (``n_clusters``, or the one chosen by ``"auto"``).
    path_ : TemperaturePath
        With ``n_clusters="auto"``: the path ``K`` was read off; ``n_clusters_reason_``
        says which plateau decided it.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Heads, in the preprocessed space (unit norm on the sphere).
    labels_ : ndarray of shape (n_samples,)
        ``argmax_h a_h(x)`` of the training rows.
    inverse_temperature_ : float
        The inverse temperature used (the resolved value of ``"auto"``).
    n_iter_ : int
        Steps taken, all stages together (with the steps on the sample, on more
        rows than the sample).
    loss_curve_ : ndarray
        Empirical risk (without the penalty) after each step over all rows, at the
        inverse temperature in ``inverse_temperature_curve_`` (non-increasing while that
        is constant and there is no penalty); its last entry is ``-score`` of the data.
    inverse_temperature_curve_ : ndarray
    converged_ : bool
    n_features_in_ : int
    mean_, scale_ : preprocessing of ``normalize="center-scale"`` (None otherwise)

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1)
    >>> X, z = mix.sample(600, rng=0, return_labels=True)
    >>> est = ac.AttentionClustering(n_clusters=3, random_state=0).fit(X + 5.0)
    >>> ac.adjusted_rand_index(z, est.labels_)
    1.0
    >>> ac.centroid_distance(est.cluster_centers_ - 5.0, mix.centroids).max < 0.05
    True
    >>> sph = ac.AttentionClustering(3, geometry="sphere", random_state=0).fit(X)
    >>> ac.adjusted_rand_index(z, sph.labels_)
    1.0
    """

    # the names of 0.1, until 0.3
    temperature_ = RenamedAttribute("temperature_", "inverse_temperature_")
    temperature_curve_ = RenamedAttribute("temperature_curve_", "inverse_temperature_curve_")

    @renamed_keywords(temperature="inverse_temperature")
    def __init__(self, n_clusters=8, *, geometry="euclidean", inverse_temperature="auto",
                 init="kmeans++", n_init="auto", normalize="auto", penalty=None, rho=0.0,
                 anneal="auto",
                 solver="fixed-point", max_iter=300, tol="auto", batch_size=None,
                 step_size=0.5, device="cpu", dtype="auto", random_state=None, verbose=0,
                 callback=None, max_clusters=10):
        self.n_clusters = n_clusters
        self.max_clusters = max_clusters
        self.geometry = geometry
        self.inverse_temperature = inverse_temperature
        self.init = init
        self.n_init = n_init
        self.normalize = normalize
        self.penalty = penalty
        self.rho = rho
        self.anneal = anneal
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.step_size = step_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    # -- the resolved settings ----------------------------------------------------------------
    @property
    def _geometry(self) -> Geometry:
        return as_geometry(self.geometry)

    @property
    def _normalize(self):
        if isinstance(self.normalize, str) and self.normalize == "auto":
            return self._geometry.normalize
        return self.normalize

    @property
    def _tol(self) -> float:
        if isinstance(self.tol, str) and self.tol == "auto":
            return self._geometry.tol
        return check_nonnegative(self.tol, "tol")

    @property
    def _anneal(self) -> bool:
        if isinstance(self.anneal, str) and self.anneal == "auto":
            return self._geometry.anneal
        return bool(self.anneal)

    def anneal_plan(self) -> list[tuple[float, int | None]]:
        """Stages of a fit: ``(fraction of lambda, steps)``; ``None`` steps: ``max_iter``.

        Examples
        --------
        >>> AttentionClustering(geometry="sphere").anneal_plan()
        [(0.125, 5), (0.25, 5), (0.5, 5), (1.0, None)]
        >>> AttentionClustering().anneal_plan()
        [(1.0, None)]
        """
        stages = [(f, ANNEAL_STEPS) for f in ANNEAL_FACTORS] if self._anneal else []
        return stages + [(1.0, None)]

    # -- input handling -------------------------------------------------------------------
    def _check_params(self, n_samples: int) -> None:
        check_int(self.n_clusters, "n_clusters", 1)
        geometry = as_geometry(self.geometry)
        if n_samples < self.n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        if not (self.normalize is None or (isinstance(self.normalize, str)
                                           and self.normalize in _NORMALIZE)):
            raise ValueError(f"normalize must be 'auto', 'rows', 'center-scale' or None, got "
                             f"{self.normalize!r}")
        if self.penalty not in _PENALTIES:
            raise ValueError(f"penalty must be None, 'repulsion' or 'balance', got "
                             f"{self.penalty!r}")
        if self.penalty is not None and not geometry.unit_heads:
            raise ValueError(f"penalty={self.penalty!r} is defined for unit heads; use "
                             "geometry='sphere' or penalty=None")
        check_nonnegative(self.rho, "rho")
        self._check_solver_params()
        check_device(self.device)
        _torch_dtype(self.dtype, np.float64)
        lam = self.inverse_temperature
        if isinstance(lam, str) and lam != "auto":
            raise ValueError(f"inverse_temperature must be a positive number or 'auto', got "
                             f"{lam!r}")
        if not isinstance(lam, str):
            check_inverse_temperature(lam)

    def _check_solver_params(self) -> None:
        if self.solver not in ("fixed-point", "pgd"):
            raise ValueError(f"solver must be 'fixed-point' or 'pgd', got {self.solver!r}")
        if self.solver == "pgd" and not self._geometry.unit_heads:
            raise ValueError("solver='pgd' runs projected gradient descent on the sphere; use "
                             "geometry='sphere' or solver='fixed-point'")
        if not (isinstance(self.anneal, bool | np.bool_) or self.anneal == "auto"):
            raise ValueError(f"anneal must be True, False or 'auto', got {self.anneal!r}")
        if not (isinstance(self.n_init, str) and self.n_init == "auto"):
            check_int(self.n_init, "n_init", 1)
        check_int(self.max_iter, "max_iter", 1)
        if not (isinstance(self.tol, str) and self.tol == "auto"):
            check_nonnegative(self.tol, "tol")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1)
        if self.solver == "pgd":
            check_nonnegative(self.step_size, "step_size")

    def _validate(self, X, *, reset: bool) -> np.ndarray:
        return validate_data(self, as_numpy_input(X), dtype=[np.float64, np.float32], reset=reset,
                             ensure_min_samples=1)

    def _preprocess(self, X: np.ndarray, *, fitting: bool, comm: Communicator | None = None,
                    offset: int = 0) -> np.ndarray:
        """Apply ``normalize`` to validated rows (``comm``: the fit's, when ``fitting``);
        ``offset``: the index of ``X``'s first row in the caller's rows (for messages)."""
        how = self._normalize
        if how == "rows":
            return _normalize_rows(X, offset)
        if how == "center-scale":
            if fitting:
                self.mean_, self.scale_ = _center_scale(X, comm, "normalize='center-scale'")
            return (X - self.mean_.astype(X.dtype)) / X.dtype.type(self.scale_)
        if self._geometry.unit_heads:
            sq = _squared_norms(X, "normalize=None", offset)
            if fitting:
                msq = float(comm.sum_array(np.sum(sq))) / comm.n_total
                if not 0.25 <= msq <= 4.0:
                    warnings.warn(
                        f"normalize=None but the rows' mean squared norm is {msq:.3g}, far from "
                        "1: the heads have unit norm; pass normalize='rows' or 'center-scale' "
                        "to bring the data to the sphere's scale", UserWarning, stacklevel=4)
        return X

    def _working_rows(self, Xp: np.ndarray, comm: Communicator) -> _Working:
        """The rows of the fit: ``Xp`` as a tensor, and the map of its chunks to the fit's.

        Euclidean heads are fitted on rows centred and scaled to unit root-mean-square
        norm. On the CPU that map is applied to each chunk as it is read, so that a
        memory-mapped ``Xp`` is never copied whole; on another device the mapped rows are
        made there once.
        """
        dtype = _torch_dtype(self.dtype, Xp.dtype)
        with warnings.catch_warnings():   # a read-only memmap is only ever read
            warnings.simplefilter("ignore", UserWarning)
            rows = torch.from_numpy(np.ascontiguousarray(Xp))
        if not self._geometry.equivariant:
            return _Working(rows.to(self.device, dtype), None, 1.0, None)
        shift, scale = _center_scale(Xp, comm, "geometry='euclidean'")
        if not np.finfo(np.float64).tiny < scale * scale < np.inf:
            raise ValueError(f"the data's spread ({scale:.3g}) puts the inverse temperature "
                             "out of float64's range; rescale the data")
        shift_t = torch.as_tensor(shift, dtype=rows.dtype)

        def row_map(chunk: torch.Tensor) -> torch.Tensor:   # centred in the data's dtype
            return (chunk - shift_t).to(dtype).div_(scale)
        if torch.device(self.device).type != "cpu":
            return _Working(row_map(rows).to(self.device), None, scale, shift)
        return _Working(rows, row_map, scale, shift)

    def _sample(self, working: _Working, gen, comm: Communicator) -> torch.Tensor:
        """At most ``_WARM_SAMPLE`` rows, drawn with the estimator's generator.

        The sample is drawn from the global row indices and each rank fills in the sampled
        rows it holds, so a sum over ranks assembles exactly the rows one process would
        draw, on every rank.
        """
        n, X = comm.n_total, working.rows
        idx = np.arange(n) if n <= _WARM_SAMPLE else np.sort(
            gen.choice(n, _WARM_SAMPLE, replace=False))
        mine = (idx >= comm.offset) & (idx < comm.offset + X.shape[0])
        picked = working.take(torch.from_numpy(idx[mine] - comm.offset).to(X.device))
        rows = picked.new_zeros(idx.size, X.shape[1], dtype=torch.float64)  # 0 where not ours
        rows[torch.from_numpy(mine).to(X.device)] = picked.double()
        return comm.reduce(rows).to(picked.dtype)            # x + 0 = x exactly

    def _initial_heads(self, S: torch.Tensor, working: _Working, gen, comm: Communicator
                       ) -> torch.Tensor:
        K, d = self.n_clusters, S.shape[1]
        if isinstance(self.init, str):
            if self.init not in _SEEDINGS:
                raise ValueError(f"init must be 'kmeans++', 'sphere', 'anneal' or an array, got "
                                 f"{self.init!r}")
            centers = _SEEDINGS[self.init](S, K, gen, self._geometry)
        else:
            centers = np.array(self.init, dtype=np.float64)
            if centers.shape != (K, d):
                raise ValueError(f"init array must have shape (n_clusters, n_features) = "
                                 f"{(K, d)}, got {centers.shape}")
            if not np.all(np.isfinite(centers)):
                raise ValueError("init array contains NaN or inf")
            if working.shift is not None:
                centers = (centers - working.shift) / working.scale
        centers = self._geometry.start_heads(centers, gen)
        heads = torch.as_tensor(centers, dtype=S.dtype, device=S.device)
        # every rank computed the same heads; rank 0's copy makes sure they agree bitwise
        return comm.broadcast(heads)

    @property
    def _n_init(self) -> int:
        if isinstance(self.n_init, str) and self.n_init == "auto":
            if isinstance(self.init, str) and self.init == "anneal":
                return 1                                  # deterministic: once is enough
            return self._geometry.n_init(isinstance(self.init, str))
        return check_int(self.n_init, "n_init", 1)

    def _warm_start(self, S, working, gen, comm: Communicator) -> torch.Tensor:
        """Initial heads; with ``n_init > 1``, the Lloyd heads of the best of the seedings."""
        if self._n_init == 1:
            return self._initial_heads(S, working, gen, comm)
        runs = [hard_lloyd(S, self._initial_heads(S, working, gen, comm), _LLOYD_STEPS,
                           geometry=self._geometry) for _ in range(self._n_init)]
        return max(runs, key=lambda run: run.score).heads

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X, y=None, *, comm: Communicator | None = None):
        """Fit the heads to ``X`` (n_samples, n_features); ``y`` is ignored.

        With ``comm`` (a :class:`~attnclust.communicator.Communicator`), ``X`` is this
        rank's share of the rows of a data-parallel fit (see :mod:`attnclust.distributed`);
        every rank gets the fit of all the rows.
        """
        if isinstance(self.n_clusters, str):
            return self._fit_auto(X, y, comm)
        X = self._validate(X, reset=True)
        comm = Communicator.local(X.shape[0]) if comm is None else comm
        self._check_params(comm.n_total)
        # on the CPU, the threads torch would have used share the chunks of each pass
        workers = torch.get_num_threads() if self._torch_threads == 1 else 1
        with torch_threads(self._torch_threads):
            self._fit_validated(X, comm, workers)
        self.n_clusters_ = self.n_clusters
        return self

    def _fit_auto(self, X, y, comm):
        """``n_clusters="auto"``: ``K`` from the temperature path of the rows (a sample of
        ``_PATH_SAMPLE`` rows drawn with ``random_state`` when there are more), read off by
        :meth:`~attnclust.TemperaturePath.choose_n_clusters`; then the fit with that ``K``."""
        if self.n_clusters != "auto":
            raise ValueError(f"n_clusters must be a positive integer or 'auto', got "
                             f"{self.n_clusters!r}")
        if comm is not None:
            raise ValueError("n_clusters='auto' is not data-parallel: choose K on one process "
                             "and pass it")
        max_k = check_int(self.max_clusters, "max_clusters", 1)
        Xv = self._validate(X, reset=True)
        rows = self._preprocess(Xv, fitting=True, comm=Communicator.local(Xv.shape[0]))
        if rows.shape[0] > _PATH_SAMPLE:
            gen = as_generator(self.random_state)
            rows = rows[np.sort(gen.choice(rows.shape[0], _PATH_SAMPLE, replace=False))]
        path = temperature_path(np.asarray(rows, dtype=np.float64), min(max_k, rows.shape[0]),
                                geometry=self._geometry.name, **FAST_SETTINGS)
        choice = path.choose_n_clusters()
        self.n_clusters = choice.n_clusters
        try:
            self.fit(X, y)
        finally:
            self.n_clusters = "auto"
        self.n_clusters_, self.path_, self.n_clusters_reason_ = (choice.n_clusters, path,
                                                                 choice.reason)
        return self

    def _chunk(self, n_features: int) -> int:
        """Rows per chunk of a pass: ``batch_size``, or blocks of about 2 MB (float32).

        Wide blocks are not only memory: the allocator keeps freed blocks of several MB
        per worker thread (1,000,000 x 128 float32 rows: +950 MB peak with 16,384-row
        chunks, +600 MB with 4,096).
        """
        if self.batch_size is not None:
            return int(self.batch_size)
        return max(256, min(_CHUNK, _CHUNK_NUMBERS // max(n_features, self.n_clusters)))

    @property
    def _torch_threads(self) -> int | None:
        """One torch thread on the CPU: passes share chunks between workers instead (see
        :mod:`attnclust._threads`)."""
        return 1 if torch.device(self.device).type == "cpu" else None

    def _fit_validated(self, X: np.ndarray, comm: Communicator, workers: int):
        """The fit of validated rows (warnings raised here point at the caller of ``fit``)."""
        if comm.n_total != X.shape[0] and self.solver != "fixed-point":
            raise ValueError(f"data-parallel fitting needs solver='fixed-point', got "
                             f"{self.solver!r}")
        self.mean_, self.scale_ = None, None
        Xp = self._preprocess(X, fitting=True, comm=comm)
        gen = as_generator(self.random_state)
        working = self._working_rows(Xp, comm)
        del Xp
        S = self._sample(working, gen, comm)
        heads0 = self._warm_start(S, working, gen, comm)
        capped = False
        if isinstance(self.inverse_temperature, str):  # "auto", checked above
            lloyd = hard_lloyd(S, heads0, _LLOYD_STEPS, geometry=self._geometry).heads
            s2, floor = boundary_variance(S, lloyd, geometry=self._geometry)
            capped = s2 <= floor
            lam = 1.0 / max(s2, floor, torch.finfo(S.dtype).tiny)
            if isinstance(self.init, str):  # a seeding is warm-started; given heads are kept
                heads0 = lloyd
        else:   # given in the preprocessed space's units
            lam = check_inverse_temperature(self.inverse_temperature) * working.scale**2
        plan = self.anneal_plan()
        temps = [lam * f for f, _ in plan]
        steps = [int(self.max_iter) if s is None else s for _, s in plan]
        if self.solver == "pgd":
            res = self._fit_pgd(working.rows, heads0, temps, steps, gen, working)
        else:
            res = self._fit_fixed_point(S, heads0, temps, steps, comm, working, workers)
        self._set_fitted(res, lam, working)
        self._label_and_check(working, res.heads, lam, capped, comm, workers)
        return self

    def _fit_fixed_point(self, S, heads0, temps, steps, comm, working, workers):
        """Fixed-point steps: on the sample first when it is smaller than the data."""
        common = dict(tol=self._tol, geometry=self._geometry, penalty=self.penalty,
                      rho=float(self.rho), chunk_size=self._chunk(working.rows.shape[1]),
                      workers=workers)
        n_iter = 0
        if S.shape[0] < comm.n_total:   # the curves are those of the steps over all rows
            res = fixed_point_fit(S, heads0, inverse_temperatures=temps, stage_steps=steps,
                                  callback=self._callback_fn(working), **common)
            heads0, n_iter = res.heads, res.n_iter
            temps, steps = temps[-1:], steps[-1:]
        res = fixed_point_fit(working.rows, heads0, inverse_temperatures=temps,
                              stage_steps=steps, reduce=comm.reduce, row_map=working.row_map,
                              callback=self._callback_fn(working, n_iter), **common)
        return res._replace(n_iter=n_iter + res.n_iter,
                            history=res.history._replace(step=res.history.step + n_iter))

    def _set_fitted(self, res: SolverResult, lam, working):
        """Fitted attributes, mapped back from the working space to the preprocessed one."""
        centers = res.heads.detach().cpu().double().numpy()
        scale2 = working.scale * working.scale
        lam = float(lam) / working.scale / working.scale
        if not np.finfo(np.float64).tiny <= lam < np.inf:
            raise ValueError(f"the data's spread ({working.scale:.3g}) puts the inverse "
                             f"temperature {lam:.3g} out of float64's range; rescale the "
                             "data")
        if working.shift is not None:
            centers = centers * working.scale + working.shift
        self.cluster_centers_ = centers
        self.inverse_temperature_ = lam
        self.loss_curve_ = res.history.risk * scale2
        self.inverse_temperature_curve_ = res.history.inverse_temperature / scale2
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        if not self.converged_:
            warnings.warn(f"AttentionClustering did not converge in max_iter={self.max_iter} "
                          "steps; increase max_iter or tol", ConvergenceWarning, stacklevel=4)

    def _label_and_check(self, working: _Working, heads, lam, capped, comm, workers) -> None:
        """``labels_``, and a :class:`DegenerateFitWarning` for a dead head or a degenerate
        ``lambda`` (cluster sizes and attention sharpness counted over all ranks' rows)."""
        K = self.n_clusters
        chunk = self._chunk(working.rows.shape[1])

        n = working.rows.shape[0]
        self.labels_ = np.empty(n, dtype=np.int64)

        def winners(start):   # labels (written in place) and sum_i max_h a_ih of one chunk
            A = softmax_heads(self._geometry.logits(working.read(start, start + chunk), heads,
                                                    lam))
            best, z = A.max(1)
            self.labels_[start:start + chunk] = z.cpu().numpy()
            return float(best.double().sum())
        sharp = sum(map_chunks(winners, n, chunk, workers))
        sizes = np.bincount(self.labels_, minlength=K).astype(np.float64)
        stats = comm.sum_array(np.append(sizes, sharp))
        n = float(stats[:K].sum())
        shown = f"lambda={self.inverse_temperature_:.3g}"
        dead = np.flatnonzero(stats[:K] == 0)
        if dead.size:
            warnings.warn(f"head(s) {dead.tolist()} win no row: the fit found fewer than "
                          f"{K} clusters; try another random_state or init, or fewer clusters",
                          DegenerateFitWarning, stacklevel=4)
        if capped:
            warnings.warn(f"the clusters have (nearly) no spread, so {shown} is at its cap "
                          "(1e12 over the data's mean squared spread, 1e6 in float32); "
                          "duplicated rows?",
                          DegenerateFitWarning, stacklevel=4)
        if K > 1 and stats[K] / n < 1.0 / K + _UNIFORM * (1.0 - 1.0 / K):
            warnings.warn(f"the attention is nearly uniform at {shown} (mean largest weight "
                          f"{stats[K] / n:.3f}, uniform {1 / K:.3f}): the risk then pins down "
                          "only the mean of the heads; raise inverse_temperature or use 'auto'",
                          DegenerateFitWarning, stacklevel=4)

    def _callback_fn(self, working: _Working, offset: int = 0):
        """The user's callback and the log, in the preprocessed space's units (iterations
        counted from ``offset``)."""
        if self.callback is None and not self.verbose:
            return None
        scale = working.scale
        shift = None if working.shift is None else torch.from_numpy(working.shift)

        def call(info: IterationInfo) -> None:
            heads = info.heads * scale
            if shift is not None:
                heads = heads + shift.to(dtype=heads.dtype, device=heads.device)
            info = IterationInfo(offset + info.iteration, info.loss * scale * scale,
                                 info.inverse_temperature / scale / scale, info.shift * scale,
                                 heads)
            if self.verbose:
                _logger.info("iter %d  lambda %.4g  loss %.8g  shift %.2e", *info[:4])
            if self.callback is not None:
                self.callback(info)
        return call

    def _fit_pgd(self, Xt, heads0, temps, steps, gen, working) -> SolverResult:
        """Plain PGD (:func:`attnclust.pgd.pgd`, float64 on the data's device): the
        annealing stages as one schedule without stopping rule, then the target."""
        from .pgd import pgd

        common = dict(step_size=float(self.step_size), penalty=self.penalty,
                      rho=float(self.rho), record_every=1, batch_size=self.batch_size, rng=gen)
        schedule = [t for t, s in zip(temps[:-1], steps[:-1], strict=True) for _ in range(s)]
        first = None
        if schedule:
            first = pgd(Xt, heads0, inverse_temperature=temps[-1], n_steps=len(schedule),
                        tol=0.0, callback=self._callback_fn(working),
                        inverse_temperature_schedule=lambda t: schedule[min(t, len(schedule) - 1)],
                        **common)
            heads0 = first.heads
        res = pgd(Xt, heads0, inverse_temperature=temps[-1], n_steps=int(self.max_iter),
                  tol=self._tol, callback=self._callback_fn(working, len(schedule)), **common)
        heads = torch.as_tensor(res.heads, dtype=Xt.dtype, device=Xt.device)
        if first is None:
            return res._replace(heads=heads)
        # the last record of the annealing (after its last update) is the first of the
        # final phase, at lambda: kept once, from the final phase
        final = res.history._replace(step=res.history.step + first.n_iter)
        history = History(*(np.concatenate([a[:-1], b]) for a, b in zip(
            first.history, final, strict=True)))
        return SolverResult(heads, history, first.n_iter + res.n_iter, res.converged)

    # -- prediction -------------------------------------------------------------------------
    def _weights(self, Xp: np.ndarray) -> torch.Tensor:
        """Attention ``(n, K)`` of preprocessed rows, in float64.

        Euclidean logits are shift invariant, so rows and heads are first centred on the
        heads' mean: the logits then keep their precision far from the origin.
        """
        heads = torch.as_tensor(self.cluster_centers_, dtype=torch.float64, device=self.device)
        X = torch.as_tensor(np.asarray(Xp, dtype=np.float64), device=self.device)
        with torch_threads(self._torch_threads):
            X, heads = self._geometry.stable_frame(X, heads)
            return softmax_heads(self._geometry.logits(X, heads, self.inverse_temperature_))

    def _by_chunks(self, X, fn) -> np.ndarray:
        """``fn(preprocessed rows)`` on ``_CHUNK`` rows at a time, concatenated."""
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return np.concatenate([fn(self._preprocess(X[s:s + _CHUNK], fitting=False, offset=s))
                               for s in range(0, X.shape[0], _CHUNK)])

    def predict_proba(self, X) -> np.ndarray:
        """Attention weights ``a_h(x)``, shape (n_samples, n_clusters), rows sum to one."""
        return self._by_chunks(X, lambda Xp: self._weights(Xp).cpu().numpy())

    def predict(self, X) -> np.ndarray:
        """Index of the most-attended head, ``argmax_h a_h(x)``."""
        return self._by_chunks(X, lambda Xp: self._weights(Xp).argmax(1).cpu().numpy()
                               .astype(np.int64))

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def _outputs(self, Xp: np.ndarray) -> np.ndarray:
        """``T_mu(x)`` of preprocessed rows, ``(n, d)``: what ``transform`` and ``score`` use."""
        heads = torch.as_tensor(self.cluster_centers_, dtype=torch.float64, device=self.device)
        return (self._weights(Xp) @ heads).cpu().numpy()

    def transform(self, X) -> np.ndarray:
        """Layer outputs ``T_mu(x)`` of the preprocessed rows, shape (n_samples, n_features)."""
        return self._by_chunks(X, self._outputs)

    def score(self, X, y=None) -> float:
        """Minus the empirical risk, ``-mean ||x - T_mu(x)||^2`` (higher is better)."""
        def squared_errors(Xp):
            return np.sum((np.asarray(Xp, dtype=np.float64) - self._outputs(Xp)) ** 2, axis=1)
        return -float(np.mean(self._by_chunks(X, squared_errors)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

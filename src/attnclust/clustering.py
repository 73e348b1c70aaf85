"""Clustering with the trained K-head attention layer: the ``AttentionClustering`` estimator.

The model is the K-head layer of :mod:`attnclust.heads`, with unit heads ``mu_h``:

    a_h(x)  = softmax_h( lambda <x, mu_h> ),      T_mu(x) = sum_h a_h(x) mu_h,

fitted by minimizing the empirical risk ``f(mu) = (1/n) sum_i ||x_i - T_mu(x_i)||^2``
(plus ``rho * Pen(mu)`` when a penalty is asked for) over the product of spheres.
A point is assigned to its most-attended head, ``argmax_h a_h(x)``.

Solver
------
``solver="fixed-point"`` (the default) runs :func:`attnclust.fixed_point.fixed_point_fit`,
safeguarded fixed-point steps on the sphere that reduce to spherical Lloyd steps when
the attention is hard (derivation and measurements in that module);
``solver="pgd"`` runs plain projected gradient descent (:func:`attnclust.pgd.pgd`).

Temperature
-----------
On the sphere, ``a_h(x)`` are exactly the E-step responsibilities of an equal-weight
isotropic Gaussian mixture with variance ``1/lambda`` (``||x - mu_h||^2 = ||x||^2 + 1 -
2 <x, mu_h>``), or of a von Mises-Fisher mixture with concentration ``lambda``, so
``lambda`` is one over the noise variance per direction. ``temperature="auto"`` sets

    lambda = 1 / s^2,   s^2 = (1/n) sum_h n_h s_h^2,

where ``s_h^2`` is the within-cluster variance of the rows along the tangent direction
at ``mu_h`` pointing to its nearest head ``mu_g`` (``<x, mu_g - G_hg mu_h> / sqrt(1 -
G_hg^2)``), pooled with the same quantity of cluster ``g`` at ``mu_g``: the spread
across the boundary that the softmax has to resolve. Clusters are the hard labels after
the initialization and hard spherical Lloyd steps to a stable partition (at most
``_LLOYD_STEPS``); the fit then starts from these Lloyd heads, unless ``init`` gives the
heads, which are then kept as the start. For isotropic noise ``sigma`` this is
``1/sigma^2`` (rows as given) or ``(1 + d sigma^2) / sigma^2`` (rows normalized: the
noise left is tangent), wherever the clusters sit on the sphere. An earlier rule used
the variance of the projections on the heads themselves; on rows normalized into a small
cap (wine, iris, breast cancer, whose rows point nearly the same way) those projections
``<x, mu_h> = 1 - ||x - mu_h||^2 / 2`` vary only to second order and that rule gave
``lambda`` 10 to 100 times too large (``2e5`` on wine), with the slow convergence that
comes with it.

Measured (ARI / matched centroid error, max over heads, against the true centroids or the
normalized class means), rows normalized, ``random_state=0``; the sweep refits at
``c * lambda_auto``, ``c`` in ``1/8 .. 8``, from k-means++ without the Lloyd warm start
that ``"auto"`` gets; mixtures: ``K`` unit centroids at least 60 degrees apart, 300 rows
per cluster; unbalanced: weights .6/.25/.1/.05. The previous rule's ``lambda`` in brackets.

====================  ============  ================  ============  ========  =====
data                  lambda auto   ARI / err (auto)  best c: ARI   KMeans    GMM sph
====================  ============  ================  ============  ========  =====
iris                  1.4e3 (1.5e4) 0.922 / 0.006     8: 0.941      0.904     0.868
wine                  2.4e3 (2.5e5) 0.281 / 0.070     8: 0.360      0.347     0.331
digits                154 (355)     0.638 / 0.440     2: 0.641      0.648     0.634
breast cancer         767 (6.2e4)   0.595 / 0.032     8: 0.607      0.595     0.598
K=3 d=10 s=.05/.1     384 / 103     1.000 / .01-.02   all 1.000     1.000     1.000
K=3 d=10 s=.2         38            0.993 / 0.047     all 0.993     0.993     0.993
K=3 d=10 s=.4         17            0.804 / 0.158     1/4: 0.815    0.800     0.803
K=3 d=50 s=.05/.1     431 / 145     1.000 / .02-.04   all 1.000     1.000     1.000
K=3 d=50 s=.2         75            0.997 / 0.085     all 0.997     0.997     0.997
K=3 d=50 s=.4         63            0.681 / 0.496     1: 0.681      0.768     0.764
K=8 d=10 s=.05/.1     412 / 108     1.000 / .01-.02   all 1.000     1.000     1.000
K=8 d=10 s=.2         35            0.985 / 0.042     4: 0.987      0.985     0.986
K=8 d=10 s=.4         17            0.604 / 0.362     8: 0.629      0.558     0.540
K=8 d=50 s=.05/.1     459 / 153     1.000 / .02-.05   all 1.000     1.000     1.000
K=8 d=50 s=.2         71            0.789 / 1.117     1: 0.789      0.991     0.991
K=8 d=50 s=.4         61            0.479 / 0.534     1: 0.479      0.622     0.627
unbalanced K=4 d=10   52            1.000 / 0.026     all 1.000     1.000     1.000
====================  ============  ================  ============  ========  =====

The auto value is within a factor 8 of the best of the sweep everywhere, and the sweep
gains at most 0.08 ARI (wine). Where it loses to KMeans (``d = 50``, ``sigma >= 0.2``
after normalization, i.e. clusters that overlap strongly), no temperature of the sweep
does better: the fit reaches a *lower* risk than the Lloyd partition but a worse one,
a property of the objective (soft values are pulled toward each other), not of ``lambda``.

Initialization
--------------
``init="kmeans++"`` runs scikit-learn's k-means++ seeding on the rows, normalized to
unit norm; above ``100,000`` rows it seeds from ``100,000`` rows drawn without
replacement with the estimator's generator (seeding cost stays bounded, and a
data-parallel fit can assemble exactly the same rows on every rank).

Data-parallel fitting
---------------------
Every statistic the fit needs is a sum over rows: the pass above (loss, ``sum_i w_i
x_i``, ``A^T A``, ``N``), the hard Lloyd sums and the projections' moments of the
``"auto"`` temperature, the column sums of ``"center-scale"``. With each rank holding a
shard of the rows, summing these over ranks (one all-reduce per pass, see
:mod:`attnclust.distributed`) gives every rank the same numbers as one process on all
rows, up to the order of floating-point additions; the safeguard and the stopping rule
then take the same branch on every rank. Single-process fitting is the case "no
reduction" of the same code.

Annealing (``anneal=True``)
---------------------------
The temperature follows ``lambda/8, lambda/4, lambda/2, lambda`` (a few steps at each of
the first three, then until convergence). At small ``lambda`` the attention is diffuse,
heads are pulled together and nearby heads merge; as ``lambda`` grows they split again
along the directions of largest spread, which moves heads out of poor starting
positions (deterministic annealing, started warm from the initialization).

Notation
--------
=============  ====================  =============================================
paper          code                  meaning
=============  ====================  =============================================
``mu_h``       ``cluster_centers_``  unit heads, shape ``(K, d)``
``lambda``     ``temperature_``      inverse temperature
``a_h(x)``     ``predict_proba``     attention of ``x`` on head ``h``
``T_mu(x)``    ``transform``         output of the layer
``R(mu)``      ``-score``            empirical risk
``N_h``        ``counts``            soft proportion of head ``h``
=============  ====================  =============================================
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
from sklearn.utils.validation import check_is_fitted, validate_data

from ._validation import as_generator, check_int, check_nonnegative, check_temperature
from .fixed_point import IterationInfo, fixed_point_fit
from .heads import softmax_heads

__all__ = ["AttentionClustering", "auto_temperature"]

_logger = logging.getLogger("attnclust")

_NORMALIZE = ("rows", "center-scale", None)
_PENALTIES = (None, "repulsion", "balance")
_ANNEAL_FACTORS = (1 / 8, 1 / 4, 1 / 2)
_ANNEAL_STEPS = 5          # fixed-point steps at each intermediate temperature
_LLOYD_STEPS = 20         # hard spherical Lloyd steps before "auto" (stops when stable)
_INIT_SAMPLE = 100_000     # k-means++ seeds on at most this many rows (drawn with the seed)


# -- helpers of the estimator ------------------------------------------------------------
def _torch_dtype(dtype) -> torch.dtype:
    name = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", str(dtype))
    name = str(np.dtype(name)) if not isinstance(dtype, torch.dtype) else str(dtype)
    name = name.removeprefix("torch.")
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    return getattr(torch, name)


class _DataParallel(NamedTuple):
    """How a data-parallel fit sees the other ranks (built by :mod:`attnclust.distributed`).

    The local rows are rows ``offset .. offset + n_local - 1`` of the concatenation of all
    ranks' rows in rank order.
    """

    reduce: Callable[[torch.Tensor], torch.Tensor]     # sum over ranks, same on every rank
    broadcast: Callable[[torch.Tensor], torch.Tensor]  # rank 0's tensor on every rank
    offset: int                                        # global index of the first local row
    n_total: int                                       # rows of all ranks


def _sum(t: torch.Tensor, reduce) -> torch.Tensor:
    return t if reduce is None else reduce(t)


def _sum_array(a: np.ndarray, dp: _DataParallel) -> np.ndarray:
    """Sum of a NumPy array over the ranks of a data-parallel fit."""
    return dp.reduce(torch.from_numpy(np.array(a, dtype=np.float64))).cpu().numpy()


def _check_device(device) -> None:
    """``ValueError`` naming ``device`` unless torch can allocate on it here."""
    try:
        torch.empty(0, device=torch.device(device))
    except (RuntimeError, AssertionError, TypeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a usable torch device here "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                         ) from exc


def _normalize_rows(X: np.ndarray) -> np.ndarray:
    """Rows divided by their norm; an all-zero row is an error naming it.

    Rows are first divided by their largest absolute entry, so that no square overflows
    (entries ~1e200) or underflows (~1e-200): the result is a unit vector for every
    non-zero finite row.
    """
    big = np.abs(X).max(axis=1, initial=0.0)                 # (n,)
    zero = np.flatnonzero(big == 0)
    if zero.size:
        raise ValueError(f"row {zero[0]} (0-based) of X is all zeros and has no direction; "
                         "normalize='rows' needs non-zero rows")
    Y = X / big[:, None]                                     # entries in [-1, 1], one is +-1
    return Y / np.linalg.norm(Y, axis=1)[:, None]


def _squared_norms(X: np.ndarray, how: str) -> np.ndarray:
    """Squared row norms ``(n,)``; ``ValueError`` when one overflows float64."""
    with np.errstate(over="ignore"):
        sq = np.einsum("ij,ij->i", X, X)                     # (n,)
    bad = np.flatnonzero(~np.isfinite(sq))
    if bad.size:
        raise ValueError(f"{how}: the squared norm of row {bad[0]} (0-based) of X overflows "
                         f"float64 (largest entry {np.abs(X[bad[0]]).max():.3g}); rescale the "
                         "data or use normalize='rows'")
    return sq


def _hard_lloyd(X, heads, n_steps: int, *, reduce=None):
    """Hard spherical Lloyd steps, at most ``n_steps``, stopping early once no label changes.

    Returns the heads and the labels of the last assignment.
    """
    labels = (X @ heads.T).argmax(1)
    for _ in range(n_steps):
        sums = _sum(torch.zeros_like(heads).index_add_(0, labels, X), reduce)
        norm = torch.linalg.vector_norm(sums, dim=1, keepdim=True)
        heads = torch.where(norm > 0, sums / norm.clamp_min(torch.finfo(X.dtype).tiny), heads)
        new = (X @ heads.T).argmax(1)
        changed = _sum((new != labels).sum().to(X.dtype).reshape(1), reduce)
        labels = new
        if float(changed[0]) == 0:
            break
    return heads, labels


def auto_temperature(X: torch.Tensor, heads: torch.Tensor, *, reduce=None) -> float:
    """``1 / s^2`` with ``s^2`` the within-cluster variance across each head's nearest boundary.

    Clusters are the hard assignments ``z_i = argmax_h <x_i, mu_h>``. For cluster ``h``
    with nearest other head ``g = argmax_{g != h} <mu_h, mu_g>`` and ``G_hg = <mu_h,
    mu_g>``, ``s_h^2`` is the variance of ``<x, u_hg>`` along the unit tangent at ``mu_h``
    pointing to ``mu_g``, ``u_hg = (mu_g - G_hg mu_h) / sqrt(1 - G_hg^2)``, within cluster
    ``h``, pooled (weighted by cluster size) with the same variance of cluster ``g`` along
    ``u_gh``; ``s^2`` is the mean of ``s_h^2`` weighted by cluster size. Only the
    projections ``P = X mu^T`` are needed: the variance along ``u_hg`` follows from each
    cluster's ``K x K`` covariance of ``P``. ``s^2`` is floored at ``1e-6`` times the mean
    squared norm of the rows (so ``lambda`` stays finite on duplicated points); with one
    head (the attention is then constant) it is the within-cluster variance of ``P``.
    With ``reduce`` (a sum over data-parallel ranks), ``X`` holds one rank's rows and every
    statistic is summed over ranks first.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=20, k=2, sigma=0.1)
    >>> X = torch.as_tensor(mix.sample(20_000, rng=0))
    >>> round(auto_temperature(X, torch.as_tensor(mix.centroids)), -1)
    100.0
    """
    P = X @ heads.T                                          # (n, K)
    labels = P.argmax(1)
    K = heads.shape[0]
    counts = torch.bincount(labels, minlength=K).to(X.dtype)
    sums = torch.zeros(K, K, dtype=X.dtype, device=X.device).index_add_(0, labels, P)
    outer = torch.zeros(K, K, K, dtype=X.dtype, device=X.device).index_add_(
        0, labels, P[:, :, None] * P[:, None, :])            # (K, K, K): sum_{i in h} P_i P_i^T
    extra = torch.stack([(X * X).sum(), X.new_tensor(float(X.shape[0]))])
    stats = _sum(torch.cat([counts, sums.reshape(-1), outer.reshape(-1), extra]), reduce)
    counts, sums = stats[:K], stats[K:K + K * K].reshape(K, K)
    outer = stats[K + K * K:K + K * K + K**3].reshape(K, K, K)
    sq_norm, n = float(stats[-2]), float(stats[-1])
    means = sums / counts.clamp_min(1)[:, None]              # (K, K) mean projection
    cov = outer / counts.clamp_min(1)[:, None, None] - means[:, :, None] * means[:, None, :]
    if K == 1:
        s2 = float(cov[0, 0, 0] * counts[0]) / n
    else:
        gram = heads @ heads.T
        near = (gram - 3.0 * torch.eye(K, dtype=X.dtype, device=X.device)).argmax(1)  # (K,)
        h = torch.arange(K, device=X.device)
        g2 = gram[h, near]                                   # (K,) G_hg
        c = near

        # variance within cluster a of <x, mu_b - G mu_a>: e^T cov_a e, e = e_b - G e_a,
        # the projection on the tangent at mu_a pointing to mu_b (norm sqrt(1 - G^2))
        def var_tangent(a, b):
            return cov[a, b, b] - 2 * g2 * cov[a, a, b] + g2**2 * cov[a, a, a]
        pooled = (counts * var_tangent(h, c) + counts[c] * var_tangent(c, h)) \
            / (counts + counts[c]).clamp_min(1)
        tang2 = (1.0 - g2**2).clamp_min(torch.finfo(X.dtype).tiny)
        s2 = float((counts * pooled.clamp_min(0) / tang2).sum()) / n
    floor = 1e-6 * sq_norm / n
    return 1.0 / max(s2, floor, torch.finfo(X.dtype).tiny)


class AttentionClustering(ClusterMixin, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Clustering by a trained K-head attention layer with unit heads.

    Fits the heads ``mu_h`` of ``T_mu(x) = sum_h softmax_h(lambda <x, mu_h>) mu_h`` by
    minimizing the empirical risk ``mean ||x - T_mu(x)||^2`` on the sphere (see the
    module docstring for the solver, the ``"auto"`` temperature and annealing).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of heads ``K``.
    temperature : float or "auto", default="auto"
        Inverse temperature ``lambda``; ``"auto"`` is ``1 / s^2`` with ``s^2`` the
        within-cluster variance across each head's nearest boundary (tangent direction to
        the nearest head), after hard spherical Lloyd steps from the initialization.
    init : {"kmeans++", "sphere"} or array of shape (n_clusters, n_features)
        Initial heads: k-means++ seeding (scikit-learn's; on a seeded sample of 100,000
        rows when there are more) normalized to unit norm, uniform random unit vectors,
        or given heads (normalized). With ``temperature="auto"`` a seeding
        (``"kmeans++"``, ``"sphere"``) is replaced by the hard Lloyd heads that estimate
        ``lambda`` (a warm start); given heads are only used to estimate ``lambda`` that
        way and the fit starts from them as given.
    normalize : {"rows", "center-scale"} or None, default="rows"
        Preprocessing, applied in ``fit`` and to every later input: ``"rows"`` projects
        each row on the unit sphere (an all-zero row is an error); ``"center-scale"``
        subtracts the column means and divides by the root-mean-square row norm, both
        learned in ``fit`` (``mean_``, ``scale_``); ``None`` uses the rows as given and
        warns when their mean squared norm is outside ``[1/4, 4]`` (the heads have unit
        norm and cannot then follow the data's scale).
    penalty : {None, "repulsion", "balance"}, default=None
        Regularizer added with weight ``rho``: ``sum_{h<h'} <mu_h, mu_h'>^2``, or
        ``sum_h (N_h - 1/K)^2`` with ``N_h`` the mean attention of head ``h``.
    rho : float, default=0.0
    anneal : bool, default=True
        Start at ``lambda/8`` and double the temperature up to ``lambda``.
    solver : {"fixed-point", "pgd"}, default="fixed-point"
        Safeguarded fixed-point steps (fast) or plain projected gradient descent.
    max_iter : int, default=300
        Steps at the final temperature.
    tol : float, default=1e-6
        Stop when no head moves by more than ``tol`` in one step.
    batch_size : int, optional
        Rows per chunk of each pass (memory only: steps stay full-batch); for
        ``solver="pgd"``, the mini-batch size of stochastic steps.
    step_size : float, default=0.5
        Step of ``solver="pgd"`` (ignored by the fixed-point solver).
    device : str, default="cpu"
        Torch device of the computation; fitted attributes are NumPy arrays.
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, Generator or None
        Seeds the initialization.
    verbose : int, default=0
        ``> 0`` logs each step on the ``"attnclust"`` logger (level INFO).
    callback : callable, optional
        Called with an :class:`IterationInfo` after each fixed-point step (progress bars).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Unit-norm heads, in the preprocessed space.
    labels_ : ndarray of shape (n_samples,)
        ``argmax_h a_h(x)`` of the training rows.
    temperature_ : float
        The temperature used (the resolved value of ``"auto"``).
    n_iter_ : int
        Steps taken, all temperatures together.
    loss_curve_ : ndarray
        Objective after each accepted step, at the temperature in ``temperature_curve_``
        (non-increasing while the temperature is constant).
    temperature_curve_ : ndarray
    converged_ : bool
    n_features_in_ : int
    mean_, scale_ : preprocessing of ``normalize="center-scale"`` (None otherwise)

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1)
    >>> X, z = mix.sample(600, rng=0, return_labels=True)
    >>> est = ac.AttentionClustering(n_clusters=3, normalize=None, random_state=0).fit(X)
    >>> ac.adjusted_rand_index(z, est.labels_)
    1.0
    >>> ac.centroid_distance(est.cluster_centers_, mix.centroids).max < 0.05
    True
    """

    def __init__(self, n_clusters=8, *, temperature="auto", init="kmeans++", normalize="rows",
                 penalty=None, rho=0.0, anneal=True, solver="fixed-point", max_iter=300,
                 tol=1e-6, batch_size=None, step_size=0.5, device="cpu", dtype="float64",
                 random_state=None, verbose=0, callback=None):
        self.n_clusters = n_clusters
        self.temperature = temperature
        self.init = init
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

    # -- input handling -------------------------------------------------------------------
    def _check_params(self, n_samples: int) -> None:
        check_int(self.n_clusters, "n_clusters", 1)
        if n_samples < self.n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        if self.normalize not in _NORMALIZE:
            raise ValueError(f"normalize must be 'rows', 'center-scale' or None, got "
                             f"{self.normalize!r}")
        if self.penalty not in _PENALTIES:
            raise ValueError(f"penalty must be None, 'repulsion' or 'balance', got "
                             f"{self.penalty!r}")
        check_nonnegative(self.rho, "rho")
        if self.solver not in ("fixed-point", "pgd"):
            raise ValueError(f"solver must be 'fixed-point' or 'pgd', got {self.solver!r}")
        check_int(self.max_iter, "max_iter", 1)
        check_nonnegative(self.tol, "tol")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1)
        if self.solver == "pgd":
            check_nonnegative(self.step_size, "step_size")
        _check_device(self.device)
        if not (self.temperature == "auto" if isinstance(self.temperature, str) else True):
            raise ValueError(f"temperature must be a positive number or 'auto', got "
                             f"{self.temperature!r}")
        if not isinstance(self.temperature, str):
            check_temperature(self.temperature)

    def _preprocess(self, X: np.ndarray, *, fitting: bool, dp=None) -> np.ndarray:
        """Apply ``normalize`` to validated rows (float64 NumPy); ``dp``: data-parallel fit."""
        if self.normalize == "rows":
            return _normalize_rows(X)
        if self.normalize == "center-scale":
            if fitting:
                # mean, then RMS norm of the centred rows computed on rows divided by their
                # largest entry (so that no square overflows), summed over ranks with dp
                with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                    total = X.sum(0) if dp is None else _sum_array(X.sum(0), dp)
                    n = X.shape[0] if dp is None else dp.n_total
                    self.mean_ = total / n
                    big = float(np.abs(X - self.mean_).max(initial=0.0))
                if dp is not None:  # a unit common to all ranks, between max and R * max
                    big = float(_sum_array(np.array([big]), dp)[0])
                if not np.isfinite(big):
                    raise ValueError("normalize='center-scale': the column sums or X - mean "
                                     "overflow float64 (entries near 1e308); rescale the data")
                unit = big if big > 0 else 1.0
                dev = np.sum(((X - self.mean_) / unit) ** 2)
                dev = float(dev if dp is None else _sum_array(dev, dp))
                scale = unit * float(np.sqrt(dev / n))
                self.scale_ = scale if scale > 0 else 1.0
            return (X - self.mean_) / self.scale_
        sq = _squared_norms(X, "normalize=None")
        if fitting:
            msq = (float(np.mean(sq)) if dp is None else
                   float(_sum_array(np.sum(sq), dp)) / dp.n_total)
            if not 0.25 <= msq <= 4.0:
                warnings.warn(
                    f"normalize=None but the rows' mean squared norm is {msq:.3g}, far from 1: "
                    "the heads have unit norm; pass normalize='rows' or 'center-scale' to "
                    "bring the data to the sphere's scale", UserWarning, stacklevel=3)
        return X

    def _tensor(self, X: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(X), dtype=_torch_dtype(self.dtype),
                               device=self.device)

    def _init_rows(self, Xn: np.ndarray, gen, dp) -> np.ndarray:
        """Rows the k-means++ seeding sees: all rows, or ``_INIT_SAMPLE`` of them.

        The sample is drawn with the estimator's generator from the global row indices,
        so a data-parallel fit (where each rank fills in the sampled rows it holds and a
        sum over ranks assembles them) seeds from exactly the rows one process would.
        """
        n = Xn.shape[0] if dp is None else dp.n_total
        idx = None if n <= _INIT_SAMPLE else np.sort(gen.choice(n, _INIT_SAMPLE, replace=False))
        if dp is None:
            return Xn if idx is None else Xn[idx]
        idx = np.arange(n) if idx is None else idx
        mine = (idx >= dp.offset) & (idx < dp.offset + Xn.shape[0])
        rows = np.zeros((idx.size, Xn.shape[1]))                 # (m, d), zero where not ours
        rows[mine] = Xn[idx[mine] - dp.offset]
        return _sum_array(rows, dp)                              # x + 0 = x exactly

    def _initial_heads(self, Xt: torch.Tensor, Xn: np.ndarray, gen, dp=None) -> torch.Tensor:
        K, d = self.n_clusters, Xn.shape[1]
        if isinstance(self.init, str):
            if self.init == "kmeans++":
                seed = int(gen.integers(2**31 - 1))
                centers, _ = kmeans_plusplus(self._init_rows(Xn, gen, dp), K, random_state=seed)
            elif self.init == "sphere":
                centers = gen.standard_normal((K, d))
            else:
                raise ValueError(f"init must be 'kmeans++', 'sphere' or an array, got "
                                 f"{self.init!r}")
        else:
            centers = np.array(self.init, dtype=np.float64)
            if centers.shape != (K, d):
                raise ValueError(f"init array must have shape (n_clusters, n_features) = "
                                 f"{(K, d)}, got {centers.shape}")
            if not np.all(np.isfinite(centers)):
                raise ValueError("init array contains NaN or inf")
        norms = np.linalg.norm(centers, axis=1)
        bad = norms == 0
        if bad.any():  # a center at the origin has no direction: draw one at random
            centers[bad] = gen.standard_normal((int(bad.sum()), d))
            norms = np.linalg.norm(centers, axis=1)
        heads = self._tensor(centers / norms[:, None])
        # every rank computed the same heads; rank 0's copy makes sure they agree bitwise
        return heads if dp is None else dp.broadcast(heads)

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit the heads to ``X`` (n_samples, n_features); ``y`` is ignored."""
        return self._fit(X)

    def _fit(self, X, dp: _DataParallel | None = None):
        """``fit``; with ``dp``, ``X`` is this rank's shard of a data-parallel fit."""
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=1)
        self._check_params(X.shape[0] if dp is None else dp.n_total)
        if dp is not None and self.solver != "fixed-point":
            raise ValueError(f"data-parallel fitting needs solver='fixed-point', got "
                             f"{self.solver!r}")
        reduce = None if dp is None else dp.reduce
        self.mean_, self.scale_ = None, None
        Xn = self._preprocess(X, fitting=True, dp=dp)
        gen = as_generator(self.random_state)
        Xt = self._tensor(Xn)
        heads0 = self._initial_heads(Xt, Xn, gen, dp)
        if isinstance(self.temperature, str):  # "auto", checked above
            lloyd, _ = _hard_lloyd(Xt, heads0, _LLOYD_STEPS, reduce=reduce)
            lam = auto_temperature(Xt, lloyd, reduce=reduce)
            if isinstance(self.init, str):  # a seeding is warm-started; given heads are kept
                heads0 = lloyd
        else:
            lam = check_temperature(self.temperature)
        temps = [lam * f for f in _ANNEAL_FACTORS] + [lam] if self.anneal else [lam]
        steps = [_ANNEAL_STEPS] * (len(temps) - 1) + [int(self.max_iter)]
        if self.solver == "fixed-point":
            res = fixed_point_fit(Xt, heads0, temperatures=temps, steps_per_temperature=steps,
                                  tol=float(self.tol), chunk_size=self.batch_size,
                                  penalty=self.penalty, rho=float(self.rho),
                                  callback=self._callback_fn(), reduce=reduce)
            heads, losses, temp_curve = res.heads, res.loss_curve, res.temperature_curve
            n_iter, converged = res.n_iter, res.converged
        else:
            heads, losses, temp_curve, n_iter, converged = self._fit_pgd(Xt, heads0, temps,
                                                                         steps, gen)
        self.cluster_centers_ = heads.detach().cpu().numpy().astype(np.float64)
        self.temperature_ = float(lam)
        self.loss_curve_ = np.asarray(losses, dtype=np.float64)
        self.temperature_curve_ = np.asarray(temp_curve, dtype=np.float64)
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        if not converged:
            warnings.warn(f"AttentionClustering did not converge in max_iter={self.max_iter} "
                          "steps; increase max_iter or tol", UserWarning, stacklevel=2)
        self.labels_ = self._weights(Xn).argmax(1).cpu().numpy().astype(np.int64)
        return self

    def _callback_fn(self):
        if self.callback is None and not self.verbose:
            return None

        def call(info: IterationInfo) -> None:
            if self.verbose:
                _logger.info("iter %d  lambda %.4g  loss %.8g  shift %.2e", *info)
            if self.callback is not None:
                self.callback(info)
        return call

    def _fit_pgd(self, Xt, heads0, temps, steps, gen):
        """Plain PGD (:func:`attnclust.pgd.pgd`, float64 on the data's device)."""
        from .pgd import pgd

        # one temperature per step: the annealing stages, then the target
        schedule = [t for t, s in zip(temps[:-1], steps[:-1], strict=True) for _ in range(s)]
        n_anneal = len(schedule)
        schedule += [temps[-1]] * int(self.max_iter)
        user = self._callback_fn()

        def reporter(offset: int, temperature_of):
            # pgd calls back with the number of updates of that call, ``step``, after the
            # update made at temperature ``temperature_of(step - 1)``
            if user is None:
                return None

            def on_step(step: int, heads: torch.Tensor) -> None:
                user(IterationInfo(offset + step, float("nan"), temperature_of(step - 1),
                                   float("nan")))
            return on_step

        common = dict(step_size=float(self.step_size), penalty=self.penalty,
                      rho=float(self.rho), record_every=1, batch_size=self.batch_size, rng=gen)
        losses: list[float] = []
        temp_curve: list[float] = []
        n_iter = 0
        if n_anneal:  # the annealing stages, without stopping rule
            def anneal_at(t: int) -> float:
                return schedule[min(t, n_anneal - 1)]
            res = pgd(Xt, heads0, temperature=temps[-1], n_steps=n_anneal, tol=0.0,
                      temperature_schedule=anneal_at, callback=reporter(0, anneal_at), **common)
            # record t is the heads before update t, at its temperature; the last record
            # (after the last update) is the first record of the final phase, at lambda
            losses += [float(v) for v in res.history.risk[:-1]]
            temp_curve += [float(v) for v in res.history.temperature[:-1]]
            heads0, n_iter = res.heads, res.n_iter
        res = pgd(Xt, heads0, temperature=temps[-1], n_steps=int(self.max_iter),
                  tol=float(self.tol), callback=reporter(n_iter, lambda t: temps[-1]), **common)
        losses += [float(v) for v in res.history.risk]
        temp_curve += [float(v) for v in res.history.temperature]
        n_iter += res.n_iter
        heads = torch.as_tensor(res.heads, dtype=Xt.dtype, device=Xt.device)
        return heads, losses, temp_curve, int(n_iter), bool(res.converged)

    # -- prediction -------------------------------------------------------------------------
    def _validated(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self._preprocess(X, fitting=False)

    def _weights(self, Xn: np.ndarray) -> torch.Tensor:
        heads = self._tensor(self.cluster_centers_)
        return softmax_heads(self.temperature_ * (self._tensor(Xn) @ heads.T))

    def predict_proba(self, X) -> np.ndarray:
        """Attention weights ``a_h(x)``, shape (n_samples, n_clusters), rows sum to one."""
        return self._weights(self._validated(X)).cpu().numpy()

    def predict(self, X) -> np.ndarray:
        """Index of the most-attended head, ``argmax_h a_h(x)``."""
        return self._weights(self._validated(X)).argmax(1).cpu().numpy().astype(np.int64)

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def _outputs(self, Xn: np.ndarray) -> np.ndarray:
        """``T_mu(x)`` of preprocessed rows, ``(n, d)``: what ``transform`` and ``score`` use."""
        return (self._weights(Xn) @ self._tensor(self.cluster_centers_)).cpu().numpy()

    def transform(self, X) -> np.ndarray:
        """Layer outputs ``T_mu(x)`` of the preprocessed rows, shape (n_samples, n_features)."""
        return self._outputs(self._validated(X))

    def score(self, X, y=None) -> float:
        """Minus the empirical risk, ``-mean ||x - T_mu(x)||^2`` (higher is better)."""
        Xn = self._validated(X)
        return -float(np.mean(np.sum((Xn - self._outputs(Xn)) ** 2, axis=1)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

"""The number of clusters (``n_clusters="auto"``): partitions scored by the likelihood of
the layer with shaped heads, and a test for no structure.

At ``lambda = 1`` the attention of shaped heads (:mod:`attnclust.cluster.mixture.shaped`) is the
posterior of a Gaussian mixture, ``a_h(x) = softmax_h(log pi_h + log N(x; mu_h, Sigma_h))``, so the
layer has a likelihood, and a likelihood with a complexity penalty scores each ``K``
(Schwarz's BIC; Fraley and Raftery's mclust, which also lets the BIC choose the shape):

    BIC(K) = min over shapes of  -2 log L_K + p_K log n,
    p_K = K q + (K - 1) + 1,   q = d + 1 (spherical), 2 d (diag), d + d (d + 1) / 2 (full),

computed in the **standardized working space** ``z_j = (x_j - m_j) / s_j`` (each feature
centred and scaled to unit variance: the partitions below are k-means cells, which
depend on the units; the likelihoods themselves do not, up to a constant).

- **Partitions.** For each ``K = 1, 2, ...``: the best of ``settings.k_init`` k-means runs in that
  space (:func:`attnclust.cluster.kmeans.batch.best_of_seedings`), or, when its ``W_K``
  (the within-cell sum of squares) is lower, **the cells of ``K + 1`` merged**: the two
  cells whose merge raises ``W`` least (Ward's cost) become one head, then Lloyd's steps
  from those ``K`` heads; tried as each ``K + 1`` is scanned, and down ``K - 1, ...``
  while it lowers ``W`` (three seedings can all join two separated clusters and cut a
  third; the cells of ``K + 1``, the third cut in two, merged, do not). ``BIC(K)`` is
  computed once ``K + 1``'s merge has been tried (again when a merge cascading down
  replaces cells already scored).
- **The mixture of each partition.** Each cell gives a head (its mean, covariance of the
  shape and weight), beside a **uniform background** of density ``1 / V`` (``V`` the
  volume of the rows' box along their principal axes) with its own weight ``pi_0`` (its
  one parameter, the last ``+ 1`` of ``p_K``): scattered rows then need no Gaussian of
  their own. ``settings.em_steps`` EM steps (the shaped layer's fixed point at ``lambda
  = 1``) move the heads to the likelihood's nearby maximum; ``log L_K`` is the last's.
  Each shape gets its own EM; ``BIC(K)`` is the least of the three (full covariances for
  elongated clusters; spherical ones where ``d^2`` parameters per head are more than the
  rows support, e.g. 20 features and 100-300 rows per cluster). A shape whose EM leaves a head
  at the covariance floor in some direction (within 1% of the floor of the features'
  typical spread, not of the grid below) on fewer rows than its covariance needs (2;
  ``d + 1`` for a full one) is not scored at that ``K``: such a Gaussian has the floor's
  likelihood, which wins the BIC without bound; a head at the floor on more rows (equal
  rows, a constant feature) is a cluster. Where every ``K >= 2`` has such a head, they
  are scored as they are, and the choice says so (weak). The chosen ``K*`` is the
  fewest clusters ``K >= 2`` whose BIC is within ``settings.bare_mention`` of the least:
  Kass and Raftery's scale (1995) calls a BIC difference of 0 to 2 evidence "not worth
  more than a bare mention", and such evidence adds no cluster (near ties: uniform noise
  taken by one or two more Gaussians).
- **The data's resolution.** A feature recorded on a grid of step ``h`` (integer counts,
  grades 0-3, lengths to 0.1 cm) cannot resolve a variance below ``h^2 / 12``, the
  variance of the rounding (Sheppard's correction): a Gaussian narrower than that along
  it describes the grid, not a cluster, and its likelihood grows without bound (more
  components win the BIC: 8 k-means cells beat two clusters of grades 0-3,
  ``tests/test_auto_k.py``). The heads' covariance floor along each standardized
  feature is therefore ``max(1e-6, h_j^2 / 12)``, ``h_j`` the least gap between the
  feature's distinct values (:func:`resolution_floor`; continuous features have gaps
  far below, and keep ``1e-6``); the choice is then that of the rows spread uniformly
  within their grid cells. The ``1e-6`` itself is relative to the feature's typical
  spread, ``s_j^2 = (IQR_j / 1.349)^2`` (the variance of a Gaussian of that quartile
  range; at most 1, the standardized variance): one row at 1e5 beside three blobs
  inflated every standard deviation 1,600-fold, and the blobs became narrower than a
  floor of ``1e-6`` (``tests/test_auto_k.py``). It stays above the rounding of the EM's
  covariances, ``1e3 eps max_i z_i^2``.
- **The scan stops** once ``BIC(K)`` has stayed above the least so far for
  ``settings.patience`` values of ``K`` in a row and no shape's BIC, falling by ``r`` at
  the last ``K``, is within ``patience r`` of that least (or at ``max_clusters``); the
  ``K`` not scanned have ``BIC = inf``. Full covariances that each covered a few of 16
  clusters in 32-D had the least BIC at ``K = 5``, while the spherical one fell by
  5,000-10,000 a step to its least (and the least of all) at 16: the scan stopped at 8.
- **How sure.** ``exp(-BIC(K) / 2)`` normalized over ``K >= 2`` is the BIC's
  approximation of the posterior probability of each ``K`` (equal priors); ``weight`` is
  that of ``K*``.
- **No structure.** ``K = 1`` only when **both** tests say so: one component has the
  least BIC by strong evidence (``BIC(1) <= BIC(K) - settings.strong_evidence`` for every
  ``K >= 2``, 6 by default, "strong" on Kass and Raftery's scale; the mixture above with one
  Gaussian and the background), **and** the rows hold no structure by the test below.
  Where the test finds structure absent, not only unproven (``z < -structure_z``: the
  cells remove less scatter than in uniform rows, as a blob's do), positive evidence
  (``settings.bare_mention``, 2) suffices: an elongated Gaussian of 500 rows had ``BIC(1)``
  5.5 below at ``z = -12.8`` (``tests/test_auto_k.py``). Either test alone errs on real
  data: the gap test calls nested, touching and non-convex clusters structureless
  (``K = 1`` on 69 of 303 multi-cluster fits of the development battery, measured once
  in 0.3), and the BIC splits one non-Gaussian cluster into several. Together, ``K = 1``
  on 5 of the battery's 475 multi-cluster fits (95 sets with 2 to 12 clusters, seeds
  0-4: one table whose rows are the points of a grid), while a Gaussian blob, round or
  elongated, is still one cluster (every seed); a uniform square, a ring and a sphere's
  surface are split, with a weak choice saying why (``attnclust bench --only auto_k``:
  both rates). Where ``K*`` leaves fewer than ``settings.thin_rows`` rows per cluster (a
  few rows, on which Gaussians on one or two rows each win the BIC without bound: 5 rows
  of noise were 4 clusters), the test decides alone. The test (a gap statistic at
  ``K*``, after Tibshirani, Walther and Hastie 2001): the k-means cells of ``K*``
  remove a share of the scatter, ``D = log(W_1 / W_K*)`` (``W_K`` the within-cell sum
  of squares); the same is computed on ``settings.n_references`` reference sets drawn
  uniformly in the rows' principal box (one k-means run each). The rows hold structure
  when ``z = (D - mean D_ref) / (sd D_ref sqrt(1 + 1/B)) > settings.structure_z`` (3), in
  the standardized space **or**, when that finds none, in the rows' own units (``z`` is
  then the larger of the two: standardizing stretches the noise across a separation
  along one feature). A Gaussian blob gives ``z`` far below 0 in both. A uniform square
  is the null, but its ``z`` is not ``t_19``: over 300 squares (500 rows) its mean was
  0.55 and its standard deviation 1.0, and with the second space 6 of the 300 passed 3.
  The test and its early stop: :mod:`attnclust.cluster.choice.structure`.
- **Clusters, not components.** Where ``K*`` is not 1, ``K`` is the number of modes of
  the mixture of ``K*`` components (``K*``'s least-BIC shape and EM), at least 2 and at
  most ``K*``: each component's mean climbs the mixture's density by modal EM, and the
  components that reach one mode are one cluster
  (:func:`~attnclust.cluster.choice.modes.mixture_modes`). Two clusters peaked at their
  centres with wide tails take 6-10 components of least BIC, and have two modes
  (``tests/test_modes.py``); Gaussian clusters more than two spreads apart keep one
  component each. ``K = 2`` where the mixture has one mode: one cluster is the test's.

The choice is **weak** (a :class:`WeakChoiceWarning` at ``fit``) when ``weight < 0.9``,
when ``K = K* = max_clusters`` (the rows may hold more), when ``K*``'s mixture has one
mode, when one of ``K*``'s k-means cells
holds fewer than ``settings.thin_rows`` rows (a Gaussian on a row or two wins the BIC
without bound: 30 rows of three blobs gave six "clusters", one of one row), when the
structure is only marginal (``3 < z < 5``), or when the gap test found none and the BIC alone chose
``K* >= 2``. Where the fit's heads then hold fewer clusters than these components
(:mod:`attnclust.cluster.head_count`), the first three doubts are moot and ``fit`` warns
only for the last two (``z < settings.marginal_z``); where they hold more (a shape that
convex cells cut through, which the gap test's k-means cells miss), for none.

Notation
--------
==========  ===================  ================================================
paper       code                 meaning
==========  ===================  ================================================
``K*``      ``best``             the fewest ``K >= 2`` within 2 of the least BIC
``K``       ``n_clusters``       the modes of ``K*``'s mixture (at least 2), or 1
``BIC(K)``  ``bic``              ``(max_clusters,)``, ``K = 1..max_clusters``
``pi_0``    (background weight)  weight of the uniform background
``D``       (gap)                ``log(W_1 / W_K*)`` of the rows' k-means cells
``z``       ``structure_z``      ``D`` against the uniform references
==========  ===================  ================================================
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from ..._validation import as_generator
from ..degenerate import user_stacklevel
from ..head_graph import distinct_rows
from ..mixture.candidates import heads_at_floor, score_lean
from ..mixture.covariance import as_covariance
from ..mixture.em import LeanEM, RowProducts
from ..settings import FitSettings
from .modes import mixture_modes
from .structure import early_bound, kmeans_cells, principal_box, structure_z

__all__ = ["COVARIANCE_TYPES", "KChoice", "WeakChoiceWarning",
           "bic_gain", "choose_n_clusters", "early_bound", "mixture_bic",
           "resolution_floor", "standardized", "structure_z"]

COVARIANCE_TYPES = ("spherical", "diag", "full")   # shapes the BIC chooses among
_REG = 1e-6            # covariance floor in the standardized space (unit variances)
_ROUNDING = 1e3        # the floor's least multiple of eps |z|^2 (the EM's rounding)


class WeakChoiceWarning(UserWarning):
    """``n_clusters="auto"`` chose ``K`` on weak evidence (``n_clusters_reason_`` says why)."""


class KChoice(NamedTuple):
    """The choice of :func:`choose_n_clusters`, its scores and why."""

    n_clusters: int
    """The modes of ``K*``'s mixture, at least 2 (module docstring, *Clusters, not
    components*), or 1 when the rows hold no structure by the test and one component has
    the least BIC by strong evidence (positive where the test finds structure absent),
    or ``K*`` leaves too few rows per cluster (module docstring, *No structure*)."""
    best: int
    """The fewest ``K >= 2`` whose BIC is within ``settings.bare_mention`` of the least."""
    bic: np.ndarray
    """BIC of ``K = 1..max_clusters``, ``(max_clusters,)``."""
    weight: float
    """BIC weight of ``best`` among ``K >= 2`` (module docstring)."""
    structure_z: float
    """The structure test's ``z`` at ``best`` (of the references drawn when it stopped)."""
    weak: bool
    reason: str
    covariance_type: str = "full"
    """The heads' shape of least BIC at ``best``."""


def standardized(rows: np.ndarray, max_dim: int = FitSettings.max_dim) -> np.ndarray:
    """Rows with each feature centred and scaled to unit variance, the constant features
    left out (they separate no clusters, and a zero-width side of the background's box
    would give it an infinite density), and those constant up to rounding (a range within
    1024 roundings of the feature's magnitude, which scaling would make unit noise: a
    column computed as a constant); wider than ``max_dim`` features: their leading
    ``max_dim`` principal components. Each feature is first divided by its largest
    magnitude, so that its squares neither overflow nor underflow (rows of ``1e170`` or
    ``1e-170``); the result does not depend on that scale.

    Examples
    --------
    >>> Z = standardized(np.array([[0.0, 10.0, 5.0], [2.0, 30.0, 5.0], [4.0, 50.0, 5.0]]))
    >>> Z.shape, Z.std(0).round(12).tolist(), Z.mean(0).round(12).tolist()
    ((3, 2), [1.0, 1.0], [0.0, 0.0])
    """
    X = np.asarray(rows, dtype=np.float64)
    varies = X.max(0) - X.min(0) > 1024 * np.finfo(np.float64).eps * np.abs(X).max(0)
    X = X[:, varies]
    X = X / np.abs(X).max(0)
    X = X - X.mean(0)
    Z = X / X.std(0)
    if Z.shape[1] > max_dim:
        _, _, Vt = np.linalg.svd(Z, full_matrices=False)
        Z = Z @ Vt[:max_dim].T
    return Z


def _principal_log_volume(Z: np.ndarray) -> float:
    """The log-volume of the rows' principal box: the uniform background's density is its
    opposite. Each side is at least ``sqrt(12 * 1e-6)``, the width of a uniform of the
    heads' least covariance: along a column that repeats others (a sum, a copy) the box
    has no width, and a background denser than any head took every row (three blobs
    beside a copy of a column were two clusters)."""
    _, lo, hi = principal_box(Z)
    return float(np.log(np.maximum(hi - lo, math.sqrt(12.0 * _REG))).sum())


def resolution_floor(Z: np.ndarray, reg: float = _REG) -> np.ndarray:
    """The covariance floor ``(d,)`` along each feature of the standardized rows ``Z``
    ``(n, d)`` (module docstring, *The data's resolution*): ``max(reg min(1, s^2),
    1e3 eps max_i z_i^2, min(h^2 / 12, v))``, ``s`` the feature's typical spread (its
    quartile range over 1.349, else its 5-95% range over 3.29, else 1), the second term
    the rounding of the EM's covariances, ``h`` the least gap between its distinct values
    and ``v`` its variance (a rare binary feature's grid is wider than its spread).
    Principal components (rows wider than ``max_dim``) lie on no grid.

    Examples
    --------
    >>> Z = np.array([[0.0, 0.11], [1.0, 0.5], [2.0, 0.93], [2.0, 0.2]])
    >>> resolution_floor(Z).round(6).tolist()                # a grid of step 1, and not
    [0.083333, 0.00067]
    """
    floor = _spread_floor(Z, reg)
    for j in range(Z.shape[1]):
        gaps = np.diff(np.unique(Z[:, j]))
        if len(gaps):
            floor[j] = max(floor[j], min(float(gaps.min()) ** 2 / 12.0, float(Z[:, j].var())))
    return floor


def _spread_floor(Z: np.ndarray, reg: float = _REG) -> np.ndarray:
    """The part of :func:`resolution_floor` set by each feature's typical spread and by
    the EM's rounding, without the grid's."""
    q05, q25, q75, q95 = np.percentile(Z, [5.0, 25.0, 75.0, 95.0], axis=0)
    # the spread of a Gaussian of that quartile range, or of that 5-95% range where the
    # middle half of the rows share one value (counts mostly zero)
    typical = np.where(q75 > q25, (q75 - q25) / 1.349, (q95 - q05) / 3.29)
    # and above the rounding of the EM's covariances, E[z^2] - E[z]^2: a few eps |z|^2 (a
    # row at 1e10 beside blobs left a floor of 1e-26, and a covariance not positive definite)
    rounding = _ROUNDING * np.finfo(np.float64).eps * (Z * Z).max(0, initial=0.0)
    return np.maximum(float(reg) * np.where(typical > 0, np.minimum(typical ** 2, 1.0), 1.0),
                      rounding)


def mixture_bic(Z: np.ndarray, labels: np.ndarray, n_clusters: int, *,
                log_volume: float, steps: int = FitSettings.em_steps,
                covariance_type: str = "full", products: RowProducts | None = None,
                sample_weight: np.ndarray | None = None,
                floor: np.ndarray | None = None,
                least_floor: np.ndarray | None = None) -> float:
    """BIC of the mixture of ``covariance_type`` heads with a uniform background
    (density ``exp(-log_volume)``) started from the cells ``labels`` ``(n,)`` and ``steps``
    EM steps (module docstring): the shaped layer's EM at ``lambda = 1``
    (:class:`~attnclust.cluster.mixture.em.LeanEM`, covariance floor ``floor`` ``(d,)``,
    ``None``: 1e-6 along every feature; no stopping rule but a
    step that would lower the likelihood), scored as the shape choice scores its candidates
    (:class:`~attnclust.cluster.mixture.candidates.ShapeScore`). ``products``: the centred rows'
    :class:`~attnclust.cluster.mixture.em.RowProducts`, shared by the calls on them;
    ``sample_weight``: the rows' weights ``(n,)`` (the likelihood of ``n`` rows, weighted).
    ``least_floor`` ``(d,)``: the BIC is ``inf`` where a head sits at it on too few rows
    (its likelihood the floor's, not a cluster's: :func:`_degenerate`).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Z = np.r_[rng.normal(-3, 1, (200, 2)), rng.normal(3, 1, (200, 2))]
    >>> one, two = (mixture_bic(Z, lab, k, log_volume=np.log(np.ptp(Z, 0)).sum())
    ...             for lab, k in ((np.zeros(400, int), 1), (np.repeat([0, 1], 200), 2)))
    >>> bool(two < one)
    True
    """
    shape = as_covariance(covariance_type)
    em = _mixture_em(Z, labels, n_clusters, shape, log_volume, steps, products,
                     sample_weight, floor)
    if least_floor is not None and _degenerate(em.result(), shape, least_floor):
        return math.inf
    # the shape's mixture parameters (means, weights, covariances), and the background's
    d = em.X.shape[1]
    return score_lean(em.state.lse, em.state.top, em.w, shape,
                      shape.n_parameters(n_clusters, d) + 1, d, 0.0).bic


def _mixture_em(Z, labels, n_clusters, shape, log_volume, steps, products=None,
                sample_weight=None, floor=None) -> LeanEM:
    """:func:`mixture_bic`'s EM after its ``steps`` (on the centred rows'
    :class:`~attnclust.cluster.mixture.em.RowProducts`, when not given)."""
    if products is None:   # centred: the likelihood is the same, the moments' scale smaller
        products = RowProducts(Z - Z.mean(0), n_clusters)
    d = products.X.shape[1]
    em = LeanEM(products.X, n_clusters, shape, np.full(d, _REG) if floor is None else floor,
                labels, tol=-math.inf,
                products=products, log_background=-log_volume, sample_weight=sample_weight)
    for _ in range(steps):
        if not em.step():
            break
    return em


def _degenerate(fit, shape, least_floor: np.ndarray) -> bool:
    """Whether a head of the EM's ``fit`` sits at ``least_floor`` in some direction on
    fewer rows than its covariance needs (2; ``d + 1`` for a full one): its likelihood is
    the floor's. A cluster of many equal rows, or of rows constant along a feature, sits
    there on enough rows, and counts."""
    need = fit.means.shape[1] + 1 if shape.joint else 2
    at_floor = heads_at_floor(shape, fit.covariances, least_floor)
    return bool((at_floor & (fit.counts[:len(at_floor)] < need)).any())


def bic_gain(rows: np.ndarray, labels: np.ndarray, cells: np.ndarray, *,
             sample_weight: np.ndarray | None = None) -> float:
    """``(BIC(labels) - BIC(cells)) / n``: how much better the mixture started from the
    partition ``cells`` ``(n,)`` describes the rows ``(n, d)`` than the one started from
    ``labels`` ``(n,)``, per row; each a :func:`mixture_bic` of full covariances (unchanged,
    as BIC, by an affine map of the rows) on the :func:`standardized` rows, with their
    principal box's background and their :func:`resolution_floor`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-3, 1, (200, 2)), rng.normal(3, 1, (200, 2))]
    >>> halves = np.repeat([0, 1], 200)
    >>> quarters = np.repeat([0, 1, 2, 3], 100)          # each blob cut in two
    >>> bool(bic_gain(X, halves, quarters) < 0 < bic_gain(X, np.zeros(400, int), halves))
    True
    """
    Z = standardized(rows)
    log_volume = _principal_log_volume(Z)
    parts = [np.unique(part, return_inverse=True)[1] for part in (labels, cells)]
    counts = [int(part.max()) + 1 for part in parts]
    products = RowProducts(Z - Z.mean(0), max(counts))     # shared by the two mixtures
    floor = resolution_floor(Z)
    bic = [mixture_bic(Z, part, k, log_volume=log_volume, products=products,
                       sample_weight=sample_weight, floor=floor)
           for part, k in zip(parts, counts, strict=True)]
    return (bic[0] - bic[1]) / len(Z)


def _shape_bics(products, labels, n_clusters, log_volume, steps: int,
                floor: np.ndarray, least_floor: np.ndarray) -> list[tuple[float, str]]:
    """The BIC of each shape of :data:`COVARIANCE_TYPES` on the centred rows'
    :class:`~attnclust.cluster.mixture.em.RowProducts`, with the shape (``inf`` for a
    shape with a head at ``least_floor``: :func:`mixture_bic`)."""
    return [(mixture_bic(products.X, labels, n_clusters, log_volume=log_volume,
                         steps=steps, covariance_type=c, products=products,
                         floor=floor, least_floor=least_floor), c)
            for c in COVARIANCE_TYPES]


def _merged(Z, cells, rng):
    """``K - 1`` cells from the ``K`` of ``cells``: the two whose merge raises ``W`` least
    (Ward's cost ``n_a n_b / (n_a + n_b) |c_a - c_b|^2``) become one head, then Lloyd's
    steps from those ``K - 1`` heads."""
    labels, _, heads = cells
    n = np.bincount(labels, minlength=len(heads)).astype(np.float64)
    cost = (np.outer(n, n) / np.maximum(n[:, None] + n[None], 1.0)
            * ((heads[:, None] - heads[None]) ** 2).sum(-1))
    np.fill_diagonal(cost, np.inf)
    a, b = np.unravel_index(int(np.argmin(cost)), cost.shape)
    joined = (n[a] * heads[a] + n[b] * heads[b]) / max(n[a] + n[b], 1.0)
    return kmeans_cells(Z, len(heads) - 1, rng,
                        init=np.r_[np.delete(heads, [a, b], 0), joined[None]])


def _scan(Z, top, gen, log_volume, settings: FitSettings) -> tuple[list, list, bool]:
    """:func:`_scan_once` without the mixtures that put a head at the floor on too few rows
    (:func:`_degenerate`), or, where every ``K >= 2`` does (the k-means cells of one far row
    alone), with them; and whether it fell back so."""
    cells, scores = _scan_once(Z, top, gen, log_volume, settings, strict=True)
    if np.isfinite([b for b, _ in scores[1:]]).any():
        return cells, scores, False
    return *_scan_once(Z, top, gen, log_volume, settings, strict=False), True


def _catching_up(shapes: list, least: float, patience: int) -> bool:
    """Whether a shape's BIC, falling by ``r`` at the last ``K``, stands less than
    ``patience`` times ``r`` above the ``least`` BIC (``shapes``: every shape's ``(BIC,
    shape)`` at ``K = 1, 2, ...``): at that pace it reaches the least within the patience."""
    now, before = (np.array([b for b, _ in shapes[i]]) for i in (-1, -2))
    with np.errstate(invalid="ignore"):
        fall = before - now
        return bool(np.any(np.isfinite(fall) & (fall > 0) & (now - least < patience * fall)))


def _scan_once(Z, top, gen, log_volume, settings: FitSettings, *, strict: bool
               ) -> tuple[list, list]:
    """The cells (:func:`kmeans_cells`) and the least BIC with its shape (of :func:`_shape_bics`, at
    the rows' :func:`resolution_floor`) of
    ``K = 1, 2, ...`` until the BIC has risen ``settings.patience`` times in a row with no
    shape catching up (:func:`_catching_up`) or ``K = top``
    (module docstring); the cells may hold one ``K`` more than the scores. ``strict``: a
    mixture with a head at the floor is not scored (:func:`mixture_bic`)."""
    cells = [kmeans_cells(Z, 1, gen)]
    tie = sum(Z.shape) * np.finfo(np.float64).eps  # W_K rounding: n terms of d products
    products = RowProducts(Z - Z.mean(0), top)          # shared by every K's mixtures
    floor = resolution_floor(Z)
    spread = _spread_floor(Z) if strict else None

    shapes = []                          # every shape's (BIC, shape) at K = 1, 2, ...

    def score(labels, k):                # K = k's, in place of any earlier scores of k
        shapes[k - 1:k] = [_shape_bics(products, labels, k, log_volume, settings.em_steps,
                                       floor, spread)]
    score(cells[0][0], 1)
    for k in range(2, top + 2):        # K = k - 1 is scored once K = k's cells are known
        if k <= top:
            cells.append(kmeans_cells(Z, k, gen, settings.k_init))
            j = k - 1          # K - 1 from K's cells merged, down while that lowers W_{K-1}
            while j >= 2:
                fewer = _merged(Z, cells[j], gen)
                if fewer[1] >= cells[j - 1][1] * (1.0 - tie):
                    break
                cells[j - 1] = fewer
                if j - 1 < len(shapes):                 # K = j was scored: again
                    score(fewer[0], j)
                j -= 1
        if k >= 3:
            score(cells[k - 2][0], k - 1)
            least = [min(bics)[0] for bics in shapes[1:]]           # K >= 2, least shape
            if k - 1 - (2 + int(np.argmin(least))) >= settings.patience and \
                    not _catching_up(shapes, min(least), settings.patience):
                break                   # risen that many times in a row, none falling to it
    return cells, [min(bics) for bics in shapes]


def _mode_count(Z, labels, best, shape, log_volume, s: FitSettings) -> int:
    """How many modes the mixture of ``best`` heads of ``shape`` started from the cells
    ``labels`` (:func:`mixture_bic`'s) has (:mod:`~attnclust.cluster.choice.modes`)."""
    fit = _mixture_em(Z, labels, best, as_covariance(shape), log_volume, s.em_steps,
                      floor=resolution_floor(Z)).result()
    try:            # a covariance that rounding left not positive definite: no count
        return int(mixture_modes(fit.means, fit.covariances, fit.weights[:best]).max()) + 1
    except np.linalg.LinAlgError:
        return best


def _clusters_of_modes(modes: int, best: int) -> tuple[int, str, list[str]]:
    """``K`` from the ``modes`` of ``K*``'s mixture (module docstring, *Clusters, not
    components*), what the reason adds, and the doubt of one mode."""
    K = max(2, min(best, modes))
    said = (f"; its {best} components climb to {modes} mode{'s' * (modes > 1)} of their "
            "density (modal EM)") if K < best else ""
    return K, said, ["one mode: K = 2, the fewest clusters above one (one cluster is the "
                     "structure test's)"] if modes == 1 < best else []


def _few_rows_doubts(labels: np.ndarray, best: int, floored: bool, s: FitSettings
                     ) -> list[str]:
    """The doubts of clusters on a row or two: a cell of ``K*`` with fewer than
    ``s.thin_rows`` rows; a scan where every ``K >= 2`` put a Gaussian on too few rows
    (``floored``: :func:`_scan`)."""
    smallest = int(np.bincount(labels, minlength=best).min())
    doubts = [f"a cluster of {smallest} row{'s' * (smallest != 1)}, fewer than "
              f"{s.thin_rows}: its Gaussian may fit those rows, not a cluster"
              ] if smallest < s.thin_rows else []
    if floored:
        doubts.append("every K >= 2 put a Gaussian on fewer rows than its covariance needs "
                      "(its likelihood the floor's), and was scored so")
    return doubts


def choose_n_clusters(rows: np.ndarray, max_clusters: int, *, random_state=None,
                      settings: FitSettings | None = None) -> KChoice:
    """``n_clusters="auto"``: the modes (at least 2) of the mixture of the fewest ``K*``
    components in ``2..max_clusters`` whose BIC is within ``settings.bare_mention`` of the
    least, or 1 when the structure test finds no
    structure and one component has the least BIC by ``settings.strong_evidence``
    (``settings.bare_mention`` where the test finds structure absent; or ``K*`` leaves
    fewer than ``settings.thin_rows`` rows per cluster; module docstring),
    on a sample of ``settings.k_rows`` rows drawn with ``random_state`` when there are
    more; ``settings``: the choice's settings
    (:class:`~attnclust.cluster.settings.FitSettings`, the defaults when ``None``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(c, 1.0, (150, 2)) for c in ((0, 0), (8, 0), (0, 8))])
    >>> choice = choose_n_clusters(X * [1.0, 1000.0], 6, random_state=0)
    >>> choice.n_clusters, choice.weak
    (3, False)
    >>> choose_n_clusters(rng.normal(size=(400, 2)), 6, random_state=0).n_clusters
    1
    """
    gen = as_generator(random_state, "random_state")
    s = FitSettings() if settings is None else settings
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape[0] > s.k_rows:
        rows = rows[np.sort(gen.choice(rows.shape[0], s.k_rows, replace=False))]
    Z = standardized(rows, s.max_dim)
    n = Z.shape[0]
    top = int(min(max_clusters, n - 1))
    if max_clusters < 2:
        return KChoice(1, 1, np.full(1, np.inf), 1.0, math.nan, False,   # nothing scored
                       "K = max_clusters = 1: no other K to compare")
    if top < 2:
        return KChoice(1, 1, np.zeros(1), 1.0, 0.0, True,
                       f"too few rows ({n}) to compare K = 1 with K >= 2")
    if Z.shape[1] == 0:
        return KChoice(1, 1, np.zeros(1), 1.0, 0.0, False,
                       "no spread: every row is the same, one cluster")
    log_volume = _principal_log_volume(Z)
    cells, scores, floored = _scan(Z, top, gen, log_volume, s)
    bic = np.full(top, np.inf)
    bic[:len(scores)] = [b for b, _ in scores]
    least = 2 + int(np.argmin(bic[1:]))
    best = 2 + int(np.flatnonzero(bic[1:] <= bic[least - 1] + s.bare_mention)[0])
    shape = scores[best - 1][1]
    rel = -(bic[1:] - bic[best - 1]) / 2.0
    weight = float(1.0 / np.exp(rel).sum())
    test = dict(n_references=s.n_references, looks=s.looks, level=s.early_level)
    z = structure_z(Z, cells[best - 1][1], best, gen, **test)
    own = rows[:, rows.min(0) < rows.max(0)]             # the test in the rows' own units,
    own = own / np.abs(own).max()                        # brought to a magnitude of one
    own = own - own.mean(0)                              # (D does not depend on it)
    if own.shape[1] > s.max_dim:
        own = own @ np.linalg.svd(own, full_matrices=False)[2][:s.max_dim].T
    if z <= s.structure_z and float((own ** 2).sum()) > 0:
        z = max(z, structure_z(own, kmeans_cells(own, best, gen, s.k_init)[1], best, gen,
                                **test))
    fewer = (f", within {s.bare_mention:g} of it (not worth more than a bare mention) at K = "
             f"{best}, the fewest" if best < least else "")
    said = (f"BIC of the mixture ({shape} covariances, uniform background) is least at K = "
            f"{least} among 2..{len(scores)}{fewer}, BIC weight {weight:.2f}; structure "
            f"test z = {z:.1f}")
    one = float(bic[0] - bic[least - 1])        # BIC(1) above the least of K >= 2
    # on a few rows per cluster, Gaussians on one or two rows each win the BIC unboundedly
    thin = n < s.thin_rows * best
    # one component by strong evidence; by positive evidence (bare_mention) where the gap
    # test finds structure absent, not only unproven (z below -structure_z: a blob's cells)
    evidence = s.bare_mention if z < -s.structure_z else s.strong_evidence
    if z <= s.structure_z and (one <= -evidence or thin):
        bic_one = (f"one component has the least BIC (BIC(1) {one:+.1f} from the least of "
                   f"K >= 2)" if not thin else f"K = {best} leaves fewer than {s.thin_rows} "
                   f"rows per cluster, too few for its BIC")
        distinct = distinct_rows(rows)            # a few points, repeated: say so
        few = (f"; weak: the rows take only {distinct} distinct values, which the test reads "
               f"at the data's resolution (pass n_clusters={distinct} to keep them apart)"
               if distinct <= top else "; weak: too few rows to tell" if thin or
               _few_rows_doubts(cells[best - 1][0], best, False, s) else "")  # (a cell of a few)
        return KChoice(1, best, bic, weight, z, bool(few),
                       f"no structure: the {best} k-means cells remove no more scatter than "
                       f"in uniform rows (z = {z:.1f} <= {s.structure_z:g}) and {bic_one}; "
                       f"{said}{few}", shape)
    K, more, one_mode = _clusters_of_modes(
        _mode_count(Z, cells[best - 1][0], best, shape, log_volume, s), best)
    said += more
    doubts = ([f"other K are close (BIC weight {weight:.2f} < {s.confident:g})"]
              if weight < s.confident else [])
    if z <= s.structure_z:
        doubts.append(f"the k-means cells remove no more scatter than in uniform rows (z = "
                      f"{z:.1f} <= {s.structure_z:g}), but one component is not the BIC's "
                      f"choice by {evidence:g} (BIC(1) {one:+.1f} from the least of "
                      "K >= 2: one cluster of a non-Gaussian shape, clusters nested or "
                      "touching, or too few rows to tell)")
    doubts += _few_rows_doubts(cells[best - 1][0], best, floored, s) + one_mode
    if K == best == top < n - 1:           # (the scan reached top: it had not stopped)
        doubts.append(f"K = max_clusters = {top}: the rows may hold more, raise max_clusters")
    if s.structure_z < z < s.marginal_z:
        # as 'said' shows it, but 4.97 as 4.9, not "5.0 < 5"
        shown = z if round(z, 1) < s.marginal_z else math.floor(z * 10.0) / 10.0
        doubts.append(f"the structure is marginal (z = {shown:.1f} < {s.marginal_z:g})")
    reason = said + ("; weak: " + "; ".join(doubts) if doubts else "; confident")
    return KChoice(K, best, bic, weight, z, bool(doubts), reason, shape)


def warn_if_weak(choice: KChoice, *, clusters: int | None = None) -> None:
    """A :class:`WeakChoiceWarning` with the reason when ``choice`` is weak; ``clusters``:
    the fit's count of clusters where its heads joined the components into fewer."""
    if choice.weak:
        K = choice.n_clusters if clusters in (None, choice.n_clusters) else \
            f"{clusters} (the heads' clusters; the mixture's choice was {choice.n_clusters})"
        warnings.warn(f"n_clusters='auto' chose K = {K} on weak evidence: {choice.reason}",
                      WeakChoiceWarning, stacklevel=user_stacklevel())

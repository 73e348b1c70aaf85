"""Clustering with the trained K-head attention layer: the ``AttentionClustering`` estimator.

The model is the K-head layer of :mod:`attnclust.layer.heads`,

    a_h(x)  = softmax_h( lambda <x, mu_h> - b_h ),      T_mu(x) = sum_h a_h(x) mu_h,

fitted by minimizing the empirical risk ``f(mu) = (1/n) sum_i ||x_i - T_mu(x_i)||^2``
(plus ``rho * Pen(mu)`` when a penalty is asked for). A point is assigned to its
most-attended head, ``argmax_h a_h(x)``.

Geometry
--------
``geometry="euclidean"`` (the default): free heads with the key bias ``b_h = lambda
||mu_h||^2 / 2``, i.e. ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)`` (soft k-means
cells); ``geometry="sphere"``: the paper's unit heads, ``b_h = 0`` (cones from the origin,
for directional data), usually with ``normalize="rows"``. Each is an object of
:mod:`attnclust.layer.geometry`, which also gives the ``"auto"`` settings. The rows of a fit
(chunks, threads, ranks, and the working space where Euclidean heads are fitted on rows
centred and scaled to unit root-mean-square norm) are one
:class:`~attnclust.cluster.rows.WorkingRows`.

Fit
---
``fit`` reads as its algorithm: prepare the working rows, warm start on a sample
(:func:`attnclust.cluster.plan.estimator_warm_start`), run the plan's ending
(:mod:`attnclust.cluster.endings`; the solvers: :mod:`attnclust.cluster.estimator_fits`),
store, warn (:class:`DegenerateFitWarning`, ``ConvergenceWarning``), and for the default
merge heads into clusters. The parameters are read once, checked
(:mod:`attnclust.cluster.estimator_params`) and resolved into one immutable
:class:`~attnclust.cluster.plan.FitPlan`, which the solvers read and the fitted estimator
keeps for its predictions.

Shaped heads
------------
``covariance_type="diag"`` or ``"full"`` gives each (Euclidean) head its own metric and
weight (:mod:`attnclust.cluster.mixture.shaped`), fitted after the same warm start by
tempered EM on the likelihood of the Gaussian mixture the heads describe
(:mod:`attnclust.cluster.mixture.tempered`). ``"spherical"`` is the fit above. The default,
``"auto"``, fits it, then the shaped candidates from its heads, and keeps the shape of
least ICL (:mod:`attnclust.cluster.mixture.shape_choice`).

Data-parallel fitting
---------------------
Every statistic of the fit is a sum over rows: with each rank holding a shard of the rows
and a :class:`~attnclust.cluster.communicator.Communicator` summing over ranks, every rank gets
the fit of one process on all rows, up to the order of floating-point additions.

Notation
--------
=============  ========================  =============================================
paper          code                      meaning
=============  ========================  =============================================
``mu_h``       ``cluster_centers_``      heads, shape ``(K, d)``
``lambda``     ``inverse_temperature_``  inverse temperature
``a_h(x)``     ``predict_proba``         attention of ``x`` on head ``h``
``T_mu(x)``    ``layer_output``          output of the layer
``R(mu)``      ``loss_curve_[-1]``       empirical risk of the fit (spherical heads)
``log p(x)``   ``score_samples``         log-likelihood of the heads' mixture
``d_h(x)``     ``transform``             distance ``||x - mu_h||`` to head ``h`` (as ``KMeans``)
=============  ========================  =============================================

Scores
------
The attention is the posterior of a mixture (equal-weight Gaussians ``N(mu_h, I /
lambda)`` for spherical Euclidean heads, the shaped heads' Gaussian mixture, von
Mises-Fisher densities on the sphere): ``score_samples``, ``score``, ``bic`` and ``aic``
are that mixture's, with one meaning for every shape (:mod:`attnclust.cluster.mixture.likelihood`).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import validate_data

from .._deprecation import RenamedAttribute, RenamedParamsMixin, renamed_keywords
from .._validation import as_flag, as_generator, as_numpy_input, check_sample_weight
from .choice.k_choice import choose_n_clusters, warn_if_weak
from .communicator import Communicator
from .degenerate import DegenerateFitWarning, user_stacklevel, warn_if_degenerate
from .endings import ending_for
from .estimator_fits import SHAPED_ARRAYS, Reporter, in_data_dtype, merge_into
from .estimator_params import check_params, param_names, parameters
from .kmeans.result import inertia
from .mixture.covariance import as_covariance_type
from .mixture.likelihood import LikelihoodMixin
from .mixture.noise_head import check_noise_head
from .mixture.shape_choice import ShapeChoice
from .plan import FitPlan, anneal_stages, resolve
from .predictions import LayerPredictionsMixin, MergedHeadsMixin
from .rows import fit_threads, residual_copies
from .warm_start import auto_inverse_temperature

__all__ = ["AttentionClustering", "DegenerateFitWarning", "auto_inverse_temperature"]


# the attributes some fits set and others not: a stream's state, the shaped heads', ...
_FIT_ONLY_SOME = ("stream_state_", "n_steps_", *SHAPED_ARRAYS, "noise_weight_",
                  "noise_log_density_", "heads_", "head_labels_", "merge_heads_",
                  "merge_heads_reason_")
# the fitted arrays kept in the dtype of the rows given to fit
_FITTED_ARRAYS = ("cluster_centers_", "covariances_", "precisions_", "precisions_cholesky_",
                  "weights_", "covariance_floor_", "mean_", "heads_")


class AttentionClustering(RenamedParamsMixin, MergedHeadsMixin, LayerPredictionsMixin,
                          LikelihoodMixin, ClusterMixin, ClassNamePrefixFeaturesOutMixin,
                          TransformerMixin, BaseEstimator):
    """Clustering by a trained K-head attention layer.

    Fits the heads ``mu_h`` of ``T_mu(x) = sum_h softmax_h(lambda <x, mu_h> - b_h) mu_h``
    (Euclidean heads, ``b_h = lambda ||mu_h||^2 / 2``, or unit heads, ``b_h = 0``) by
    minimizing the empirical risk ``mean ||x - T_mu(x)||^2`` (see the module docstring
    for the geometry, the solver, the ``"auto"`` inverse temperature and the warnings).

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        Number of heads ``K``; ``"auto"``: the fewest ``K`` in ``2..max_clusters`` whose
        BIC is within 2 of the least (the layer with shaped heads of the best shape and a
        uniform background, from k-means cells of the standardized rows), or ``K = 1``
        where a gap test finds no structure and one component has the least BIC by 6 (2
        where the test finds structure absent; :mod:`attnclust.cluster.choice.k_choice`,
        ``docs/guide/temperature-path.md``: the criterion and its measured error rates).
        A weak choice warns (:class:`~attnclust.cluster.choice.k_choice.WeakChoiceWarning`).
        The fit then uses the ``covariance_type`` asked for; the default fit's heads may
        then count fewer or more clusters (:mod:`attnclust.cluster.head_count`).
    geometry : {"euclidean", "sphere"}, default="euclidean"
        Free heads whose attention is ``softmax_h(-lambda ||x - mu_h||^2 / 2)`` (soft
        k-means cells), or the paper's unit heads, ``softmax_h(lambda <x, mu_h>)`` (cones
        from the origin: for directions, such as embeddings compared by cosine).
    covariance_type : {"auto", "spherical", "diag", "full"}, default="auto"
        The heads' query-key metric. ``"spherical"``: one isotropic metric shared by all
        heads, the paper's layer fitted on the risk. ``"auto"``: the spherical fit, then
        shaped heads fitted from its heads, and the shape of lowest ICL kept
        (:mod:`attnclust.cluster.mixture.shape_choice`; ``covariance_type_`` and
        ``covariance_type_reason_`` say which and why). Shapes are chosen for the fit with
        Euclidean heads, ``"auto"`` lambda, the fixed-point solver and no penalty; any
        other fit (a given or ``"sphere"`` ``init`` too), and ``partial_fit``, is
        ``"spherical"``. ``"diag"``, ``"full"``: each
        head learns its own precision ``P_h`` and weight ``pi_h``
        (:mod:`attnclust.cluster.mixture.shaped`), fitted by tempered EM on the likelihood of the
        Gaussian mixture they describe (:mod:`attnclust.cluster.mixture.tempered`; Euclidean
        heads only): ``inverse_temperature`` is then the tempering exponent (``"auto"``:
        1, the likelihood itself, where the fit is ``GaussianMixture``'s EM), ``tol`` the
        change of the mean log-likelihood per step (``"auto"``: 1e-3) and ``loss_curve_``
        minus the mean tempered log-likelihood after each step (``score`` is the
        untempered one).
    inverse_temperature : float or "auto", default="auto"
        Inverse temperature ``lambda`` (in the units of the preprocessed rows); ``"auto"``
        is ``1 / s^2`` with ``s^2`` the within-cluster variance across each cluster's
        nearest boundary, after hard Lloyd steps from the initialization. A given value
        fits the soft layer at that ``lambda``; with ``"auto"`` and Euclidean heads seeded
        by k-means++ or ``"anneal"`` the fit ends in the hard limit (module docstring).
    init : {"kmeans++", "sphere", "anneal"} or array of shape (n_clusters, n_features)
        Initial heads: k-means++ seeding (greedy, as scikit-learn's, on a seeded sample of
        ``settings.warm_sample`` rows when there are more), ``"anneal"`` (the heads of the
        annealing path from the cold start where ``K`` of them are apart,
        :func:`attnclust.cluster.annealing.anneal_heads`, on the unweighted sample: no
        randomness, one init), random directions (uniform on the sphere; for Euclidean
        heads scaled to the data's root-mean-square distance from its mean, around the
        mean), or given heads (normalized on the sphere), in the space of
        ``cluster_centers_`` (``normalize="center-scale"``: ``(c - mean_) / scale_``). With
        ``inverse_temperature="auto"`` a seeding is replaced by the hard Lloyd heads that
        estimate ``lambda`` (a warm start); given heads only estimate ``lambda`` so.
        Given heads fix ``K``: they take an integer ``n_clusters``, not ``"auto"``.
    n_init : int or "auto", default="auto"
        Seedings tried (each on the warm-start sample, followed by hard Lloyd steps); the
        one of lowest k-means objective starts the fit. ``"auto"``: 10 for Euclidean heads
        seeded by ``init`` (as ``KMeans(n_init=10)``), ``settings.shape_choice_seedings``
        where the fit chooses its heads' shape (``covariance_type="auto"``, the default:
        its shaped candidates refine the partition); above ``settings.warm_sample`` rows
        and with 10 heads or more, one per ``settings.seeding_rows`` times the sample's
        rows, at most those; 1 otherwise and for shaped heads.
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
        Start at ``lambda/8`` and double it up to ``lambda``; ``"auto"``: on the sphere
        only (from a Lloyd warm start Euclidean heads need no annealing, and at
        ``lambda/8`` nearby heads merge).
    solver : {"fixed-point", "pgd"}, default="fixed-point"
        Safeguarded fixed-point steps (fast) or plain projected gradient descent (sphere).
    max_iter : int, default=300
        Steps at the final inverse temperature (for a fit that ends in the hard limit:
        Lloyd steps on the sample, and steps over all rows).
    tol : float or "auto", default="auto"
        The stopping rule of the fit's ending. A fit that ends in the hard limit (the
        default): scikit-learn's ``KMeans`` rule for the Lloyd steps of the warm start's
        k-means and for the steps over all rows, a run stops at the step that moves the
        heads by a sum of squares of at most ``tol`` times the rows' mean variance per
        feature (the steps over all rows also stop once one lowers the k-means objective
        by less than ``1e-3`` of it and moves at most 1% of the rows; the Lloyd runs that
        try swaps of heads, with ten heads or more, keep ``1e-4``); ``"auto"``: ``1e-4``,
        as ``KMeans``. Fixed-point steps (a given ``inverse_temperature``, or the sphere):
        stop when no head moves by more than ``tol`` in one step (for Euclidean heads,
        relative to the root-mean-square distance of the rows from their mean);
        ``"auto"``: ``1e-6`` on the sphere, ``1e-4`` for Euclidean heads (their labels
        settle long before ``1e-6``). ``solver="pgd"``: the Riemannian gradient's norm
        below ``tol`` (``"auto"``: as those steps). Shaped heads: see ``covariance_type``.
    batch_size : int, optional
        Mini-batch size of the stochastic steps of ``solver="pgd"`` (default: full batch).
        With the fixed-point solver it is read as ``chunk_size``, with a ``FutureWarning``
        (its meaning in 0.1 and 0.2), until 0.5.
    chunk_size : int, optional
        Rows per chunk of each pass (memory only: the result does not depend on it;
        default: 16,384, fewer for wide data, about 2 MB per block).
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
        Called with an :class:`~attnclust.layer.results.IterationInfo` after each step (progress
        bars), in the data's units; steps are counted over the whole fit.
    max_clusters : int, default=10
        With ``n_clusters="auto"``: the largest ``K`` scored (the scan stops once the BIC
        has risen for three ``K`` in a row, no shape catching up) and counted by the
        heads. Set it above the largest ``K`` expected; ``K = max_clusters`` warns (but
        for ``max_clusters=1``, which asks for one cluster, and where the heads count
        fewer clusters than the components: ``n_clusters_reason_`` still says so).
    noise_head : bool, default=False
        With ``covariance_type="auto"``: a head more, a uniform background over the rows'
        box beside the shaped heads, takes the rows no cluster explains (noise,
        outliers); they get the label ``-1``, as scikit-learn's noise. The heads' shape
        is then chosen between ``"diag"`` and ``"full"``, each with the background
        (:mod:`attnclust.cluster.mixture.noise_head`; ``docs/guide/shaped-heads.md``: what it
        gains and loses, measured). Rows held by one process on the CPU.
    merge_heads : "auto", bool or MergeSettings, default="auto"
        Clusters of any shape (the default fit): more spherical heads than clusters,
        fitted on at most 3,000 rows, are joined into ``K`` clusters by the overlap of
        their attention and replace the ``K``-head fit (``"auto"``) where its rules say so
        (:mod:`attnclust.cluster.merge`: the heads' normalized cut against the fit's, the
        split gain, and when no merge is tried); ``True``: always (the default fit with
        an integer ``K`` only, else a ``ValueError``); ``False``: never; a
        ``MergeSettings``: ``"auto"`` with those settings.
    settings : FitSettings, optional
        The tuning settings of the fit's choices (the warm-start sample, the shape choice's
        sample and cost guards, its candidates' EM, the choice of ``K``), each documented
        in :class:`~attnclust.cluster.settings.FitSettings`; ``None``: its defaults.

    Attributes
    ----------
    n_clusters_ : int
        The number of clusters (``n_clusters``, or ``"auto"``'s: components or heads).
    n_clusters_reason_, k_choice_ : str, KChoice
        With ``n_clusters="auto"``: why ``K``, in words, with how sure the choice is, and
        the scores it was chosen by (BIC per ``K``, the weight and shape of the chosen
        one, the structure test's ``z``).
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Heads, in the preprocessed space (unit norm on the sphere). The fitted arrays and
        ``predict_proba``, ``transform``, ``layer_output`` have the dtype of the rows
        given to ``fit`` (float32 or float64; ``partial_fit`` keeps float64).
    labels_ : ndarray of shape (n_samples,)
        ``argmax_h a_h(x)`` of the training rows.
    inverse_temperature_ : float
        The inverse temperature used (the resolved value of ``"auto"``).
    n_iter_ : int
        Steps taken, all stages together (the sample's, the hard limit's Lloyd steps).
    loss_curve_ : ndarray
        Empirical risk (without the penalty) after each step over all rows, at the
        inverse temperature in ``inverse_temperature_curve_`` (non-increasing while that
        is constant and there is no penalty). A fit that ends in the hard limit: its risk
        there (the k-means objective per row) of the sample's partition where the sample
        holds every row, else after each step over all rows.
    inverse_temperature_curve_ : ndarray
        The inverse temperature of each step (``inf``: a Lloyd step, the hard limit).
    converged_ : bool
        Whether the last stage met its tolerance within ``max_iter`` (``partial_fit``:
        ``False``).
    inertia_ : float
        Sum of the squared distances of the training rows to their cluster's centre
        (preprocessed space), weighted by ``sample_weight``, as ``KMeans.inertia_``;
        noise rows (``-1``) left out. After ``partial_fit``: of the last batch.
    n_features_in_, feature_names_in_ : int, ndarray of str
        The features seen by ``fit`` (their names: a DataFrame's columns, as scikit-learn).
    n_steps_, stream_state_ : int, object
        With ``partial_fit``: the batches taken and the running sums.
    mean_, scale_ : ndarray, float
        The preprocessing of ``normalize="center-scale"`` (``None`` otherwise).
    covariances_, precisions_, precisions_cholesky_, weights_ : ndarray
        Shaped heads only (names and shapes as in ``sklearn.mixture.GaussianMixture``).
    covariance_floor_ : ndarray of shape (n_features,)
        Shaped heads only: the floor added to every covariance's diagonal.
    heads_, head_labels_ : ndarray of shape (n_heads, n_features) and (n_heads,)
        The heads and the cluster of each: merged heads when ``merge_heads_``, else
        ``cluster_centers_`` and ``0..K-1``. Merged, ``cluster_centers_`` are the means of
        the clusters' rows, ``inverse_temperature_`` the heads' (``covariance_type_``
        ``"spherical"``), ``predict_proba`` sums each cluster's heads' attention
        (``predict``, ``labels_``: its argmax), ``score_samples`` is the heads' mixture.
    merge_heads_, merge_heads_reason_ : bool, str
        Whether the heads were merged, and why (the normalized cuts compared).
    covariance_type_ : str
        The heads' shape fitted: ``covariance_type``, or the one ``"auto"`` chose.
    covariance_type_reason_ : str
        Why: ``"given"``, or the criteria of ``"auto"``'s candidates.
    covariance_type_criteria_ : dict
        With ``"auto"``: each candidate's :class:`~attnclust.cluster.mixture.candidates.ShapeScore`
        (log-likelihood, entropy, parameters, rows, BIC, ICL; data units); else empty.
    noise_weight_, noise_log_density_ : float
        With ``noise_head=True``: the background head's weight (``weights_`` then sums to
        one minus it) and the log of its density in the preprocessed space.

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
    >>> full = ac.AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    >>> full.covariances_.shape, ac.adjusted_rand_index(z, full.labels_)
    ((3, 10, 10), 1.0)
    """

    # the names of 0.1, until 0.5 (set_params takes them too)
    temperature_ = RenamedAttribute("temperature_", "inverse_temperature_")
    temperature_curve_ = RenamedAttribute("temperature_curve_", "inverse_temperature_curve_")

    @renamed_keywords(temperature="inverse_temperature")
    def __init__(self, n_clusters=8, *, geometry="euclidean", covariance_type="auto",
                 inverse_temperature="auto", init="kmeans++", n_init="auto", normalize="auto",
                 penalty=None, rho=0.0, anneal="auto", solver="fixed-point", max_iter=300,
                 tol="auto", batch_size=None, chunk_size=None, step_size=0.5, device="cpu",
                 dtype="auto", random_state=None, verbose=0, callback=None, max_clusters=10,
                 noise_head=False, merge_heads="auto", settings=None):
        self.n_clusters = n_clusters
        self.merge_heads = merge_heads
        self.settings = settings
        self.max_clusters = max_clusters
        self.geometry = geometry
        self.covariance_type = covariance_type
        self.noise_head = noise_head
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
        self.chunk_size = chunk_size
        self.step_size = step_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    @classmethod
    def _get_param_names(cls):
        return list(param_names(cls))       # a copy: the cached list stays as it is

    def anneal_plan(self) -> list[tuple[float, int | None]]:
        """Stages of a fit: ``(fraction of lambda, steps)``; ``None`` steps: ``max_iter``.

        Examples
        --------
        >>> AttentionClustering(geometry="sphere").anneal_plan()
        [(0.125, 5), (0.25, 5), (0.5, 5), (1.0, None)]
        >>> AttentionClustering().anneal_plan()
        [(1.0, None)]
        """
        return anneal_stages(self.anneal, self.geometry)

    # -- input handling -------------------------------------------------------------------
    def _validate(self, X, *, reset: bool) -> np.ndarray:
        return validate_data(self, as_numpy_input(X), dtype=[np.float64, np.float32], reset=reset,
                             ensure_min_samples=1)

    def _resolve(self, n_samples: int, n_local: int, *, data_parallel: bool = False,
                 weight_total: float | None = None) -> FitPlan:
        """The parameters, read once, checked (:func:`.estimator_params.check_params`) and
        resolved into the :class:`~attnclust.cluster.plan.FitPlan` of a fit."""
        params = parameters(self)
        check_params(params, n_samples, n_local, data_parallel=data_parallel,
                     weight_total=weight_total)
        plan = resolve(params)
        if plan.noise_head and not plan.chooses_shape:
            raise ValueError("noise_head=True is fitted from the default fit: it needs "
                             "geometry='euclidean', inverse_temperature='auto', "
                             "solver='fixed-point', init='kmeans++' or 'anneal' and "
                             "penalty=None")
        if as_flag(self.merge_heads) is True and (not plan.chooses_shape or plan.noise_head
                                         or plan.n_clusters is None or data_parallel):
            raise ValueError("merge_heads=True merges the heads of the default fit: it needs "
                             "an integer n_clusters, geometry='euclidean', "
                             "covariance_type='auto', inverse_temperature='auto', "
                             "init='kmeans++' or 'anneal', penalty=None, noise_head=False "
                             "and rows held by one process (no comm)")
        return plan

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None, *, comm: Communicator | None = None):
        """Fit the heads to ``X`` (n_samples, n_features); ``y`` is ignored.

        ``sample_weight`` (n_samples,), optional: non-negative weights of the rows; every
        sum of the fit (seeding, Lloyd steps, the ``"auto"`` inverse temperature, the
        fixed-point steps, the centring of Euclidean heads, the cluster sizes of the
        warnings) is weighted, so an integer weight acts as that many copies of the row
        and a zero weight as no row. The merge of heads counts rows
        (:mod:`attnclust.cluster.merge`, *Sample weights*): equal weights are no weights,
        and integer weights give the repeated rows' merge in distribution over
        ``random_state`` (its draws have the same law, they are not the same draws).

        With ``comm`` (a :class:`~attnclust.cluster.communicator.Communicator`), ``X`` is this
        rank's share of the rows of a data-parallel fit (see :mod:`attnclust.cluster.distributed`)
        and ``sample_weight`` their weights; every rank gets the fit of all the rows.
        """
        X = self._validate(X, reset=True)
        weights = check_sample_weight(sample_weight, X.shape[0])
        data_parallel = comm is not None
        comm = comm.checked(X.shape[0]) if data_parallel else Communicator.local(X.shape[0])
        given, unit = weights, 1.0          # integer weights: copies of rows, for K's choice
        if weights is not None:
            # relative weights, brought to at most the ranks' count (the unit: the mean of
            # the ranks' largest) so that their sums cannot overflow and float32 holds them
            # (1e39 or 1e-46 were inf or 0); inertia_ in their own scale (all 0: refused)
            unit = float(comm.sum_array(weights.max(initial=0.0) / comm.sum_array(1.0))) or 1.0
            weights = weights / unit
        plan = self._resolve(comm.n_total, X.shape[0], data_parallel=data_parallel,
                             weight_total=None if weights is None else float(comm.sum_array(
                                 weights.sum())))
        for name in ("k_choice_", "n_clusters_reason_"):   # none left from an earlier fit
            self.__dict__.pop(name, None)
        K = plan.n_clusters if plan.n_clusters is not None else \
            self._choose_n_clusters(X, plan, given)
        with fit_threads(plan.device) as workers:
            rows = self._fit(X, comm, workers, weights, plan.with_clusters(K), given)
            if not self.merge_heads_:               # one head per cluster
                self.heads_, self.head_labels_ = self.cluster_centers_, np.arange(K)
            self.inertia_ = unit * inertia(rows, self.cluster_centers_, self.labels_)
        self.n_clusters_ = len(self.cluster_centers_)
        # the heads' count: fewer than the components keep only doubts about structure
        if plan.n_clusters is None and (self.n_clusters_ == K or (
                self.n_clusters_ < K and self.k_choice_.structure_z < plan.settings.marginal_z)):
            warn_if_weak(self.k_choice_, clusters=self.n_clusters_)
        in_data_dtype(self, _FITTED_ARRAYS, X.dtype)   # as KMeans and GaussianMixture
        return self

    def _choose_n_clusters(self, X: np.ndarray, plan: FitPlan, weights=None) -> int:
        """``n_clusters="auto"``: :func:`~attnclust.cluster.choice.k_choice.choose_n_clusters` of
        the preprocessed rows with the plan's settings (at most ``settings.k_rows``, drawn
        with ``random_state`` when there are more). Rows of weight zero are left out;
        integer weights summing to at most ``k_rows`` are copies of their rows, as ``fit``
        reads them; other unequal weights give as many rows (at most ``k_rows``) by
        :func:`~attnclust.cluster.rows.residual_copies`. Sets ``k_choice_`` and
        ``n_clusters_reason_``, and warns when the choice is weak."""
        if weights is not None:
            X, w = X[weights > 0], weights[weights > 0]
            k_rows = plan.settings.k_rows
            if np.array_equal(w, np.round(w)) and w.sum() <= k_rows:
                X = np.repeat(X, w.astype(np.int64), axis=0)
            elif np.ptp(w) > 0:
                X = np.repeat(X, residual_copies(w, min(k_rows, len(X))), axis=0)
        local = Communicator.local(X.shape[0])
        self.mean_, self.scale_ = plan.learn_center(X, local)
        rows = plan.preprocess(X, (self.mean_, self.scale_), comm=local)
        choice = choose_n_clusters(rows, plan.max_clusters, random_state=plan.random_state,
                                   settings=plan.settings)
        self.k_choice_, self.n_clusters_reason_ = choice, choice.reason
        return choice.n_clusters

    def partial_fit(self, X, y=None, sample_weight=None):
        """Update the heads with one batch of rows ``X`` (n_batch, n_features).

        The first call seeds the heads and fixes the inverse temperature on its batch, as
        ``fit`` starts; every call adds its batch's sums to running ones and takes one
        fixed-point step from them (:mod:`attnclust.cluster.streaming`). ``labels_`` and
        ``inertia_`` are the last batch's. A batch refused, or stopped, changes nothing.
        """
        from .streaming import check_streaming, partial_fit

        if as_covariance_type(self.covariance_type).shaped:
            raise ValueError(f"partial_fit takes the risk's fixed-point steps; "
                             f"covariance_type={self.covariance_type!r} is fitted by fit")
        if self.noise_head:
            raise ValueError("partial_fit takes the risk's fixed-point steps; "
                             "noise_head=True is fitted by fit")
        fitted = hasattr(self, "cluster_centers_")
        check_streaming(self)          # also after a fit, whose solver may not stream
        X = self._validate(X, reset=not fitted)
        weights = check_sample_weight(sample_weight, X.shape[0])
        saved = copy.deepcopy(self.__dict__)     # a refused or stopped batch changes nothing
        try:
            if not fitted:             # the first batch: the plan of the stream
                self._plan = self._resolve(X.shape[0], X.shape[0], weight_total=None
                                           if weights is None else float(weights.max()))
            with fit_threads(self._plan.device):
                partial_fit(self, self._plan, X, weights)
                # the last batch's (float64, as the running state compares), in the weights'
                # own scale from the stream's units; none at weight zero
                # (a batch of weight zero after a fit starts no stream: no stream_state_)
                if weights is not None and not weights.max() > 0:
                    self.inertia_ = 0.0
                else:
                    unit = 1.0 if weights is None else self.stream_state_.weight_unit
                    Xp = self._plan.preprocess(X, (self.mean_, self.scale_))
                    self.inertia_ = unit * inertia(self._plan.working_rows(
                        Xp, Communicator.local(len(X)), weights=None if weights is None
                        else weights / unit), self.cluster_centers_, self.labels_)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise
        return self

    def _fit(self, X: np.ndarray, comm: Communicator, workers: int, weights, plan: FitPlan,
             given=None):
        """The algorithm on validated rows, for the resolved ``plan`` (its warnings point
        at the caller of ``fit``): prepare the rows, warm start, run the plan's ending
        (:mod:`attnclust.cluster.endings`), store, warn, merge (``given``: the sample
        weights as given, which the merge counts rows by); returns the working rows."""
        if plan.noise_head:             # before any work, and before this fit's state
            check_noise_head(comm.n_total, X.shape[1], plan.n_clusters, settings=plan.settings)
        gen = as_generator(plan.random_state, "random_state")
        for name in _FIT_ONLY_SOME:
            self.__dict__.pop(name, None)           # none left from an earlier fit
        self.mean_, self.scale_ = plan.learn_center(X, comm, weights)
        rows = plan.working_rows(plan.preprocess(X, (self.mean_, self.scale_), comm=comm),
                                 comm, workers=workers, weights=weights)
        ending = ending_for(plan)
        outcome = ending.run(rows, plan.warm_start(rows, gen), plan, gen=gen,
                             report=Reporter(plan.callback, plan.verbose))
        self._plan = plan.with_covariance(outcome.choice.covariance)
        self._record_shape(outcome.choice)
        self._store(outcome.fitted)
        self.__dict__.update(outcome.extra)
        if outcome.degeneracy is not None:
            warn_if_degenerate(**outcome.degeneracy)
        merge = as_flag(self.merge_heads)
        self.merge_heads_, self.merge_heads_reason_ = False, "not merged: " + (
            "merge_heads=False" if merge is False else "only the default fit, given K, on "
            "one process, merges")
        if merge is not False and ending.merges_heads and rows.comm.world == 1:
            merge_into(self, rows, gen, merge, given)     # then a cluster of no row warns
        return rows

    def _record_shape(self, choice: ShapeChoice) -> None:
        """The heads' shape of the fit (``covariance_type_``), why (the reason) and the
        criteria of the candidates of ``"auto"``."""
        self.covariance_type_ = choice.covariance.name
        self.covariance_type_reason_ = choice.reason
        self.covariance_type_criteria_ = {s.covariance.name: s.as_dict() for s in choice.scores}

    def _store(self, fitted):
        """The fitted attributes (a named tuple of :mod:`attnclust.cluster.estimator_fits`), and a
        ``ConvergenceWarning`` for the caller of ``fit`` when the solver did not converge."""
        for name, value in fitted._asdict().items():
            setattr(self, name, value)
        if not self.converged_:
            warnings.warn(f"AttentionClustering did not converge in max_iter={self.max_iter} "
                          "steps; increase max_iter or tol", ConvergenceWarning,
                          stacklevel=user_stacklevel())
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

"""The tuning settings of a fit's choices, in frozen objects: :class:`FitSettings`, and
:class:`MergeSettings` for the merge of heads into clusters (:mod:`attnclust.cluster.merge`).

The estimator's parameters (:mod:`attnclust.cluster.estimator_params`) say *what* to fit;
these settings say how much work its data-driven choices may do: the warm start's
sample (:mod:`attnclust.cluster.warm_start`), the heads' shape chosen by ICL
(:mod:`attnclust.cluster.mixture.shape_choice`) and its candidates' EM
(:mod:`attnclust.cluster.mixture.candidates`), and the choice of ``K``
(:mod:`attnclust.cluster.choice.k_choice`). Their defaults are the measured ones the modules'
docstrings explain; ``AttentionClustering(settings=FitSettings(...))`` changes them for
one estimator (tests use small values to exercise the paths of large data on a few
rows). The resolved :class:`~attnclust.cluster.plan.FitPlan` carries them
(``plan.settings``), and the modules read them there.

Notation
--------
==========  =====================  ===============================================
paper       code                   meaning
==========  =====================  ===============================================
``K``       ``n_clusters``         heads
``n``       ``n_rows``             rows of the fit
``p_c``     ``n_parameters``       free parameters of a candidate shape ``c``
==========  =====================  ===============================================
"""

from __future__ import annotations

import dataclasses
import math
import numbers

__all__ = ["FitSettings", "MergeSettings"]

# fields that are counts: integers >= 1
_COUNTS = ("warm_sample", "per_head", "seeding_rows", "choice_rows", "lean_rows",
           "choice_numbers", "fit_numbers", "shape_choice_seedings", "stop_steps",
           "peak_rows", "peak_candidates", "k_init", "em_steps", "patience",
           "n_references", "thin_rows", "max_dim", "k_rows")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_count(name: str, value) -> None:
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_range(name: str, value, low: float, high: float, *, open_low: bool = False,
                 open_high: bool = False) -> None:
    inside = _is_number(value) and not math.isnan(value) and \
        (value > low if open_low else value >= low) and \
        (value < high if open_high else value <= high)
    if not inside:
        bounds = ("(" if open_low else "[") + f"{low:g}, {high:g}" + (")" if open_high else "]")
        raise ValueError(f"{name} must be a number in {bounds}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class FitSettings:
    """The tuning settings of :class:`~attnclust.AttentionClustering`'s choices (the
    estimator's ``settings``; ``None`` there: ``FitSettings()``, these defaults).

    Parameters
    ----------
    warm_sample : int, default=20_000
        The warm start's seedings, Lloyd steps and the fit's first steps run on a seeded
        sample of at most this many rows (all rows when there are no more).
    per_head : int, default=256
        For a fit that ends in the hard limit on more than ``warm_sample`` rows, the
        sample holds ``per_head`` rows per head (at most ``warm_sample``): the passes over
        all rows finish what the sample starts.
    seeding_rows : int, default=5
        Then, with ``n_init="auto"`` and ten heads or more (the swaps), one seeding per
        ``seeding_rows`` times the sample's rows (at most ``n_init``): the seedings cost no
        more row visits than the passes.
    choice_rows : int, default=2_000
        ``covariance_type="auto"`` chooses the heads' shape on all rows up to this many,
        else on a seeded sample of this many (:mod:`attnclust.cluster.mixture.shape_choice`: on the
        batteries the choice on 2,000 rows was that on all rows in 117 of 120 fits).
    lean_rows : int, default=10_000
        The chosen shape is fitted on all rows by the lean EM where they are held whole
        and at most this many, by the chunked EM otherwise.
    choice_numbers : int, default=20_000_000
        A shaped candidate whose EM would handle more numbers per pass (rows x heads x
        covariance entries per head) on the rows of the choice is not tried.
    fit_numbers : int, default=100_000_000
        Nor one whose fit on all rows would handle more numbers per pass than this.
    shape_choice_seedings : int, default=7
        ``n_init="auto"`` of a fit that chooses its heads' shape, at most (its candidates
        refine the partition; ``benchmarks/bench_shaped.py`` compares it with ten).
    stop_steps : int, default=2
        A shaped candidate's EM stops early (it cannot win) after this many steps in a
        row whose Aitken-projected ICL bound is above the least ICL so far
        (:mod:`attnclust.cluster.mixture.candidates`).
    rows_per_parameter : float, default=10
        The density core's second start is tried only for a candidate with at least this
        many rows per free parameter (``math.inf``: never).
    peak_rows : int, default=256
        The density peak is searched in a seeded sample of at most this many rows ...
    peak_candidates : int, default=64
        ... of which at most this many are tried as the peak.
    merge_share : float, default=0.8
        A fit from the second start that gives one head at least this share of the
        weight of each of two default cells merges them, and is not kept.
    min_moved : float, default=0.1
        The second start runs only where it moves at least this share of the weight out
        of the default partition's cells.
    k_init : int, default=3
        ``n_clusters="auto"`` (:mod:`attnclust.cluster.choice.k_choice`): k-means runs per ``K``,
        the best kept.
    em_steps : int, default=5
        EM steps from each partition's cells.
    patience : int, default=3
        ``K`` scanned past the least BIC so far before the scan stops, unless a shape's
        BIC, falling by ``r`` at the last ``K``, is within ``patience r`` of that least.
    n_references : int, default=20
        Uniform reference sets of the structure test (one k-means run each).
    looks : tuple of int, default=(4, 10)
        References after which the structure test may stop early (increasing, each in
        ``[2, n_references)``).
    early_level : float, default=1e-4
        The null's probability of ``|z|`` past the bound at an early look.
    structure_z : float, default=3.0
        The structure test's ``z`` above which the rows hold structure.
    bare_mention : float, default=2.0
        BIC above the least that is "not worth more than a bare mention" (Kass and
        Raftery): the fewest ``K`` within it is chosen; and the evidence for one
        component that ``K = 1`` needs where the structure test finds structure absent
        (``z < -structure_z``).
    strong_evidence : float, default=6.0
        BIC below the least of ``K >= 2`` that is "strong" evidence (Kass and Raftery):
        what one component needs for ``K = 1`` where the structure test finds none (at
        least ``bare_mention``; :mod:`attnclust.cluster.choice.k_choice`, *No structure*).
    thin_rows : int, default=5
        Rows per cluster of the chosen ``K`` below which its BIC is not trusted against
        ``K = 1``.
    confident : float, default=0.9
        BIC weight of the chosen ``K`` below which the choice is weak (a warning).
    marginal_z : float, default=5.0
        Structure ``z`` below which the choice is weak.
    max_dim : int, default=50
        Rows wider than this are read through their leading ``max_dim`` principal
        components.
    k_rows : int, default=5_000
        The choice of ``K`` reads at most this many rows (a seeded sample beyond).

    Examples
    --------
    >>> FitSettings().warm_sample
    20000
    >>> small = FitSettings(warm_sample=500, choice_rows=400)
    >>> small.warm_sample, small.per_head
    (500, 256)
    >>> FitSettings(merge_share=1.5)
    Traceback (most recent call last):
    ...
    ValueError: merge_share must be a number in (0, 1], got 1.5
    """

    # the warm start's sample (attnclust.cluster.warm_start)
    warm_sample: int = 20_000
    per_head: int = 256
    seeding_rows: int = 5
    # the shape choice (attnclust.cluster.mixture.shape_choice, attnclust.cluster.plan)
    choice_rows: int = 2_000
    lean_rows: int = 10_000
    choice_numbers: int = 20_000_000
    fit_numbers: int = 100_000_000
    shape_choice_seedings: int = 7
    # the candidates' EM (attnclust.cluster.mixture.candidates)
    stop_steps: int = 2
    rows_per_parameter: float = 10
    peak_rows: int = 256
    peak_candidates: int = 64
    merge_share: float = 0.8
    min_moved: float = 0.1
    # the choice of K (attnclust.cluster.choice.k_choice)
    k_init: int = 3
    em_steps: int = 5
    patience: int = 3
    n_references: int = 20
    looks: tuple[int, ...] = (4, 10)
    early_level: float = 1e-4
    structure_z: float = 3.0
    bare_mention: float = 2.0
    strong_evidence: float = 6.0
    thin_rows: int = 5
    confident: float = 0.9
    marginal_z: float = 5.0
    max_dim: int = 50
    k_rows: int = 5_000

    def __post_init__(self):
        for name in _COUNTS:
            _check_count(name, getattr(self, name))
        if not (_is_number(self.rows_per_parameter) and self.rows_per_parameter > 0):
            raise ValueError(f"rows_per_parameter must be a number > 0 (inf: never), got "
                             f"{self.rows_per_parameter!r}")
        _check_range("merge_share", self.merge_share, 0, 1, open_low=True)
        _check_range("min_moved", self.min_moved, 0, 1)
        _check_range("early_level", self.early_level, 0, 1, open_low=True, open_high=True)
        _check_range("confident", self.confident, 0, 1)
        for name in ("structure_z", "bare_mention", "strong_evidence", "marginal_z"):
            _check_range(name, getattr(self, name), 0, math.inf, open_high=True)
        if self.strong_evidence < self.bare_mention:
            raise ValueError(f"strong_evidence must be at least bare_mention "
                             f"({self.bare_mention!r}), got {self.strong_evidence!r}")
        self._check_looks()

    def _check_looks(self) -> None:
        looks = self.looks
        try:
            looks = tuple(looks)
        except TypeError:
            looks = None
        if looks is None or not all(isinstance(b, numbers.Integral) and not isinstance(b, bool)
                                    for b in looks) \
                or any(b < 2 or b >= self.n_references for b in looks) \
                or any(a >= b for a, b in zip(looks, looks[1:], strict=False)):
            raise ValueError(f"looks must be increasing integers in [2, n_references) = "
                             f"[2, {self.n_references}), got {self.looks!r} (with fewer "
                             f"n_references, give looks too, e.g. looks=() for none)")
        object.__setattr__(self, "looks", tuple(int(b) for b in looks))   # a list: hashable


_LINKAGES = ("single", "average")
# MergeSettings' counts (integers >= 1, as FitSettings' _COUNTS), then its numbers:
# (names, what they must be, the test)
_MERGE_COUNTS = ("heads_per_cluster", "min_heads", "rows_per_head", "sample_per_head",
                 "max_rows", "max_iter")
_MERGE_CHECKS = (
    (("temperature", "cut_ratio", "count_cut_ratio", "count_temperature", "cut_floor",
      "min_rise", "min_shared", "split_rows"), "a positive number", lambda v: v > 0),
    (("gini_threshold",), "in [0, 1]", lambda v: 0 <= v <= 1),
    (("skip_cut", "grid_variance"), "a number >= 0", lambda v: v >= 0),
    (("min_redraw",), "in [-1, 1]", lambda v: -1 <= v <= 1),
    (("min_split_gain", "split_gain_floor"), "a finite number",
     lambda v: math.isfinite(v)),
)


@dataclasses.dataclass(frozen=True)
class MergeSettings:
    """The settings of a merge of heads into clusters
    (:func:`~attnclust.cluster.merge.merge_heads`).

    Parameters
    ----------
    heads_per_cluster, min_heads, rows_per_head : int
        ``m = min(max(heads_per_cluster * K, min_heads), min(n, max_rows) // rows_per_head)``
        (defaults 6, 150 and 5), and at most one per ``rows_per_head`` distinct sampled
        rows (heads on repeated rows, counts or grades, attend to one row each and every
        cut of theirs is near 0); no merge when that is not more than ``K``. Finer heads
        trace shapes more closely (the guide, *Clusters of any shape*).
    sample_per_head, max_rows : int
        The heads and their overlap are fitted on at most ``min(sample_per_head * m,
        max_rows)`` rows (a seeded sample; defaults 14 and 3,000), so that the merge's cost
        grows with the heads, not with the rows.
    max_iter : int
        Lloyd steps of the heads' k-means (default 5: the heads tile the data, they need
        not converge).
    temperature : float
        ``t``: the attention's variance over the heads' mean squared distance (default
        0.5).
    gini_threshold : float
        Genie's constraint on the groups' sizes (default 0.3; 1 turns it off).
    linkage : {"single", "average"}
        Similarity of two groups: of their most similar heads, or the mean over their
        pairs of heads.
    cut_ratio : float
        The merge is kept when its normalized cut is below ``cut_ratio`` times the
        ``K``-head fit's (default 0.1) and the split gain is above ``split_gain_floor``,
        or when its cut is below the fit's and the split gain above ``min_split_gain``.
    count_cut_ratio : float
        With ``n_clusters="auto"``: the heads' count is a shape where its cut is below
        ``count_cut_ratio`` times that of as many k-means cells, and fewer clusters than
        the components only where it is below that times the components' (default 0.05).
    min_split_gain, split_gain_floor, split_rows : float
        The per-row BIC gain of ``2 K`` Gaussian components over ``K``
        (:func:`~attnclust.cluster.merge.split_gain`)
        above which the ``K`` components under-fit the rows (default 0.05), below which
        they fit them so much better that no merge is taken (default -1), and the sampled
        rows per parameter of the ``2 K`` components it needs (default 2; with fewer, EM
        fits the covariance floor, not the rows, and no merge is taken: no heads tiled).
    min_redraw : float
        The merge is considered only when the heads redraw the ``K``-head fit's
        partition at an adjusted Rand index of at least ``min_redraw`` (default 0.6; 0
        turns the check off).
    skip_cut : float
        The merge is skipped, before any head is tiled, when the normalized cut of the
        ``K``-head fit's own posterior overlap
        (:func:`~attnclust.cluster.head_graph.posterior_cut`) is below ``skip_cut`` (default
        0.03; 0 turns the check off).
    grid_variance : float
        With a finite value, the heads tile the sampled rows with each column on a coarse
        grid spread over its cells (:func:`~attnclust.cluster.head_graph.dequantized`): a
        column whose rounding variance ``h^2 / 12`` (``h`` the least gap between its values)
        is at least ``grid_variance`` times its variance (``1e-4``: a binary, count or
        graded column). Between neighbouring values of a grid there is no row, and the
        merge can cut along a categorical column unrelated to the clusters (three blobs
        beside a yes/no column: 3 of 10 seeds); spread, it does not. Off by default
        (``inf``): where such a column carries the clusters, that cut finds them when the
        ``K``-head fit cannot (the guide, *Categorical columns*). Exact grids only: a value
        off the grid by one rounding makes the least gap that rounding.
    count_temperature, cut_floor, min_rise, min_shared : float
        With ``n_clusters="auto"`` (:mod:`attnclust.cluster.head_count`): the heads'
        count of clusters reads their overlap at ``t = count_temperature`` (default 4: a
        wider attention than the merge's, so that chains of heads along a thin shape do not
        part at their sparser links); a normalized cut below ``cut_floor`` counts as none
        (default 3e-4: in the rise of the cut from one count to the next, where merged and
        convex cells both separate the clusters, and in the fit's cut at ``K``); another
        count than the components' only where that rise is at least ``min_rise`` (default
        2) and the components joined into one cluster share at least ``min_shared`` of
        their rows (default 0.015).

    Examples
    --------
    >>> MergeSettings(temperature=1.0).linkage
    'single'
    >>> MergeSettings(linkage="complete")
    Traceback (most recent call last):
    ...
    ValueError: linkage must be one of ('single', 'average'), got 'complete'
    """

    heads_per_cluster: int = 6
    min_heads: int = 150
    rows_per_head: int = 5
    sample_per_head: int = 14
    max_rows: int = 3000
    max_iter: int = 5
    temperature: float = 0.5
    gini_threshold: float = 0.3
    linkage: str = "single"
    cut_ratio: float = 0.1
    count_cut_ratio: float = 0.05
    min_redraw: float = 0.6
    skip_cut: float = 0.03
    grid_variance: float = math.inf
    count_temperature: float = 4.0
    cut_floor: float = 3e-4
    min_rise: float = 2.0
    min_shared: float = 0.015
    min_split_gain: float = 0.05
    split_gain_floor: float = -1.0
    split_rows: float = 2.0

    def __post_init__(self):
        for name in _MERGE_COUNTS:
            _check_count(name, getattr(self, name))
        for names, what, ok in _MERGE_CHECKS:
            for name in names:
                value = getattr(self, name)
                if not _is_number(value) or not ok(value):
                    raise ValueError(f"{name} must be {what}, got {value!r}")
        if self.linkage not in _LINKAGES:
            raise ValueError(f"linkage must be one of {_LINKAGES}, got {self.linkage!r}")

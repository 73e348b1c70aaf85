"""The number of clusters read off the temperature path (the path's plateau rule,
:meth:`TemperaturePath.choose_n_clusters`; ``n_clusters="auto"`` is
:mod:`attnclust.cluster.k_choice`'s likelihood choice).

The path (:func:`attnclust.temperature_path`, module :mod:`attnclust.cluster.annealing`) counts
the clusters at each inverse temperature of its grid. A *plateau* is a run of grid values
with the same count ``K``, from ``lambda_start`` (the first value with that count) to
``lambda_stop`` (the first with another, or the last value of the path: an open plateau);
its width is measured in ``log lambda``:

    w = log(lambda_stop / lambda_start)

The rule: ``K`` is the count of the widest plateau of ``K >= 2`` after the cold start's
(whose width only reflects where the grid begins), ties going to the smaller ``K``; when
no such plateau is at least ``w_min = MIN_PLATEAU_WIDTH`` wide (``1``: ``lambda`` grows
by a factor ``e`` across it), ``K = 1``: one blob splits in a cascade of narrow plateaus,
and a path that never splits into clusters of ``min_cluster_size`` rows is one cluster.

:func:`choose_from_path` is the estimator's use of the rule: the path of (a sample of)
the preprocessed rows on the coarser grid of :data:`FAST_SETTINGS`, stopped as soon as no
later plateau could be wider than the widest so far.

Notation
--------
========================  ===================  =========================================
paper                     code                 meaning
========================  ===================  =========================================
``K``                     ``n_clusters``       clusters counted on a plateau
``lambda_start``          ``start``            first grid value of the plateau
``lambda_stop``           ``stop``             first grid value past it (or the last)
``w``                     ``width``            ``log(lambda_stop / lambda_start)``
``w_min``                 ``min_width``        ``MIN_PLATEAU_WIDTH``: least width of K >= 2
========================  ===================  =========================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .._validation import as_generator

if TYPE_CHECKING:
    from .annealing import TemperaturePath

__all__ = ["FAST_SETTINGS", "MIN_PLATEAU_WIDTH", "ClusterChoice", "Plateau",
           "choose_from_path", "plateaus_of", "widest_plateau"]

MIN_PLATEAU_WIDTH = 1.0   # log-width a plateau of K >= 2 needs to be chosen over K = 1
# a coarser grid, looser fixed points and strides, for reading K off the path (the
# estimator's n_clusters="auto"): as accurate on benchmarks/bench_auto_k.py's 90
# mixtures (90/90), many times faster (docs/guide/temperature-path.md); init="anneal"
# keeps single steps and 100 iterations at tol 1e-4 on that grid
FAST_SETTINGS = {"grid_ratio": 1.12, "n_decades": 3.0, "max_iter": 20, "tol": 1e-3, "stride": 4}


@dataclass(frozen=True)
class Plateau:
    """A range of ``lambda`` over which the path counts the same number of clusters.

    ``start`` is the first grid value with this count, ``stop`` the first with another
    (the last grid value when the path ends on it, then ``closed`` is ``False``);
    ``width = log(stop / start)``. ``heads`` ``(k, d)`` and ``sizes`` ``(k,)`` are the
    counted clusters at ``start`` (their rows by largest attention).
    """

    n_clusters: int
    start: float
    stop: float
    width: float
    closed: bool
    heads: np.ndarray
    sizes: np.ndarray


class ClusterChoice(NamedTuple):
    """The number of clusters read off a path, the plateau that decided it, and why."""

    n_clusters: int
    plateau: Plateau | None
    reason: str


def plateaus_of(lams, counts, reps) -> tuple[Plateau, ...]:
    """The plateaus of a path: its grid ``lams`` ``(G,)``, the clusters counted at each
    value ``counts`` ``(G,)``, and ``reps``, one ``(heads, sizes)`` per value.

    Examples
    --------
    >>> reps = [(np.zeros((c, 1)), np.ones(c, dtype=int)) for c in (1, 1, 2)]
    >>> [(p.n_clusters, p.start, p.stop, p.closed)
    ...  for p in plateaus_of(np.array([1.0, 2.0, 4.0]), np.array([1, 1, 2]), reps)]
    [(1, 1.0, 4.0, True), (2, 4.0, 4.0, False)]
    """
    out, start = [], 0
    for i in range(1, len(lams) + 1):
        if i < len(lams) and counts[i] == counts[start]:
            continue
        stop = lams[i] if i < len(lams) else lams[-1]
        heads, sizes = reps[start]
        out.append(Plateau(int(counts[start]), float(lams[start]), float(stop),
                           float(math.log(stop / lams[start])), i < len(lams), heads, sizes))
        start = i
    return tuple(out)


def widest_plateau(plateaus: tuple[Plateau, ...], min_cluster_size: int, *,
                   min_width: float = MIN_PLATEAU_WIDTH) -> ClusterChoice:
    """The rule of :meth:`~attnclust.TemperaturePath.choose_n_clusters` (module docstring)
    on a path's ``plateaus``, counted with clusters of ``min_cluster_size`` rows or more.

    Examples
    --------
    >>> reps = [(np.zeros((c, 1)), np.ones(c, dtype=int)) for c in (1, 2, 2, 2, 3)]
    >>> lams, counts = 2.0 ** np.arange(5), np.array([1, 2, 2, 2, 3])
    >>> choice = widest_plateau(plateaus_of(lams, counts, reps), 1)
    >>> choice.n_clusters, round(choice.plateau.width, 3)
    (2, 2.079)
    """
    found = [p for p in plateaus[1:] if p.n_clusters >= 2]
    if not found:
        return ClusterChoice(1, None, "the path never split into clusters of "
                             f"{min_cluster_size} rows or more")
    best = max(found, key=lambda p: (p.width, -p.n_clusters))
    if best.width < min_width:
        return ClusterChoice(1, None, f"no plateau of K >= 2 spans lambda by a factor "
                             f"{math.exp(min_width):.2f} (widest: K = {best.n_clusters}, "
                             f"factor {math.exp(best.width):.2f})")
    return ClusterChoice(best.n_clusters, best, f"the widest plateau of the path: "
                         f"{best.n_clusters} clusters for lambda in [{best.start:.3g}, "
                         f"{best.stop:.3g}], a factor {math.exp(best.width):.2f}")


class _Settled:
    """A :func:`temperature_path` callback that stops the path once
    :meth:`TemperaturePath.choose_n_clusters` can no longer change: the widest plateau so
    far (of ``K >= 2``, after the cold start's) is at least ``min_width`` wide, and wider
    than any later plateau can be (the rest of the grid) and than the current plateau can
    grow (to the end of the grid), unless that is the widest one itself. Widths are
    computed as :func:`plateaus_of` computes them, and "wider" means by more than rounding,
    so that ties are broken on the cut path as on the whole one."""

    def __init__(self, grid, min_width: float):
        self.end, self.min_width = float(grid[-1]), min_width
        self.best = (-math.inf, 0)             # (width, -K) of the widest closed plateau
        self.count, self.start, self.plateaus = None, 0.0, 0

    def __call__(self, index: int, lam: float, n_clusters: int) -> bool:
        if n_clusters != self.count:
            if self.plateaus > 1 and self.count >= 2:
                self.best = max(self.best, (math.log(lam / self.start), -self.count))
            self.count, self.start, self.plateaus = n_clusters, lam, self.plateaus + 1
        current = (math.log(lam / self.start), -self.count)
        counts = self.plateaus > 1 and self.count >= 2
        best = max(self.best, current) if counts else self.best
        if best[0] < self.min_width:
            return False
        could = math.log(self.end / (lam if counts and best == current else self.start))
        return could < best[0] - 1e-9


def choose_from_path(rows: np.ndarray, max_clusters: int, *, geometry: str, random_state=None,
                     max_rows: int = 5_000) -> tuple[ClusterChoice, TemperaturePath]:
    """``n_clusters="auto"``: the :meth:`TemperaturePath.choose_n_clusters` of the path of
    preprocessed ``rows`` (a sample of ``max_rows`` drawn with ``random_state`` when there
    are more; at most ``max_clusters`` heads, :data:`FAST_SETTINGS`), and the path. The
    path stops once the choice is settled (no later plateau could be wider than the
    widest so far), so the chosen plateau may be the open last one.

    Examples
    --------
    >>> X = np.r_[np.full((20, 1), -1.0), np.full((20, 1), 1.0)]
    >>> X = X + np.random.default_rng(0).normal(0, 0.05, X.shape)
    >>> choice, path = choose_from_path(X, 4, geometry="euclidean")
    >>> choice.n_clusters
    2
    """
    from .annealing import path_grid, temperature_path  # the path imports this module

    if rows.shape[0] > max_rows:
        gen = as_generator(random_state, "random_state")
        rows = rows[np.sort(gen.choice(rows.shape[0], max_rows, replace=False))]
    rows = np.asarray(rows, dtype=np.float64)
    grid = path_grid(rows, geometry=geometry, grid_ratio=FAST_SETTINGS["grid_ratio"],
                     n_decades=FAST_SETTINGS["n_decades"])
    path = temperature_path(rows, min(max_clusters, rows.shape[0]), geometry=geometry,
                            inverse_temperatures=grid, callback=_Settled(grid, MIN_PLATEAU_WIDTH),
                            **FAST_SETTINGS)
    choice = path.choose_n_clusters()
    # the path also stops once all max_clusters heads are apart: when that left no plateau
    # wide enough, one blob splitting in a cascade looks like more clusters than heads
    # (12 blobs for 10 heads); nothing on the path tells them apart, so the reason says so
    if choice.plateau is None and max_clusters < rows.shape[0] and \
            path.n_distinct[-1] == max_clusters:
        choice = choice._replace(reason=f"{choice.reason}; the path stopped with all "
                                 f"max_clusters={max_clusters} heads apart, as it does for "
                                 "more clusters than that too: raise max_clusters if the "
                                 "rows may hold more")
    return choice, path

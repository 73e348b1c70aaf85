"""The number of clusters read off the temperature path, for a caller that has only rows
(benchmarks, the guide's figures; ``n_clusters="auto"`` of the estimator is
:mod:`attnclust.cluster.choice.k_choice`'s likelihood choice).

:func:`choose_from_path` follows the path (:func:`attnclust.temperature_path`, module
:mod:`attnclust.cluster.annealing`) of (a sample of) the preprocessed rows on the coarser
grid of :data:`FAST_SETTINGS` and applies the plateau rule of
:meth:`~attnclust.TemperaturePath.choose_n_clusters` (:mod:`attnclust.cluster.choice.plateaus`:
the widest plateau of ``K >= 2``, at least ``MIN_PLATEAU_WIDTH`` wide in ``log lambda``,
else ``K = 1``), stopping the path as soon as no later plateau could be wider than the
widest so far. The plateaus' names (:class:`~attnclust.cluster.choice.plateaus.Plateau`,
:class:`~attnclust.cluster.choice.plateaus.ClusterChoice`, ...) stay importable from here.

Notation
--------
That of :mod:`attnclust.cluster.choice.plateaus` (``K``: ``n_clusters``, ``w_min``:
``min_width``); ``lam`` is an inverse temperature ``lambda`` of the path's grid.
"""

from __future__ import annotations

import math

import numpy as np

from ..._validation import as_generator
from ..annealing import TemperaturePath, path_grid, temperature_path
from .plateaus import (  # the plateaus' names stay importable from here
    MIN_PLATEAU_WIDTH,
    ClusterChoice,
    Plateau,
    plateaus_of,
    widest_plateau,
)

__all__ = ["FAST_SETTINGS", "MIN_PLATEAU_WIDTH", "ClusterChoice", "Plateau",
           "choose_from_path", "plateaus_of", "widest_plateau"]

# a coarser grid, looser fixed points and strides, for reading K off the path: as
# accurate on benchmarks/bench_auto_k.py's 90 mixtures (90/90), many times faster
# (docs/guide/temperature-path.md); init="anneal" keeps single steps and 100 iterations
# at tol 1e-4 on that grid (attnclust.cluster.annealing.ANNEAL_SETTINGS)
FAST_SETTINGS = {"grid_ratio": 1.12, "n_decades": 3.0, "max_iter": 20, "tol": 1e-3, "stride": 4}


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

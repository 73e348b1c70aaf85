"""The plateaus of a temperature path and the rule that reads the number of clusters off
them (:meth:`~attnclust.TemperaturePath.choose_n_clusters`; ``n_clusters="auto"`` is
:mod:`attnclust.cluster.choice.k_choice`'s likelihood choice).

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

These are functions of the path's grid and counts only: the path
(:mod:`attnclust.cluster.annealing`) records its plateaus with them, and
:mod:`attnclust.cluster.choice.path_choice` reads ``K`` off a path it stops early.

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
from typing import NamedTuple

import numpy as np

__all__ = ["MIN_PLATEAU_WIDTH", "ClusterChoice", "Plateau", "plateaus_of", "widest_plateau"]

MIN_PLATEAU_WIDTH = 1.0   # log-width a plateau of K >= 2 needs to be chosen over K = 1


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
        last = plateaus[-1]
        cut = (f"; the path ended on K = {last.n_clusters}, its heads all apart, before its "
               "plateau closed: follow more heads (max_clusters) to measure it"
               if not last.closed and last.n_clusters >= 2 else "")
        return ClusterChoice(1, None, f"no plateau of K >= 2 spans lambda by a factor "
                             f"{math.exp(min_width):.2f} (widest: K = {best.n_clusters}, "
                             f"factor {math.exp(best.width):.2f}){cut}")
    return ClusterChoice(best.n_clusters, best, f"the widest plateau of the path: "
                         f"{best.n_clusters} clusters for lambda in [{best.start:.3g}, "
                         f"{best.stop:.3g}], a factor {math.exp(best.width):.2f}")

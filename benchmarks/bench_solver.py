"""The fixed-point solver: passes over the data with and without Anderson extrapolation.

One row per (data set, geometry): passes over the data summed over ``random_state``
0..5, and fits converged (of 6), for plain safeguarded steps (``_ANDERSON_DEPTH = 0``)
and for the default extrapolated steps, and their ratio. A pass is one all-reduce of the
solver's statistics (:func:`attnclust.cluster.distributed.pass_bytes`), counted through a
one-process :class:`attnclust.Communicator` whose sum is the identity, so the fits are
those of ``AttentionClustering(K, ...).fit(X)``: on the sphere the default, for
Euclidean heads the soft layer at the default's ``"auto"`` inverse temperature (the
default itself ends in the hard limit, Lloyd's steps from k-means runs on a sample, and
sums no pass of the soft solver). Data: scikit-learn's iris, wine and digits with the
true ``K``; quick: iris and wine. docs/solver.md quotes this table.
"""

from __future__ import annotations

import sys
import warnings

import torch
from sklearn.datasets import load_digits, load_iris, load_wine

import attnclust as ac
from attnclust.cluster import fixed_point
from attnclust.cluster.distributed import pass_bytes

SEEDS = range(6)


def _passes(X, K: int, **params) -> tuple[int, bool]:
    """Passes of one fit (all-reduces of the pass's size) and whether it converged."""
    numel = pass_bytes(K, X.shape[1]) // torch.empty((), dtype=torch.float64).element_size()
    count = 0

    def reduce(t: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += t.numel() == numel
        return t

    comm = ac.Communicator(reduce, lambda t: t, 0, len(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ac.AttentionClustering(K, **params).fit(X, comm=comm)
    return count, bool(est.converged_)


def _soft_fit(X, K: int, geometry: str, seed: int) -> dict:
    """Parameters of a fit that runs the fixed-point solver to convergence: the sphere's
    default; for Euclidean heads, the soft layer at the default's ``"auto"`` lambda."""
    params = {"geometry": geometry, "random_state": seed}
    if geometry == "euclidean":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lam = ac.AttentionClustering(K, random_state=seed).fit(X).inverse_temperature_
        params["inverse_temperature"] = lam
    return params


def run(quick: bool) -> list[dict]:
    sets = [("iris", load_iris, 3), ("wine", load_wine, 3)]
    if not quick:
        sets.append(("digits", load_digits, 10))
    default_depth = fixed_point._ANDERSON_DEPTH
    rows = []
    try:
        for name, loader, K in sets:
            X = loader(return_X_y=True)[0]
            for geometry in ("sphere", "euclidean"):
                row = {"data": name, "geometry": geometry}
                params = [_soft_fit(X, K, geometry, s) for s in SEEDS]
                for label, depth in (("plain", 0), ("extrapolated", default_depth)):
                    fixed_point._ANDERSON_DEPTH = depth
                    fits = [_passes(X, K, **p) for p in params]
                    row[f"{label} passes"] = sum(p for p, _ in fits)
                    row[f"{label} converged"] = sum(c for _, c in fits)
                row["extrapolated / plain"] = row["extrapolated passes"] / row["plain passes"]
                rows.append(row)
    finally:
        fixed_point._ANDERSON_DEPTH = default_depth
    return rows


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

"""The parameters of :class:`~attnclust.AttentionClustering`: what each may be, the rules
that tie them together, and the settings they resolve to.

Every function takes the estimator's parameters as the dictionary of
``get_params(deep=False)``. An ``"auto"`` value is resolved by the geometry
(:class:`~attnclust.geometry.Geometry`: ``normalize``, ``tol``, ``anneal``, ``n_init``);
the annealing plan is ``lambda/8, lambda/4, lambda/2`` for ``ANNEAL_STEPS`` steps each,
then ``lambda`` for ``max_iter`` steps; the default fit (``"auto"`` lambda, k-means++
seeding or ``"anneal"``, a geometry whose hard limit is k-means, spherical heads) ends
in the hard limit.

Notation
--------
==========  ================  ==========================================
paper       code              meaning
==========  ================  ==========================================
``lambda``  ``lam``           inverse temperature of the last stage
``K``       ``n_clusters``    heads
==========  ================  ==========================================
"""

from __future__ import annotations

import functools
import warnings

from sklearn.base import BaseEstimator

from ._validation import (
    as_torch_dtype,
    check_constraints,
    check_device,
    check_int,
    check_inverse_temperature,
    check_nonnegative,
)
from .covariance import as_covariance
from .geometry import as_geometry

__all__ = ["ANNEAL_FACTORS", "ANNEAL_STEPS", "CONSTRAINTS", "anneal_plan", "check_params",
           "ends_in_hard_limit", "param_names", "resolved", "rows_per_chunk", "stages"]

ANNEAL_FACTORS = (1 / 8, 1 / 4, 1 / 2)   # the annealing plan: fractions of lambda ...
ANNEAL_STEPS = 5                         # ... and fixed-point steps at each of them

# parameter -> (the constants it may be, a check of any other value: None, none allowed)
CONSTRAINTS = {
    "n_clusters": (("auto",), lambda v: check_int(v, "n_clusters", 1)),
    "max_clusters": ((), lambda v: check_int(v, "max_clusters", 1)),
    "geometry": ((), as_geometry),
    "covariance_type": ((), as_covariance),
    "inverse_temperature": (("auto",), check_inverse_temperature),
    "n_init": (("auto",), lambda v: check_int(v, "n_init", 1)),
    "normalize": (("auto", "rows", "center-scale", None), None),
    "penalty": ((None, "repulsion", "balance"), None),
    "rho": ((), lambda v: check_nonnegative(v, "rho")),
    "anneal": ((True, False, "auto"), None),
    "solver": (("fixed-point", "pgd"), None),
    "max_iter": ((), lambda v: check_int(v, "max_iter", 1)),
    "tol": (("auto",), lambda v: check_nonnegative(v, "tol")),
    "batch_size": ((None,), lambda v: check_int(v, "batch_size", 1)),
    "chunk_size": ((None,), lambda v: check_int(v, "chunk_size", 1)),
    "device": ((), check_device),
    "dtype": (("auto",), as_torch_dtype),
    "callback": ((None,), lambda v: _check_callable(v, "callback")),
}


def _check_callable(value, name: str):
    if not callable(value):
        raise ValueError(f"{name} must be a callable, got {value!r}")
    return value


@functools.cache
def param_names(cls) -> list[str]:
    """scikit-learn's ``_get_param_names`` of an estimator class, read once: scikit-learn
    reads ``__init__``'s signature on every ``get_params`` (0.15 ms, several times per fit,
    a tenth of a small fit), and a class's signature does not change."""
    return BaseEstimator._get_param_names.__func__(cls)


def _is(value, name: str) -> bool:
    return isinstance(value, str) and value == name


def check_params(p: dict, n_samples: int, n_local: int, *, data_parallel: bool = False,
                 weight_total: float | None = None) -> None:
    """The table ``CONSTRAINTS``, then the rules that tie parameters together
    (``n_samples`` rows in all, ``n_local`` of them on this rank, of a ``data_parallel``
    fit; ``weight_total``: the sum of the sample weights, when given).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> check_params(AttentionClustering(n_clusters=20).get_params(), 10, 10)
    Traceback (most recent call last):
    ...
    ValueError: n_samples=10 should be >= n_clusters=20
    """
    check_constraints(p, CONSTRAINTS)
    unit_heads, solver = as_geometry(p["geometry"]).unit_heads, p["solver"]
    if data_parallel and _is(p["n_clusters"], "auto"):
        raise ValueError("n_clusters='auto' is not data-parallel: choose K on one process "
                         "and pass it")
    if weight_total is not None and solver != "fixed-point":
        raise ValueError(f"sample_weight needs solver='fixed-point', got {solver!r}")
    if weight_total is not None and not weight_total > 0:
        raise ValueError("sample_weight sums to zero: no row has a positive weight")
    if not isinstance(p["n_clusters"], str) and n_samples < p["n_clusters"]:
        raise ValueError(f"n_samples={n_samples} should be >= n_clusters={p['n_clusters']}")
    if as_covariance(p["covariance_type"]).shaped and (unit_heads or solver != "fixed-point"
                                                or p["penalty"] is not None):
        raise ValueError(f"covariance_type={p['covariance_type']!r} needs "
                         "geometry='euclidean', solver='fixed-point' and penalty=None")
    if p["penalty"] is not None and not unit_heads:
        raise ValueError(f"penalty={p['penalty']!r} is defined for unit heads; use "
                         "geometry='sphere' or penalty=None")
    if solver == "pgd" and not unit_heads:
        raise ValueError("solver='pgd' runs projected gradient descent on the sphere; use "
                         "geometry='sphere' or solver='fixed-point'")
    if solver == "pgd":   # the fixed-point solver ignores it
        check_nonnegative(p["step_size"], "step_size")
    if n_samples != n_local and solver != "fixed-point":
        raise ValueError(f"data-parallel fitting needs solver='fixed-point', got {solver!r}")


def resolved(p: dict, name: str):
    """Parameter ``name``, its ``"auto"`` resolved by the geometry (``normalize``, ``tol``,
    ``anneal``, ``n_init``).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> resolved(AttentionClustering(geometry="sphere").get_params(), "normalize")
    'rows'
    """
    value = p[name]
    if not _is(value, "auto"):
        return value
    geometry = as_geometry(p["geometry"])
    if name == "n_init" and _is(p["init"], "anneal"):
        return 1                                  # deterministic: once is enough
    return geometry.n_init(isinstance(p["init"], str)) if name == "n_init" \
        else getattr(geometry, name)


def anneal_plan(p: dict) -> list[tuple[float, int | None]]:
    """Stages of a fit: ``(fraction of lambda, steps)``; ``None`` steps: ``max_iter``.

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> anneal_plan(AttentionClustering(anneal=True).get_params())
    [(0.125, 5), (0.25, 5), (0.5, 5), (1.0, None)]
    """
    stages = [(f, ANNEAL_STEPS) for f in ANNEAL_FACTORS] if resolved(p, "anneal") else []
    return stages + [(1.0, None)]


def stages(p: dict, lam: float) -> tuple[list[float], list[int]]:
    """The :func:`anneal_plan` at ``lam``: the stages' inverse temperatures and steps.

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> stages(AttentionClustering(max_iter=50).get_params(), 2.0)
    ([2.0], [50])
    """
    plan = anneal_plan(p)
    return [lam * f for f, _ in plan], [int(p["max_iter"]) if n is None else n for _, n in plan]


def rows_per_chunk(p: dict) -> int | None:
    """``chunk_size``, or ``batch_size`` in its old meaning for the fixed-point solver (a
    ``FutureWarning`` for the caller of ``fit``, three frames up from the caller).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> rows_per_chunk(AttentionClustering(chunk_size=512).get_params())
    512
    """
    if p["batch_size"] is None or p["solver"] == "pgd":
        return p["chunk_size"]
    warnings.warn("batch_size as the rows per chunk of the fixed-point solver is "
                  "deprecated and will be removed in 0.4: pass chunk_size (batch_size is "
                  "the mini-batch of solver='pgd')", FutureWarning, stacklevel=4)
    return p["batch_size"] if p["chunk_size"] is None else p["chunk_size"]


def ends_in_hard_limit(p: dict) -> bool:
    """Whether a fit ends in the hard limit (:mod:`attnclust.hard_ending`): the default
    (``"auto"`` lambda, k-means++ seeding or the annealing path's heads, a geometry whose
    hard limit is k-means, heads without a shape of their own).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> ends_in_hard_limit(AttentionClustering().get_params())
    True
    """
    return (not as_covariance(p["covariance_type"]).shaped
            and isinstance(p["inverse_temperature"], str)
            and p["solver"] == "fixed-point" and as_geometry(p["geometry"]).kmeans_limit
            and (_is(p["init"], "kmeans++") or _is(p["init"], "anneal")))

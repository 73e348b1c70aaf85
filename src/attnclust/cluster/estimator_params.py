"""The parameters of :class:`~attnclust.AttentionClustering`: what each may be and the
rules that tie them together, checked once at the start of ``fit`` (and of the first
``partial_fit``).

The functions take the estimator's parameters by name, as the dictionary of
``get_params(deep=False)``. The settings they resolve to (every ``"auto"``, the
annealing stages, the ending) are :class:`~attnclust.cluster.plan.FitPlan`'s, made by
:func:`attnclust.cluster.plan.resolve` from the checked parameters.

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

import numpy as np
from sklearn.base import BaseEstimator

from .._validation import (
    as_torch_dtype,
    check_constraints,
    check_device,
    check_int,
    check_inverse_temperature,
    check_nonnegative,
)
from ..layer.geometry import as_geometry
from .mixture.covariance import as_covariance_type
from .settings import FitSettings, MergeSettings

__all__ = ["CONSTRAINTS", "check_params", "param_names", "parameters"]

# parameter -> (the constants it may be, a check of any other value: None, none allowed)
CONSTRAINTS = {
    "n_clusters": (("auto",), lambda v: check_int(v, "n_clusters", 1)),
    "max_clusters": ((), lambda v: check_int(v, "max_clusters", 1)),
    "geometry": ((), as_geometry),
    "covariance_type": ((), as_covariance_type),
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
    "init": (("kmeans++", "sphere", "anneal"), lambda v: _check_init(v)),
    "noise_head": ((True, False), None),
    "merge_heads": (("auto", True, False), lambda v: _check_merge_settings(v)),
    "settings": ((None,), lambda v: _check_fit_settings(v)),
    "verbose": ((True, False), lambda v: check_int(v, "verbose", 0)),
}


def _check_init(value):
    """An array of heads, whose shape ``fit`` checks against ``(n_clusters, n_features)``."""
    if isinstance(value, str) or np.ndim(value) != 2:
        raise ValueError(f"init must be an array of shape (n_clusters, n_features), got "
                         f"{value!r}")      # the table adds the names it may be
    return value


def _check_merge_settings(value):
    if not isinstance(value, MergeSettings):
        raise ValueError(f"merge_heads must be a MergeSettings, got {value!r}")
    return value


def _check_fit_settings(value):
    if not isinstance(value, FitSettings):
        raise ValueError(f"settings must be a FitSettings, got {value!r}")
    return value


def _check_callable(value, name: str):
    if not callable(value):
        raise ValueError(f"{name} must be a callable, got {value!r}")
    return value


@functools.cache
def param_names(cls) -> list[str]:
    """scikit-learn's ``_get_param_names`` of an estimator class, read once: scikit-learn
    reads ``__init__``'s signature on every ``get_params`` (several times per fit, a
    noticeable share of a small fit), and a class's signature does not change."""
    return BaseEstimator._get_param_names.__func__(cls)


def parameters(est) -> dict:
    """The estimator's parameters by name, read once (``get_params(deep=False)``'s
    dictionary, without scikit-learn's machinery).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> parameters(AttentionClustering(4)) == AttentionClustering(4).get_params(deep=False)
    True
    """
    return {name: getattr(est, name) for name in param_names(type(est))}


def _is(value, name: str) -> bool:
    return isinstance(value, str) and value == name


def _check_auto(p: dict, data_parallel: bool) -> None:
    """``n_clusters="auto"``'s rules: one process, and no given heads (they fix ``K``;
    refused before ``K`` is chosen, not after)."""
    if data_parallel:
        raise ValueError("n_clusters='auto' is not data-parallel: choose K on one process "
                         "and pass it")
    if not isinstance(p["init"], str):
        raise ValueError(f"init given as {len(p['init'])} heads fixes K: pass "
                         f"n_clusters={len(p['init'])}, not 'auto' (which chooses K), or "
                         "init='kmeans++'")


def check_params(p: dict, n_samples: int, n_local: int, *, data_parallel: bool = False,
                 weight_total: float | None = None) -> None:
    """The table ``CONSTRAINTS``, then the rules that tie parameters together
    (``n_samples`` rows in all, ``n_local`` of them on this rank, of a ``data_parallel``
    fit; ``weight_total``: where sample weights are given, their sum or their largest,
    positive where any weight is).

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
    if _is(p["n_clusters"], "auto"):
        _check_auto(p, data_parallel)
    if weight_total is not None and solver != "fixed-point":
        raise ValueError(f"sample_weight needs solver='fixed-point', got {solver!r}")
    if weight_total is not None and not weight_total > 0:
        raise ValueError("sample_weight sums to zero: no row has a positive weight")
    if not isinstance(p["n_clusters"], str) and n_samples < p["n_clusters"]:
        raise ValueError(f"n_samples={n_samples} should be >= n_clusters={p['n_clusters']}")
    if as_covariance_type(p["covariance_type"]).shaped and (unit_heads or solver != "fixed-point"
                                                or p["penalty"] is not None):
        raise ValueError(f"covariance_type={p['covariance_type']!r} needs "
                         "geometry='euclidean', solver='fixed-point' and penalty=None")
    if p["noise_head"] and not as_covariance_type(p["covariance_type"]).automatic:
        raise ValueError(f"noise_head=True chooses diagonal or full heads beside the "
                         f"background: it takes covariance_type='auto', got "
                         f"{p['covariance_type']!r}")
    if p["noise_head"] and (data_parallel or str(p["device"]).split(":")[0] != "cpu"):
        raise ValueError("noise_head=True fits rows held whole by one process on the CPU: "
                         "fit without comm, on device='cpu'")
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

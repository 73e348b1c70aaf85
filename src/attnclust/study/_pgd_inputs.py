"""What :func:`attnclust.pgd` is given, made ready for its loop: the objective, the
initial heads, the penalty terms of each run (and those of the runs still active).

The objective ``R`` is the population risk of a mixture (one per run, or shared), the
empirical risk of data (full or mini-batch, or this rank's shard with ``reduce``), or
any object with ``value_and_grad``. The penalty ``Pen`` of run ``r`` is ``"repulsion"``,
``"balance"`` (on the objective's mixture or data), a callable ``(K, d) -> scalar`` or an
objective; runs that share a penalty share one term, evaluated for all of them at once.
The initial heads ``mu^0`` are checked (finite; no zero row on the sphere), projected on
the geometry's manifold and given a run axis.

Notation
--------
==========  ==================  ===============================================
paper       code                meaning
==========  ==================  ===============================================
``R``       ``risk``            the objective of every run, one batched object
``Pen``     ``terms``           ``[(penalty term, run indices)]``
``mu^0``    ``heads0``          initial heads, ``(K, d)`` or ``(R, K, d)``
==========  ==================  ===============================================
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._validation import as_tensor, check_finite
from ..layer.geometry import Geometry
from ._run_schedules import group_runs, per_run
from .mixture import GaussianMixture
from .objectives import (
    Balance,
    CallablePenalty,
    EmpiricalRisk,
    Objective,
    PopulationRisk,
    Repulsion,
)

__all__ = ["as_objective", "check_options", "check_problems", "initial_heads", "penalty_terms",
           "restrict"]

_PENALTIES = (None, "repulsion", "balance")
_METHODS = ("auto", "exact", "qmc")


def _is_mixtures(objective) -> bool:
    return isinstance(objective, GaussianMixture) or (
        isinstance(objective, Sequence) and len(objective) > 0
        and all(isinstance(m, GaussianMixture) for m in objective))


def as_objective(objective, *, batch_size, reduce, gen, method, n_samples, qmc_seed, geometry):
    """The risk as an objective object (one given is checked against ``geometry``).

    Examples
    --------
    >>> import attnclust as ac
    >>> from attnclust.layer.geometry import as_geometry
    >>> mix = ac.GaussianMixture.orthogonal(d=4, k=2)
    >>> risk = as_objective(mix, batch_size=None, reduce=None, gen=None, method="auto",
    ...                     n_samples=2**10, qmc_seed=0, geometry=as_geometry("sphere"))
    >>> type(risk).__name__, risk.d
    ('PopulationRisk', 4)
    """
    if hasattr(objective, "value_and_grad"):        # an Objective, or any object like one
        wanted, assumed = geometry, getattr(objective, "geometry", None)
        if assumed not in (None, wanted):  # Geometry objects, equal when of one kind
            raise ValueError(f"the objective is for geometry={assumed.name!r}, but pgd was "
                             f"asked for geometry={wanted.name!r}")
        return objective
    if _is_mixtures(objective):
        if batch_size is not None:
            raise ValueError("batch_size applies to data arrays, not to a GaussianMixture")
        if reduce is not None:
            raise ValueError("reduce applies to data shards, not to a GaussianMixture")
        return PopulationRisk(objective, method=method, n_samples=n_samples, rng=qmc_seed,
                              geometry=geometry)
    return EmpiricalRisk(objective, batch_size=batch_size, reduce=reduce, rng=gen,
                         geometry=geometry)


def check_problems(risk, n_runs: int) -> None:
    """``ValueError`` unless the risk holds one mixture or data set, or one per run (more
    were silently cut to the runs' number, fewer raised from inside).

    Examples
    --------
    >>> import attnclust as ac
    >>> risk = ac.PopulationRisk([ac.GaussianMixture.orthogonal(d=4, k=2)] * 3)
    >>> check_problems(risk, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 3 mixtures or data sets for 2 runs: give one, or one per run (...)
    """
    mix, X = getattr(risk, "mix", None), getattr(risk, "X", None)
    count = len(mix) if mix is not None and X is None else \
        X.shape[0] if X is not None and X.ndim == 3 else 1
    if count not in (1, n_runs):
        raise ValueError(f"{count} mixtures or data sets for {n_runs} run"
                         f"{'s' * (n_runs != 1)}: give one, or one per run (heads0 of shape "
                         f"({count}, K, d))")


def initial_heads(heads0, d: int | None, device, geometry: Geometry) -> torch.Tensor:
    """``heads0`` checked (shape, ``d`` columns, finite, no zero row on the sphere),
    projected by ``geometry`` and given a run axis: ``(R, K, d)`` float64 on ``device``.

    Examples
    --------
    >>> from attnclust.layer.geometry import as_geometry
    >>> initial_heads([[3.0, 4.0]], 2, "cpu", as_geometry("sphere")).tolist()
    [[[0.6, 0.8]]]
    """
    heads = as_tensor(heads0, name="heads0", dtype=torch.float64).detach().clone()
    if heads.ndim not in (2, 3) or 0 in heads.shape:
        raise ValueError(f"heads0 must have shape (K, d) or (R, K, d), none of them 0, got "
                         f"{tuple(heads.shape)}")
    if d is not None and heads.shape[-1] != d:
        raise ValueError(f"heads0 must have d={d} columns, got {heads.shape[-1]}")
    check_finite(heads, "heads0")
    if geometry.unit_heads and bool((heads.norm(dim=-1) == 0).any()):
        raise ValueError("heads0 has a zero row, which has no direction")
    heads = geometry.projx(heads)
    return (heads if heads.ndim == 3 else heads[None]).to(device)


def penalty_terms(penalty, n_runs: int, risk, objective, *, method, n_samples, qmc_seed):
    """``[(term, run indices)]`` for the runs that have a penalty.

    Examples
    --------
    >>> terms = penalty_terms([None, "repulsion", "repulsion"], 3, None, None,
    ...                       method="auto", n_samples=2**10, qmc_seed=0)
    >>> [(type(term).__name__, idx.tolist()) for term, idx in terms]
    [('Repulsion', [1, 2])]
    """
    terms = []
    for spec, idx in group_runs(per_run(penalty, n_runs, "penalty")):
        if spec is None:
            continue
        if isinstance(spec, Objective):
            term = spec
        elif callable(spec):
            term = CallablePenalty(spec)
        elif spec == "repulsion":
            term = Repulsion()
        elif spec == "balance":
            if isinstance(risk, EmpiricalRisk):
                term = Balance(risk.X, reduce=risk.reduce, share=risk.share,
                               geometry=risk.geometry)
            elif isinstance(risk, PopulationRisk):
                term = Balance(risk.mix, method=method, n_samples=n_samples, rng=qmc_seed,
                               geometry=risk.geometry)
            else:
                raise ValueError("penalty='balance' needs a mixture or data objective")
        else:
            raise ValueError(f"penalty must be one of {_PENALTIES} or a callable, "
                             f"got {spec!r}")
        terms.append((term, idx))
    return terms


def restrict(risk, terms, active: np.ndarray):
    """The objective and penalty terms of the active runs: ``(risk, [(term, positions
    within active, run indices)])``.

    Examples
    --------
    >>> import attnclust as ac
    >>> risk = ac.PopulationRisk(ac.GaussianMixture.orthogonal(d=4, k=2))
    >>> terms = penalty_terms([None, "repulsion", "repulsion"], 3, risk, None,
    ...                       method="auto", n_samples=2**10, qmc_seed=0)
    >>> _, active_terms = restrict(risk, terms, np.array([0, 2]))
    >>> [(pos.tolist(), runs.tolist()) for _, pos, runs in active_terms]
    [([1], [2])]
    """
    out = []
    for term, idx in terms:
        members = np.intersect1d(idx, active)
        if len(members):
            out.append((term.take(members), np.searchsorted(active, members), members))
    return risk.take(active), out


def check_options(method, tol, reduce) -> float:
    """The stopping tolerance as a float, after checking ``method`` and ``tol >= 0``.

    Examples
    --------
    >>> check_options("auto", 1e-6, None)
    1e-06
    >>> check_options("fast", 0.0, None)
    Traceback (most recent call last):
    ...
    ValueError: method must be one of ('auto', 'exact', 'qmc'), got 'fast'
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    return tol

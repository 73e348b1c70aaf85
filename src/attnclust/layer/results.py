"""What the solvers report, in types they share.

:func:`attnclust.pgd` and :func:`attnclust.cluster.fixed_point.fixed_point_fit` both call
``callback(info)`` with an :class:`IterationInfo` after each update, and both return a
:class:`SolverResult` whose :class:`History` holds the recorded iterates; so does the
estimator :class:`~attnclust.AttentionClustering` with either solver. One run gives
scalars and ``(K, d)`` heads; a batch of ``R`` runs of :func:`~attnclust.pgd` gives
one value per run and ``(R, K, d)`` heads.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .._deprecation import RenamedAttribute

__all__ = ["IterationInfo", "History", "SolverResult"]


class IterationInfo(NamedTuple):
    """What a solver's ``callback`` receives after each update of the heads."""

    iteration: int
    """Updates made so far (1 after the first)."""
    loss: float | np.ndarray
    """Objective ``R + rho Pen`` at the updated heads, where the solver evaluated it (the
    fixed-point solver does, for its safeguard); NaN otherwise (PGD evaluates it before
    each update: read ``history``)."""
    inverse_temperature: float | np.ndarray
    """``lambda`` of this update."""
    shift: float | np.ndarray
    """Largest Euclidean distance a head moved in this update."""
    heads: torch.Tensor | None = None
    """The updated heads (a copy)."""

    temperature = RenamedAttribute("temperature", "inverse_temperature")   # until 0.5


class History(NamedTuple):
    """Quantities recorded at some iterates (every ``record_every`` steps of PGD, every
    accepted step of the fixed-point solver, and at the last one).

    Shapes are for one run, ``T`` records; a batch of ``R`` runs adds an axis of length
    ``R`` after the first (``risk`` is ``(T, R)``, ``heads`` is ``(T, R, K, d)``). A run
    that has stopped keeps the values of its last step. The fixed-point solver records
    the first iterate of each annealing stage at both inverse temperatures, so a value
    of ``step`` can appear twice.
    """

    step: np.ndarray
    """Updates made before each record, shape ``(T,)``."""
    risk: np.ndarray
    """Risk ``R`` (without the penalty) at the recorded heads."""
    grad_norm: np.ndarray
    """Frobenius norm of the gradient of ``R + rho_t Pen`` (Riemannian on the sphere)."""
    inverse_temperature: np.ndarray
    """``lambda_t``."""
    rho: np.ndarray
    """``rho_t``."""
    heads: np.ndarray
    """The recorded heads, shape ``(T, K, d)``."""

    temperature = RenamedAttribute("temperature", "inverse_temperature")   # until 0.5


class SolverResult(NamedTuple):
    """Outcome of a solver."""

    heads: torch.Tensor
    """Final heads, ``(K, d)`` (``(R, K, d)`` for a batch), detached."""
    history: History
    n_iter: int | np.ndarray
    """Number of updates performed (per run for a batch)."""
    converged: bool | np.ndarray
    """Whether the stopping test was met (per run for a batch)."""

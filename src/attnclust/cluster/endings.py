"""How a fit ends, as values: the part of ``fit`` that the plan decides.

``AttentionClustering.fit`` reads as a short sequence: prepare the working rows, warm
start, run the ending, store, warn (and, for the default, merge heads into clusters).
The ending is one of four values, each with the same :meth:`FitEnding.run`, chosen by
:func:`ending_for` from the resolved plan alone:

====================  ==============================================================
ending                when, and what it runs
====================  ==============================================================
:data:`GIVEN_SHAPE`   ``covariance_type="diag"`` or ``"full"``: tempered EM of shaped
                      heads from the warm start's heads
:data:`NOISE_HEAD`    ``noise_head=True``: the default fit, then the shaped heads
                      beside a uniform background (:mod:`.mixture.noise_head`)
:data:`CHOSEN_SHAPE`  ``covariance_type="auto"`` (the default): the default fit (the
                      hard limit), then the heads' shape of least ICL
                      (:mod:`.mixture.shape_choice`)
:data:`RISK`          the unshaped layer: the risk's heads by the hard limit,
                      fixed-point steps or PGD (:func:`~.estimator_fits.solve`)
====================  ==============================================================

Each gives an :class:`Outcome`: the fitted attributes, the heads' shape and why, the
attributes only some fits have, and what the degeneracy checks of the unshaped layer
read.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .degenerate import DegenerateFitWarning, user_stacklevel
from .estimator_fits import Reporter, fit_shaped, risk_attributes, solve, with_deferred_lambda
from .mixture.noise_head import fit_noise_head
from .mixture.shape_choice import ShapeChoice, fit_chosen_shape, given_shape
from .rows import WorkingRows

if TYPE_CHECKING:
    from .plan import FitPlan

__all__ = ["CHOSEN_SHAPE", "GIVEN_SHAPE", "NOISE_HEAD", "RISK", "FitEnding", "Outcome",
           "ending_for"]


class Outcome(NamedTuple):
    """What an ending gives the estimator."""

    fitted: Any
    """The fitted attributes, a named tuple of :mod:`attnclust.cluster.estimator_fits`."""
    choice: ShapeChoice
    """The heads' shape, why, and the criteria of the candidates."""
    extra: dict = {}
    """Attributes only this ending has (the noise head's weight and density)."""
    degeneracy: dict | None = None
    """Keywords of :func:`~attnclust.cluster.degenerate.warn_if_degenerate` (the
    unshaped layer's checks), ``None`` where they do not apply."""


class FitEnding(ABC):
    """One way a fit ends (module docstring); ``merges_heads``: whether its heads may then
    merge into clusters (``merge_heads``, the default fit's only)."""

    merges_heads = False

    @abstractmethod
    def run(self, rows: WorkingRows, warm: tuple, plan: FitPlan, *,
            gen: np.random.Generator, report: Reporter) -> Outcome:
        """The ending on the working ``rows`` from the warm start ``warm`` (``(S, Sw,
        start, lam)``, :meth:`~attnclust.cluster.plan.FitPlan.warm_start`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _solve(rows: WorkingRows, warm: tuple, plan: FitPlan, gen, report):
    """The risk's heads from the warm start (:func:`~attnclust.cluster.estimator_fits.solve`)."""
    S, Sw, start, lam = warm
    return solve(S, Sw, rows, start, lam, plan, gen=gen, report=report)


def _risk_outcome(warm: tuple, end, rows: WorkingRows, plan: FitPlan,
                  choice: ShapeChoice) -> Outcome:
    """The unshaped layer's attributes of the solved ``end`` (its ``"auto"`` lambda read
    now where the warm start deferred it), with its degeneracy checks."""
    S, Sw, start, lam = warm
    if lam is None:
        start, lam, end = with_deferred_lambda(S, Sw, start, end, plan.geometry)
    fitted = risk_attributes(end, lam, rows)
    return Outcome(fitted, choice, degeneracy=dict(
        sizes=end.sizes, sharpness=end.sharpness, capped=start.capped,
        inverse_temperature=fitted.inverse_temperature_))


class _Risk(FitEnding):
    def run(self, rows, warm, plan, *, gen, report):
        end = _solve(rows, warm, plan, gen, report)
        return _risk_outcome(warm, end, rows, plan, given_shape(plan))


class _GivenShape(FitEnding):
    def run(self, rows, warm, plan, *, gen, report):
        start = warm[2]
        return Outcome(fit_shaped(rows, start.heads, plan, report=report), given_shape(plan))


class _ChosenShape(FitEnding):
    merges_heads = True

    def run(self, rows, warm, plan, *, gen, report):
        end = _solve(rows, warm, plan, gen, report)
        fitted, choice = fit_chosen_shape(rows, end, plan, gen=gen, report=report)
        if choice.covariance.shaped:    # shaped heads: their fit is the fit
            return Outcome(fitted, choice)
        return _risk_outcome(warm, end, rows, plan, choice)


class _NoiseHead(FitEnding):
    def run(self, rows, warm, plan, *, gen, report):
        end = _solve(rows, warm, plan, gen, report)
        noise = fit_noise_head(rows, end, plan, gen=gen)
        labels = np.asarray(noise.fitted.labels_)
        w = None if rows.weights is None else rows.weights.cpu().numpy()
        share = float(np.average(labels < 0, weights=w))
        if share > 0.5:                 # (user, fit, _fit, run)
            warnings.warn(f"noise_head=True: the background took {share:.0%} of the rows; "
                          "clusters that are not Gaussian (crescents, rows on a grid) read "
                          "as noise to it: fit without noise_head", DegenerateFitWarning,
                          stacklevel=user_stacklevel())
        return Outcome(noise.fitted, noise.choice, {
            "noise_weight_": noise.noise_weight, "noise_log_density_": noise.noise_log_density})


RISK, GIVEN_SHAPE, CHOSEN_SHAPE, NOISE_HEAD = _Risk(), _GivenShape(), _ChosenShape(), _NoiseHead()


def ending_for(plan: FitPlan) -> FitEnding:
    """The ending of the resolved ``plan`` (module docstring).

    Examples
    --------
    >>> from attnclust import AttentionClustering
    >>> from attnclust.cluster.plan import resolve
    >>> [ending_for(resolve(AttentionClustering(3, **p).get_params())) for p in (
    ...     {}, {"covariance_type": "full"}, {"noise_head": True},
    ...     {"covariance_type": "spherical"})]
    [_ChosenShape(), _GivenShape(), _NoiseHead(), _Risk()]
    """
    if plan.covariance.shaped:
        return GIVEN_SHAPE
    if plan.noise_head:
        return NOISE_HEAD
    return CHOSEN_SHAPE if plan.chooses_shape else RISK

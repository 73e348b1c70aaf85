"""Schedules of the inverse temperature and the penalty weight, as values.

A schedule answers "the value at step ``t``" (as optax's schedules and ott-jax's
epsilon scheduler do); both solvers take one wherever they take ``inverse_temperature``
or ``rho``: :func:`attnclust.pgd` reads it at every step, the fixed-point solver
(:func:`attnclust.cluster.fixed_point.fixed_point_fit`) as its run-length :meth:`Schedule.stages`
(a stage of steps at one value each). A plain number is a :class:`Constant`; a callable
``t -> value`` is a schedule too.

    Constant(v)(t)            = v
    Anneal(v, ratio, steps)(t) = v * ratio ** (min(1, t / steps) - 1)    (geometric, v / ratio -> v)
    Decay(v, steps)(t)        = v * max(0, 1 - t / steps)                (linear, v -> 0)
    Stages(values, steps)(t)  = values[s] for sum(steps[:s]) <= t < sum(steps[:s+1])

``finished_at`` is the step from which the value no longer changes; a solver's stopping
test waits for it.

Notation
--------
============  ================  ==============================================
paper         code              meaning
============  ================  ==============================================
``t``         ``t``             step (``0, 1, ...``)
``lambda_t``  ``schedule(t)``   inverse temperature at step ``t``
``rho_t``     ``schedule(t)``   penalty weight at step ``t``
============  ================  ==============================================
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Schedule", "Constant", "Anneal", "Decay", "Stages", "as_schedule"]


class Schedule:
    """A value at each step ``t``: a float, or one per run (an array)."""

    finished_at: float = 0
    """The step from which the value no longer changes."""

    def __call__(self, t: int):
        raise NotImplementedError

    def stages(self, n_steps: int) -> list[tuple[float, int]]:
        """The values of steps ``0 .. n_steps - 1`` as ``[(value, count), ...]``: runs of
        equal values (one run's values; the fixed-point solver's stages).

        Examples
        --------
        >>> Stages([1.0, 4.0], [2, 10]).stages(5)
        [(1.0, 2), (4.0, 3)]
        """
        out: list[tuple[float, int]] = []
        for t in range(int(n_steps)):
            value = float(self(t))
            if out and out[-1][0] == value:
                out[-1] = (value, out[-1][1] + 1)
            else:
                out.append((value, 1))
        return out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Constant(Schedule):
    """The same value at every step.

    Examples
    --------
    >>> Constant(3.0)(10)
    3.0
    """

    def __init__(self, value):
        self.value = value

    def __call__(self, t: int):
        return self.value

    def stages(self, n_steps: int) -> list[tuple[float, int]]:
        return [(float(self.value), int(n_steps))]


def _progress(t: int, steps: float) -> float:
    return min(1.0, t / steps) if steps > 0 else 1.0


def _checked(value, name: str, *, positive: bool = False) -> float:
    """A schedule's number of steps (``>= 0``) or ratio (``> 0``), finite; booleans and
    strings refused (``steps="10"`` was stored as given, ``ratio=0`` divided by zero)."""
    if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (int, float, np.number)) \
            or not np.isfinite(value) or (value <= 0 if positive else value < 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")
    return value


class Anneal(Schedule):
    """Geometric from ``value / ratio`` to ``value`` over ``steps`` steps, then ``value``.

    Parameters
    ----------
    value : float or array of shape (R,)
        The target (the inverse temperature reached).
    ratio : float, default=100.0
        How many times smaller the value starts.
    steps : float
        Steps of the annealing (``0``: the target at once).

    Examples
    --------
    >>> s = Anneal(50.0, ratio=100.0, steps=10)
    >>> float(s(0)), float(s(5)), float(s(10)), s.finished_at
    (0.5, 5.0, 50.0, 10)
    """

    def __init__(self, value, *, ratio: float = 100.0, steps: float):
        self.value, self.steps = value, _checked(steps, "steps")
        self.ratio = _checked(ratio, "ratio", positive=True)
        self.finished_at = steps

    def __call__(self, t: int):
        return self.value * self.ratio ** (_progress(t, self.steps) - 1.0)


class Decay(Schedule):
    """Linear from ``value`` to ``0`` over ``steps`` steps, then ``0`` (so the end point
    minimizes the risk alone when it weighs a penalty).

    Examples
    --------
    >>> s = Decay(2.0, steps=4)
    >>> [float(s(t)) for t in range(6)]
    [2.0, 1.5, 1.0, 0.5, 0.0, 0.0]
    """

    def __init__(self, value, *, steps: float):
        self.value, self.steps = value, _checked(steps, "steps")
        self.finished_at = steps

    def __call__(self, t: int):
        return self.value * (1.0 - _progress(t, self.steps))


class Stages(Schedule):
    """Piecewise constant: ``values[s]`` for ``steps[s]`` steps, the last value kept.

    Examples
    --------
    >>> s = Stages([1.0, 4.0, 8.0], [2, 3, 100])
    >>> [s(t) for t in range(7)], s.finished_at
    ([1.0, 1.0, 4.0, 4.0, 4.0, 8.0, 8.0], 5)
    """

    def __init__(self, values: Sequence[float], steps: Sequence[int]):
        if len(values) != len(steps) or not values:
            raise ValueError(f"values and steps must be non-empty and of one length, got "
                             f"{len(values)} and {len(steps)}")
        self.values = [float(v) for v in values]
        self.steps = [int(_checked(s, "steps")) for s in steps]
        self._ends = np.cumsum(self.steps)
        self.finished_at = int(self._ends[-2]) if len(self.steps) > 1 else 0

    def __call__(self, t: int):
        s = int(np.searchsorted(self._ends, t, side="right"))
        return self.values[min(s, len(self.values) - 1)]

    def stages(self, n_steps: int) -> list[tuple[float, int]]:
        """The stages of ``n_steps`` steps (a stage of no step kept as it is), the last
        value kept past the stages' sum, as every solver reads it.

        Examples
        --------
        >>> Stages([1.0, 4.0], [2, 3]).stages(8)
        [(1.0, 2), (4.0, 6)]
        """
        out, left = [], int(n_steps)
        for value, count in zip(self.values, self.steps, strict=True):
            if left <= 0:
                break
            out.append((value, min(count, left)))
            left -= count
        if left > 0:                    # past the last stage: its value, kept
            out[-1] = (out[-1][0], out[-1][1] + left)
        return out


class _Function(Schedule):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t: int):
        return self.fn(t)


def as_schedule(value) -> Schedule:
    """A :class:`Schedule` from a schedule, a callable ``t -> value`` or a value.

    Examples
    --------
    >>> as_schedule(2.0)(7), as_schedule(lambda t: 2.0 * t)(7)
    (2.0, 14.0)
    """
    if isinstance(value, Schedule):
        return value
    if callable(value):
        return _Function(value)
    return Constant(value)

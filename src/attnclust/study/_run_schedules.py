"""The schedules of a batched descent: ``lambda_t`` and ``rho_t`` for every run at step ``t``.

:func:`attnclust.pgd` takes ``inverse_temperature`` and ``rho`` as one spec shared by its
``R`` runs or as a list of one spec per run; a spec is a number, a schedule of
:mod:`attnclust.layer.schedules` or a callable ``t -> value``. :class:`RunSchedule` turns them
into ``t -> (R,)``: numbers are one vector returned as is at every step, and each
distinct schedule (callables by identity) is evaluated once per step for all the runs
that share it. The step from which a run's schedule is finished (``finished_at``; ``0``
for callables and numbers) is when its stopping test may begin.

The keywords of 0.2 (:func:`legacy_schedule`, with a ``FutureWarning``) become schedules
over the first half of the ``n`` steps:

    rho_schedule="decay"                 ->  rho_t = rho (1 - min(t / (n/2), 1))
    inverse_temperature_schedule="anneal" ->  lambda_t = lambda 100^(min(t / (n/2), 1) - 1)

Notation
--------
==============  =======================  ============================================
paper           code                     meaning
==============  =======================  ============================================
``lambda_t``    ``inverse_temperature``  inverse temperature at step ``t``, ``(R,)``
``rho_t``       ``rho``                  penalty weight at step ``t``, ``(R,)``
``R``           ``n_runs``               runs of the batch
``n``           ``n_steps``              maximum number of updates
==============  =======================  ============================================
"""

from __future__ import annotations

import numpy as np

from .._deprecation import REMOVED_IN, warn_deprecated
from ..layer.schedules import Anneal, Decay, Schedule, as_schedule

__all__ = ["RunSchedule", "group_runs", "legacy_schedule", "per_run", "run_vector"]

_ANNEAL_RATIO = 100.0  # "anneal" starts at lambda / _ANNEAL_RATIO
_SCHEDULE_FRACTION = 0.5  # "decay" and "anneal" finish after this fraction of the steps


def per_run(value, n_runs: int, name: str) -> list:
    """A spec for each run: ``value`` itself, or its items when it is a per-run list.

    Examples
    --------
    >>> per_run("repulsion", 2, "penalty"), per_run([None, "balance"], 2, "penalty")
    (['repulsion', 'repulsion'], [None, 'balance'])
    """
    if isinstance(value, (list, tuple)):
        if len(value) != n_runs:
            raise ValueError(f"{name} has {len(value)} entries for {n_runs} runs")
        return list(value)
    return [value] * n_runs


def group_runs(specs: list) -> list[tuple[object, np.ndarray]]:
    """Runs grouped by spec (callables by identity): ``[(spec, run indices), ...]``.

    Examples
    --------
    >>> [(spec, idx.tolist()) for spec, idx in group_runs([None, "balance", None])]
    [(None, [0, 2]), ('balance', [1])]
    """
    keys: dict = {}
    for r, spec in enumerate(specs):
        keys.setdefault(id(spec) if callable(spec) else spec, (spec, []))[1].append(r)
    return [(spec, np.asarray(idx)) for spec, idx in keys.values()]


def _is_number(value) -> bool:
    return not (isinstance(value, Schedule) or callable(value))


class RunSchedule:
    """``t -> (R,)`` values of one schedule per run (numbers, schedules or callables), and
    the step from which each run's is finished (``done``).

    Examples
    --------
    >>> lam = RunSchedule("inverse_temperature", [Anneal(10.0, steps=4), 3.0], 2,
    ...                   positive=True)
    >>> lam(0).tolist(), lam(4).tolist(), lam.done.tolist()
    ([0.1, 3.0], [10.0, 3.0], [4.0, 0.0])
    """

    def __init__(self, name: str, value, n_runs: int, *, positive: bool):
        self.name, self.positive = name, positive
        entries = per_run(value, n_runs, name) if isinstance(value, (list, tuple)) else None
        if entries is None or all(_is_number(e) for e in entries):
            if entries is None and not _is_number(value):
                entries = [value] * n_runs
            else:  # numbers only: one vector, returned as is at every step
                self.base = run_vector(value, n_runs, name, positive=positive)
                self.parts, self.done = [], np.zeros(n_runs)
                return
        self.base = np.zeros(n_runs)
        self.parts = []
        for spec, idx in group_runs(entries):
            if _is_number(spec):
                self.base[idx] = run_vector(spec, 1, name, positive=positive)[0]
            else:
                self.parts.append((as_schedule(spec), idx))
        self.done = np.zeros(n_runs)
        for sched, idx in self.parts:
            self.done[idx] = getattr(sched, "finished_at", 0)

    def __call__(self, t: int) -> np.ndarray:
        if not self.parts:  # the common case: no copy per step
            return self.base
        out = self.base.copy()
        for sched, idx in self.parts:
            out[idx] = np.broadcast_to(np.asarray(sched(t), dtype=np.float64), out.shape)[idx]
        ok = np.isfinite(out) & (out > 0 if self.positive else out >= 0)
        if not ok.all():             # a schedule's value is checked as a number is
            run_vector(float(out[~ok][0]), 1, f"{self.name} at step {t}", positive=self.positive)
        return out


_LEGACY = {  # the named schedules of 0.2, as schedules: (kind, name) -> (base, n_steps) -> ...
    ("rho", "decay"): lambda base, n: Decay(base, steps=_SCHEDULE_FRACTION * n),
    ("inverse_temperature", "anneal"):
        lambda base, n: Anneal(base, ratio=_ANNEAL_RATIO, steps=_SCHEDULE_FRACTION * n),
}
_LEGACY_NAMES = {"rho": ("constant", "decay"), "inverse_temperature": (None, "anneal")}


def legacy_schedule(kind: str, value, spec, n_runs: int, n_steps: int):
    """``value`` with the 0.2 keyword ``{kind}_schedule`` folded in (a FutureWarning when
    that keyword says anything but its default): one entry per run, a number or a schedule.

    Examples
    --------
    >>> legacy_schedule("rho", 0.5, "constant", 2, 100)
    0.5
    """
    specs = per_run(spec, n_runs, f"{kind}_schedule")
    default = _LEGACY_NAMES[kind][0]
    if all(not callable(s) and s == default for s in specs):
        return value
    warn_deprecated(f"{kind}_schedule is deprecated and will be removed in {REMOVED_IN}; pass a "
                    f"schedule as {kind} (attnclust.layer.schedules: Anneal, Decay, Stages, or a "
                    f"callable t -> value)", stacklevel=4)
    base = run_vector(value, n_runs, kind, positive=kind == "inverse_temperature")
    entries: list = [float(b) for b in base]
    for s, idx in group_runs(specs):
        if callable(s):
            made = s
        elif s in _LEGACY_NAMES[kind]:
            made = _LEGACY[(kind, s)](base, n_steps) if s != default else None
        else:
            raise ValueError(f"{kind}_schedule must be one of {_LEGACY_NAMES[kind]} or a "
                             f"callable, got {s!r}")
        for r in idx:
            entries[r] = entries[r] if made is None else made
    return entries


def run_vector(value, n_runs: int, name: str, *, positive: bool) -> np.ndarray:
    """``value`` (a number, or one per run) as a vector ``(n_runs,)``, checked: positive
    and finite, or finite and ``>= 0``.

    Examples
    --------
    >>> run_vector(0.5, 3, "step_size", positive=True).tolist()
    [0.5, 0.5, 0.5]
    >>> run_vector([1.0, -1.0], 2, "rho", positive=False)
    Traceback (most recent call last):
    ...
    ValueError: rho must be a finite number >= 0 (or one per run), got [1.0, -1.0]
    """
    numbers = np.ndim(value) <= 1 and not any(   # True and "0.5" are no numbers here
        isinstance(v, (bool, np.bool_, str)) for v in np.ravel(np.asarray(value, dtype=object)))
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (n_runs,)).copy() \
        if numbers else None
    if arr is None or not np.all(np.isfinite(arr)) or np.any(arr <= 0 if positive else arr < 0):
        kind = "positive finite number" if positive else "finite number >= 0"
        raise ValueError(f"{name} must be a {kind} (or one per run), got {value!r}")
    return arr

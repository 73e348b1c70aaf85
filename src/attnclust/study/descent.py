"""Projected gradient descent on the heads (PGD_rho), for many runs at once.

Minimizes the regularized risk ``R_rho(mu) = R(mu) + rho Pen(mu)`` over heads
``mu = (mu_1..mu_K)``, one step per iteration ``t``. On the product of spheres
``S^{d-1}`` (``geometry="sphere"``, the paper's layer):

    g_h    = grad_{mu_h} R_rho(mu)                       (Euclidean)
    xi_h   = g_h - <g_h, mu_h> mu_h                      (Riemannian gradient, sphere.tangent)
    mu_h  <- normalize(mu_h - eta xi_h)                  (retraction; eta g_h if not riemannian)

For Euclidean heads (``geometry="euclidean"``: logits ``lambda <x, mu_h> - lambda
||mu_h||^2 / 2``, heads of any norm) the step is the plain gradient step
``mu_h <- mu_h - eta g_h``.

This module is ``attnclust.study.descent``; the function is ``attnclust.pgd``.

**Batched.** The iterate is a tensor of shape ``(R, K, d)``: ``R`` independent runs,
each with its own init, mixture (or data), inverse temperature and schedule, penalty
and penalty weight, step size and stopping test; one run is ``R = 1`` of the same code.
Each step evaluates the objective of every active run in one call (see
:mod:`attnclust.study.objectives`); a run whose Riemannian gradient norm falls below ``tol``
(once its schedules have finished) is frozen and leaves the batch, so the batched
iterates are those of ``R`` separate calls (tested step by step: each batched step is a
separate call's up to the rounding of the gradient, whose sums the kernels may order
otherwise for another batch shape).

``R`` is the population risk of a :class:`~attnclust.GaussianMixture` (full batch;
exact rule for ``K <= 3``, QMC with common random numbers otherwise) or the empirical
risk of a data array (full batch, or mini-batch SGD with ``batch_size``), or any
objective object with ``value_and_grad(heads, lam)`` (:class:`attnclust.study.objectives.Objective`
gives the rest of the protocol its defaults, so a penalty such as
:class:`~attnclust.Repulsion` alone is an objective too).

Schedules (``t = 0..n_steps-1``), per run or shared: ``inverse_temperature`` and ``rho``
are values or schedules of :mod:`attnclust.layer.schedules` (the same ones the fixed-point
solver takes), e.g. ``inverse_temperature=Anneal(30.0, steps=500)`` (geometric from
``lambda / 100`` to ``lambda`` over 500 steps, then constant) or ``rho=Decay(0.5,
steps=500)`` (linear to ``0``, so the end point minimizes ``R`` itself), or a callable
``t -> value`` (a number, or one value per run). The 0.2 keywords
``inverse_temperature_schedule="anneal"`` and ``rho_schedule="decay"`` (over the first
half of the steps) still work, with a ``FutureWarning``.

**Data-parallel** (``reduce``, :func:`attnclust.cluster.distributed.pgd_distributed`): with the
rows split into shards ``X_r`` of ``n_r`` rows, ``R = sum_r (n_r / n) R_r`` and so
``g = sum_r (n_r / n) grad R_r``: one all-reduce of ``(R, g)`` per step, after which
every rank takes the same step. Mini-batches are stratified: shard ``r`` draws
``b n_r / n`` of the ``b`` rows.

On data, the iterate stays on the data's device (CUDA included); the host reads
numbers only at recorded steps and, when ``tol > 0``, for the stopping test. The
population kernels run on the host (NumPy) whatever the device of the heads.

The stopping rule ``||xi|| < tol`` is checked only once the schedules have finished
(from their ``finished_at`` step, e.g. ``steps`` for :class:`~attnclust.layer.schedules.Anneal`
and :class:`~attnclust.layer.schedules.Decay`; at every step for callables, whose caller owns
them).

Here: :func:`pgd` and its loop. The random initial heads are :mod:`attnclust.study.inits`
(:func:`~attnclust.init_on_manifold`, :func:`~attnclust.init_on_sphere`, also exported
from here); the checks of the objective, heads and penalties, :mod:`attnclust.study._pgd_inputs`;
the schedules of every run, :mod:`attnclust.study._run_schedules`.

Notes
-----
**The inverse temperature's bias.** At finite ``lambda`` the minimizer of ``R`` is not the
set of centroids: every token is pulled toward a *soft* mixture of the heads, so a head
sitting exactly on its centroid quantizes its own cluster toward the other head, and the
heads move apart to compensate, symmetrically within the plane of the centroids. The
study's table (``docs/study.md``, "What we measured") gives the bias on the running
example; the test ``test_inverse_temperature_bias_pushes_the_heads_apart`` re-measures
it, and figure 7
charts it against ``lambda``.

Notation
--------
==========  =========================  ======================================================
paper       code                       meaning
==========  =========================  ======================================================
``mu_h``    ``heads[..., h, :]``       head ``h`` (unit on the sphere); ``(R, K, d)`` batched
``eta``     ``step_size``              step size
``rho``     ``rho``                    penalty weight
``lambda``  ``inverse_temperature``    inverse temperature
``M``       ``init_on_manifold``       heads in ``span(mu*_1..mu*_K)``
==========  =========================  ======================================================
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .._deprecation import renamed_keywords
from .._validation import as_generator, as_tensor, check_int
from ..layer.geometry import as_geometry
from ..layer.results import History, IterationInfo, SolverResult
from ._pgd_inputs import (
    as_objective,
    check_options,
    check_problems,
    initial_heads,
    penalty_terms,
    restrict,
)
from ._run_schedules import RunSchedule, legacy_schedule, run_vector
from .inits import init_on_manifold, init_on_sphere

__all__ = ["PGDResult", "PGDHistory", "pgd", "init_on_manifold", "init_on_sphere"]


PGDHistory = History    # the names of 0.1
PGDResult = SolverResult


# --------------------------------------------------------------------------------------
# PGD
# --------------------------------------------------------------------------------------
@renamed_keywords(temperature="inverse_temperature",
                  temperature_schedule="inverse_temperature_schedule")
def pgd(
    objective,
    heads0,
    *,
    inverse_temperature,
    step_size=0.1,
    n_steps: int = 1000,
    penalty=None,
    rho=0.0,
    rho_schedule="constant",
    inverse_temperature_schedule=None,
    riemannian: bool = True,
    tol: float = 0.0,
    record_every: int = 10,
    batch_size: int | None = None,
    rng=None,
    method: str = "auto",
    n_samples: int = 2**14,
    callback: Callable[[IterationInfo], None] | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    geometry: str = "sphere",
) -> SolverResult:
    """Projected (Riemannian) gradient descent of ``R + rho Pen`` on the sphere.

    Parameters
    ----------
    objective : GaussianMixture, sequence of GaussianMixture, array-like or objective
        Population risk of a mixture (one per run, or shared), empirical risk of data
        ``(n, d)`` (or ``(R, n, d)``, one data set per run), or any object with
        ``value_and_grad(heads, lam)`` (:class:`attnclust.study.objectives.Objective`).
    heads0 : array-like of shape (K, d) or (R, K, d)
        Initial heads (projected to the sphere for ``geometry="sphere"``); ``(R, K, d)``
        runs ``R`` descents at once.
    inverse_temperature : float, array-like of shape (R,), schedule or callable, or a list
        Inverse temperature ``lambda`` (per run in a list or array): a value, or a schedule
        of :mod:`attnclust.layer.schedules` (or a callable ``t -> value``) giving ``lambda_t``.
    step_size : float or array-like of shape (R,), default=0.1
        ``eta > 0``.
    n_steps : int, default=1000
        Maximum number of updates.
    penalty : {None, "repulsion", "balance"}, callable or objective, or a list of them
        ``Pen`` (one per run in a list); a callable maps a ``(K, d)`` tensor to a
        differentiable scalar.
    rho : float, array-like of shape (R,), schedule or callable, or a list, default=0.0
        Penalty weight ``rho_t``, as ``inverse_temperature``.
    rho_schedule, inverse_temperature_schedule :
        Deprecated (0.2's names): ``"decay"`` is ``rho=Decay(rho, steps=n_steps / 2)``,
        ``"anneal"`` is ``inverse_temperature=Anneal(lambda, steps=n_steps / 2)``, a
        callable is the schedule itself.
    riemannian : bool, default=True
        Step along the Riemannian gradient; ``False`` steps along the Euclidean one
        before projecting.
    tol : float, default=0.0
        A run stops when its Riemannian gradient norm is below ``tol`` (schedules
        finished); the others go on.
    record_every : int, default=10
    batch_size : int, optional
        Mini-batch size for data (stochastic steps; batches drawn with ``rng``, the same
        rows for every run).
    rng : int or numpy Generator, optional
        Mini-batch sampling; seed of the QMC points for ``K > 3`` mixtures.
    method : {"auto", "exact", "qmc"}, default="auto"
        Population risk rule (see :func:`attnclust.population_risk`).
    n_samples : int, default=2**14
        QMC points per mixture component.
    callback : callable ``(IterationInfo) -> None``, optional
        Called after each update (:class:`attnclust.layer.results.IterationInfo`: the new heads,
        ``(K, d)`` or ``(R, K, d)``, with the update's ``lambda`` and shift per run; the
        objective is evaluated before each update, so ``loss`` is NaN).
    reduce : callable ``tensor -> tensor``, optional
        Data-parallel hook: the sum of a tensor over the ranks of a process group, the
        same result on every rank (see :func:`attnclust.cluster.distributed.pgd_distributed`).
        ``objective`` is then this rank's rows; each step all-reduces the global risk
        and its gradient (``1 + K d`` numbers per run), so every rank takes the same
        step and records the global risk. With ``batch_size`` (the global batch), each
        rank draws ``round(batch_size n_r / n)`` rows of its shard with its own ``rng``
        (stratified sampling: the summed gradient is unbiased for the full one).
    geometry : {"sphere", "euclidean"}, default="sphere"
        Unit heads and the Riemannian step on the spheres, or free heads with the key
        bias ``lambda ||mu_h||^2 / 2`` and the plain gradient step (``riemannian`` then
        has no effect; the stopping test reads the Euclidean gradient).

    Returns
    -------
    SolverResult
        Heads, :class:`~attnclust.layer.results.History` (risk, gradient norm, schedules and
        heads at the recorded steps), ``n_iter`` and ``converged``. For ``heads0`` of
        shape ``(R, K, d)``: heads ``(R, K, d)``, a history with a run axis, and
        ``n_iter`` and ``converged`` arrays of shape ``(R,)``.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> res = ac.pgd(mix, ac.init_on_manifold(mix, rng=0), inverse_temperature=30.0,
    ...              step_size=0.5, n_steps=1000)
    >>> ac.centroid_distance(res.heads, mix.centroids).max < 1e-2
    True

    Three runs at once, each with its own init and inverse temperature:

    >>> heads0 = torch.stack([ac.init_on_manifold(mix, rng=r) for r in range(3)])
    >>> many = ac.pgd(mix, heads0, inverse_temperature=[3.0, 10.0, 30.0], step_size=0.5,
    ...               n_steps=1000, record_every=1000)
    >>> many.heads.shape, many.history.heads.shape
    (torch.Size([3, 2, 10]), (2, 3, 2, 10))
    >>> [round(ac.centroid_distance(h, mix.centroids).max, 4) for h in many.heads]
    [0.0747, 0.0081, 0.0033]

    Euclidean heads (free norms) on the same population risk:

    >>> free = ac.pgd(mix, 0.5 * ac.init_on_manifold(mix, rng=0), inverse_temperature=30.0,
    ...               step_size=0.5, n_steps=1000, geometry="euclidean")
    >>> ac.centroid_distance(free.heads, mix.centroids).max < 0.05
    True
    """
    tol = check_options(method, tol, reduce)
    if not isinstance(riemannian, (bool, np.bool_)):
        raise ValueError(f"riemannian must be True or False, got {riemannian!r}")
    gen = as_generator(rng)
    qmc_seed = int(rng) if isinstance(rng, (int, np.integer)) else int(gen.integers(2**31))
    geometry = as_geometry(geometry)
    risk = as_objective(objective, batch_size=batch_size, reduce=reduce, gen=gen,
                      method=method, n_samples=n_samples, qmc_seed=qmc_seed, geometry=geometry)
    given = as_tensor(heads0, name="heads0")
    device = getattr(risk, "device", None) or given.device
    single = given.ndim == 2
    H = initial_heads(heads0, getattr(risk, "d", None), device, geometry)  # (R, K, d)
    R = H.shape[0]
    check_problems(risk, R)
    n_steps = check_int(n_steps, "n_steps", 0)
    lam_at = RunSchedule("inverse_temperature", legacy_schedule(
        "inverse_temperature", inverse_temperature, inverse_temperature_schedule, R, n_steps),
        R, positive=True)
    rho_at = RunSchedule("rho", legacy_schedule("rho", rho, rho_schedule, R, n_steps), R,
                          positive=False)
    eta = run_vector(step_size, R, "step_size", positive=True)
    record_every = check_int(record_every, "record_every", 1)
    terms = penalty_terms(penalty, R, risk, objective, method=method, n_samples=n_samples,
                           qmc_seed=qmc_seed)
    stop_from = np.maximum(lam_at.done, rho_at.done)
    return _descend(risk, terms, H, single=single, lam_at=lam_at, rho_at=rho_at, eta=eta,
                    stop_from=stop_from, n_steps=n_steps, record_every=record_every, tol=tol,
                    riemannian=riemannian, reduce=reduce, callback=callback, geometry=geometry)


# --------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------
def _evaluate(risk, terms, heads, lam, rho, *, batch, reduce):
    """Risk ``(A,)`` and Euclidean gradient ``(A, K, d)`` of ``R + rho Pen``, active runs.

    Sharded parts (this rank's share of a data-parallel sum) are all-reduced together
    in one call of ``1 + K d`` numbers per run; penalties that every rank computes in
    full are added afterwards.
    """
    lam_t = torch.from_numpy(lam)
    value, grad = risk.value_and_grad(heads, lam_t, batch=batch)
    grad = grad.clone()
    after = []
    for term, pos, members in terms:
        weight = rho[members]
        if not np.any(weight > 0):
            continue  # rho_t = 0: the penalty is not evaluated (nor communicated)
        pos_t = torch.from_numpy(pos).to(heads.device)
        _, pen_grad = term.value_and_grad(heads[pos_t], lam_t[pos], batch=batch)
        part = torch.from_numpy(weight).to(heads.device)[:, None, None] * pen_grad
        if term.sharded or reduce is None:
            grad[pos_t] += part
        else:
            after.append((pos_t, part))
    if reduce is not None:
        n = value.numel()
        buf = reduce(torch.cat([value.reshape(-1), grad.reshape(-1)]))
        value, grad = buf[:n], buf[n:].view_as(grad)
    for pos_t, part in after:
        grad[pos_t] += part
    return value, grad


def _history(records: dict, single: bool) -> History:
    fields = {"step": np.asarray(records["step"], dtype=np.int64),
              "risk": np.stack(records["risk"]),
              "grad_norm": np.stack(records["grad_norm"]),
              "inverse_temperature": np.stack(records["inverse_temperature"]),
              "rho": np.stack(records["rho"]),
              "heads": np.stack(records["heads"])}
    if single:
        fields = {key: v if key == "step" else v[:, 0] for key, v in fields.items()}
    return History(**fields)


class _Records:
    """The history, filled at recorded steps; a stopped run keeps its last values."""

    def __init__(self, n_runs: int):
        self.risk, self.grad_norm = np.full(n_runs, np.nan), np.full(n_runs, np.nan)
        self.rows: dict[str, list] = {f: [] for f in ("step", "risk", "grad_norm",
                                                      "inverse_temperature", "rho", "heads")}

    def add(self, t: int, lam_t, rho_t, H: torch.Tensor) -> None:
        for key, val in (("step", t), ("risk", self.risk.copy()),
                         ("grad_norm", self.grad_norm.copy()), ("inverse_temperature", lam_t),
                         ("rho", rho_t), ("heads", H.detach().cpu().numpy().copy())):
            self.rows[key].append(val)


def _grad_norms(rgrad: torch.Tensor, t: int) -> np.ndarray:
    gnorm = (rgrad * rgrad).sum((1, 2)).cpu().numpy() ** 0.5
    if not np.all(np.isfinite(gnorm)):
        raise ValueError(f"the gradient became non-finite at step {t}; lower step_size")
    return gnorm


def _descend(risk, terms, H, *, single, lam_at, rho_at, eta, stop_from, n_steps, record_every,
             tol, riemannian, reduce, callback, geometry) -> SolverResult:
    """The loop: one batched evaluation and one retraction per step, for the active runs.

    The host reads numbers only at recorded steps and, with ``tol``, for the stopping
    test; a run that stops leaves ``active`` (and the batch of the next evaluations).
    """
    R, device = H.shape[0], H.device
    stochastic = bool(getattr(risk, "stochastic", False))
    eta_t = torch.from_numpy(eta).to(device)[:, None, None]
    active = np.arange(R)
    sub_risk, sub_terms = restrict(risk, terms, active)
    n_iter, converged = np.full(R, n_steps), np.zeros(R, dtype=bool)
    records = _Records(R)
    report = _Reporter(callback, R, single)
    idx = torch.from_numpy(active).to(device)
    for t in range(n_steps + 1):
        lam_t, rho_t = lam_at(t), rho_at(t)
        everyone = len(active) == R
        Ha = H if everyone else H[idx]
        value, grad = _evaluate(sub_risk, sub_terms, Ha, lam_t if everyone else lam_t[active],
                                rho_t,
                                batch=risk.next_batch() if stochastic else None, reduce=reduce)
        rgrad = geometry.egrad2rgrad(Ha, grad)  # Riemannian gradient
        checking = tol > 0 and bool(np.any(t >= stop_from[active]))
        due = t == n_steps or t % record_every == 0
        stop = np.zeros(len(active), dtype=bool)
        if checking or due:
            records.grad_norm[active] = gnorm = _grad_norms(rgrad, t)
            if checking:
                stop = (t >= stop_from[active]) & (gnorm < tol)
            converged[active[stop]], n_iter[active[stop]] = True, t
            if stochastic and (due or stop.all()):
                value = risk.full_value(Ha, lam_t[active])
            records.risk[active] = value.detach().cpu().numpy()
            if due or stop.all():
                records.add(t, lam_t, rho_t, H)
        if t == n_steps or stop.all():
            break
        moved = geometry.retr(Ha, -eta_t[idx] * (rgrad if riemannian else grad))
        report.shifts(active, stop, moved, Ha)
        if stop.any():  # frozen at this step: the others move on without them
            keep = torch.from_numpy(~stop).to(device)
            H[idx[keep]] = moved[keep]
            active = active[~stop]
            idx = torch.from_numpy(active).to(device)
            sub_risk, sub_terms = restrict(risk, terms, active)
        elif len(active) == R:
            H = moved
        else:
            H[idx] = moved
        report(t + 1, lam_t, H)
    history = _history(records.rows, single)
    if single:
        return SolverResult(H[0].detach().clone(), history, int(n_iter[0]),
                            bool(converged[0]))
    return SolverResult(H.detach().clone(), history, n_iter, converged)


class _Reporter:
    """Calls ``callback`` with an :class:`IterationInfo` after each update (a no-op
    without one); runs that have stopped report a shift of 0."""

    def __init__(self, callback, n_runs: int, single: bool):
        self.callback, self.single = callback, single
        self.shift = np.zeros(n_runs)

    def shifts(self, active: np.ndarray, stop: np.ndarray, moved, before) -> None:
        """Record how far the heads of the active runs moved (``moved - before``, of shape
        ``(A, K, d)``); those that stop at this step do not move."""
        if self.callback is not None:
            self.shift[:] = 0.0
            self.shift[active] = (moved - before).norm(dim=-1).amax(-1).cpu().numpy() * ~stop

    def __call__(self, iteration: int, lam_t: np.ndarray, H: torch.Tensor) -> None:
        if self.callback is None:
            return
        heads = H.detach().clone()
        if self.single:
            info = IterationInfo(iteration, float("nan"), float(lam_t[0]),
                                 float(self.shift[0]), heads[0])
        else:
            info = IterationInfo(iteration, np.full(len(self.shift), np.nan), lam_t.copy(),
                                 self.shift.copy(), heads)
        self.callback(info)

"""PGD on the sphere: invariants, convergence, inverse temperature bias, schedules, inputs."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import attention_risk_tol, balance_tol, eps, sum_tol
from attnclust.layer.schedules import Anneal, Decay, Schedule, Stages
from attnclust.study import _population, _quadrature
from attnclust.study.objectives import EmpiricalRisk

SIGMA = 0.3
RUNNING = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=SIGMA)
OFF_SPAN = slice(1, 9)  # coordinates orthogonal to e_1 and e_10
# Off the centroids' span the heads stay exactly 0, not within rounding: the centroids and
# the initial heads (combinations of them) are exactly 0 there, and every coordinate j of
# the gradient is a sum of products each with a factor x_j or mu_gj (the chain rule through
# <x, mu_h>, ||mu_0 - mu_1|| and G = mu mu^T; all else lives on the K heads or the k
# components), so a sum of signed zeros; so are mu_hj - eta xi_hj and its quotient by the
# norm. A matrix product forms each entry from its own row and column (every BLAS's gemm),
# so no kernel, order or thread count puts a nonzero there: one is a coordinate leaking.


def _angle(heads):
    h = heads.numpy()
    return float(np.degrees(np.arccos(np.clip(h[0] @ h[1], -1.0, 1.0))))


def _unit_tol(d) -> float:
    """``| ||h|| - 1 |`` of ``h = x / ||x||`` (a retraction) with its norm recomputed: two
    sums of ``d`` squares (each within ``d u``) and a division per coordinate. Each step
    retracts afresh, so this does not grow with the steps."""
    return (d + 2) * eps()


def _collect(seen):
    def callback(info):
        seen.append(info.heads.numpy().copy())
    return callback


@pytest.mark.parametrize("penalty", [None, "balance"])  # fused K=2 path, autograd path
def test_iterates_stay_on_the_sphere_and_on_the_manifold(penalty):
    seen = []
    heads0 = ac.init_on_manifold(RUNNING, rng=3)
    n_steps = 400 if penalty is None else 150
    ac.pgd(RUNNING, heads0, inverse_temperature=10.0, step_size=0.3, n_steps=n_steps,
           penalty=penalty, rho=0.5, callback=_collect(seen))
    path = np.stack(seen)  # (T, K, d)
    assert len(path) == n_steps
    assert np.abs(np.linalg.norm(path, axis=-1) - 1.0).max() <= _unit_tol(path.shape[-1])
    assert np.abs(path[..., OFF_SPAN]).max() == 0.0  # exactly (see OFF_SPAN)


def test_manifold_invariance_three_heads():
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.0)
    seen = []
    ac.pgd(mix, ac.init_on_manifold(mix, rng=0), inverse_temperature=5.0, step_size=0.3,
           n_steps=300, callback=_collect(seen))
    path = np.stack(seen)
    assert np.abs(np.linalg.norm(path, axis=-1) - 1.0).max() <= _unit_tol(path.shape[-1])
    assert np.abs(path[..., 2:9]).max() == 0.0  # span e_1, e_2, e_10 (OFF_SPAN)


def test_init_on_manifold_and_sphere():
    mix = ac.GaussianMixture.random(d=6, k=3, rng=1)
    heads = ac.init_on_manifold(mix, rng=0, n_heads=5)
    assert heads.shape == (5, 6)
    np.testing.assert_allclose(heads.norm(dim=1).numpy(), 1.0, rtol=0, atol=_unit_tol(6))
    # unit heads in the centroids' span: the least-squares fit reproduces them to its
    # backward error, (d + k) cond(C) eps of their unit size
    coef, *_ = np.linalg.lstsq(mix.centroids.T, heads.numpy().T, rcond=None)
    np.testing.assert_allclose(mix.centroids.T @ coef, heads.numpy().T, rtol=0,
                               atol=(6 + 3) * np.linalg.cond(mix.centroids) * eps())
    sphere = ac.init_on_sphere(4, 6, rng=0)
    np.testing.assert_allclose(sphere.norm(dim=1).numpy(), 1.0, rtol=0, atol=_unit_tol(6))


def test_running_example_converges_for_ten_seeds():
    for seed in range(10):
        res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=seed), inverse_temperature=30.0,
                     step_size=0.5, n_steps=1000, tol=1e-9)
        assert res.converged, seed
        assert ac.centroid_distance(res.heads, RUNNING.centroids).max < 1e-2, seed
        assert ac.centroid_distance(res.history.heads[-1], RUNNING.centroids).max < 1e-2
        assert res.history.step[-1] == res.n_iter


def test_inverse_temperature_bias_pushes_the_heads_apart():
    """The bias table of docs/study.md: bias decreasing in lambda, heads beyond 90 deg."""
    table = {1 / (1 + 2 * SIGMA**2): (0.2343, 116.9), 1.0: (0.2237, 115.7),
             3.0: (0.0747, 98.6), 10.0: (0.00811, 90.93), 30.0: (0.00330, 90.38)}
    biases = []
    for lam, (bias, angle) in table.items():
        res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=1), inverse_temperature=lam,
                     step_size=0.5, n_steps=3000, tol=1e-10)
        assert res.converged
        got = ac.centroid_distance(res.heads, RUNNING.centroids)
        biases.append(got.max)
        # direction, with a margin: at least half the measured excess over 90 degrees
        assert _angle(res.heads) - 90.0 > 0.5 * (angle - 90.0), lam
        assert got.max == pytest.approx(bias, rel=0.01)
        # the heads stay in the plane of the centroids and symmetric
        assert got.rms == pytest.approx(got.max, rel=1e-6)
    assert np.all(np.diff(biases) < 0)


def test_dirac_mixture_converges():
    mix = RUNNING.with_sigma(0.0)
    for seed in range(3):
        res = ac.pgd(mix, ac.init_on_manifold(mix, rng=seed), inverse_temperature=10.0,
                     step_size=0.5, n_steps=2000, tol=1e-10)
        assert res.converged
        assert ac.centroid_distance(res.heads, mix.centroids).max < 1e-3


@pytest.mark.slow
def test_empirical_risk_lands_near_the_population_solution():
    lam = 10.0
    pop = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0), inverse_temperature=lam,
                 step_size=0.5, n_steps=2000, tol=1e-10).heads
    X = RUNNING.sample(20_000, rng=0)
    heads0 = ac.init_on_manifold(RUNNING, rng=1)
    full = ac.pgd(X, heads0, inverse_temperature=lam, step_size=0.5, n_steps=30, record_every=10)
    assert ac.centroid_distance(full.heads, pop).max < 0.05
    sgd = ac.pgd(X, heads0, inverse_temperature=lam, step_size=0.2, n_steps=150, batch_size=500,
                 rng=0, record_every=50)
    assert ac.centroid_distance(sgd.heads, pop).max < 0.05
    assert ac.centroid_distance(sgd.history.heads[-1], RUNNING.centroids).max < 0.05
    runs = [ac.pgd(X, heads0, inverse_temperature=lam, step_size=0.2, n_steps=15, batch_size=500,
                   rng=0, record_every=100).heads for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


def test_fused_path_matches_the_autograd_path():
    """Step by step: from each iterate of the closed-form repulsion, one step of autograd's
    lands on the next. The two differ only in the penalty's gradient, ``2 sum_g G_hg mu_g``
    within ``(K + d) eps 2 sum_g |G_hg| |mu_g|`` of each other; a step moves a head by
    ``step_size rho`` times that (projection and retraction of a tangent step do not
    expand it), plus the retraction's rounding (heads0 is normalized again)."""
    heads0 = ac.init_on_sphere(2, 10, rng=5)
    kwargs = dict(inverse_temperature=10.0, step_size=0.2, rho=0.3)
    fast = ac.pgd(RUNNING, heads0, penalty="repulsion", n_steps=60, record_every=1, **kwargs)
    for t in range(60):
        h = torch.as_tensor(fast.history.heads[t])
        slow = ac.pgd(RUNNING, h, penalty=ac.repulsion, n_steps=1, record_every=1,
                      **kwargs)                                  # a callable: autograd
        K, d = h.shape
        grad_tol = (K + d) * eps() * 2 * ((h @ h.T).abs() @ h.abs())            # (K, d)
        step_tol = kwargs["step_size"] * kwargs["rho"] * grad_tol.norm(dim=1) + _unit_tol(d)
        moved = (slow.heads - torch.as_tensor(fast.history.heads[t + 1])).norm(dim=1)
        assert bool((moved <= step_tol).all()), t
        # the same risk evaluation at heads within _unit_tol: moved by the gradient times
        # that, and its own rounding of each point's loss ((K + d + 2) eps of the risk)
        g, risk = fast.history.grad_norm[t], fast.history.risk[t]
        assert slow.history.risk[0] == pytest.approx(
            risk, rel=0, abs=g * _unit_tol(d) + (K + d + 2) * eps() * risk)
        # the gradient's norm: the penalty's part, and K d terms summed
        assert slow.history.grad_norm[0] == pytest.approx(
            g, rel=0, abs=kwargs["rho"] * float(grad_tol.norm()) + sum_tol(K * d) * g)


def test_schedules_history_and_stopping():
    n = 200
    res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0),
                 inverse_temperature=Anneal(20.0, steps=n // 2), step_size=0.5, n_steps=n,
                 rho=Decay(1.0, steps=n // 2), penalty="repulsion", record_every=7, tol=1e-6)
    h = res.history
    assert h.step[0] == 0 and h.step[-1] == res.n_iter
    assert res.converged and res.n_iter >= n // 2  # tol only once schedules are done
    assert h.inverse_temperature[0] == pytest.approx(20.0 / 100)
    assert np.all(np.diff(h.inverse_temperature) >= 0) and h.inverse_temperature[-1] == 20.0
    assert h.rho[0] == 1.0 and np.all(h.rho[h.step >= n // 2] == 0.0)
    assert h.heads.shape == (len(h.step), 2, 10)
    np.testing.assert_allclose(np.linalg.norm(h.heads, axis=-1), 1.0, rtol=0,
                               atol=_unit_tol(h.heads.shape[-1]))
    assert h.grad_norm[-1] < 1e-6
    custom = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0),
                    inverse_temperature=lambda t: 1.0 + t, n_steps=20, rho=lambda t: 0.0)
    assert custom.history.inverse_temperature[1] == 11.0
    assert len(custom.history.step) == 3  # steps 0, 10, 20
    euclid = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0), inverse_temperature=30.0,
                    step_size=0.3, n_steps=1000, riemannian=False, tol=1e-9)
    assert euclid.converged
    assert ac.centroid_distance(euclid.heads, RUNNING.centroids).max < 1e-2


def test_many_heads_use_qmc():
    mix = ac.GaussianMixture.random(d=8, k=4, sigma=0.1, min_angle=1.2, rng=0)
    res = ac.pgd(mix, ac.init_on_manifold(mix, rng=0), inverse_temperature=10.0, step_size=0.5,
                 n_steps=40, n_samples=2**11, rng=0, record_every=20)
    assert np.all(np.diff(res.history.risk) < 0)
    same_points = ac.population_risk(res.heads, mix, inverse_temperature=10.0, n_samples=2**11,
                                     rng=0)
    # the same points, other operations (value alone against value and gradient): a mean
    # of n K nonnegative point losses (sum_tol), each within (K + d + 2) eps (|x| + 1)^2 of
    # itself plus its logits' rounding (lambda d eps |x|, moving the weights by twice
    # that, the output by as much, the loss by 2 |x - T| times it); E(|x| + 1)^2 <= 2 (E|x|^2
    # + 1) with E|x|^2 = 1 + sigma^2 d (unit centroids)
    K, d, lam, sigma, n = 4, 8, 10.0, 0.1, 2**11
    point = (K + d + 2 + 4 * lam * d) * eps() * 2 * (1 + sigma**2 * d + 1)
    risk = res.history.risk[-1]
    assert float(same_points) == pytest.approx(risk, rel=0, abs=point + sum_tol(n * K) * risk)


def test_bad_inputs():
    good = ac.init_on_manifold(RUNNING, rng=0)
    cases = [
        (dict(heads0=good[0]), "heads0"),
        (dict(heads0=good[:, :5]), "d=10"),
        (dict(inverse_temperature=0.0), "inverse_temperature"),
        (dict(inverse_temperature=-1.0), "inverse_temperature"),
        (dict(step_size=0.0), "step_size"),
        (dict(penalty="lasso"), "penalty"),
        (dict(rho_schedule="cosine"), "rho_schedule"),
        (dict(inverse_temperature_schedule="cool"), "inverse_temperature_schedule"),
        (dict(n_steps=-1), "n_steps"),
        (dict(record_every=0), "record_every"),
        (dict(batch_size=10), "batch_size"),
        (dict(heads0=torch.zeros(2, 10)), "zero row"),
        (dict(rho=-1.0), "rho"),
        (dict(method="simpson"), "method"),
    ]
    for override, match in cases:
        kwargs = dict(heads0=good, inverse_temperature=1.0, n_steps=2)
        kwargs.update(override)
        heads0 = kwargs.pop("heads0")
        with pytest.raises(ValueError, match=match):
            ac.pgd(RUNNING, heads0, **kwargs)
    with pytest.raises(ValueError, match="objective"):
        ac.pgd(np.ones((0, 10)), good, inverse_temperature=1.0)


# -- batched runs -------------------------------------------------------------------------
# Are R runs in one call the iterates of R calls bit for bit? Not provably: pgd hands the
# whole (R, K, d) iterate to each kernel (torch's matmul, bmm, reductions and autograd on
# data; numpy's einsum, matmul and sums on mixtures; torch's batched Cholesky for QMC), and
# how those libraries order a run's sums is theirs to choose from the whole shape (torch
# splits a sum across threads by its total size, so a row of 40000 summed alone or among
# eight rows rounds differently with two threads). So each step is compared instead: from
# each iterate of the batched call (recorded at every step), one step of the other
# computation lands within one step's rounding, the risk and the gradient's norm at that
# iterate within their rounding, and the stopping test takes the same side of ``tol``.
def _value(spec, t: int) -> float:
    """A run's lambda_t or rho_t: the number, or its schedule at step ``t`` (pgd calls the
    same schedule at the same ``t``: compared exactly)."""
    return float(spec(t)) if callable(spec) else float(spec)


def _population_run(mix, lam, rho, penalty, eta, *, K, n_samples=None):
    """What :func:`_assert_each_step` needs of a run on a mixture: ``n`` the terms of the
    rule's sums (the exact rule's nodes at the run's first heads, as many at any heads;
    ``n_samples`` points per component for QMC), ``scale`` ``r + H`` of
    :func:`attention_risk_tol` (``r`` the root mean square row, ``E||X||^2``; unit heads)."""
    if n_samples is None:
        h = ac.init_on_sphere(K, mix.d, rng=0)
        n = _population.exact_samples(h, mix, _value(lam, 0), _quadrature.rule())[2].numel()
    else:
        n = n_samples * mix.k
    return dict(lam=lam, rho=rho, penalty=penalty, eta=eta, n_grad=n, n_value=n,
                scale=_quadrature.second_moment(mix) ** 0.5 + 1.0)


def _restart_steps(d: int, lam: float, scale: float) -> float:
    """Rounding steps (in :func:`attention_risk_tol`'s count, units of eps) that restarting
    from a recorded iterate adds: pgd normalizes heads0 again, a relative change of up to
    ``(d + 2) eps`` of each head (:func:`_unit_tol`), which moves each product ``<x, mu_h>``
    by ``(d + 2) eps s^2`` and each logit by ``lambda`` times that (``s = r + H``); the
    tangent projection rounds by ``(d + 2) eps`` of the gradient's size."""
    return (d + 2) * (2 + lam * scale**2)


def _step_tols(run: dict, h: torch.Tensor, lam: float, rho: float, gnorm: float):
    """(step, risk, gradient norm) differences allowed between two computations of one
    step from the heads ``h`` (K, d) of a run at lambda_t, rho_t:

    * the Euclidean gradient within :func:`attention_risk_tol`'s per entry (the same
      ``n`` terms summed in another order, plus the restart's steps), the balance
      penalty's :func:`balance_tol` or the repulsion's ``(K + d) eps 2 sum_g |G_hg|
      |mu_g|`` (with the restart's ``3 (d + 2)``: ``G`` twice, ``mu`` once) times rho;
    * a head moves by ``eta`` times its gradient's difference (``sqrt(d)`` entries; the
      tangent projection and the retraction of a tangent step do not expand it), plus the
      restart's and the retraction's rounding (:func:`_unit_tol` each);
    * the norm of the Riemannian gradient, over ``K d`` entries, by ``sqrt(K d)`` times
      the entries' bound plus the rounding of its sum of squares (:func:`sum_tol`)."""
    K, d = h.shape
    s, extra = run["scale"], _restart_steps(d, lam, run["scale"])
    vtol = attention_risk_tol(run["n_value"] + extra, s, lam, K, d)[0]
    gtol = attention_risk_tol(run["n_grad"] + extra, s, lam, K, d)[1]
    if run["penalty"] == "balance":
        gtol += rho * balance_tol(run["n_grad"] + extra, s, lam, K, d)[1]
    elif run["penalty"] == "repulsion":
        rep = (K + d + 3 * (d + 2)) * eps() * 2 * ((h @ h.T).abs() @ h.abs())
        gtol += rho * float(rep.max())
    step = run["eta"] * np.sqrt(d) * gtol + 2 * _unit_tol(d)
    return step, vtol, np.sqrt(K * d) * gtol + sum_tol(K * d) * gnorm


def _assert_each_step(res, runs: dict, one_step, *, tol: float = 0.0):
    """``res``: a batched call recorded at every step; ``runs``: run index -> its spec
    (:func:`_population_run`); ``one_step(t, rs)``: the other computation's step from
    ``res.history.heads[t, rs]`` at the runs' lambda_t and rho_t, a list of SolverResults
    of one step recorded at every step (heads (K, d), risk and gradient norm at both ends).

    Exact: the step numbers, the schedules (the same calls), the frozen runs' records and
    final heads (copies). Within :func:`_step_tols`: each step, risk and gradient norm. The
    stopping test (``tol``, from a run's ``finished_at``): at every step where the batched
    call tested it, its gradient norm is further from ``tol`` than the two computations'
    difference (asserted: which side it takes is then no machine's rounding), and the
    other computation's norm is on the same side."""
    hist = res.history
    T = len(hist.step)
    np.testing.assert_array_equal(hist.step, np.arange(T))
    for r, run in runs.items():
        stop = int(res.n_iter[r])
        assert hist.inverse_temperature[:, r].tolist() == [_value(run["lam"], t) for t in range(T)]
        assert hist.rho[:, r].tolist() == [_value(run["rho"], t) for t in range(T)]
        np.testing.assert_array_equal(res.heads[r].numpy(), hist.heads[stop, r])
        np.testing.assert_array_equal(hist.heads[stop:, r], hist.heads[[stop] * (T - stop), r])
        assert res.converged[r] == (stop < T - 1 or (tol > 0 and hist.grad_norm[stop, r] < tol))
    for t in range(T):
        rs = [r for r in runs if t <= res.n_iter[r]]
        for r, one in zip(rs, one_step(t, rs), strict=True):
            run, h = runs[r], torch.as_tensor(hist.heads[t, r])
            lam, rho, gnorm = hist.inverse_temperature[t, r], hist.rho[t, r], hist.grad_norm[t, r]
            step_tol, vtol, gtol = _step_tols(run, h, lam, rho, gnorm)
            assert abs(one.history.risk[0] - hist.risk[t, r]) <= vtol, (t, r)
            assert abs(one.history.grad_norm[0] - gnorm) <= gtol, (t, r)
            if t < res.n_iter[r]:
                moved = (one.heads - torch.as_tensor(hist.heads[t + 1, r])).norm(dim=1)
                assert bool((moved <= step_tol).all()), (t, r, moved.max().item(), step_tol)
            if tol > 0 and t >= getattr(run["lam"], "finished_at", 0) \
                    and t >= getattr(run["rho"], "finished_at", 0):
                assert abs(gnorm - tol) > gtol, (t, r, gnorm)        # the margin
                stopped = bool(res.converged[r]) and t == res.n_iter[r]
                assert (one.history.grad_norm[0] < tol) == stopped, (t, r)


def _separate_steps(objective_at, runs: dict, res, **common):
    """``one_step`` of :func:`_assert_each_step` by separate calls: run ``r``'s objective
    at step ``t`` (``objective_at(r, t)``), its lambda_t, rho_t, penalty and step size."""
    def one_step(t, rs):
        hist = res.history
        return [ac.pgd(objective_at(r, t), hist.heads[t, r],
                       inverse_temperature=hist.inverse_temperature[t, r], rho=hist.rho[t, r],
                       penalty=runs[r]["penalty"], step_size=runs[r]["eta"], n_steps=1,
                       record_every=1, **common) for r in rs]
    return one_step


@pytest.mark.slow
def test_batched_runs_equal_separate_runs_population_k2():
    """R runs in one call take the steps of R calls (each step within its rounding): own
    inits, inverse temperatures, penalties, weights, schedules and stopping steps."""
    R = 6
    heads0 = torch.stack([ac.init_on_sphere(2, 10, rng=r) for r in range(R)])
    per_run = dict(inverse_temperature=[10.0, 30.0, Anneal(100.0, steps=80),
                                        Anneal(30.0, steps=80), 10.0, 50.0],
                   penalty=[None, "repulsion", "balance", None, "balance", "repulsion"],
                   rho=[0.0, Decay(1.0, steps=80), Decay(0.5, steps=80), 0.0, 1.0,
                        Decay(0.3, steps=80)],
                   step_size=[0.5, 0.05, 0.5, 0.5, 0.5, 0.05])
    mixes = [RUNNING.with_sigma(s) for s in (0.1, 0.3, 0.1, 0.0, 0.2, 0.3)]
    # tol well above the gradient's rounding (~1e-8 at lambda = 100), so that which step
    # stops a run is set by the descent, not by rounding (asserted step by step below)
    tol = 1e-6
    batched = ac.pgd(mixes, heads0, **per_run, n_steps=160, record_every=1, tol=tol)
    assert batched.heads.shape == (R, 2, 10) and batched.history.risk.shape[1] == R
    # some runs froze early (at different steps), some did not
    assert 1 < batched.converged.sum() < R and len(set(batched.n_iter)) > 2
    runs = {r: _population_run(mixes[r], *(per_run[k][r] for k in
                                          ("inverse_temperature", "rho", "penalty", "step_size")),
                               K=2) for r in range(R)}
    _assert_each_step(batched, runs,
                      _separate_steps(lambda r, t: mixes[r], runs, batched), tol=tol)
    # per-run histories: the schedules of each run
    assert batched.history.inverse_temperature[0, 2] == pytest.approx(100.0 / 100)
    assert batched.history.inverse_temperature[0, 0] == 10.0


def _batches_at(X, t: int, **kwargs) -> EmpiricalRisk:
    """The mini-batches of a call given ``X`` and ``kwargs``, from the one of step ``t``:
    pgd draws one batch per step (the last step's evaluation included) with its rng."""
    risk = EmpiricalRisk(X, **kwargs)
    for _ in range(t):
        risk.next_batch()
    return risk


@pytest.mark.slow
def test_batched_runs_equal_separate_runs_qmc_and_data():
    K, d, R = 4, 6, 3
    mixes = [ac.GaussianMixture.random(d, K, 0.1, min_angle=1.0, rng=10 + r) for r in range(R)]
    heads0 = torch.stack([ac.init_on_sphere(K, d, rng=r) for r in range(R)])
    per_run = dict(inverse_temperature=[5.0, 20.0, 10.0], penalty=["balance", None, "repulsion"],
                   rho=[1.0, 0.0, 0.5])
    common = dict(step_size=0.5, n_samples=256, rng=3)  # the same QMC points (seed 3)
    batched = ac.pgd(mixes, heads0, **per_run, **common, n_steps=40, record_every=1)
    runs = {r: _population_run(mixes[r], per_run["inverse_temperature"][r], per_run["rho"][r],
                               per_run["penalty"][r], 0.5, K=K, n_samples=256) for r in range(R)}
    _assert_each_step(batched, runs, _separate_steps(lambda r, t: mixes[r], runs, batched,
                                                     n_samples=256, rng=3))
    assert np.all(batched.history.risk[-1] < batched.history.risk[0])
    # empirical risk: shared data, mini-batches (the same rows for every run)
    X = RUNNING.sample(3000, rng=0)
    heads0 = torch.stack([ac.init_on_sphere(2, 10, rng=r) for r in range(R)])
    per_run = dict(inverse_temperature=[3.0, 10.0, 30.0], penalty=[None, "balance", "repulsion"],
                   rho=[0.0, 0.5, 0.5])
    batched = ac.pgd(X, heads0, **per_run, step_size=0.3, n_steps=30, record_every=1,
                     batch_size=500, rng=7)
    # the gradient sums a batch's 500 rows, the recorded risk all 3000 (r the largest row)
    scale = float(np.linalg.norm(X, axis=1).max()) + 1.0
    runs = {r: dict(lam=per_run["inverse_temperature"][r], rho=per_run["rho"][r],
                    penalty=per_run["penalty"][r], eta=0.3, n_grad=500, n_value=len(X),
                    scale=scale) for r in range(R)}
    _assert_each_step(batched, runs, _separate_steps(
        lambda r, t: _batches_at(X, t, batch_size=500, rng=7), runs, batched))


def test_batched_runs_share_nothing_but_the_call():
    """A run's steps do not depend on which other runs share its batch: from each iterate
    of four runs, two of them in a call of their own take the same step (within its
    rounding: the kernels see other shapes)."""
    heads0 = torch.stack([ac.init_on_manifold(RUNNING, rng=r) for r in range(4)])
    kwargs = dict(inverse_temperature=10.0, step_size=0.5)
    whole = ac.pgd(RUNNING, heads0, **kwargs, n_steps=50, record_every=1)
    runs = {r: _population_run(RUNNING, 10.0, 0.0, None, 0.5, K=2) for r in (2, 0)}

    def part(t, rs):                      # runs 2 and 0 (those not yet stopped), one call
        res = ac.pgd(RUNNING, whole.history.heads[t][rs], **kwargs, n_steps=1, record_every=1)
        return [SimpleNamespace(heads=res.heads[i], history=SimpleNamespace(
            risk=res.history.risk[:, i], grad_norm=res.history.grad_norm[:, i]))
            for i in range(len(rs))]
    _assert_each_step(whole, runs, part)
    with pytest.raises(ValueError, match="3 entries for 4 runs"):
        ac.pgd(RUNNING, heads0, inverse_temperature=1.0, penalty=[None] * 3)
    with pytest.raises(ValueError, match="inverse_temperature"):
        ac.pgd(RUNNING, heads0, inverse_temperature=[1.0, 2.0, -1.0, 1.0])


def test_pgd_is_the_function_and_the_module_moved():
    """``attnclust.pgd`` is a plain function; its module is ``attnclust.study.descent``. The old
    module path keeps its names with a FutureWarning, and importing it leaves the function
    in place."""
    import types

    import attnclust.pgd  # noqa: F401  (the 0.2 module path: must not rebind ac.pgd)

    import attnclust.study.descent

    assert isinstance(ac.pgd, types.FunctionType) and ac.pgd is attnclust.study.descent.pgd
    assert type(attnclust.study.descent) is types.ModuleType  # no class swap
    with pytest.warns(FutureWarning, match="attnclust.study.descent"):
        from attnclust.pgd import init_on_manifold
    assert init_on_manifold is ac.init_on_manifold
    res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0), inverse_temperature=3.0,
                 n_steps=3)
    assert res.n_iter == 3


def test_any_objective_object_works():
    """The objective protocol: a penalty alone (no mixture, no data) is an objective.
    Repulsion alone drives unit heads to pairwise orthogonal ones."""
    heads0 = ac.init_on_sphere(3, 5, rng=0)
    res = ac.pgd(ac.Repulsion(), heads0, inverse_temperature=1.0, step_size=0.2, n_steps=300)
    gram = (res.heads @ res.heads.T).numpy()
    np.testing.assert_allclose(gram, np.eye(3), atol=1e-8)
    assert res.history.risk[0] > 0.01 and res.history.risk[-1] < 1e-15

    class Distance(ac.study.objectives.Objective):  # a user's objective: only value_and_grad
        def value_and_grad(self, heads, lam, *, batch=None):
            target = torch.eye(2, 4, dtype=heads.dtype)
            diff = heads - target
            return ac.ValueAndGrad((diff**2).sum((1, 2)), 2.0 * diff)

    res = ac.pgd(Distance(), torch.ones(2, 4), inverse_temperature=1.0, step_size=0.1,
                 n_steps=400, geometry="euclidean")
    # h <- h - 0.1 * 2 (h - e) contracts by 0.8 a step (0.8^400: none of the start is
    # left); each step rounds by eps of |h| <= 1, which the contraction leaves within
    # eps / (1 - 0.8) of the target
    torch.testing.assert_close(res.heads, torch.eye(2, 4, dtype=torch.float64),
                               atol=eps() / (1 - 0.8), rtol=0)


@pytest.mark.slow
def test_euclidean_pgd_on_the_population_risk_and_on_data():
    """PGD for Euclidean heads: plain gradient steps on the population risk with the key
    bias. The end point is a stationary point of that risk (its gradient, by the exact
    rule, vanishes) and not of the sphere's; on data it follows the empirical risk."""
    mix = ac.GaussianMixture.random(d=6, k=2, sigma=0.3, min_angle=1.2, rng=0)
    heads0 = 0.6 * ac.init_on_manifold(mix, rng=1)
    res = ac.pgd(mix, heads0, inverse_temperature=8.0, step_size=0.3, n_steps=1000,
                 tol=1e-9, geometry="euclidean")
    assert res.converged
    h = res.heads.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(ac.population_risk(h, mix, inverse_temperature=8.0,
                                                  geometry="euclidean"), h)
    assert float(g.norm()) < 1e-8
    # free heads: from norm 0.6 out to near the unit centroids, yet not on the sphere
    norms = res.heads.norm(dim=1)
    assert bool(((norms - 1.0).abs() > 1e-3).all()) and bool(((norms - 1.0).abs() < 0.1).all())
    assert ac.centroid_distance(res.heads, mix.centroids).max < 0.2
    # the same descent on a large sample lands near the population end point
    X = mix.sample(2000, rng=2)
    on_data = ac.pgd(X, heads0, inverse_temperature=8.0, step_size=0.3, n_steps=200,
                     geometry="euclidean")
    assert float((on_data.heads - res.heads).norm(dim=1).max()) < 0.05
    # a sphere objective given to a Euclidean descent is refused
    with pytest.raises(ValueError, match="geometry"):
        ac.pgd(ac.PopulationRisk(mix), heads0, inverse_temperature=8.0, geometry="euclidean")


def test_callback_and_history_are_the_shared_types():
    """pgd reports through the same IterationInfo and SolverResult as the fixed-point
    solver: the heads after each update, how far they moved, the update's lambda."""
    infos = []
    res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0), inverse_temperature=10.0,
                 step_size=0.5, n_steps=30,
                 record_every=1, callback=infos.append)
    assert isinstance(res, ac.SolverResult) and isinstance(res.history, ac.History)
    assert [i.iteration for i in infos] == list(range(1, 31))
    path = np.stack([res.history.heads[0]] + [i.heads.numpy() for i in infos])
    np.testing.assert_array_equal(path, res.history.heads)          # heads after each update
    moved = np.linalg.norm(np.diff(path, axis=0), axis=-1).max(-1)
    # the same differences; the norms' sums of d squares in other orders (torch, NumPy)
    np.testing.assert_allclose([i.shift for i in infos], moved, rtol=sum_tol(path.shape[-1]))
    np.testing.assert_array_equal([i.inverse_temperature for i in infos],
                                  res.history.inverse_temperature[:-1])
    assert np.isnan([i.loss for i in infos]).all()


def test_batched_callback_reports_per_run_and_zero_shift_once_stopped():
    heads0 = torch.stack([ac.init_on_manifold(RUNNING, rng=r) for r in range(2)])
    infos = []
    res = ac.pgd(RUNNING, heads0, inverse_temperature=[30.0, 30.0], step_size=[0.5, 0.05],
                 n_steps=400, tol=1e-8, callback=infos.append)
    assert res.converged[0] and res.n_iter[0] < res.n_iter[1]        # run 0 stops first
    assert infos[-1].heads.shape == (2, 2, 10) and infos[-1].shift.shape == (2,)
    assert all(i.shift[0] == 0.0 for i in infos[res.n_iter[0]:])
    assert all(i.shift[1] > 0.0 for i in infos)


def test_old_schedule_keywords_warn_and_give_the_same_iterates():
    """0.2's rho_schedule / inverse_temperature_schedule are schedules over half the steps:
    the same iterates bit for bit, with a FutureWarning; per-run lists too."""
    heads0 = torch.stack([ac.init_on_sphere(2, 10, rng=r) for r in range(3)])
    common = dict(step_size=0.5, n_steps=60, penalty="repulsion", record_every=10)
    with pytest.warns(FutureWarning, match="inverse_temperature_schedule is deprecated"):
        old = ac.pgd(RUNNING, heads0, inverse_temperature=[10.0, 30.0, 20.0],
                     inverse_temperature_schedule=[None, "anneal", "anneal"],
                     rho=0.5, rho_schedule="decay", **common)
    lam = [10.0, Anneal(30.0, steps=30), Anneal(20.0, steps=30)]
    new = ac.pgd(RUNNING, heads0, inverse_temperature=lam, rho=Decay(0.5, steps=30), **common)
    torch.testing.assert_close(new.heads, old.heads, rtol=0, atol=0)
    np.testing.assert_array_equal(new.history.inverse_temperature,
                                  old.history.inverse_temperature)
    np.testing.assert_array_equal(new.history.rho, old.history.rho)
    assert old.history.inverse_temperature[0, 1] == pytest.approx(0.3)


def test_one_schedule_type_for_both_solvers():
    """A Stages schedule drives pgd step by step and the fixed-point solver stage by stage."""
    lam = Stages([2.0, 8.0, 30.0], [5, 5, 100])
    res = ac.pgd(RUNNING, ac.init_on_manifold(RUNNING, rng=0), inverse_temperature=lam,
                 step_size=0.5, n_steps=20, record_every=1)
    np.testing.assert_array_equal(res.history.inverse_temperature[:11],
                                  [2.0] * 5 + [8.0] * 5 + [30.0])
    assert lam.stages(20) == [(2.0, 5), (8.0, 5), (30.0, 10)] and lam.finished_at == 10
    assert Anneal(10.0, ratio=4.0, steps=2).stages(4) == [(2.5, 1), (5.0, 1), (10.0, 2)]


@pytest.mark.parametrize("n_steps", [0, 1, 4, 5, 8, 200])
def test_stages_past_their_sum_keep_the_last_value_for_both_solvers(n_steps):
    """``Stages`` keeps its last value (the docs, and pgd's reading step by step); the
    fixed-point solver's stages stopped at the stages' sum: ``n_steps=200`` ran 5 steps
    and reported no convergence. Its stages are now the step-by-step values, in runs."""
    lam = Stages([1.0, 4.0], [2, 3])
    generic = [(v, c) for v, c in Schedule.stages(lam, n_steps)]
    assert lam.stages(n_steps) == generic
    assert sum(c for _, c in lam.stages(n_steps)) == n_steps


def test_the_fixed_point_solver_runs_a_stages_schedule_as_a_function_of_it():
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.3)
    X = torch.as_tensor(mix.sample(500, rng=0))
    h0 = ac.init_on_sphere(2, 4, rng=1)
    from attnclust.cluster.fixed_point import fixed_point_fit

    fit = [fixed_point_fit(X, h0, inverse_temperature=lam, n_steps=200, tol=1e-12)
           for lam in (Stages([1.0, 4.0], [2, 3]), lambda t: 1.0 if t < 2 else 4.0)]
    assert fit[0].converged and fit[0].n_iter == fit[1].n_iter
    torch.testing.assert_close(fit[0].heads, fit[1].heads, rtol=0, atol=0)


def test_mixtures_or_data_sets_are_one_or_one_per_run():
    """More mixtures or data sets than runs were cut to the runs' number, silently."""
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    h0 = ac.normalize(torch.randn(2, 4, dtype=torch.float64, generator=torch.Generator()
                                  .manual_seed(0)))
    two = torch.stack([h0, h0])
    with pytest.raises(ValueError, match="3 mixtures or data sets for 2 runs"):
        ac.pgd([mix] * 3, two, inverse_temperature=5.0, n_steps=1)
    with pytest.raises(ValueError, match="2 mixtures or data sets for 1 run"):
        ac.pgd([mix] * 2, h0, inverse_temperature=5.0, n_steps=1)
    X = mix.sample(50, rng=0)
    with pytest.raises(ValueError, match="2 mixtures or data sets for 1 run"):
        ac.pgd(np.stack([X, X]), h0, inverse_temperature=5.0, n_steps=1)
    assert ac.pgd([mix] * 2, two, inverse_temperature=5.0, n_steps=1).heads.shape == (2, 2, 4)


@pytest.mark.parametrize("kwargs", [dict(inverse_temperature="30"),
                                    dict(inverse_temperature=True),
                                    dict(inverse_temperature=[True, 2.0]),
                                    dict(step_size=True), dict(rho=True)])
def test_booleans_and_strings_are_no_numbers(kwargs):
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    heads = ac.normalize(torch.ones(2, 2, 4, dtype=torch.float64) + torch.eye(4)[:2])
    with pytest.raises(ValueError, match="must be a"):
        ac.pgd(mix, heads, n_steps=1, **({"inverse_temperature": 5.0} | kwargs))


def test_riemannian_is_a_flag():
    """``riemannian="no"`` ran as True (any object is truthy); identity attention refuses
    such flags, and so does pgd."""
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    heads = ac.init_on_sphere(2, 4, rng=0)
    for flag in ("no", 0, None):
        with pytest.raises(ValueError, match="riemannian must be True or False"):
            ac.pgd(mix, heads, inverse_temperature=3.0, riemannian=flag, n_steps=1)
    assert ac.pgd(mix, heads, inverse_temperature=3.0, riemannian=np.bool_(False),
                  n_steps=1).n_iter == 1


def test_batched_risks_check_their_inverse_temperatures():
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    X = torch.as_tensor(mix.sample(50, rng=0))
    H = ac.normalize(torch.ones(1, 2, 4, dtype=torch.float64) + torch.eye(4)[:2])
    for lam in (-1.0, 0.0, float("nan"), [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match="inverse_temperature must be"):
            ac.empirical_risk(H, X, inverse_temperature=lam)
        with pytest.raises(ValueError, match="inverse_temperature must be"):
            ac.PopulationRisk(mix).value_and_grad(H, lam)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Anneal(3.0, ratio=0, steps=5), "ratio must be a finite number > 0"),
    (lambda: Anneal(3.0, steps=-10), "steps must be a finite number >= 0"),
    (lambda: Decay(3.0, steps=float("nan")), "steps must be a finite number >= 0"),
    (lambda: Anneal(3.0, steps="10"), "steps must be a finite number >= 0"),
    (lambda: Stages([1.0, 2.0], [-3, 5]), "steps must be a finite number >= 0"),
])
def test_schedules_check_their_steps_and_ratio(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("rho", [Decay(-5.0, steps=10), lambda t: -5.0,
                                 lambda t: float("nan")])
def test_a_scheduled_rho_is_checked_as_a_number_is(rho):
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    heads = ac.normalize(torch.ones(2, 4, dtype=torch.float64) + torch.eye(4)[:2])
    with pytest.raises(ValueError, match="rho at step 0 must be a finite number >= 0"):
        ac.pgd(mix, heads, inverse_temperature=5.0, penalty="repulsion", rho=rho, n_steps=3)


def test_no_runs_or_no_heads_are_named_at_the_entry():
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    with pytest.raises(ValueError, match=r"none of them 0, got \(0, 2, 4\)"):
        ac.pgd(mix, torch.zeros(0, 2, 4), inverse_temperature=1.0, n_steps=1)
    with pytest.raises(ValueError, match=r"none of them 0, got \(1, 0, 4\)"):
        ac.empirical_risk(torch.zeros(1, 0, 4), torch.ones(5, 4), inverse_temperature=1.0)

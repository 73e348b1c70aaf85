"""Population risk (exact rule, QMC), empirical risk and penalties."""

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import attention_risk_tol, balance_tol, eps, sum_tol
from attnclust.study import _population as P
from attnclust.study import _qmc
from attnclust.study import _quadrature as Q
from attnclust.study import risk as R

D = 10


def _scale(heads, data):
    """``r + H`` of :func:`attention_risk_tol`: ``r`` the root mean square norm of the rows
    (``E||X||^2`` of a mixture, the largest row of data), ``H`` the largest head norm.
    ``|P_h| <= r H`` and a key offset ``||mu_h||^2 / 2 <= H^2``, so every logit and each
    term of ``F = -2 a.P + a^T G a`` is at most ``(r + H)^2``."""
    if isinstance(data, ac.GaussianMixture):
        r = Q.second_moment(data) ** 0.5
    else:
        r = float(torch.as_tensor(np.asarray(data)).norm(dim=1).max())
    return r + float(torch.as_tensor(heads).detach().norm(dim=-1).max())


def _risk_tol(n, heads, data, lam):
    """(value, gradient) tolerance of two evaluations on the same ``n`` nodes or rows."""
    K, d = heads.shape[-2:]
    return attention_risk_tol(n, _scale(heads, data), lam, K, d)


def _balance_tol(n, heads, data, lam):
    """The same for the balance penalty (absolute: it may be near 0)."""
    K, d = heads.shape[-2:]
    return balance_tol(n, _scale(heads, data), lam, K, d)


def _nodes(heads, mix, lam, method="exact", n_samples=2**14, geometry="sphere"):
    """Terms of the rule's sum: ``k`` components times its nodes."""
    if method == "qmc" or heads.shape[-2] > 3:
        return n_samples * mix.k
    return P.exact_samples(heads.detach(), mix, lam, Q.rule(), geometry)[2].numel()


def _close(got, ref, tol):
    """``got`` within the absolute ``tol`` of ``ref`` (values or gradients)."""
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(ref, dtype=float),
                               rtol=0, atol=tol)


def _mc_risk(heads, mix, lam, n=10**6, rng=123, geometry="sphere"):
    """Plain Monte Carlo in d dimensions: independent of the quadrature code."""
    X = torch.from_numpy(mix.sample(n, rng=rng))
    out = ac.attention_heads(X, heads.detach(), inverse_temperature=lam, geometry=geometry)
    err = ((X - out) ** 2).sum(1)
    return float(err.mean()), float(err.std()) / np.sqrt(n)


def _reference_exact_risk(heads, mix, lam, rule, geometry="sphere"):
    """The exact rule with every op of the integrand recorded for autograd.

    The independent reference for the hand-written gradients of ``_quadrature.k2_exact``
    and ``k3_integral`` (same nodes, detached; the integrand and its derivative are left
    to torch). ``a.P`` is written out as ``P_K + sum_h a_h (P_h - P_K)``, with ``P_h -
    P_K = D_h - (c_h - c_K)`` for Euclidean heads, not through the kernels' ``G~``.
    """
    K = heads.shape[0]
    order, D, weights = P.exact_samples(heads, mix, lam, rule, geometry)
    a = R._softmax_weights(D, lam)
    h = heads[order]
    c = torch.zeros(K, dtype=h.dtype) if geometry == "sphere" else -0.5 * (h * h).sum(1)
    gram = h @ h.T
    F = -2.0 * sum(a[i] * (D[i] - (c[i] - c[-1])) for i in range(K - 1))
    for i in range(K):
        for j in range(K):
            F = F + gram[i, j] * a[i] * a[j]
    pi, cents = torch.from_numpy(mix.weights), torch.from_numpy(mix.centroids)
    return Q.second_moment(mix) + pi @ (weights * F).sum(-1) - 2.0 * pi @ (cents @ h[-1])


def _reference_qmc_risk(heads, mix, lam, n_samples, seed, geometry="sphere"):
    """The QMC estimator op by op in torch (autograd gradient): the reference of the
    NumPy kernel ``_qmc.qmc_kernel`` and its written-out chain rule."""
    z = _qmc.sobol_normals(heads.shape[0], n_samples, seed)  # (S, n', K)
    mean = torch.from_numpy(mix.centroids) @ heads.T  # (k_mix, K)
    logits = mean[None, :, None, :] + mix.sigma * (z @ _qmc.gram_factor(heads).T)[:, None]
    Pr = logits
    if geometry == "euclidean":
        logits = logits - 0.5 * (heads * heads).sum(1)
    a = torch.softmax(lam * logits, dim=-1)
    F = -2.0 * (a * Pr).sum(-1) + ((a @ (heads @ heads.T)) * a).sum(-1)  # (S, k, n')
    return Q.second_moment(mix) + F.mean((0, 2)) @ torch.from_numpy(mix.weights)


def _heads(K, seed, mix=None):
    return ac.init_on_manifold(mix, rng=seed) if mix is not None else \
        ac.init_on_sphere(K, D, rng=seed)


CASES = [  # (K, sigma, lambda, heads: "sphere" | "manifold" | "equal")
    (2, 0.3, 1.0, "sphere"),
    (2, 0.3, 30.0, "manifold"),
    (2, 0.8, 10.0, "sphere"),
    (2, 0.0, 5.0, "sphere"),
    (2, 0.3, 10.0, "equal"),
    (3, 0.3, 3.0, "sphere"),
    (3, 0.5, 30.0, "manifold"),
    (3, 0.0, 10.0, "sphere"),
    (3, 0.3, 10.0, "equal"),
]


def _case_heads(K, sigma, kind, seed=0):
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=sigma)
    if kind == "manifold":
        heads = ac.init_on_manifold(mix, rng=seed)
    else:
        heads = ac.init_on_sphere(K, D, rng=seed)
        if kind == "equal":
            heads[1] = heads[0]
    return mix, heads


@pytest.mark.slow
@pytest.mark.parametrize("K,sigma,lam,kind", CASES)
def test_exact_matches_monte_carlo(K, sigma, lam, kind):
    mix, heads = _case_heads(K, sigma, kind)
    exact = float(ac.population_risk(heads, mix, inverse_temperature=lam, method="exact"))
    mc, se = _mc_risk(heads, mix, lam)
    assert abs(exact - mc) < 4 * se, (exact, mc, se)


@pytest.mark.parametrize("K,sigma,lam,kind", CASES[:3] + CASES[4:7] + CASES[8:])
def test_exact_gradient_matches_finite_differences(K, sigma, lam, kind):
    mix, heads = _case_heads(K, sigma, kind, seed=1)
    h = heads.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(ac.population_risk(h, mix, inverse_temperature=lam), h)
    assert torch.isfinite(grad).all()
    step = 1e-5
    gen = torch.Generator().manual_seed(K)
    # directional derivatives along the coordinate axes of two heads' first entries
    # and along random directions (cheap for K = 3)
    directions = [torch.randn(K, D, dtype=torch.float64, generator=gen) for _ in range(2)]
    for i in range(K if K == 2 else 1):
        e = torch.zeros(K, D, dtype=torch.float64)
        e[i, -1] = 1.0
        directions.append(e)
    for e in directions:
        fd = (float(ac.population_risk(heads + step * e, mix, inverse_temperature=lam))
              - float(ac.population_risk(heads - step * e, mix,
                                         inverse_temperature=lam))) / (2 * step)
        exact = float((grad * e).sum())
        assert abs(exact - fd) < 1e-6 * max(abs(fd), float(grad.norm() * e.norm())), (exact, fd)


@pytest.mark.slow
@pytest.mark.parametrize("K,sigma,lam,kind", [CASES[1], CASES[4], CASES[6], CASES[8]])
def test_fused_gradient_matches_plain_autograd(K, sigma, lam, kind):
    mix, heads = _case_heads(K, sigma, kind, seed=2)
    out = []
    for risk in (P.exact_risk, _reference_exact_risk):
        h = heads.clone().requires_grad_(True)
        value = risk(h, mix, lam, Q.rule())
        out.append((value.item(), torch.autograd.grad(value, h)[0]))
    tol, gtol = _risk_tol(_nodes(heads, mix, lam), heads, mix, lam)  # same nodes, other order
    _close(out[0][0], out[1][0], tol)
    _close(out[0][1], out[1][1], gtol)


@pytest.mark.parametrize("sigma,lam,kind", [(0.3, 30.0, "sphere"), (0.0, 5.0, "sphere"),
                                            (0.3, 10.0, "equal"), (1.0, 0.5, "manifold")])
def test_fast_k2_value_and_gradient_match_autograd(sigma, lam, kind):
    """The batched K = 2 kernel (R = 1) against the op-by-op autograd reference."""
    mix, heads = _case_heads(2, sigma, kind, seed=3)
    fast = ac.PopulationRisk(mix).value_and_grad(heads[None], lam)
    fast_value, fast_grad = float(fast.value[0]), fast.grad[0].numpy()
    h = heads.clone().requires_grad_(True)
    ref = _reference_exact_risk(h, mix, lam, Q.rule())
    (ref_grad,) = torch.autograd.grad(ref, h)
    tol, gtol = _risk_tol(_nodes(heads, mix, lam), heads, mix, lam)  # same nodes, other order
    _close(fast_value, ref.item(), tol)
    _close(fast_grad, ref_grad, gtol)


@pytest.mark.slow
@pytest.mark.parametrize("K", [2, 3])
def test_accuracy_against_a_much_finer_rule(K):
    """The accuracy table of docs/risk.md, re-measured (margin: 1e-9 < 1e-8), plus the
    rounding of the two rules' sums (the finer one's nodes)."""
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=0.3)
    if K == 2:
        fine, scales = Q.rule(12, 0.25, 9.5, 2**0.5, 0.25, 40.0), [0.1, 1.0, 10.0, 100.0, 1e3]
    else:
        fine, scales = Q.rule(10, 0.5, 9.5, 2**0.5, 0.5, 40.0), [0.1, 10.0, 1e3]
    heads = ac.init_on_sphere(K, D, rng=4)
    for s in scales:
        lam = s / mix.sigma
        ref = float(P.exact_risk(heads, mix, lam, fine))
        got = float(P.exact_risk(heads, mix, lam, Q.rule()))
        n = P.exact_samples(heads, mix, lam, fine)[2].numel()
        assert abs(got - ref) < 1e-9 * ref + _risk_tol(n, heads, mix, lam)[0], (s, got, ref)


def test_dirac_is_a_finite_sum():
    mix = ac.GaussianMixture.orthogonal(d=D, k=3, sigma=0.0)
    heads = ac.init_on_sphere(3, D, rng=5)
    lam = 7.0
    X = torch.tensor(mix.centroids)
    Y = ac.attention_heads(X, heads, inverse_temperature=lam)
    direct = float(mix.weights @ ((X - Y) ** 2).sum(1).numpy())
    value = float(ac.population_risk(heads, mix, inverse_temperature=lam))
    _close(value, direct, _risk_tol(mix.k, heads, mix, lam)[0])  # k terms, other order
    # heads on the centroids: E||X||^2 - 2 E<X, mu> + E||mu||^2 cancels to 0; the softmax
    # saturates (a = 0 or 1 exactly), so only the products and sums round (lambda = 0)
    zero = float(ac.population_risk(mix.centroids, mix, inverse_temperature=1e4))
    assert abs(zero) < _risk_tol(mix.k, torch.tensor(mix.centroids), mix, 0.0)[0]


@pytest.mark.parametrize("K,sigma,lam", [(2, 0.3, 10.0), (3, 0.3, 3.0), (3, 0.0, 10.0)])
def test_qmc_agrees_with_exact(K, sigma, lam):
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=sigma)
    heads = ac.init_on_sphere(K, D, rng=6)
    exact = float(ac.population_risk(heads, mix, inverse_temperature=lam, method="exact"))
    est = ac.qmc_risk(heads, mix, inverse_temperature=lam, n_samples=2**14, rng=0)
    # sigma = 0: stderr is 0, and the QMC mean of 2^14 equal samples rounds
    rounding = _risk_tol(_nodes(heads, mix, lam, "qmc") + _nodes(heads, mix, lam), heads,
                         mix, lam)[0]
    assert abs(float(est.value) - exact) < 4 * est.stderr + rounding
    again = ac.qmc_risk(heads, mix, inverse_temperature=lam, n_samples=2**14, rng=0)
    assert float(again.value) == float(est.value)  # common random numbers


def test_qmc_matches_monte_carlo_for_many_heads():
    mix = ac.GaussianMixture.random(d=D, k=6, sigma=0.3, min_angle=1.0, rng=0)
    heads = ac.init_on_sphere(6, D, rng=7)
    est = ac.qmc_risk(heads, mix, inverse_temperature=5.0)
    mc, se = _mc_risk(heads, mix, 5.0, n=400_000)
    assert abs(float(est.value) - mc) < 4 * np.hypot(se, est.stderr)
    assert float(ac.population_risk(heads, mix,
                                    inverse_temperature=5.0)) == float(est.value)  # auto -> qmc
    h = heads.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(ac.qmc_risk(h, mix, inverse_temperature=5.0).value, h)
    e = torch.randn(6, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    step = 1e-6
    fd = (float(ac.qmc_risk(heads + step * e, mix, inverse_temperature=5.0).value)
          - float(ac.qmc_risk(heads - step * e, mix, inverse_temperature=5.0).value)) / (2 * step)
    assert float((grad * e).sum()) == pytest.approx(fd, rel=1e-6)


def test_empirical_risk_batches_and_gradient():
    mix = ac.GaussianMixture.orthogonal(d=D, k=2, sigma=0.3)
    X = mix.sample(1001, rng=0)
    heads = ac.init_on_sphere(2, D, rng=8).requires_grad_(True)
    full = ac.empirical_risk(heads, X, inverse_temperature=4.0)
    batched = ac.empirical_risk(heads, X, inverse_temperature=4.0, batch_size=100)
    Xt = torch.from_numpy(X)
    direct = ((Xt - ac.attention_heads(Xt, heads, inverse_temperature=4.0)) ** 2).sum(1).mean()
    tol, gtol = _risk_tol(len(X), heads, X, 4.0)  # the rows' terms summed in other orders
    _close(full.item(), direct.item(), tol)
    _close(batched.item(), direct.item(), tol)
    g1, g2 = (torch.autograd.grad(v, heads)[0] for v in (batched, direct))
    _close(g1, g2, gtol)


def test_repulsion_and_balance():
    heads = ac.init_on_sphere(3, D, rng=9)
    G = (heads @ heads.T).numpy()
    assert float(ac.repulsion(heads)) == pytest.approx(G[0, 1]**2 + G[0, 2]**2 + G[1, 2]**2)
    for K in (2, 3):
        mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=0.4)
        heads = ac.init_on_sphere(K, D, rng=10)
        X = mix.sample(400_000, rng=1)
        a = ac.head_weights(torch.from_numpy(X), heads, inverse_temperature=3.0)
        mean, se = a.mean(0), a.std(0) / np.sqrt(len(X))
        target = torch.full((K,), 1.0 / K, dtype=torch.float64)
        exact = float(ac.balance(heads, mix, inverse_temperature=3.0))
        data = float(ac.balance(heads, X, inverse_temperature=3.0, batch_size=50_000))
        _close(data, float(((mean - target) ** 2).sum()),
               _balance_tol(len(X), heads, X, 3.0)[0])  # means of a in batches vs at once
        # the exact balance differs from the data one by at most ~ 2 |m - t| * 4 se
        assert abs(exact - data) < 8 * float(((mean - target).abs() * se).sum()) + 1e-6
        qmc = float(ac.balance(heads, mix, inverse_temperature=3.0, method="qmc"))
        assert qmc == pytest.approx(exact, abs=1e-4)



def test_balance_with_target_matches_hand_computation():
    # Dirac mixture, heads on the orthogonal centroids: <mu*_k, mu_h> = delta_kh, so
    # E[a_h] = pi_h e^lam / (e^lam + 2) + (1 - pi_h) / (e^lam + 2)
    pi, lam, target = np.array([0.5, 0.3, 0.2]), 2.0, np.array([0.2, 0.3, 0.5])
    mix = ac.GaussianMixture(ac.GaussianMixture.orthogonal(d=D, k=3).centroids, weights=pi)
    heads = torch.tensor(mix.centroids)
    e = np.exp(lam)
    mean_a = (pi * e + (1 - pi)) / (e + 2)
    expected = float(((mean_a - target) ** 2).sum())
    assert expected > 0.05  # far from zero: the comparison below can fail
    # the formula against the rule's sums: k nodes (exact), 2^14 k equal samples (QMC)
    _close(float(ac.balance(heads, mix, inverse_temperature=lam, target=target)), expected,
           _balance_tol(mix.k, heads, mix, lam)[0])
    _close(float(ac.balance(heads, mix, inverse_temperature=lam, target=target, method="qmc")),
           expected, _balance_tol(2**14 * mix.k, heads, mix, lam)[0])
    # the same on data: rows 0, 0, 0, 0, 0, 1, 1, 1, 2, 2 realize pi exactly
    X = mix.centroids[[0] * 5 + [1] * 3 + [2] * 2]
    _close(float(ac.balance(heads, X, inverse_temperature=lam, target=target)), expected,
           _balance_tol(len(X), heads, X, lam)[0])


@pytest.mark.parametrize("d", [3, D])
@pytest.mark.parametrize("method", ["qmc", "auto"])
def test_qmc_with_singular_gram_agrees_with_monte_carlo(d, method):
    # K = 4 heads with two equal ones: G is singular (and K > d when d = 3), so the
    # factor of G falls back to the heads times a basis of their span, padded to (K, K)
    mix = ac.GaussianMixture.random(d=d, k=3, sigma=0.4, min_angle=1.0, rng=1)
    heads = ac.init_on_sphere(4, d, rng=2)
    heads[3] = heads[0]
    value = float(ac.population_risk(heads, mix, inverse_temperature=4.0, method=method))
    est = ac.qmc_risk(heads, mix, inverse_temperature=4.0)
    assert value == float(est.value) and np.isfinite(value)
    mc, se = _mc_risk(heads, mix, 4.0, n=200_000)
    assert abs(value - mc) < 4 * np.hypot(se, est.stderr)
    # and a gradient exists (the fallback factor is differentiable in the heads)
    h = heads.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(ac.qmc_risk(h, mix, inverse_temperature=4.0).value, h)
    assert grad.shape == (4, d) and bool(torch.isfinite(grad).all())


def test_qmc_more_heads_than_dimensions():
    mix = ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.3)
    heads = ac.init_on_sphere(4, 3, rng=0)  # G is 4 x 4 of rank 3
    est = ac.qmc_risk(heads, mix, inverse_temperature=5.0)
    mc, se = _mc_risk(heads, mix, 5.0, n=200_000)
    assert abs(float(est.value) - mc) < 4 * np.hypot(se, est.stderr)
    assert float(ac.population_risk(heads, mix, inverse_temperature=5.0)) == float(est.value)


def test_bad_inputs():
    mix = ac.GaussianMixture.orthogonal(d=D, k=2, sigma=0.3)
    good = torch.tensor(mix.centroids)
    with pytest.raises(ValueError, match="heads"):
        ac.population_risk(good[0], mix, inverse_temperature=1.0)
    for target in ([np.nan, 1.0], [5.0, 5.0], [1.5, -0.5]):     # taken as they were
        with pytest.raises(ValueError, match="target must be proportions"):
            ac.balance(good, mix, inverse_temperature=1.0, target=target)
    for grad in (False, True):      # NaN heads were let through when they required grad
        with pytest.raises(ValueError, match=r"heads contains NaN or inf"):
            ac.population_risk((good * np.nan).requires_grad_(grad), mix,
                               inverse_temperature=1.0)
    with pytest.raises(ValueError, match="d=10"):
        ac.population_risk(good[:, :5], mix, inverse_temperature=1.0)
    with pytest.raises(ValueError, match="inverse_temperature"):
        ac.population_risk(good, mix, inverse_temperature=0.0)
    with pytest.raises(ValueError, match="method"):
        ac.population_risk(good, mix, inverse_temperature=1.0, method="simpson")
    with pytest.raises(ValueError, match="K <= 3"):
        ac.population_risk(ac.init_on_sphere(4, D, rng=0), mix, inverse_temperature=1.0,
                           method="exact")
    with pytest.raises(ValueError, match="GaussianMixture"):
        ac.population_risk(good, "mixture", inverse_temperature=1.0)
    with pytest.raises(ValueError, match="n_samples"):
        ac.qmc_risk(good, mix, inverse_temperature=1.0, n_samples=0)
    with pytest.raises(ValueError, match="batch_size"):
        ac.empirical_risk(good, np.ones((3, D)), inverse_temperature=1.0, batch_size=0)
    with pytest.raises(ValueError, match="batch_size.*True"):
        ac.balance(good, np.ones((3, D)), inverse_temperature=1.0, batch_size=True)
    with pytest.raises(ValueError, match="n_samples.*2.5"):
        ac.qmc_risk(good, mix, inverse_temperature=1.0, n_samples=2.5)
    with pytest.raises(ValueError, match="target"):
        ac.balance(good, mix, inverse_temperature=1.0, target=[1.0])
    with pytest.raises(ValueError, match="NaN"):
        ac.population_risk(good * float("nan"), mix, inverse_temperature=1.0)


# -- objectives of many runs at once ------------------------------------------------------
def _runs(K, d, n, seed=0):
    return torch.stack([ac.init_on_sphere(K, d, rng=seed + r) for r in range(n)])


def _autograd(fn, heads):
    h = heads.clone().requires_grad_(True)
    value = fn(h)
    return float(value), torch.autograd.grad(value, h)[0]


def _reference(method, mix, lam, n_samples=512, seed=1, geometry="sphere"):
    if method == "exact":
        return lambda h: _reference_exact_risk(h, mix, lam, Q.rule(), geometry)
    return lambda h: _reference_qmc_risk(h, mix, lam, n_samples, seed, geometry)


@pytest.mark.parametrize("K,method", [(2, "exact"), (3, "exact"), (4, "qmc"), (2, "qmc")])
def test_population_objectives_match_the_references(K, method):
    """Each run of a batch equals the op-by-op autograd reference of its rule (risk) and
    the autograd function on the same nodes (balance)."""
    mixes = [ac.GaussianMixture.random(8, K, sigma, min_angle=0.8, rng=r)
             for r, sigma in enumerate((0.2, 0.0, 0.5))]
    heads = _runs(K, 8, 3)
    lam = torch.tensor([5.0, 20.0, 2.0], dtype=torch.float64)
    kw = dict(method=method, n_samples=512, rng=1)
    risk = ac.PopulationRisk(mixes, **kw).value_and_grad(heads, lam)
    bal = ac.Balance(mixes, **kw).value_and_grad(heads, lam)
    for r, mix in enumerate(mixes):
        lam_r = float(lam[r])
        n = _nodes(heads[r], mix, lam_r, method, 512)  # same nodes, other order
        for got, fn, tols in ((risk, _reference(method, mix, lam_r), _risk_tol),
                              (bal, lambda h, m=mix, t=lam_r: ac.balance(
                                  h, m, inverse_temperature=t, **kw), _balance_tol)):
            value, grad = _autograd(fn, heads[r])
            tol, gtol = tols(n, heads[r], mix, lam_r)
            _close(float(got.value[r]), value, tol)
            _close(got.grad[r], grad, gtol)


def test_penalty_and_empirical_objectives_match_autograd():
    heads = _runs(3, 5, 4)
    value, grad = ac.Repulsion().value_and_grad(heads)
    X = ac.GaussianMixture.random(5, 3, 0.2, rng=0).sample(400, rng=0)
    lam = torch.tensor([1.0, 3.0, 10.0, 30.0], dtype=torch.float64)
    emp = ac.EmpiricalRisk(X).value_and_grad(heads, lam)
    bal = ac.Balance(X).value_and_grad(heads, lam)
    K, d = heads.shape[-2:]
    for r in range(4):
        # sum_{h<l} G_hl^2, G from inner products of length d: terms of size H^4 (gradient
        # 4 G_hl mu_l: H^3), K^2 + d roundings
        H = float(heads[r].norm(dim=1).max())
        ref = _autograd(ac.repulsion, heads[r])
        _close(float(value[r]), ref[0], sum_tol(K * K + d) * K * K * H**4)
        _close(grad[r], ref[1], 4 * sum_tol(K * K + d) * K * H**3)
        lam_r = float(lam[r])
        tol, gtol = _risk_tol(len(X), heads[r], X, lam_r)  # the rows in other orders
        ref = _autograd(lambda h, t=lam_r: ac.empirical_risk(h, X, inverse_temperature=t), heads[r])
        _close(float(emp.value[r]), ref[0], tol)
        _close(emp.grad[r], ref[1], gtol)
        tol, gtol = _balance_tol(len(X), heads[r], X, lam_r)
        ref = _autograd(lambda h, t=lam_r: ac.balance(h, X, inverse_temperature=t), heads[r])
        _close(float(bal.value[r]), ref[0], tol)
        _close(bal.grad[r], ref[1], gtol)


def test_k2_kernel_gradient_by_finite_differences():
    """The hand-written gradient of the K = 2 kernel against central differences."""
    mix = ac.GaussianMixture.orthogonal(d=6, k=2, sigma=0.3)
    heads = _runs(2, 6, 1, seed=5)
    obj = ac.PopulationRisk(mix)
    _, grad = obj.value_and_grad(heads, 7.0)
    eps = 1e-6
    for h, j in [(0, 0), (1, 5), (0, 3)]:
        bump = torch.zeros_like(heads)
        bump[0, h, j] = eps
        fd = (obj.value_and_grad(heads + bump, 7.0).value
              - obj.value_and_grad(heads - bump, 7.0).value) / (2 * eps)
        # central differences at 1e-6 of the terms' size |grad| (an entry may be ~0)
        assert abs(float(fd[0]) - float(grad[0, h, j])) < 1e-6 * float(grad.norm())


def test_qmc_objective_singular_gram_and_float32_kernel():
    """Equal heads (singular G) take the QMC rule's fallback factor (against the op-by-op
    estimator on that factor); the float32 kernel agrees with the float64 one to float32
    accuracy."""
    mix = ac.GaussianMixture.random(6, 4, 0.3, min_angle=0.8, rng=2)
    heads = _runs(4, 6, 2, seed=7)
    heads[1, 2] = heads[1, 0]  # run 1 has two equal heads
    kw = dict(method="qmc", n_samples=512, rng=4)
    got = ac.PopulationRisk(mix, **kw).value_and_grad(heads, 6.0)
    for r in range(2):
        value, grad = _autograd(_reference("qmc", mix, 6.0, seed=4), heads[r])
        tol, gtol = _risk_tol(512 * mix.k, heads[r], mix, 6.0)  # same samples, other order
        _close(float(got.value[r]), value, tol)
        _close(got.grad[r], grad, gtol)
    low = ac.PopulationRisk(mix, qmc_dtype="float32", **kw).value_and_grad(heads, 6.0)
    # the same sums in float32: the bound scaled by eps32 / eps64
    ratio = eps(np.float32) / eps()
    tol, gtol = (ratio * t for t in _risk_tol(512 * mix.k, heads, mix, 6.0))
    _close(low.value, got.value, tol)
    _close(low.grad, got.grad, gtol)
    assert not torch.equal(low.grad, got.grad)  # it did compute in float32


# -- Euclidean heads: logits lambda <x, mu_h> - lambda ||mu_h||^2 / 2, heads of any norm ----
def _free_heads(K, d, seed):
    """Heads off the sphere (norms 0.5 .. 1.5), so that the key bias matters."""
    gen = np.random.default_rng(seed)
    h = gen.standard_normal((K, d))
    h *= np.linspace(0.5, 1.5, K)[:, None] / np.linalg.norm(h, axis=1, keepdims=True)
    return torch.from_numpy(h)


EUCLIDEAN = [(2, 0.3, 5.0), (2, 0.5, 30.0), (2, 0.0, 5.0), (3, 0.3, 3.0), (3, 0.4, 20.0)]


@pytest.mark.slow
@pytest.mark.parametrize("K,sigma,lam", EUCLIDEAN)
def test_euclidean_exact_matches_monte_carlo(K, sigma, lam):
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=sigma)
    heads = _free_heads(K, D, seed=K)
    exact = float(ac.population_risk(heads, mix, inverse_temperature=lam, geometry="euclidean"))
    mc, se = _mc_risk(heads, mix, lam, geometry="euclidean")
    assert abs(exact - mc) < 4 * se, (exact, mc, se)
    # the key bias matters here: the sphere's risk of the same heads is far from it
    sphere = float(ac.population_risk(heads, mix, inverse_temperature=lam))
    assert abs(sphere - exact) > 50 * se


@pytest.mark.parametrize("K,sigma,lam", EUCLIDEAN)
def test_euclidean_exact_matches_op_by_op_autograd(K, sigma, lam):
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=sigma)
    heads = _free_heads(K, D, seed=10 + K)
    out = []
    for risk in (lambda h: ac.population_risk(h, mix, inverse_temperature=lam,
                                              geometry="euclidean"),
                 lambda h: _reference_exact_risk(h, mix, lam, Q.rule(), "euclidean")):
        h = heads.clone().requires_grad_(True)
        value = risk(h)
        out.append((value.item(), torch.autograd.grad(value, h)[0]))
    tol, gtol = _risk_tol(_nodes(heads, mix, lam, geometry="euclidean"), heads, mix, lam)
    _close(out[0][0], out[1][0], tol)  # same nodes, other order
    _close(out[0][1], out[1][1], gtol)


@pytest.mark.parametrize("K,sigma,lam", [EUCLIDEAN[0], EUCLIDEAN[1], EUCLIDEAN[3]])
def test_euclidean_gradient_matches_finite_differences(K, sigma, lam):
    mix = ac.GaussianMixture.orthogonal(d=D, k=K, sigma=sigma)
    heads = _free_heads(K, D, seed=20 + K)
    h = heads.clone().requires_grad_(True)
    kw = dict(inverse_temperature=lam, geometry="euclidean")
    (grad,) = torch.autograd.grad(ac.population_risk(h, mix, **kw), h)
    gen = torch.Generator().manual_seed(K)
    step = 1e-5
    for _ in range(3):
        e = torch.randn(K, D, dtype=torch.float64, generator=gen)
        fd = (float(ac.population_risk(heads + step * e, mix, **kw))
              - float(ac.population_risk(heads - step * e, mix, **kw))) / (2 * step)
        # as for the sphere: relative to the terms |grad| |e| (the derivative may be ~0)
        scale = max(abs(fd), float(grad.norm() * e.norm()))
        assert abs(float((grad * e).sum()) - fd) < 1e-6 * scale


def test_euclidean_unit_heads_equal_the_sphere():
    """With unit heads the key bias is the same for every head: the two layers coincide."""
    for K, method in ((2, "exact"), (3, "exact"), (4, "qmc")):
        mix = ac.GaussianMixture.random(D, K, 0.3, min_angle=0.8, rng=K)
        heads = ac.init_on_sphere(K, D, rng=K)
        kw = dict(inverse_temperature=6.0, method=method, n_samples=1024)
        # the offsets -||mu_h||^2 / 2 cancel up to rounding: nodes placed alike, summed
        # with other terms (both rules' node counts)
        n = _nodes(heads, mix, 6.0, method, 1024) + _nodes(heads, mix, 6.0, method, 1024,
                                                           "euclidean")
        _close(float(ac.population_risk(heads, mix, geometry="euclidean", **kw)),
               float(ac.population_risk(heads, mix, **kw)), _risk_tol(n, heads, mix, 6.0)[0])


@pytest.mark.slow
@pytest.mark.parametrize("K,lam", [(2, 5.0), (3, 3.0), (4, 4.0)])
def test_euclidean_qmc(K, lam):
    """QMC for Euclidean heads: against the exact rule (K <= 3) or Monte Carlo (K = 4),
    and its gradient against the op-by-op torch estimator."""
    mix = ac.GaussianMixture.random(D, K, 0.3, min_angle=1.0, rng=K)
    heads = _free_heads(K, D, seed=30 + K)
    kw = dict(inverse_temperature=lam, geometry="euclidean")
    est = ac.qmc_risk(heads, mix, **kw)
    if K <= 3:
        exact = float(ac.population_risk(heads, mix, method="exact", **kw))
        n = _nodes(heads, mix, lam, "qmc") + _nodes(heads, mix, lam, geometry="euclidean")
        assert abs(float(est.value) - exact) < 4 * est.stderr + _risk_tol(n, heads, mix, lam)[0]
    else:
        mc, se = _mc_risk(heads, mix, lam, n=400_000, geometry="euclidean")
        assert abs(float(est.value) - mc) < 4 * np.hypot(se, est.stderr)
    got = _autograd(lambda h: ac.qmc_risk(h, mix, **kw).value, heads)
    ref = _autograd(lambda h: _reference_qmc_risk(h, mix, lam, 2**14, 0, "euclidean"), heads)
    tol, gtol = _risk_tol(2**14 * mix.k, heads, mix, lam)  # same samples, other order
    _close(got[0], ref[0], tol)
    _close(got[1], ref[1], gtol)


@pytest.mark.slow
@pytest.mark.parametrize("K,method", [(2, "exact"), (3, "exact"), (2, "qmc"), (4, "qmc")])
def test_euclidean_objectives(K, method):
    """The batched objects for Euclidean heads: risk against the op-by-op references,
    balance against the autograd function (torch's softmax on the same nodes)."""
    mixes = [ac.GaussianMixture.random(8, K, sigma, min_angle=0.8, rng=r)
             for r, sigma in enumerate((0.2, 0.0, 0.5))]
    heads = torch.stack([_free_heads(K, 8, seed=40 + r) for r in range(3)])
    lam = torch.tensor([5.0, 20.0, 2.0], dtype=torch.float64)
    kw = dict(method=method, n_samples=512, rng=1, geometry="euclidean")
    risk = ac.PopulationRisk(mixes, **kw).value_and_grad(heads, lam)
    bal = ac.Balance(mixes, **kw).value_and_grad(heads, lam)
    for r, mix in enumerate(mixes):
        t = float(lam[r])
        ref = _autograd(lambda h, m=mix, t=t: _reference_exact_risk(h, m, t, Q.rule(), "euclidean")
                        if method == "exact" else
                        _reference_qmc_risk(h, m, t, 512, 1, "euclidean"), heads[r])
        n = _nodes(heads[r], mix, t, method, 512, "euclidean")  # same nodes, other order
        tol, gtol = _risk_tol(n, heads[r], mix, t)
        _close(float(risk.value[r]), ref[0], tol)
        _close(risk.grad[r], ref[1], gtol)
        ref = _autograd(lambda h, m=mix, t=t: ac.balance(h, m, inverse_temperature=t, **kw),
                        heads[r])
        tol, gtol = _balance_tol(n, heads[r], mix, t)
        _close(float(bal.value[r]), ref[0], tol)
        _close(bal.grad[r], ref[1], gtol)


def test_euclidean_empirical_risk_and_objective():
    mix = ac.GaussianMixture.orthogonal(d=D, k=3, sigma=0.3)
    X = torch.from_numpy(mix.sample(2000, rng=0))
    heads = _free_heads(3, D, seed=50)
    h = heads.clone().requires_grad_(True)
    direct = ((X - ac.attention_heads(X, h, inverse_temperature=4.0, geometry="euclidean"))
              ** 2).sum(1).mean()
    value = ac.empirical_risk(h, X, inverse_temperature=4.0, geometry="euclidean", batch_size=300)
    tol, gtol = _risk_tol(len(X), heads, X, 4.0)  # the rows' terms in other orders
    _close(value.item(), direct.item(), tol)
    assert abs(value.item() - ac.empirical_risk(heads, X, inverse_temperature=4.0).item()) > 1e-3
    obj = ac.EmpiricalRisk(X, geometry="euclidean").value_and_grad(heads[None], 4.0)
    _close(float(obj.value[0]), direct.item(), tol)
    _close(obj.grad[0], torch.autograd.grad(direct, h)[0], gtol)

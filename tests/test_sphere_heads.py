import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnclust as ac
from attnclust import AttentionHeads, attention_heads, head_weights
from attnclust._validation import check_finite, check_int
from attnclust.sphere import normalize, random_sphere, retract, riemannian_gradient, tangent


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000))
def test_tangent_is_orthogonal_and_idempotent(k, d, seed):
    mu = random_sphere(k, d, rng=seed)
    v = torch.as_tensor(np.random.default_rng(seed + 1).standard_normal((k, d)))
    t = tangent(mu, v)
    assert torch.allclose((t * mu).sum(-1), torch.zeros(k, dtype=t.dtype), atol=1e-12)
    assert torch.allclose(tangent(mu, t), t, atol=1e-12)
    # the retraction lands on the sphere
    assert torch.allclose(retract(mu, 0.3 * t).norm(dim=-1), torch.ones(k, dtype=t.dtype),
                          atol=1e-14)


def test_riemannian_gradient_is_directional_derivative_along_geodesics():
    # f(mu) = <a, mu>^2 ; along mu(t) = cos t mu + sin t u (u unit tangent),
    # d/dt f(mu(t)) at 0 equals <grad_R f, u>.
    rng = np.random.default_rng(0)
    mu = random_sphere(1, 5, rng=1)[0]
    a = torch.as_tensor(rng.standard_normal(5))
    u = normalize(tangent(mu, torch.as_tensor(rng.standard_normal(5))))
    x = mu.clone().requires_grad_(True)
    (torch.dot(a, x) ** 2).backward()
    g = riemannian_gradient(mu, x.grad)

    def f(t):
        return float(torch.dot(a, np.cos(t) * mu + np.sin(t) * u) ** 2)

    h = 1e-6
    assert abs((f(h) - f(-h)) / (2 * h) - float(torch.dot(g, u))) < 1e-8


def test_normalize_rejects_zero_rows_naming_the_first():
    with pytest.raises(ValueError, match="zero vector"):
        normalize(torch.zeros(2, 3))
    x = torch.ones(4, 3)
    x[2] = 0
    with pytest.raises(ValueError, match="row 2 is zero"):
        normalize(x)
    y = torch.ones(2, 3, 2)  # (B, L, d): the index is (prompt, token)
    y[1, 2] = 0
    with pytest.raises(ValueError, match=r"row \(1, 2\) is zero"):
        normalize(y)


def test_check_finite_names_the_first_bad_index():
    x = torch.zeros(3, 4)
    x[2, 1], x[1, 3] = float("inf"), float("nan")
    with pytest.raises(ValueError, match=r"X contains NaN or inf \(first at index \(1, 3\)"):
        check_finite(x, "X")
    with pytest.raises(ValueError, match=r"index 2: inf"):
        check_finite(torch.tensor([0.0, 1.0, float("inf")]), "v")
    assert check_finite(x[0], "ok") is not None


@pytest.mark.parametrize("bad", [True, 2.0, "3", -1, None])
def test_check_int_refuses_non_integers(bad):
    with pytest.raises(ValueError, match=f"n must be an integer >= 0, got {bad!r}"):
        check_int(bad, "n", 0)


def test_random_sphere_is_uniform_enough():
    x = random_sphere(20_000, 3, rng=0).numpy()
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=0.02)
    np.testing.assert_allclose(x.T @ x / len(x), np.eye(3) / 3, atol=0.01)


def test_head_layer_matches_explicit_sum_and_is_in_convex_hull():
    rng = np.random.default_rng(0)
    heads = random_sphere(3, 4, rng=2)
    x = torch.as_tensor(rng.standard_normal((2, 5, 4)))  # (B, L, d)
    lam = 2.5
    out = attention_heads(x, heads, inverse_temperature=lam)
    assert out.shape == (2, 5, 4)
    for b in range(2):
        for i in range(5):
            s = torch.stack([lam * torch.dot(x[b, i], h) for h in heads])
            w = torch.exp(s - s.max())
            w = w / w.sum()
            ref = sum(w[h] * heads[h] for h in range(3))
            assert torch.allclose(out[b, i], ref, atol=1e-14)
    a = head_weights(x, heads, inverse_temperature=lam)
    assert torch.allclose(a.sum(-1), torch.ones(2, 5, dtype=a.dtype))
    assert bool((out.norm(dim=-1) <= 1 + 1e-12).all())  # convex hull of unit vectors


def test_module_matches_function():
    heads = random_sphere(2, 3, rng=0)
    layer = AttentionHeads(heads, inverse_temperature=4.0)
    x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(layer(x), attention_heads(x, heads, inverse_temperature=4.0))
    assert torch.allclose(layer.weights(x), head_weights(x, heads, inverse_temperature=4.0))
    assert "n_heads=2" in repr(layer)
    with pytest.raises(ValueError, match="inverse_temperature"):
        AttentionHeads(heads, inverse_temperature=0.0)
    with pytest.raises(ValueError, match="heads must have shape"):
        AttentionHeads([1.0, 0.0], inverse_temperature=1.0)


def test_module_trains_by_sgd_on_the_empirical_risk():
    # a few SGD steps, heads renormalized after each, lower the empirical risk of a
    # two-cluster mixture from a random start
    mix = ac.GaussianMixture.orthogonal(d=5, k=2, sigma=0.1)
    X = torch.from_numpy(mix.sample(500, rng=0))
    layer = AttentionHeads(random_sphere(2, 5, rng=0), inverse_temperature=10.0)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)

    def risk() -> float:
        with torch.no_grad():
            return float(ac.empirical_risk(layer.heads, X,
                                           inverse_temperature=layer.inverse_temperature))

    start = risk()
    for _ in range(40):
        opt.zero_grad()
        ((X - layer(X)) ** 2).sum(1).mean().backward()
        opt.step()
        with torch.no_grad():
            layer.heads.copy_(normalize(layer.heads))
    assert risk() < 0.05 * start
    # and the heads found the centroids (the minimizer is within ~sigma^2 of them)
    assert ac.centroid_distance(layer.heads.detach(), mix.centroids).max < 0.05
    assert torch.allclose(layer.heads.detach().norm(dim=1), torch.ones(2, dtype=X.dtype))


def test_module_on_float32_input_keeps_gradients():
    heads = random_sphere(3, 4, rng=1)
    layer = AttentionHeads(heads, inverse_temperature=3.0)
    x64 = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = layer(x64.float())
    assert out.dtype == torch.float32 and layer.weights(x64.float()).dtype == torch.float32
    torch.testing.assert_close(out, layer(x64).float(), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert layer.heads.grad is not None and layer.heads.grad.dtype == torch.float64
    assert float(layer.heads.grad.abs().sum()) > 0
    # NumPy input follows the parameter's dtype
    assert layer(x64.numpy()).dtype == torch.float64


def test_functions_validate_inverse_temperature_and_accept_numpy():
    heads = random_sphere(2, 3, rng=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    for fn in (head_weights, attention_heads):
        out = fn(x, heads, inverse_temperature=2.0)
        assert isinstance(out, torch.Tensor)
        torch.testing.assert_close(out, fn(torch.from_numpy(x), heads, inverse_temperature=2.0))
        assert isinstance(fn(x, heads.numpy(), inverse_temperature=2.0), torch.Tensor)
        for bad in (-1.0, 0.0, float("nan"), "hot", True):
            with pytest.raises(ValueError, match="inverse_temperature"):
                fn(x, heads, inverse_temperature=bad)

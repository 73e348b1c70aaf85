"""Tests of :mod:`attnclust.layer.sphere`: tangent projection, retraction, Riemannian gradient,
normalization and uniform sampling on the unit sphere."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _tolerance import eps
from attnclust.layer.sphere import normalize, random_sphere, retract, riemannian_gradient, tangent


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000))
def test_tangent_is_orthogonal_and_idempotent(k, d, seed):
    mu = random_sphere(k, d, rng=seed)
    v = torch.as_tensor(np.random.default_rng(seed + 1).standard_normal((k, d)))
    t = tangent(mu, v)
    # <v, mu> mu subtracted: zero up to the rounding of inner products of length d of
    # terms |v| |mu| (|mu| = 1 to (d + 2) eps): an absolute bound, the value being 0
    tol = 2 * (d + 2) * eps() * float(v.norm(dim=1).max())
    assert torch.allclose((t * mu).sum(-1), torch.zeros(k, dtype=t.dtype), rtol=0, atol=tol)
    assert torch.allclose(tangent(mu, t), t, rtol=0, atol=tol)
    # the retraction lands on the sphere: a norm of d terms, divided by it
    assert torch.allclose(retract(mu, 0.3 * t).norm(dim=-1), torch.ones(k, dtype=t.dtype),
                          rtol=0, atol=(d + 2) * eps())


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
    # with a gradient to follow too (it returned NaN rows)
    with pytest.raises(ValueError, match="row 2 is zero"):
        normalize(x.clone().requires_grad_())


def test_random_sphere_is_uniform_enough():
    x = random_sphere(20_000, 3, rng=0).numpy()
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=(3 + 2) * eps())
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=0.02)
    np.testing.assert_allclose(x.T @ x / len(x), np.eye(3) / 3, atol=0.01)


def test_points_on_a_sphere_need_a_dimension():
    """``random_sphere(2, 0)`` returned a (2, 0) tensor: points on S^-1."""
    from attnclust.layer.sphere import random_sphere

    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        random_sphere(2, 0)
    assert random_sphere(0, 3).shape == (0, 3)

"""Tests of :mod:`attnclust.layer.heads`: the attention-head layer, as functions and as a module."""

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import eps
from attnclust import AttentionHeads, attention_heads, head_weights
from attnclust.layer.sphere import normalize, random_sphere


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
            # unit heads: a softmax over inner products of length d (condition lam |x|)
            # and a sum of K unit vectors, in another order
            tol = (4 + 3 + lam * float(x[b, i].norm())) * eps()
            assert torch.allclose(out[b, i], ref, rtol=0, atol=tol)
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


@pytest.mark.parametrize(("x", "heads", "match"), [
    (torch.ones(3, 2, dtype=torch.float32), torch.eye(2, dtype=torch.float64),
     "x is torch.float32 on cpu and the heads torch.float64"),
    (torch.ones(3, 3, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
     r"x of shape \(3, 3\) and heads of shape \(2, 2\)"),
    (torch.ones(3, 2, dtype=torch.float64), torch.ones(2, dtype=torch.float64),
     "heads must be"),
])
def test_mismatched_tokens_and_heads_are_named(x, heads, match):
    with pytest.raises(ValueError, match=match):
        attention_heads(x, heads, inverse_temperature=1.0)


def test_a_layer_of_no_heads_or_of_infinite_ones_is_refused():
    with pytest.raises(ValueError, match=r"K, d >= 1"):
        AttentionHeads(np.zeros((0, 2)), 2.0)
    with pytest.raises(ValueError, match=r"K, d >= 1"):      # the function too (no
        attention_heads(torch.ones(3, 2), torch.ones(0, 2),  # IndexError from a max)
                        inverse_temperature=1.0)
    with pytest.raises(ValueError, match="inf"):
        AttentionHeads([[np.inf, 0.0], [1.0, 0.0]], 2.0)


def test_heads_far_from_the_origin_are_normalized_in_float32():
    layer = AttentionHeads(torch.tensor([[3e20, 4e20], [1.0, 0.0]]), 1.0)
    np.testing.assert_allclose(layer.heads.detach().numpy(), [[0.6, 0.8], [1.0, 0.0]],
                               rtol=4 * np.finfo(np.float32).eps)

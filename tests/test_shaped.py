"""Tests of :mod:`attnclust.cluster.shaped`: the K-head layer with a learned metric per head."""

import numpy as np
import pytest
import torch
from scipy.linalg import solve_triangular
from scipy.stats import multivariate_normal as mvn

import attnclust as ac
from attnclust.cluster.shaped import ShapedAttentionHeads, shaped_attention, shaped_weights

K, D = 3, 3


def _mixture(rng):
    """Means, full covariances, their (diag, spherical) reductions and weights."""
    means = rng.standard_normal((K, D))
    a = rng.standard_normal((K, D, D))
    covs = a @ a.transpose(0, 2, 1) + 0.5 * np.eye(D)
    return means, covs, np.array([0.2, 0.5, 0.3])


def _factor(covs, cov_type):
    """scikit-learn's precisions_cholesky_ of covariances of the given type."""
    if cov_type == "full":
        # L^-1 by triangular solves: exactly lower triangular (a general inverse leaves
        # rounding, BLAS-dependent, where the layer's factor holds exact zeros)
        eye = np.eye(covs.shape[-1])
        return np.stack([solve_triangular(low, eye, lower=True).T
                         for low in np.linalg.cholesky(covs)])
    return 1.0 / np.sqrt(covs)


def _reduced(covs, cov_type):
    if cov_type == "full":
        return covs
    diag = np.diagonal(covs, axis1=1, axis2=2)
    return diag if cov_type == "diag" else diag.mean(1)


@pytest.mark.parametrize("cov_type", ["full", "diag", "spherical"])
@pytest.mark.parametrize("lam", [1.0, 0.4, 3.0])
def test_weights_are_the_tempered_posterior_of_the_mixture(cov_type, lam):
    # a_h(x) = p_h(x)^lambda / sum_g p_g(x)^lambda, p_h = pi_h N(x; mu_h, Sigma_h) from
    # scipy, on a (B, L, d) batch
    rng = np.random.default_rng(1)
    means, covs, w = _mixture(rng)
    covs = _reduced(covs, cov_type)
    x = rng.standard_normal((2, 4, D))
    a = shaped_weights(x, means, _factor(covs, cov_type), np.log(w), inverse_temperature=lam,
                       covariance_type=cov_type).numpy()
    dense = covs if cov_type == "full" else (
        [np.diag(c) for c in covs] if cov_type == "diag" else [c * np.eye(D) for c in covs])
    log_p = np.stack([np.log(w[h]) + mvn(means[h], dense[h]).logpdf(x) for h in range(K)], -1)
    ref = np.exp(lam * log_p - lam * log_p.max(-1, keepdims=True))
    assert a.shape == (2, 4, K)
    np.testing.assert_allclose(a, ref / ref.sum(-1, keepdims=True), rtol=1e-11, atol=1e-14)


def test_spherical_unit_metric_is_todays_euclidean_layer():
    rng = np.random.default_rng(2)
    means = torch.as_tensor(rng.standard_normal((4, 5)))
    x = torch.as_tensor(rng.standard_normal((7, 5)))
    ones = torch.ones(4, dtype=torch.float64)
    for lam in (0.3, 5.0):
        new = shaped_weights(x, means, ones, inverse_temperature=lam,
                             covariance_type="spherical")
        old = ac.head_weights(x, means, inverse_temperature=lam, geometry="euclidean")
        assert torch.allclose(new, old, rtol=1e-12, atol=1e-15)
        layer = ShapedAttentionHeads(means, inverse_temperature=lam)
        today = ac.AttentionHeads(means, inverse_temperature=lam, geometry="euclidean")
        assert torch.allclose(layer(x), today(x), rtol=1e-12, atol=1e-14)
    # a per-head scale changes the cells: no longer today's layer
    other = shaped_weights(x, means, torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64),
                           inverse_temperature=1.0, covariance_type="spherical")
    assert not torch.allclose(other, ac.head_weights(x, means, inverse_temperature=1.0,
                                                     geometry="euclidean"), atol=1e-3)


def test_output_is_the_weighted_mean_of_the_heads():
    rng = np.random.default_rng(3)
    means, covs, w = _mixture(rng)
    x = rng.standard_normal((6, D))
    u = _factor(covs, "full")
    a = shaped_weights(x, means, u, np.log(w))
    np.testing.assert_allclose(shaped_attention(x, means, u, np.log(w)).numpy(),
                               a.numpy() @ means, rtol=1e-13)


@pytest.mark.parametrize("cov_type", ["full", "diag", "spherical"])
def test_module_matches_function_and_keeps_the_metric_positive_definite(cov_type):
    rng = np.random.default_rng(4)
    means, covs, w = _mixture(rng)
    u = _factor(_reduced(covs, cov_type), cov_type)
    layer = ShapedAttentionHeads(means, 2.0, covariance_type=cov_type,
                                 precisions_cholesky=u, weights=w)
    x = torch.as_tensor(rng.standard_normal((5, D)))
    ref = shaped_attention(x, means, u, np.log(w), inverse_temperature=2.0,
                           covariance_type=cov_type)
    assert torch.allclose(layer(x), ref, rtol=1e-12)
    np.testing.assert_allclose(layer.precisions_cholesky.detach().numpy(), u, rtol=1e-12)
    # large steps of plain SGD keep P_h positive definite (the parametrization's purpose)
    opt = torch.optim.SGD(layer.parameters(), lr=5.0)
    for _ in range(5):
        opt.zero_grad()
        ((x - layer(x)) ** 2).sum().backward()
        opt.step()
    prec = layer.precisions.detach()
    smallest = (torch.linalg.eigvalsh(prec)[:, 0] if cov_type == "full"
                else prec.reshape(K, -1).amin(1))
    assert bool((smallest > 0).all()) and bool(torch.isfinite(layer(x)).all())


def test_bad_arguments_are_named():
    m = np.zeros((2, 3))
    with pytest.raises(ValueError, match="covariance_type must be"):
        shaped_weights(np.zeros(3), m, np.ones(2), covariance_type="tied")
    with pytest.raises(ValueError, match=r"precisions_cholesky must have shape \(2, 3, 3\)"):
        shaped_weights(np.zeros(3), m, np.ones((2, 3)))
    with pytest.raises(ValueError, match="positive diagonal"):
        ShapedAttentionHeads(m, covariance_type="diag", precisions_cholesky=-np.ones((2, 3)))
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        ShapedAttentionHeads(m, weights=[1.0, 0.0])

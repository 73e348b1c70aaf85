"""Tests of :mod:`attnclust.cluster.mixture.shaped`: the K-head layer with a learned metric per
head."""

import numpy as np
import pytest
import torch
from scipy.linalg import solve_triangular
from scipy.stats import multivariate_normal as mvn

import attnclust as ac
from _tolerance import eps, sq_dist_tol
from attnclust.cluster.mixture.shaped import ShapedAttentionHeads, shaped_attention, shaped_weights

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
    # scipy's log-density (an eigendecomposition) against our factors: each term of log p
    # (log w, d/2 log 2 pi, log det / 2, the Mahalanobis term / 2) within (2d + 1) cond eps
    # of its size (Cholesky and a triangular inverse, as test_covariance derives); a
    # softmax moves a_h by at most 2 a_h lambda max |d log p|: relative to each weight
    full = np.asarray(dense)
    maha = np.stack([np.einsum("...i,ij,...j->...", x - means[h], np.linalg.inv(full[h]),
                               x - means[h]) for h in range(K)], -1)
    terms = np.abs(np.log(w)) + D / 2 * np.log(2 * np.pi) \
        + np.abs(np.linalg.slogdet(full)[1]) / 2 + maha / 2
    rel = 2 * lam * (2 * D + 1) * eps() * np.linalg.cond(full).max() * terms.max()
    np.testing.assert_allclose(a, ref / ref.sum(-1, keepdims=True), rtol=rel, atol=0)


def test_spherical_unit_metric_is_todays_euclidean_layer():
    rng = np.random.default_rng(2)
    means = torch.as_tensor(rng.standard_normal((4, 5)))
    x = torch.as_tensor(rng.standard_normal((7, 5)))
    ones = torch.ones(4, dtype=torch.float64)
    # the two layers compute the squared distances their own ways: logits -lambda/2 ||x -
    # mu||^2 apart by lambda/2 sq_dist_tol, so each weight by 2 a_h times that (a softmax),
    # and the output, a mean of the heads, by as much of max |mu| (plus K eps of the sum)
    dist_tol = torch.as_tensor(sq_dist_tol(x.numpy(), means.numpy()).max(1))[:, None]
    for lam in (0.3, 5.0):
        new = shaped_weights(x, means, ones, inverse_temperature=lam,
                             covariance_type="spherical")
        old = ac.head_weights(x, means, inverse_temperature=lam, geometry="euclidean")
        assert bool(((new - old).abs() <= lam * dist_tol * old).all())
        layer = ShapedAttentionHeads(means, inverse_temperature=lam)
        today = ac.AttentionHeads(means, inverse_temperature=lam, geometry="euclidean")
        out_tol = (lam * dist_tol + means.shape[0] * eps()) * means.abs().max()
        assert bool(((layer(x) - today(x)).abs() <= out_tol).all())
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
    # the same weights; torch's product against NumPy's: K eps of sum_h a_h |mu_h|
    diff = shaped_attention(x, means, u, np.log(w)).numpy() - a.numpy() @ means
    assert (np.abs(diff) <= K * eps() * (a.numpy() @ np.abs(means))).all()


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
    # the layer keeps log(diag U) and log w (renormalized): exp(log u) is u to (2 +
    # |log u|) eps of it; the logits lambda (log det U - ||(x - mu) U||^2 / 2 + log w) move
    # by lambda (d + maha + K |log w|) times that, the output by twice it of max |mu|
    rel = (2 + np.abs(np.log(np.abs(u[u != 0]))).max()) * eps()
    np.testing.assert_allclose(layer.precisions_cholesky.detach().numpy(), u, rtol=rel, atol=0)
    xs, full = x.numpy(), u.reshape(K, -1)
    maha = max(float(np.sum(((xs - means[h]) @ (u[h] if cov_type == "full"
                                                else np.diag(np.broadcast_to(full[h], D))))
                            ** 2, -1).max()) for h in range(K))
    logit = 2.0 * (D + maha + K * np.abs(np.log(w)).max()) * rel
    assert bool(((layer(x) - ref).abs() <= 2 * logit * np.abs(means).max()).all())
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


@pytest.mark.parametrize(("x", "log_weights", "match"), [
    (np.zeros((1, 2)), np.zeros(3), r"log_weights must have shape \(2,\), one per head"),
    (np.zeros((1, 3)), None, r"x must have shape \(\.\.\., 2\) as the means"),
])
def test_shaped_inputs_of_the_wrong_shape_are_named(x, log_weights, match):
    with pytest.raises(ValueError, match=match):
        shaped_weights(x, np.zeros((2, 2)), np.ones((2, 2)), log_weights,
                       covariance_type="diag")


def test_a_lower_or_non_positive_factor_is_refused():
    """A lower triangular factor lost its off-diagonal in the module and gave another
    posterior than the function; a non-positive diagonal gave NaN."""
    cov = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.2, 0.0], [0.0, 2.0]]])
    u = np.linalg.inv(np.linalg.cholesky(cov)).transpose(0, 2, 1)     # upper: accepted
    means = np.array([[0.0, 0.0], [1.0, 0.0]])
    shaped_weights(np.zeros((1, 2)), means, u)
    for bad, match in ((u.transpose(0, 2, 1), "upper triangular"),
                       (-u, "positive diagonal")):
        with pytest.raises(ValueError, match=match):
            shaped_weights(np.zeros((1, 2)), means, bad)
        with pytest.raises(ValueError, match=match):
            ShapedAttentionHeads(means, covariance_type="full", precisions_cholesky=bad)


def test_a_shaped_layer_of_no_heads_is_refused():
    with pytest.raises(ValueError, match=r"K, d >= 1, got \(0, 2\)"):
        ShapedAttentionHeads(np.zeros((0, 2)))

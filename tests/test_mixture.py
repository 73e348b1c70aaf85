import numpy as np
import pytest

from _tolerance import eps
from attnclust import GaussianMixture


def test_orthogonal_running_example():
    mix = GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    e10, minus_e1 = np.eye(10)[9], -np.eye(10)[0]
    np.testing.assert_array_equal(mix.centroids, np.stack([e10, minus_e1]))
    np.testing.assert_allclose(mix.weights, [0.5, 0.5])


@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_orthogonal_centroids_are_orthonormal(k):
    c = GaussianMixture.orthogonal(d=7, k=k).centroids
    np.testing.assert_allclose(c @ c.T, np.eye(k))


def test_random_respects_min_angle_and_seed():
    a = GaussianMixture.random(d=6, k=5, min_angle=np.deg2rad(60), rng=3)
    b = GaussianMixture.random(d=6, k=5, min_angle=np.deg2rad(60), rng=3)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    cos = a.centroids @ a.centroids.T
    assert np.all(cos[~np.eye(5, dtype=bool)] <= np.cos(np.deg2rad(60)) + 1e-12)
    np.testing.assert_allclose(np.linalg.norm(a.centroids, axis=1), 1.0)


def test_random_impossible_angle_raises():
    with pytest.raises(ValueError, match="min_angle"):
        GaussianMixture.random(d=2, k=5, min_angle=np.deg2rad(100), rng=0, max_tries=200)


def test_sample_moments_match_model():
    mix = GaussianMixture(np.eye(3)[:2], sigma=0.5, weights=[0.25, 0.75])
    X, z = mix.sample(200_000, rng=0, return_labels=True)
    assert X.shape == (200_000, 3)
    assert abs(np.mean(z == 1) - 0.75) < 0.005
    resid = X - mix.centroids[z]
    np.testing.assert_allclose(resid.std(axis=0), 0.5, rtol=0.01)
    np.testing.assert_allclose(resid.mean(axis=0), 0.0, atol=0.005)


def test_dirac_tokens_are_centroids_and_prompts_have_shape():
    mix = GaussianMixture.orthogonal(d=4, k=3, sigma=0.0)
    X, z = mix.sample_prompts(3, 7, rng=1, return_labels=True)
    assert X.shape == (3, 7, 4) and z.shape == (3, 7)
    np.testing.assert_array_equal(X, mix.centroids[z])


def test_sampling_is_reproducible():
    mix = GaussianMixture.antipodal(d=3, sigma=0.2)
    np.testing.assert_array_equal(mix.sample(10, rng=5), mix.sample(10, rng=5))
    assert not np.array_equal(mix.sample(10, rng=5), mix.sample(10, rng=6))


def test_posterior_matches_bayes_rule():
    mix = GaussianMixture(np.eye(2), sigma=0.7, weights=[0.3, 0.7])
    x = np.array([[0.2, -0.4]])
    # direct Gaussian densities (the normalizing constant cancels)
    dens = mix.weights * np.exp(-np.sum((x - mix.centroids) ** 2, axis=1) / (2 * 0.7**2))
    # exp of exponents E = ||x - c||^2 / 2 sigma^2 computed in another order (d + 2
    # roundings of E, each moving exp(-E) by E eps), then a sum of K and a quotient
    E = np.sum((x - mix.centroids) ** 2, axis=1).max() / (2 * 0.7**2)
    np.testing.assert_allclose(mix.posterior(x)[0], dens / dens.sum(), atol=0,
                               rtol=2 * ((2 + 2) * (1 + E) + 2 + 1) * eps())


@pytest.mark.parametrize("sigma", [1e-160, 1e-3, 0.3, 1e150])
def test_an_empty_cluster_nearest_the_token_takes_no_posterior(sigma):
    """The logits were shifted by the nearest centroid's score, an empty cluster's too:
    at sigma = 1e-160 every logit underflowed to -inf, the posterior was NaN and predict
    chose the empty cluster. An empty cluster's posterior is 0 at every sigma."""
    mix = GaussianMixture(np.eye(2), sigma=sigma, weights=[0.0, 1.0])
    x = np.array([[1.0, 0.0], [0.0, 1.0], [-5.0, 3.0]])
    np.testing.assert_array_equal(mix.posterior(x), [[0.0, 1.0]] * 3)
    np.testing.assert_array_equal(mix.predict(x), [1, 1, 1])


def test_a_token_that_is_not_finite_has_no_posterior():
    mix = GaussianMixture(np.eye(2), sigma=0.3)
    with pytest.raises(ValueError, match=r"NaN or inf \(first in row 1\)"):
        mix.predict([[0.0, 1.0], [np.nan, 0.0]])


def test_dirac_posterior_ignores_empty_clusters_and_breaks_ties_by_weight():
    mix = GaussianMixture(np.eye(3), sigma=0.0, weights=[0.0, 0.3, 0.7])
    # the nearest centroid is e_0, whose weight is zero: it can never be the cluster
    x = np.array([[1.0, 0.2, 0.1], [0.0, 1.0, 0.0], [0.1, 0.5, 0.5], [1.0, 0.0, 0.0]])
    post = mix.posterior(x)
    np.testing.assert_array_equal(post, [[0, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]])
    np.testing.assert_array_equal(mix.predict(x), [1, 1, 2, 2])
    # it is the limit sigma -> 0 of the Gaussian posterior (away from exact ties)
    # a losing cluster's posterior is at most w_j / w_win exp(-(D_j - D_win) / 2 sigma^2)
    # (about e^-500 here: 0 after rounding but for eps of the winner's)
    D = ((x[:2, None] - mix.centroids) ** 2).sum(-1)
    win = post[:2].argmax(1)
    live = mix.weights > 0
    gap = (D[:, live] - D[np.arange(2), win][:, None])[D[:, live] > D[np.arange(2), win][:, None]]
    bound = np.exp(-gap.min() / (2 * 0.02**2)) / mix.weights[live].min() + 4 * eps()
    np.testing.assert_allclose(mix.with_sigma(0.02).posterior(x[:2]), post[:2], rtol=0,
                               atol=bound)
    # tokens drawn from the mixture are never given to the empty cluster
    X, z = mix.sample(200, rng=0, return_labels=True)
    np.testing.assert_array_equal(mix.predict(X), z)
    assert mix.bayes_error(1000) == 0.0


def test_bayes_error_of_antipodal_matches_normal_tail():
    from scipy.stats import norm

    mix = GaussianMixture.antipodal(d=5, sigma=0.8)
    # error = P(N(1, sigma^2) < 0) = Phi(-1/sigma)
    assert abs(mix.bayes_error(400_000, rng=0) - norm.cdf(-1 / 0.8)) < 0.003


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(centroids=[[2.0, 0.0]]), "unit norm"),
        (dict(centroids=[[1.0, 0.0]], sigma=-0.1), "sigma"),
        (dict(centroids=[[1.0, 0.0]], sigma=True), "sigma.*True"),
        (dict(centroids=[[1.0, 0.0]], sigma="0.1"), "sigma"),
        (dict(centroids=[[1.0, 0.0]], sigma=np.inf), "sigma"),
        (dict(centroids=[[1.0, 0.0], [0.0, 1.0]], weights=[0.5, 0.6]), "sum to 1"),
        (dict(centroids=[[1.0, 0.0], [0.0, 1.0]], weights=[1.0]), "shape"),
        (dict(centroids=[[1.0, 0.0], [0.0, 1.0]], weights=[1.5, -0.5]), ">= 0"),
        (dict(centroids=[1.0, 0.0]), r"\(k, d\)"),
        (dict(centroids=[[np.nan, 1.0]]), "NaN"),
    ],
)
def test_validation_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GaussianMixture(**kwargs)


def test_bad_sample_sizes():
    mix = GaussianMixture.antipodal(d=2)
    with pytest.raises(ValueError, match="n must be"):
        mix.sample(-1)
    with pytest.raises(ValueError, match="X must have shape"):
        mix.posterior(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="k <= d"):
        GaussianMixture.orthogonal(d=2, k=3)


def test_float32_unit_centroids_are_unit_centroids():
    """Unit rows in float32 are 1 to float32's rounding (~1e-8 off in float64): accepted
    within a bound from float32's epsilon and made unit in float64; a row 1% long is not."""
    c = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    mix = GaussianMixture(c, sigma=0.1)
    np.testing.assert_allclose(np.linalg.norm(mix.centroids, axis=1), 1.0, rtol=0,
                               atol=4 * np.finfo(np.float64).eps)
    with pytest.raises(ValueError, match="off 1 by up to 0.01"):
        GaussianMixture(1.01 * c)


@pytest.mark.parametrize("sigma", [1e-155, 1e-300])
def test_the_bayes_classifier_at_a_spread_whose_square_underflows(sigma):
    """sigma^2 is 0 in float64 below ~1e-154: the posterior was NaN and the label 0."""
    mix = GaussianMixture.antipodal(d=2, sigma=sigma)
    np.testing.assert_array_equal(mix.predict([[-1.0, 0.0], [1.0, 0.0]]), [1, 0])
    np.testing.assert_array_equal(mix.posterior([[-1.0, 0.0]]), [[0.0, 1.0]])

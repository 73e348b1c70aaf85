"""``AttentionClustering(covariance_type=...)``: shaped heads in the estimator."""

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal as mvn
from sklearn.datasets import load_iris, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust as ac
from attnclust import AttentionClustering, DegenerateFitWarning
from attnclust.cluster.shaped import shaped_weights


def _anisotropic():
    X, y = make_blobs(n_samples=600, random_state=170)
    return X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y


def _same_fit(a, b):
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.loss_curve_, b.loss_curve_)
    assert a.inverse_temperature_ == b.inverse_temperature_ and a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("params", [dict(), dict(inverse_temperature=3.0, anneal=True),
                                    dict(init="sphere", n_init=2)])
def test_spherical_is_todays_fit_and_todays_layer(params):
    X, _ = _anisotropic()
    today = AttentionClustering(3, random_state=0, **params).fit(X)
    sph = AttentionClustering(3, covariance_type="spherical", random_state=0, **params).fit(X)
    _same_fit(today, sph)
    assert not hasattr(sph, "covariances_")
    # its attention is the shaped layer's with one unit metric shared by all heads
    a = shaped_weights(X, sph.cluster_centers_, np.ones(3),
                       inverse_temperature=sph.inverse_temperature_, covariance_type="spherical")
    np.testing.assert_allclose(sph.predict_proba(X), a.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cov_type", ["full", "diag"])
def test_fit_is_the_maximum_likelihood_of_gaussian_mixture(cov_type):
    # from the same start (given centres; covariances and weights of their nearest-centre
    # partition) both EMs climb to the same maximum (floors of 1e-6 apart)
    X, y = load_iris(return_X_y=True)
    centres = np.stack([X[y == k].mean(0) for k in range(3)])
    near = ((X[:, None] - centres) ** 2).sum(-1).argmin(1)
    covs = [np.cov(X[near == k].T, bias=True) for k in range(3)]
    covs = np.stack(covs if cov_type == "full" else [np.diag(c) for c in covs])
    est = AttentionClustering(3, covariance_type=cov_type, init=centres, tol=1e-12,
                              max_iter=2000).fit(X)
    gm = GaussianMixture(3, covariance_type=cov_type, means_init=centres, tol=1e-12,
                         weights_init=np.bincount(near) / len(X), max_iter=2000,
                         precisions_init=np.linalg.inv(covs) if cov_type == "full" else 1 / covs
                         ).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, gm.means_, atol=1e-4)
    np.testing.assert_allclose(est.covariances_, gm.covariances_, atol=1e-4)
    np.testing.assert_allclose(est.weights_, gm.weights_, atol=1e-5)
    np.testing.assert_allclose(est.predict_proba(X), gm.predict_proba(X), atol=1e-4)
    assert est.score(X) == pytest.approx(gm.score(X), abs=1e-4)
    assert est.loss_curve_[-1] == pytest.approx(-est.score(X), rel=1e-9)
    assert np.all(np.diff(est.loss_curve_) <= 1e-12 * np.abs(est.loss_curve_[1:]))


def test_full_attributes_are_the_mixture_they_describe():
    X, y = _anisotropic()
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    assert ac.adjusted_rand_index(y, est.labels_) == pytest.approx(1.0)
    np.testing.assert_allclose(est.precisions_ @ est.covariances_, np.broadcast_to(
        np.eye(2), (3, 2, 2)), atol=1e-10)
    np.testing.assert_allclose(est.precisions_cholesky_ @ est.precisions_cholesky_.transpose(
        0, 2, 1), est.precisions_, rtol=1e-12)
    assert est.weights_.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    # the posterior of the fitted mixture (scipy), with the floor's term -tr(P_h D)/2
    floor_term = -0.5 * np.einsum("hjj,j->h", est.precisions_, est.covariance_floor_)
    logp = np.stack([np.log(w) + mvn(m, c).logpdf(X) for w, m, c in zip(
        est.weights_, est.cluster_centers_, est.covariances_, strict=True)], 1) + floor_term
    post = np.exp(logp - logp.max(1, keepdims=True))
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba, post / post.sum(1, keepdims=True), atol=1e-12)
    np.testing.assert_allclose(est.transform(X), proba @ est.cluster_centers_, rtol=1e-12)
    lse = logp.max(1) + np.log(post.sum(1))
    assert est.score(X) == pytest.approx(lse.mean(), rel=1e-10)
    assert np.all(np.abs(floor_term) < 1e-3)          # and that term is small


def test_full_fit_is_equivariant_under_translation_and_scaling():
    X, _ = _anisotropic()
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    moved = AttentionClustering(3, covariance_type="full", random_state=0).fit(1e3 * X - 50.0)
    np.testing.assert_array_equal(moved.labels_, est.labels_)
    np.testing.assert_allclose(moved.cluster_centers_, 1e3 * est.cluster_centers_ - 50.0,
                               rtol=1e-8)
    np.testing.assert_allclose(moved.covariances_, 1e6 * est.covariances_, rtol=1e-8)
    # log-densities shift by d log(1000)
    assert moved.score(1e3 * X - 50.0) == pytest.approx(est.score(X) - 2 * np.log(1e3))
    np.testing.assert_allclose(moved.loss_curve_, est.loss_curve_ + 2 * np.log(1e3))


def test_tempered_fit_and_annealing():
    X, y = _anisotropic()
    hot = AttentionClustering(3, covariance_type="full", inverse_temperature=0.5,
                              random_state=0).fit(X)
    assert hot.inverse_temperature_ == 0.5
    annealed = AttentionClustering(3, covariance_type="full", anneal=True,
                                   random_state=0).fit(X)
    cold = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    # lambda < 1 flattens the posteriors (the heads' cells overlap more)
    assert hot.predict_proba(X).max(1).mean() < cold.predict_proba(X).max(1).mean() - 0.01
    lams, losses = annealed.inverse_temperature_curve_, annealed.loss_curve_
    np.testing.assert_allclose(np.unique(lams), [0.125, 0.25, 0.5, 1.0])
    assert np.all(np.diff(lams) >= 0) and lams[-1] == 1.0
    same = np.diff(lams) == 0                      # within a stage the objective descends
    assert np.all(np.diff(losses)[same] <= 1e-12 * np.abs(losses[1:][same]))


def test_float32_is_fitted_in_float32_and_agrees():
    X, y = _anisotropic()
    f64 = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    seen = []
    f32 = AttentionClustering(3, covariance_type="full", random_state=0,
                              callback=lambda info: seen.append(info.heads.dtype)
                              ).fit(X.astype(np.float32))
    assert set(seen) == {torch.float32}
    np.testing.assert_array_equal(f32.labels_, f64.labels_)
    np.testing.assert_allclose(f32.cluster_centers_, f64.cluster_centers_, atol=1e-3)


def test_callback_reports_the_data_units():
    X, _ = _anisotropic()
    infos = []
    est = AttentionClustering(3, covariance_type="full", random_state=0,
                              callback=infos.append).fit(1e3 * X)
    assert infos[-1].loss == pytest.approx(est.loss_curve_[-1])
    assert infos[-1].inverse_temperature == 1.0
    np.testing.assert_allclose(infos[-1].heads.numpy(), est.cluster_centers_, rtol=1e-12)


def test_constant_column_warns_through_the_estimator():
    X, _ = _anisotropic()
    X = np.column_stack([X, np.full(len(X), 3.0)])
    with pytest.warns(DegenerateFitWarning, match="no spread in some direction"):
        est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    assert np.all(np.isfinite(est.predict_proba(X))) and np.isfinite(est.score(X))


@pytest.mark.parametrize("bad, match", [
    (dict(covariance_type="tied"), "covariance_type must be"),
    (dict(covariance_type="full", geometry="sphere"), "needs geometry='euclidean'"),
    (dict(covariance_type="diag", penalty="repulsion", geometry="euclidean"),
     "penalty"),
])
def test_bad_covariance_parameters(bad, match):
    X, _ = _anisotropic()
    with pytest.raises(ValueError, match=match):
        AttentionClustering(3, **bad).fit(X)


def test_data_parallel_fit_sums_the_ranks():
    # two "ranks" holding the same rows fit the rows twice over, as one process does
    from attnclust.cluster.communicator import Communicator

    X, _ = _anisotropic()
    init = X[[0, 200, 400]]
    double = Communicator(lambda t: 2 * t, lambda t: t, 0, 2 * len(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        two = AttentionClustering(3, covariance_type="full", init=init).fit(X, comm=double)
        one = AttentionClustering(3, covariance_type="full", init=init).fit(np.concatenate([X, X]))
    np.testing.assert_allclose(two.cluster_centers_, one.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(two.covariances_, one.covariances_, rtol=1e-9)
    assert two.n_iter_ == one.n_iter_


_PARTIAL_FIT = "shaped heads have no partial_fit yet: it raises a ValueError saying so"
_EXPECTED = {
    "check_sample_weight_equivalence_on_dense_data": (
        "k-means++ draws its seeds among the rows, so repeated rows change the draws (as in "
        "today's fit and scikit-learn's KMeans); from the same start weights and repeated "
        "rows give the same fit (test_sample_weight_counts_rows)"),
    "check_fit_score_takes_y": _PARTIAL_FIT,
    "check_n_features_in_after_fitting": _PARTIAL_FIT,
    "check_estimators_partial_fit_n_features": _PARTIAL_FIT,
}


@parametrize_with_checks([AttentionClustering(covariance_type="full", max_iter=20),
                          AttentionClustering(covariance_type="diag", max_iter=20)],
                         expected_failed_checks=lambda est: _EXPECTED)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)    # tiny data, constant columns
        check(estimator)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fit_matches_the_cpu_fit():
    X, _ = _anisotropic()
    cpu = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    gpu = AttentionClustering(3, covariance_type="full", random_state=0, device="cuda").fit(X)
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_allclose(gpu.covariances_, cpu.covariances_, rtol=1e-8)
    np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-10)


def test_sample_weight_counts_rows():
    # integer weights fit as repeated rows (same given centres, so the same start), and
    # score weighs the rows' log-likelihoods
    X, _ = _anisotropic()
    counts = np.random.default_rng(0).integers(0, 3, len(X))
    init = X[[0, 200, 400]]
    weighted = AttentionClustering(3, covariance_type="full", init=init).fit(
        X, sample_weight=counts)
    repeated = AttentionClustering(3, covariance_type="full", init=init).fit(
        np.repeat(X, counts, axis=0))
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_, rtol=1e-9)
    np.testing.assert_allclose(weighted.covariances_, repeated.covariances_, rtol=1e-8)
    assert weighted.score(X, sample_weight=counts) == pytest.approx(
        repeated.score(np.repeat(X, counts, axis=0)), rel=1e-10)


def test_partial_fit_refuses_shaped_heads():
    X, _ = _anisotropic()
    with pytest.raises(ValueError, match="covariance_type='full' is fitted by fit"):
        AttentionClustering(3, covariance_type="full").partial_fit(X)

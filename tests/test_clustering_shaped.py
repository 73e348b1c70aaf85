"""``AttentionClustering(covariance_type=...)``: shaped heads in the estimator."""

import warnings

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import multivariate_normal as mvn
from sklearn.datasets import load_iris, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust as ac
from _tolerance import assert_labels_off_ties, eps, sum_tol
from attnclust import AttentionClustering, DegenerateFitWarning
from attnclust.cluster.mixture.shaped import shaped_weights


def _anisotropic():
    X, y = make_blobs(n_samples=600, random_state=170)
    return X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y


def _log_joint_tol(est, X) -> np.ndarray:
    """Per row, how far two computations of the fit's ``lambda log(w_h p_h(x))`` (rows and
    heads in other frames, the factors through other products) can be apart, at most over
    the heads: each term (``log w``, ``d/2 log 2 pi``, ``log det / 2``, the Mahalanobis
    term ``/ 2``) within ``(2d + 1) eps`` of its size (a triangular product and a sum of
    ``d`` squares); the Mahalanobis term's rounding follows the rows' and heads' norms in
    the frame, not their distance: ``||U_h||^2 (|x - c| + |mu_h - c| + |c|)^2`` with ``c``
    the heads' mean (the heads reach data units by adding a centre of about that size)."""
    d = X.shape[1]
    mu, U = est.cluster_centers_, est.precisions_cholesky_
    U = U if U.ndim == 3 else np.stack([np.diag(u) for u in U])
    c = mu.mean(0)
    reach = np.linalg.norm(X - c, axis=1)[:, None] + np.linalg.norm(mu - c, axis=1)[None] \
        + np.linalg.norm(c)
    log_det = 2 * np.log(np.abs(np.diagonal(U, axis1=1, axis2=2))).sum(1)
    terms = np.abs(np.log(est.weights_)) + d / 2 * np.log(2 * np.pi) + np.abs(log_det) / 2 \
        + (np.linalg.norm(U, ord=2, axis=(1, 2)) * reach) ** 2 / 2
    return est.inverse_temperature_ * (2 * d + 1) * eps() * terms.max(1)


def _log_joints(est, X, *, floor: bool) -> np.ndarray:
    """``log w_h + log N(x; mu_h, Sigma_h)`` of the fitted shaped heads by SciPy, ``(n,
    K)``; ``floor``: with the term ``-tr(P_h D) / 2`` of the covariance floor ``D`` that
    the fit's objective (``loss_curve_``) carries and the mixture's density does not."""
    covs = est.covariances_ if est.covariances_.ndim == 3 else \
        np.stack([np.diag(c) for c in est.covariances_])
    logp = np.stack([np.log(w) + mvn(m, c).logpdf(X) for w, m, c in zip(
        est.weights_, est.cluster_centers_, covs, strict=True)], 1)
    if floor:
        logp = logp - 0.5 * np.stack([np.diag(np.linalg.inv(c)) @ est.covariance_floor_
                                      for c in covs])
    return logp


def _proba_close(proba, ref, logit_tol, logits) -> None:
    """Softmax weights from logits apart by at most ``logit_tol`` per row: each weight
    ``a_h`` moves by at most ``2 a_h logit_tol``, plus the softmax's own rounding (``K + 2``
    eps: the exponential and the sum) and that of ``s_h - max s`` (``eps |s_h - max s|``
    in each computation, relative on ``a_h``: far heads' small weights)."""
    gap = logits.max(1, keepdims=True) - logits
    rel = 2 * np.asarray(logit_tol).reshape(-1, 1) + (ref.shape[1] + 2) * eps() + 2 * eps() * gap
    excess = np.abs(proba - ref) / (rel * ref)
    assert excess.max() <= 1, f"{excess.max():.3g} times the tolerance"


def _fit_tols(X, n_iter, n=None):
    """Absolute tolerances ``(heads, covariances)`` between two fits whose EM steps add the
    same ``n`` rows in other orders: a step's head, a weighted mean, within ``n eps`` of
    the rows' largest coordinate (the sum) and as much again (the weights' sum); a
    covariance, a weighted mean of ``(x - mu)(x - mu)^T``, within that of ``D^2`` (``D``
    the largest coordinate of ``x - mu``) and ``2 D`` times its head's move. Near the
    maximum each EM step contracts, so ``n_iter`` steps' rounding adds up to at most
    ``n_iter`` times one step's."""
    n = len(X) if n is None else n
    head = 2 * sum_tol(n) * float(np.abs(X).max())
    D = float(np.ptp(X, axis=0).max())
    return n_iter * head, n_iter * (2 * sum_tol(n) * D * D + 2 * D * head)


def _same_fit(a, b):
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.loss_curve_, b.loss_curve_)
    assert a.inverse_temperature_ == b.inverse_temperature_ and a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("params", [dict(), dict(inverse_temperature=3.0, anneal=True),
                                    dict(init="sphere", n_init=2)])
def test_spherical_is_the_risk_fit_and_its_layer(params):
    X, _ = _anisotropic()
    sph = AttentionClustering(3, covariance_type="spherical", random_state=0, **params).fit(X)
    if params:   # not the default fit: "auto" (the default) is "spherical", exactly
        _same_fit(AttentionClustering(3, random_state=0, **params).fit(X), sph)
    assert not hasattr(sph, "covariances_")
    # its attention is the shaped layer's with one unit metric shared by all heads
    a = shaped_weights(X, sph.cluster_centers_, np.ones(3),
                       inverse_temperature=sph.inverse_temperature_, covariance_type="spherical")
    # predict_proba's logits -lambda/2 ||x - mu||^2 are products in the frame of the heads'
    # mean c, shaped_weights' are differences: within lambda/2 (d + 2) eps (|x - c| + max
    # |mu - c|)^2 each (the sq_dist_tol bound)
    lam, mu = sph.inverse_temperature_, sph.cluster_centers_
    c, d = mu.mean(0), X.shape[1]
    logit_tol = lam / 2 * (d + 2) * eps() * (np.linalg.norm(X - c, axis=1)
                                             + np.linalg.norm(mu - c, axis=1).max()) ** 2
    logits = -lam / 2 * ((X[:, None] - mu[None]) ** 2).sum(-1)
    _proba_close(sph.predict_proba(X), a.numpy(), logit_tol, logits)


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
    # the fit's last loss (working frame, chunked) is minus the mean log-likelihood with
    # the floor's term (SciPy, data units; scipy's eigendecomposition within 1e-10 of our
    # factors here): per row within _log_joint_tol, the mean within sum_tol of it
    s = float(np.mean(logsumexp(_log_joints(est, X, floor=True), axis=1)))
    assert est.loss_curve_[-1] == pytest.approx(-s, rel=0, abs=float(
        _log_joint_tol(est, X).mean()) + sum_tol(len(X)) * abs(s) + 1e-10)
    assert np.all(np.diff(est.loss_curve_) <= 1e-12 * np.abs(est.loss_curve_[1:]))


def test_full_attributes_are_the_mixture_they_describe():
    X, y = _anisotropic()
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    assert ac.adjusted_rand_index(y, est.labels_) == pytest.approx(1.0)
    # a Cholesky factor and a triangular inverse: P Sigma - I within (2d + 1) cond(Sigma)
    # eps (the residual of a backward stable inverse)
    cond = float(np.linalg.cond(est.covariances_).max())
    np.testing.assert_allclose(est.precisions_ @ est.covariances_, np.broadcast_to(
        np.eye(2), (3, 2, 2)), rtol=0, atol=(2 * 2 + 1) * cond * eps())
    # precisions_ is this very product (U U^T of precisions_cholesky_): the same bits
    np.testing.assert_array_equal(est.precisions_cholesky_ @ est.precisions_cholesky_.transpose(
        0, 2, 1), est.precisions_)
    assert est.weights_.sum() == pytest.approx(1.0)
    # predict (data units) against the fit's last pass (working frame): off rows whose two
    # highest log-posteriors are within either's rounding
    log_post = np.log(np.maximum(est.predict_proba(X), np.finfo(np.float64).tiny))
    assert_labels_off_ties(est.predict(X), est.labels_, log_post, log_post,
                           slack=_log_joint_tol(est, X))
    # the posterior of the fitted mixture (scipy), with the floor's term -tr(P_h D)/2
    floor_term = -0.5 * np.einsum("hjj,j->h", est.precisions_, est.covariance_floor_)
    logp = np.stack([np.log(w) + mvn(m, c).logpdf(X) for w, m, c in zip(
        est.weights_, est.cluster_centers_, est.covariances_, strict=True)], 1) + floor_term
    post = np.exp(logp - logp.max(1, keepdims=True))
    proba = est.predict_proba(X)
    # scipy's log-density (an eigendecomposition) against our factors: each term of log p
    # (log w, d/2 log 2 pi, log det / 2, the Mahalanobis term / 2, the floor's) within
    # (2d + 1) cond eps of its size (as test_covariance derives)
    d, cov = X.shape[1], est.covariances_
    maha = np.stack([np.einsum("...i,ij,...j->...", X - m, np.linalg.inv(c), X - m)
                     for m, c in zip(est.cluster_centers_, cov, strict=True)], -1)
    terms = np.abs(np.log(est.weights_)) + d / 2 * np.log(2 * np.pi) \
        + np.abs(np.linalg.slogdet(cov)[1]) / 2 + maha / 2 + np.abs(floor_term)
    row_tol = (2 * d + 1) * eps() * np.linalg.cond(cov).max() * terms.max(1)
    _proba_close(proba, post / post.sum(1, keepdims=True), row_tol, logp)
    # the same weights; torch's product against NumPy's: K eps of sum_h a_h |mu_h|
    out_tol = len(cov) * eps() * (proba @ np.abs(est.cluster_centers_))
    assert np.all(np.abs(est.layer_output(X) - proba @ est.cluster_centers_) <= out_tol)
    # the score: the mixture's log-density, without the floor's term
    lse = logsumexp(logp - floor_term, axis=1)        # each row within its row_tol
    assert est.score(X) == pytest.approx(lse.mean(), rel=0, abs=float(
        row_tol.mean()) + sum_tol(len(X)) * float(np.abs(lse).mean()))
    assert np.all(np.abs(floor_term) < 1e-3)          # and that term is small


def test_full_fit_is_equivariant_under_translation_and_scaling():
    X, _ = _anisotropic()
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    moved = AttentionClustering(3, covariance_type="full", random_state=0).fit(1e3 * X - 50.0)
    # other rounding all through the fit: labels agree off rows within the fits' difference
    # of a tie (measured from their log-posteriors), plus each one's rounding
    tiny = np.finfo(np.float64).tiny
    assert_labels_off_ties(est.labels_, moved.labels_,
                           np.log(np.maximum(est.predict_proba(X), tiny)),
                           np.log(np.maximum(moved.predict_proba(1e3 * X - 50.0), tiny)),
                           slack=_log_joint_tol(est, X))
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
    # float32 all through: labels agree off rows within the fits' difference of a tie,
    # plus float32 rounding of f32's own logits (its labels are its float32 pass's)
    tiny = np.finfo(np.float64).tiny
    assert_labels_off_ties(f64.labels_, f32.labels_,
                           np.log(np.maximum(f64.predict_proba(X), tiny)),
                           np.log(np.maximum(f32.predict_proba(X), tiny)),
                           slack=_log_joint_tol(f32, X) * eps(np.float32) / eps())
    np.testing.assert_allclose(f32.cluster_centers_, f64.cluster_centers_, atol=1e-3)


def test_callback_reports_the_data_units():
    X, _ = _anisotropic()
    infos = []
    est = AttentionClustering(3, covariance_type="full", random_state=0,
                              callback=infos.append).fit(1e3 * X)
    assert infos[-1].loss == pytest.approx(est.loss_curve_[-1])
    assert infos[-1].inverse_temperature == 1.0
    # the last report's heads are the fit's, mapped to data units by the same elementwise
    # scale and shift: the same bits
    np.testing.assert_array_equal(infos[-1].heads.numpy(), est.cluster_centers_)


def test_a_column_constant_within_clusters_warns_through_the_estimator():
    X, y = _anisotropic()
    X = np.column_stack([X, y.astype(float)])
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
    # twice each sum against sums of the rows repeated (other orders), over the steps
    heads_tol, cov_tol = _fit_tols(X, one.n_iter_, 2 * len(X))
    np.testing.assert_allclose(two.cluster_centers_, one.cluster_centers_, rtol=0, atol=heads_tol)
    np.testing.assert_allclose(two.covariances_, one.covariances_, rtol=0, atol=cov_tol)
    _stops_apart_from_tol(one, 2 * len(X))
    assert two.n_iter_ == one.n_iter_


def _stops_apart_from_tol(fit, n) -> None:
    """Two fits of other rounding take the same steps when no step's drop of the loss is
    within their losses' difference of the stopping tolerance (1e-3 at "auto"): each
    loss a mean of ``n`` rows' log-likelihoods, within ``sum_tol`` of its size per step."""
    drops = -np.diff(fit.loss_curve_)
    margin = 2 * fit.n_iter_ * sum_tol(n) * float(np.abs(fit.loss_curve_).max())
    assert np.abs(drops - 1e-3).min() > margin


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
    # other kernels all through the fit: labels agree off rows within the fits'
    # difference of a tie
    tiny = np.finfo(np.float64).tiny
    assert_labels_off_ties(cpu.labels_, gpu.labels_,
                           np.log(np.maximum(cpu.predict_proba(X), tiny)),
                           np.log(np.maximum(gpu.predict_proba(X), tiny)),
                           slack=_log_joint_tol(cpu, X))
    # the EM steps' sums in other orders: the same steps (no drop of the loss near the
    # stopping tolerance), the heads and covariances within the steps' rounding
    _stops_apart_from_tol(cpu, len(X))
    assert gpu.n_iter_ == cpu.n_iter_
    heads_tol, cov_tol = _fit_tols(X, cpu.n_iter_)
    np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_, rtol=0,
                               atol=heads_tol)
    np.testing.assert_allclose(gpu.covariances_, cpu.covariances_, rtol=0, atol=cov_tol)


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
    # weighted sums against sums of the repeated rows (other orders), over the steps
    R = np.repeat(X, counts, axis=0)
    heads_tol, cov_tol = _fit_tols(X, repeated.n_iter_, len(R))
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_, rtol=0,
                               atol=heads_tol)
    np.testing.assert_allclose(weighted.covariances_, repeated.covariances_, rtol=0,
                               atol=cov_tol)
    # one fit's score: the weighted mean of its rows' log-likelihoods is the mean over the
    # repeated rows (each row's within its rounding in other blocks, the means sum_tol)
    wscore = weighted.score(X, sample_weight=counts)
    assert wscore == pytest.approx(weighted.score(R), rel=0, abs=float(np.max(
        _log_joint_tol(weighted, X))) + sum_tol(len(R)) * abs(wscore))


def test_partial_fit_refuses_shaped_heads():
    X, _ = _anisotropic()
    with pytest.raises(ValueError, match="covariance_type='full' is fitted by fit"):
        AttentionClustering(3, covariance_type="full").partial_fit(X)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_float32_rows_beside_dummies_fit_full_heads(seed):
    """Two float32 columns beside a category one-hot encoded without dropping a level (the
    dummies sum to 1: a direction without spread): the full heads' second moments, summed
    in float32, erred by the floor's own size there, and the fit raised "not positive
    definite" on these seeds. They are summed in float64."""
    X, y = make_blobs(900, 2, centers=3, random_state=seed + 170)
    level = np.random.default_rng(seed).integers(0, 3, 900)
    A = np.c_[X @ np.array([[0.6, -0.64], [-0.41, 0.85]]), np.eye(3)[level]]
    est = AttentionClustering(3, covariance_type="full", random_state=seed).fit(
        A.astype(np.float32))
    assert np.isfinite(est.covariances_).all() and len(np.unique(est.labels_)) == 3

"""The noise head (``noise_head=True``): the shaped heads beside a uniform background.

Claims checked: EM with the background never raises its objective; ``score`` is the
log-likelihood of the mixture the attributes describe, recomputed with SciPy; the
background's density is that of the rows' box; the rows scattered over the box get the
label -1 and the clusters keep theirs; without noise the background takes almost
nothing; ``predict`` agrees with ``labels_``; the fit on a sample carries to all rows;
integer weights act as repeated rows; and the settings it cannot serve raise.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust as ac
from _tolerance import assert_labels_off_ties, eps, sum_tol
from attnclust import AttentionClustering
from attnclust.cluster.mixture.covariance import Full
from attnclust.cluster.mixture.em import LeanEM
from attnclust.cluster.mixture.noise_head import NOISE_LABEL
from attnclust.cluster.settings import FitSettings

SEEDS = range(5)


def _blobs_over_noise(seed, n=200, noise=100, low=-6.0, high=10.0):
    """Three round blobs (sd 0.5) and ``noise`` rows uniform over a square around them
    (labelled -1)."""
    rng = np.random.default_rng(seed)
    blobs = np.concatenate([rng.normal(c, 0.5, (n, 2)) for c in ((0, 0), (4, 0), (0, 4))])
    X = np.concatenate([blobs, rng.uniform(low, high, (noise, 2))])
    return X, np.r_[np.repeat([0, 1, 2], n), np.full(noise, -1)]


def _fit(X, K, seed, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(K, noise_head=True, random_state=seed, **params).fit(X)


def test_em_with_the_background_never_raises_its_objective():
    X, _ = _blobs_over_noise(0)
    labels = np.random.default_rng(0).integers(0, 3, len(X))
    em = LeanEM(X, 3, Full(), np.full(2, 1e-6), labels, tol=-np.inf,
                log_background=-math.log(16.0 * 16.0))
    for _ in range(40):
        em.step()
    losses = np.asarray(em.losses)
    # each accepted step lowers f; the stop refuses a rise beyond 1e-12 relative
    assert np.all(np.diff(losses) <= 1e-12 * (1.0 + np.abs(losses[:-1])))
    weights = np.exp(em.params[2])
    assert weights.shape == (4,) and abs(weights.sum() - 1.0) <= 8 * eps()
    assert 0.05 < weights[3] < 0.3       # 100 of 700 rows are noise


def _log_joint(est, X, *, floor: bool = True):
    """The fitted mixture's log-joint of the rows, ``(n, K + 1)``, the background last, by
    SciPy from the attributes (data units): ``log w_h + log N(x; mu_h, Sigma_h) - tr(P_h
    D) / 2`` (``D`` the covariance floor, whose term the shaped heads' log-joint carries:
    attnclust.cluster.mixture.em; ``floor=False``: without it, the mixture's density) and
    ``log w_0 + noise_log_density_``."""
    K = len(est.weights_)
    covs = est.covariances_ if est.covariance_type_ == "full" else \
        np.stack([np.diag(c) for c in est.covariances_])
    parts = [np.log(est.weights_[h]) - floor * 0.5 * np.diag(np.linalg.inv(covs[h])) @
             est.covariance_floor_ + multivariate_normal(est.cluster_centers_[h], covs[h])
             .logpdf(X) for h in range(K)]
    parts.append(np.full(len(X), np.log(est.noise_weight_) + est.noise_log_density_))
    return np.stack(parts, axis=1)


def _assert_labels(a, b, log_a, log_b):
    """Labels that agree off ties of the log-joints, the noise label read as head ``K``
    (``slack``: the rounding of a log-joint of a few units, float64)."""
    K = log_a.shape[1] - 1
    a, b = np.where(a == NOISE_LABEL, K, a), np.where(b == NOISE_LABEL, K, b)
    assert_labels_off_ties(a, b, log_a, log_b, slack=1e-9 * (1 + np.abs(log_a).max(1)))


@pytest.mark.parametrize("seed", SEEDS)
def test_score_is_the_log_likelihood_of_the_fitted_mixture(seed):
    """``score`` is the mean of ``log sum`` over the heads and the background of
    :func:`_log_joint` (the mixture's density: no floor term); the background's density is
    ``1 / V`` of the rows' box (sides at least ``sqrt(2 pi e)`` times the root of the
    covariance floor)."""
    X, _ = _blobs_over_noise(seed)
    est = _fit(X, 3, seed)
    reference = float(np.mean(logsumexp(_log_joint(est, X, floor=False), axis=1)))
    # the score adds n terms of a few units each: the rounding of the sum, relative
    assert est.score(X) == pytest.approx(reference, rel=64 * sum_tol(len(X)))
    side = np.maximum(np.ptp(X, axis=0), np.sqrt(2 * np.pi * np.e * est.covariance_floor_))
    assert est.noise_log_density_ == pytest.approx(-np.log(side).sum(), rel=64 * eps())
    assert est.weights_.sum() + est.noise_weight_ == pytest.approx(1.0, abs=64 * eps())


def test_noise_rows_get_the_noise_label_and_the_clusters_keep_theirs():
    """Over 5 seeds: at least 70% of the uniform rows get -1 (some fall inside a blob),
    under 2% of the blob rows do, and the blobs' labels are as good as the default's."""
    recall, false, ari, ari_default = [], [], [], []
    for seed in SEEDS:
        X, y = _blobs_over_noise(seed)
        est = _fit(X, 3, seed)
        noise = y == -1
        recall.append(np.mean(est.labels_[noise] == NOISE_LABEL))
        false.append(np.mean(est.labels_[~noise] == NOISE_LABEL))
        ari.append(ac.adjusted_rand_index(y[~noise], est.labels_[~noise]))
        default = AttentionClustering(3, random_state=seed).fit(X)
        ari_default.append(ac.adjusted_rand_index(y[~noise], default.labels_[~noise]))
        assert est.noise_weight_ == pytest.approx(noise.mean(), abs=0.07)
    assert np.mean(recall) > 0.7 and np.mean(false) < 0.02
    assert np.mean(ari) >= np.mean(ari_default) - 0.01



@pytest.mark.parametrize(("far", "n_far"), [(100.0, 1), (100.0, 3), (100.0, 5), (1e4, 1)])
def test_far_outliers_are_noise_not_a_head(far, n_far):
    """Three blobs and a few rows far away: the default fit's cells give the far rows a head
    of their own and join two blobs (a likelihood the EM does not leave); the start that
    gives their cell's rows to the nearest blob lets the background take them."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(600, n_features=4, centers=3, random_state=0)
    outliers = np.full((n_far, 4), far) + 0.1 * np.arange(n_far)[:, None]
    est = AttentionClustering(3, noise_head=True, random_state=0).fit(np.r_[X, outliers])
    assert np.all(est.labels_[600:] == NOISE_LABEL)
    assert ac.adjusted_rand_index(y, est.labels_[:600]) == 1.0
    assert "for the background to take them" in est.covariance_type_reason_


@pytest.mark.parametrize("seed", range(6))
def test_far_rows_apart_are_noise_and_the_blobs_keep_their_heads(seed):
    """Three rows about 1,000 sd away, each in its own direction: the default fit's cells
    gave two of them a head each and kept the third in a blob's cell, whose 2-means halves
    then cut it off again (ARI 0 on 4 of these 6 seeds, the blobs sharing a head). Now k-means
    of the other rows starts the heads: the three rows are noise, and the blobs score as
    a Gaussian mixture fitted to them alone (an independent reference), within 0.05."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 5, (3, 3))
    X = np.vstack([c + rng.normal(0, 1, (250, 3)) for c in centres])
    y = np.repeat([0, 1, 2], 250)
    far = rng.choice(750, 3, replace=False)
    X[far] += rng.normal(0, 1e3, (3, 3))
    inliers = np.setdiff1d(np.arange(750), far)
    est = AttentionClustering(3, noise_head=True, random_state=seed).fit(X)
    assert np.all(est.labels_[far] == NOISE_LABEL)
    reference = GaussianMixture(3, random_state=0).fit(X[inliers]).predict(X[inliers])
    assert ac.adjusted_rand_index(y[inliers], est.labels_[inliers]) >= \
        ac.adjusted_rand_index(y[inliers], reference) - 0.05

def test_without_noise_the_background_takes_almost_nothing():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.5, (300, 2)) for c in ((0, 0), (5, 0), (0, 5))])
    est = _fit(X, 3, 0)
    assert est.noise_weight_ < 0.01
    assert np.mean(est.labels_ == NOISE_LABEL) < 0.01
    assert ac.adjusted_rand_index(np.repeat([0, 1, 2], 300), est.labels_) > 0.98


@pytest.mark.parametrize("n_constant", [1, 3])
def test_constant_features_change_nothing(n_constant):
    """A constant feature adds the same to every head's log-joint and to the
    background's (the box's side on it is the width of the uniform of a Gaussian's
    entropy at the floor): the labels and the noise weight are those without it."""
    X, _ = _blobs_over_noise(0)
    plain = _fit(X, 3, 0)
    padded = _fit(np.c_[X, np.full((len(X), n_constant), 3.0)], 3, 0)
    np.testing.assert_array_equal(padded.labels_, plain.labels_)
    assert padded.noise_weight_ == pytest.approx(plain.noise_weight_, rel=1e-9)


def test_identical_rows_are_not_noise():
    est = _fit(np.ones((20, 2)), 2, 0)
    assert est.labels_.min() >= 0


@pytest.mark.parametrize("seed", SEEDS)
def test_predict_is_labels(seed):
    X, _ = _blobs_over_noise(seed)
    est = _fit(X, 3, seed)
    assert set(np.unique(est.labels_)) <= {-1, 0, 1, 2}
    log_joint = _log_joint(est, X)
    _assert_labels(est.predict(X), est.labels_, log_joint, log_joint)
    _assert_labels(est.predict(X), np.where(log_joint.argmax(1) == 3, -1, log_joint.argmax(1)),
                   log_joint, log_joint)
    proba = est.predict_proba(X)          # over the K heads, given the row is not noise
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=64 * eps())
    assert est.covariance_type_ in ("diag", "full")
    assert "background" in est.covariance_type_reason_


def test_the_choice_on_a_sample_carries_to_all_rows():
    X, y = _blobs_over_noise(1)
    est = _fit(X, 3, 1, settings=FitSettings(choice_rows=300))
    assert est.covariance_type_criteria_[est.covariance_type_]["n_rows"] == 300
    assert len(est.labels_) == len(X)
    assert est.weights_.sum() + est.noise_weight_ == pytest.approx(1.0, abs=64 * eps())
    assert np.mean(est.labels_[y == -1] == NOISE_LABEL) > 0.6
    log_joint = _log_joint(est, X)
    _assert_labels(est.predict(X), est.labels_, log_joint, log_joint)


def test_integer_weights_are_repeated_rows():
    """With the deterministic start (``init="anneal"``) a weight of 2 is the row twice (the
    heads in another order: the default fit's annealing orders them so)."""
    X, _ = _blobs_over_noise(2, n=100, noise=60)
    counts = np.random.default_rng(0).integers(1, 3, len(X))
    weighted = _fit(X, 3, 0, init="anneal").fit(X, sample_weight=counts)
    repeated = _fit(np.repeat(X, counts, axis=0), 3, 0, init="anneal")
    assert weighted.covariance_type_ == repeated.covariance_type_
    # the same EM steps: weighted sums and sums of repeated rows differ by rounding only
    order = ((weighted.cluster_centers_[:, None] - repeated.cluster_centers_[None]) ** 2
             ).sum(2).argmin(1)                     # repeated's head of each weighted head
    np.testing.assert_allclose(repeated.cluster_centers_[order], weighted.cluster_centers_,
                               rtol=1e-6, atol=1e-9)
    renamed = np.argsort(order)[repeated.labels_[np.cumsum(counts) - 1]]
    renamed[repeated.labels_[np.cumsum(counts) - 1] == NOISE_LABEL] = NOISE_LABEL
    log_repeated = _log_joint(repeated, X)
    log_repeated[:, :3] = log_repeated[:, order]
    _assert_labels(weighted.labels_, renamed, _log_joint(weighted, X), log_repeated)
    assert weighted.noise_weight_ == pytest.approx(repeated.noise_weight_, rel=1e-6)
    assert weighted.noise_log_density_ == pytest.approx(repeated.noise_log_density_,
                                                        rel=64 * eps())


def test_a_refit_without_it_leaves_no_noise_attributes():
    X, _ = _blobs_over_noise(0)
    est = _fit(X, 3, 0)
    est.set_params(noise_head=False, covariance_type="spherical").fit(X)
    for name in ("noise_weight_", "noise_log_density_", "covariances_", "weights_"):
        assert not hasattr(est, name), name
    assert est.labels_.min() >= 0


@pytest.mark.parametrize("params, match", [
    (dict(covariance_type="spherical"), "covariance_type='auto'"),
    (dict(covariance_type="full"), "covariance_type='auto'"),
    (dict(geometry="sphere"), "geometry='euclidean'"),
    (dict(inverse_temperature=2.0), "inverse_temperature='auto'"),
    (dict(noise_head="yes"), "noise_head"),
])
def test_settings_it_cannot_serve_raise(params, match):
    X, _ = _blobs_over_noise(0)
    kwargs = dict(noise_head=True) | params
    with pytest.raises(ValueError, match=match):
        AttentionClustering(3, random_state=0, **kwargs).fit(X)


def test_when_both_shapes_are_too_costly_it_says_so_before_any_work():
    """The refusal comes before the fit touches the estimator: an earlier fit stays whole."""
    X, _ = _blobs_over_noise(0)
    est = AttentionClustering(3, random_state=0).fit(X)
    labels = est.predict(X)
    with pytest.raises(ValueError, match="both are too costly here"):
        est.set_params(noise_head=True, settings=FitSettings(choice_numbers=10)).fit(X)
    np.testing.assert_array_equal(est.predict(X), labels)


def test_a_data_parallel_fit_raises():
    from attnclust.cluster.communicator import Communicator

    X, _ = _blobs_over_noise(0)
    with pytest.raises(ValueError, match="held whole by one process on the CPU"):
        AttentionClustering(3, noise_head=True).fit(X, comm=Communicator.local(len(X)))


def test_partial_fit_raises():
    X, _ = _blobs_over_noise(0)
    with pytest.raises(ValueError, match="noise_head=True is fitted by fit"):
        AttentionClustering(3, noise_head=True).partial_fit(X)


_PARTIAL_FIT = "noise_head=True has no partial_fit: it raises a ValueError saying so"


@parametrize_with_checks([AttentionClustering(noise_head=True, max_iter=20)],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "k-means++ draws its seeds among the rows, so repeated "
                                 "rows change the draws (as in the default fit)"),
                             "check_fit_score_takes_y": _PARTIAL_FIT,
                             "check_n_features_in_after_fitting": _PARTIAL_FIT,
                             "check_estimators_partial_fit_n_features": _PARTIAL_FIT})
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


def test_a_background_that_takes_most_rows_warns():
    """Two crescents, which no Gaussian describes: the background took 71% of the rows
    with no word (a grid of integers, all of them). Blobs over noise rows (one row in
    seven) do not warn."""
    from sklearn.datasets import make_moons

    from attnclust.cluster.degenerate import DegenerateFitWarning

    X = make_moons(600, noise=0.05, random_state=0)[0]
    with pytest.warns(DegenerateFitWarning, match=r"the background took \d+% of the rows"):
        est = AttentionClustering(2, noise_head=True, random_state=0).fit(X)
    assert (est.labels_ == NOISE_LABEL).mean() > 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        AttentionClustering(3, noise_head=True, random_state=0).fit(_blobs_over_noise(0)[0])

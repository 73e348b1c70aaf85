"""Tests of the AttentionClustering estimator: the sphere's layer, then Euclidean heads."""

from __future__ import annotations

import math
import warnings
from functools import partial

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust as ac
from _tolerance import (
    assert_labels_off_ties,
    assert_same_labels,
    eps,
    objective_tol,
    sum_tol,
)
from attnclust.cluster import fixed_point
from attnclust.cluster.clustering import AttentionClustering, DegenerateFitWarning
from attnclust.cluster.plan import resolve
from attnclust.cluster.settings import FitSettings
from attnclust.cluster.warm_start import auto_inverse_temperature, hard_lloyd

# the tests written for the paper's layer (unit heads) name it; the default is Euclidean
SphereClustering = partial(AttentionClustering, geometry="sphere")


def _risk_autograd(heads, X, lam):
    """Independent reference: mean ||x - softmax(lam X mu^T) mu||^2 by plain torch."""
    A = torch.softmax(lam * X @ heads.T, dim=1)
    return ((X - A @ heads) ** 2).sum(1).mean()


def _risk_tol(X, heads, lam) -> float:
    """Absolute difference allowed between two computations of the sphere's risk ``mean
    ||x - T(x)||^2`` at the same heads (the fit's chunked pass, the score's float64 logits,
    plain torch). Per row the logits ``lambda <x, mu>`` (``d``-term products) are within
    ``lambda d eps |x| max|mu|``, moving each weight by twice that relatively, so ``T`` (a
    mean of ``K`` heads) by as much of ``max|mu|``, plus ``(K + d + 2) eps (|x| + max|mu|)``
    for its own sums; the squared error moves by ``2 |x - T|`` times that, plus ``d eps
    |x - T|^2``; the means add ``n`` rows in other orders (``sum_tol``)."""
    X, heads = np.asarray(X, dtype=np.float64), np.asarray(heads, dtype=np.float64)
    K, d = heads.shape
    x, m = np.linalg.norm(X, axis=1), np.linalg.norm(heads, axis=1).max()
    A = torch.softmax(lam * torch.as_tensor(X) @ torch.as_tensor(heads).T, 1).numpy()
    r = np.linalg.norm(X - A @ heads, axis=1)
    out = 2 * lam * d * eps() * x * m * m + (K + d + 2) * eps() * (x + m)
    return float(np.mean(2 * r * out + d * eps() * r * r)) + sum_tol(len(X)) * float(np.mean(r * r))


def _risk(est, X) -> float:
    """The fitted layer's empirical risk ``mean ||x - T(x)||^2`` (``layer_output``) of rows
    ``X`` its preprocessing leaves as they are (``normalize=None``, or rows on the sphere)."""
    X = np.asarray(X, dtype=np.float64)
    return float(np.mean(np.sum((X - est.layer_output(X)) ** 2, axis=1)))


def _lambda_rel(X, heads) -> float:
    """Relative difference allowed between two computations of the "auto" ``lambda = 1 /
    s^2`` at the same heads: ``s^2`` comes from ``E[p^2] - E[p]^2`` of the rows'
    projections ``p`` on the heads within each nearest-head cell, so its rounding is the
    sums' (``n eps``) times the cancellation ``kappa = E[p^2] / Var(p)``, four sums in all."""
    X, heads = np.asarray(X, dtype=np.float64), np.asarray(heads, dtype=np.float64)
    p = X @ heads.T
    labels = p.argmax(1)
    cells = [p[labels == h] for h in range(len(heads)) if np.sum(labels == h) > 1]
    assert all(np.var(c, 0).min() > 0 for c in cells)   # else kappa, and the bound, is inf
    kappa = max(np.max(np.mean(c ** 2, 0) / np.var(c, 0)) for c in cells)
    return 4 * float(kappa) * sum_tol(len(X))


def _unit_tol(d) -> float:
    """``| ||mu|| - 1 |`` of a head normalized by the fit (``mu = v / ||v||``), its norm
    recomputed: two sums of ``d`` squares (``d u`` each) and a division per coordinate."""
    return (d + 2) * eps()


def _out_tol(proba, heads) -> np.ndarray:
    """The layer's output from the same weights, torch's product against NumPy's: ``K``
    eps of ``sum_h a_h |mu_h|``."""
    return heads.shape[0] * eps() * (proba @ np.abs(heads))


def _euclidean_logit_tol(X, heads, lam) -> np.ndarray:
    """Per row, how far two computations of the Euclidean logits ``-lambda ||x - mu||^2 / 2``
    (up to a constant per row: products in the frame of the heads' mean ``c``, or of the
    rows as given) can be apart: ``lambda / 2 (d + 2) eps (|x| + max|mu| + |c|)^2`` for
    each (the frame's differences bounded by the norms), both counted."""
    c = heads.mean(0)
    reach = np.linalg.norm(X, axis=1) + np.linalg.norm(heads, axis=1).max() + np.linalg.norm(c)
    return lam * (X.shape[1] + 2) * eps() * reach**2


def _log_proba(est, X) -> np.ndarray:
    return np.log(np.maximum(est.predict_proba(X), np.finfo(np.float64).tiny))


def _riemannian_grad_norm(heads, X, lam) -> float:
    h = torch.as_tensor(heads, dtype=torch.float64).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_risk_autograd(h, torch.as_tensor(X), lam), h)
    h = h.detach()
    return float((g - (g * h).sum(1, keepdim=True) * h).norm())


@pytest.fixture(scope="module")
def mixture_fit():
    mix = ac.GaussianMixture.random(d=50, k=5, sigma=0.2, min_angle=np.pi / 3, rng=0)
    X, z = mix.sample(20_000, rng=1, return_labels=True)
    est = SphereClustering(5, normalize=None, random_state=0).fit(X)
    return mix, X, z, est


# -- the acceptance test of the issue ----------------------------------------------------
def test_mixture_recovers_centroids_and_labels(mixture_fit):
    mix, X, z, est = mixture_fit
    dist = ac.centroid_distance(est.cluster_centers_, mix.centroids)
    assert dist.max < 0.05
    assert ac.adjusted_rand_index(z, est.labels_) >= 0.99
    np.testing.assert_allclose(np.linalg.norm(est.cluster_centers_, axis=1), 1.0, rtol=0,
                               atol=_unit_tol(X.shape[1]))


def test_row_normalized_mixture_recovers_directions():
    mix = ac.GaussianMixture.random(d=50, k=5, sigma=0.2, min_angle=np.pi / 3, rng=0)
    X, z = mix.sample(5_000, rng=2, return_labels=True)
    est = SphereClustering(5, random_state=0).fit(X)  # normalize="rows"
    assert ac.centroid_distance(est.cluster_centers_, mix.centroids).max < 0.06
    assert ac.adjusted_rand_index(z, est.labels_) >= 0.99


# -- the solver ---------------------------------------------------------------------------
def test_fit_ends_at_stationary_point_of_the_risk(mixture_fit):
    _, X, _, est = mixture_fit
    assert est.converged_
    gnorm = _riemannian_grad_norm(est.cluster_centers_, X, est.inverse_temperature_)
    # compare with the gradient at the true centroids' neighbourhood scale: ~ 1e-1
    assert gnorm < 1e-5


@pytest.mark.parametrize("anneal", [True, False])
def test_loss_curve_non_increasing_at_fixed_inverse_temperature(anneal):
    d = load_wine()
    X = d.data / np.linalg.norm(d.data, axis=1, keepdims=True)
    est = SphereClustering(3, anneal=anneal, random_state=1).fit(X)
    temps = est.inverse_temperature_curve_
    assert len(est.loss_curve_) == len(temps) >= 2
    for lam in np.unique(temps):
        seg = est.loss_curve_[temps == lam]
        assert np.all(np.diff(seg) <= 1e-12 * abs(seg[0]))
    if anneal:
        np.testing.assert_allclose(temps[0], est.inverse_temperature_ / 8)
    assert temps[-1] == est.inverse_temperature_
    # the curve's last value is the fitted objective: the layer's risk (another pass)
    assert est.loss_curve_[-1] == pytest.approx(_risk(est, X), rel=0, abs=_risk_tol(
        X, est.cluster_centers_, est.inverse_temperature_))


def test_stationary_with_overlapping_clusters():
    """Soft attention (overlapping clusters): the key part of the gradient matters."""
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.35)
    X = mix.sample(3000, rng=0)
    est = SphereClustering(3, normalize=None, random_state=0, tol=1e-10,
                              max_iter=1000).fit(X)
    assert est.converged_
    start = ac.normalize(torch.as_tensor(X[:3]))
    g_start = _riemannian_grad_norm(start, X, est.inverse_temperature_)
    assert _riemannian_grad_norm(est.cluster_centers_, X, est.inverse_temperature_) < 1e-7 * g_start


def test_extrapolation_makes_digits_converge(monkeypatch):
    """Digits (overlapping clusters): plain steps zigzag and creep past max_iter; the
    safeguarded Anderson extrapolation reaches a fixed point within it, at a lower risk."""
    data = load_digits()
    X = data.data / np.linalg.norm(data.data, axis=1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "did not converge" warning fails the test
        est = SphereClustering(10, random_state=0).fit(X)
    assert est.converged_ and est.n_iter_ < 15 + est.max_iter
    lam = est.inverse_temperature_
    seg = est.loss_curve_[est.inverse_temperature_curve_ == lam]
    assert np.all(np.diff(seg) <= 1e-12 * abs(seg[0]))     # extrapolations never increase it
    # converged: the full step moves no head by more than tol = 1e-6, i.e. each head's
    # Riemannian gradient is at most about 2 N_h tol, N_h < 0.15: sqrt(10) 0.3 tol < 1e-6
    assert _riemannian_grad_norm(est.cluster_centers_, X, lam) < 1e-6
    monkeypatch.setattr(fixed_point, "_ANDERSON_DEPTH", 0)  # the plain safeguarded steps
    with pytest.warns(UserWarning, match="did not converge"):
        plain = SphereClustering(10, random_state=0).fit(X)
    assert plain.inverse_temperature_ == lam and not plain.converged_
    assert _riemannian_grad_norm(plain.cluster_centers_, X, lam) > 1e-5
    assert est.loss_curve_[-1] < plain.loss_curve_[-1]


def test_chunked_passes_give_the_same_fit():
    d = load_wine()
    X = d.data / np.linalg.norm(d.data, axis=1, keepdims=True)
    infos = []
    a = SphereClustering(3, random_state=0, max_iter=300, callback=infos.append).fit(X)
    b = SphereClustering(3, random_state=0, max_iter=300, chunk_size=17).fit(X)
    assert a.converged_ and b.converged_
    # chunks of 17 rows add each step's sums in another order and may take the logits'
    # d-term products from other kernels: per step the unit heads move by at most
    # sum_tol(n) (weighted means of unit rows) plus twice lambda d eps (the weights). Near
    # the fixed point the steps contract by g (the ratio of the last two moves), so each
    # fit ends within g m / (1 - g) of it (m: its last move) and the rounding adds up to
    # per_step / (1 - g)
    path = np.stack([i.heads.numpy() for i in infos])
    moves = np.linalg.norm(np.diff(path, axis=0), axis=-1).max(-1)
    g = moves[-1] / moves[-2]
    assert g < 0.5                                # contracting where it stopped
    per_step = sum_tol(len(X)) + 2 * a.inverse_temperature_ * X.shape[1] * eps()
    tol = 2 * (g * moves[-1] + per_step) / (1 - g) + _unit_tol(X.shape[1])
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=0, atol=tol)


@pytest.mark.filterwarnings("ignore:AttentionClustering did not converge")
def test_batch_size_of_the_fixed_point_solver_is_the_deprecated_chunk_size():
    """batch_size meant rows per chunk for the fixed-point solver and the mini-batch for
    pgd: the chunks are chunk_size now, and batch_size keeps its old meaning there with a
    FutureWarning until 0.5; with pgd it is the mini-batch, without a warning."""
    X = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.1).sample(400, rng=0)
    new = ac.AttentionClustering(3, random_state=0, chunk_size=50).fit(X)
    with pytest.warns(FutureWarning, match="batch_size as the rows per chunk .* chunk_size"):
        old = ac.AttentionClustering(3, random_state=0, batch_size=50).fit(X)
    np.testing.assert_array_equal(old.cluster_centers_, new.cluster_centers_)
    assert old.n_iter_ == new.n_iter_
    common = dict(geometry="sphere", solver="pgd", max_iter=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        full = ac.AttentionClustering(3, chunk_size=50, **common).fit(X)
        mini = ac.AttentionClustering(3, batch_size=50, **common).fit(X)
    assert full.loss_curve_.tolist() == ac.AttentionClustering(3, **common).fit(X) \
        .loss_curve_.tolist()                       # chunks change no step
    assert not np.array_equal(mini.loss_curve_, full.loss_curve_)   # stochastic steps


def test_pgd_solver_reaches_the_same_heads():
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1)
    X = mix.sample(600, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        pgd_est = SphereClustering(3, normalize=None, solver="pgd", step_size=0.5,
                                      max_iter=2000, tol=1e-9, random_state=0).fit(X)
    fp_est = SphereClustering(3, normalize=None, tol=1e-10, random_state=0).fit(X)
    assert pgd_est.inverse_temperature_ == fp_est.inverse_temperature_
    np.testing.assert_allclose(pgd_est.cluster_centers_, fp_est.cluster_centers_, atol=1e-6)


def test_pgd_callback_and_loss_curve_count_steps_once():
    X = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1).sample(300, rng=0)
    infos = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tol=0: never converged
        est = SphereClustering(3, normalize=None, solver="pgd", max_iter=12, tol=0.0,
                                  random_state=0, callback=infos.append).fit(X)
    lam, n_anneal = est.inverse_temperature_, 15                   # 5 steps at lam/8, /4, /2
    assert est.n_iter_ == n_anneal + 12
    assert [i.iteration for i in infos] == list(range(1, est.n_iter_ + 1))
    # the inverse temperature of each reported step is the one its update used
    expected = [lam / 8] * 5 + [lam / 4] * 5 + [lam / 2] * 5 + [lam] * 12
    # lambda / 2^k and the sphere's unit scale: exact
    assert [i.inverse_temperature for i in infos] == expected
    # one record per iterate: before each update (at its inverse temperature), and the last
    assert len(est.loss_curve_) == len(est.inverse_temperature_curve_) == est.n_iter_ + 1
    np.testing.assert_array_equal(est.inverse_temperature_curve_, expected + [lam])
    assert est.loss_curve_[-1] == pytest.approx(
        float(ac.empirical_risk(est.cluster_centers_, X, inverse_temperature=lam)), rel=0,
        abs=_risk_tol(X, est.cluster_centers_, lam))


# -- inverse temperature -------------------------------------------------------------------
def test_auto_inverse_temperature_keeps_a_given_init():
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1)
    X = mix.sample(600, rng=0)
    init = mix.centroids + 0.4 * np.random.default_rng(1).standard_normal(mix.centroids.shape)
    unit = init / np.linalg.norm(init, axis=1, keepdims=True)
    est = SphereClustering(3, init=init, normalize=None, anneal=False).fit(X)
    # the fit starts from the given heads, not from the Lloyd warm start ...
    # (the fit normalizes the given heads itself: within _unit_tol of unit, which moves the
    # risk by at most its gradient, 2 lambda max|x| + 2 per row, times that)
    lam = est.inverse_temperature_
    assert est.loss_curve_[0] == pytest.approx(
        float(ac.empirical_risk(unit, X, inverse_temperature=lam)), rel=0,
        abs=_risk_tol(X, unit, lam) + (2 * lam * np.linalg.norm(X, axis=1).max() + 2)
        * np.sqrt(len(unit)) * _unit_tol(X.shape[1]))
    # ... which is only used to estimate lambda, as for a seeding
    Xt = torch.as_tensor(X)
    lloyd = hard_lloyd(Xt, torch.as_tensor(unit), 20).heads
    # the same rule on the same heads, its variances summed in other orders (the fit's warm
    # start, this call): the cancellation of E[p^2] - E[p]^2 times the sums' rounding
    assert est.inverse_temperature_ == pytest.approx(auto_inverse_temperature(Xt, lloyd),
                                                     rel=_lambda_rel(X, lloyd.numpy()))
    lloyd_risk = float(ac.empirical_risk(lloyd, X, inverse_temperature=est.inverse_temperature_))
    assert abs(est.loss_curve_[0] - lloyd_risk) > 1e-3
    assert ac.centroid_distance(est.cluster_centers_, mix.centroids).max < 0.05


def test_auto_inverse_temperature_is_a_scale():
    """Scaling the data by c scales lambda by 1/c^2 ... up to the unit heads: with rows
    normalized first, the fitted inverse temperature does not depend on the data's scale at all."""
    d = load_iris()
    a = SphereClustering(3, random_state=0).fit(d.data)
    b = SphereClustering(3, random_state=0).fit(1000 * d.data)
    # the rows normalized from 1000 X round apart by (d + 2) eps; lambda then by its
    # cancellation times that and the sums' rounding
    unit = d.data / np.linalg.norm(d.data, axis=1, keepdims=True)
    rel = _lambda_rel(unit, a.cluster_centers_) * (1 + (d.data.shape[1] + 2) / len(unit))
    assert a.inverse_temperature_ == pytest.approx(b.inverse_temperature_, rel=rel)
    tight = SphereClustering(3, normalize=None, random_state=0)
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.02)
    assert tight.fit(mix.sample(3000, rng=0)).inverse_temperature_ > 1000


def test_fixed_inverse_temperature_is_used():
    X = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1).sample(300, rng=0)
    est = SphereClustering(3, inverse_temperature=7.0, anneal=False, normalize=None,
                              random_state=0).fit(X)
    assert est.inverse_temperature_ == 7.0 and np.all(est.inverse_temperature_curve_ == 7.0)


# -- estimator behaviour on real data --------------------------------------------------------
@pytest.mark.parametrize("loader", [load_iris, load_wine, load_digits])
def test_real_data_properties(loader):
    data = loader()
    X = data.data / np.linalg.norm(data.data, axis=1, keepdims=True)
    K = len(np.unique(data.target))
    with warnings.catch_warnings():  # properties, not convergence, are checked here
        warnings.simplefilter("ignore", UserWarning)
        est = SphereClustering(K, random_state=3, max_iter=40).fit(X)
        again = SphereClustering(K, random_state=3, max_iter=40).fit(X)
    assert est.cluster_centers_.shape == (K, X.shape[1])
    assert est.labels_.shape == (len(X),) and est.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(est.cluster_centers_, again.cluster_centers_)  # same fit
    # the fit's pass (working rows, chunks) against predict's float64 logits: off ties
    heads = est.cluster_centers_
    assert_same_labels(est.labels_, est.predict(X), X, heads)
    proba = est.predict_proba(X)
    # K weights e_h / S: S within (K - 1) u, each quotient u, their sum (K - 1) u
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=(K + 1) * eps())
    assert_same_labels(proba.argmax(1), est.labels_, X, heads)
    assert np.all(np.abs(est.layer_output(X) - proba @ heads) <= _out_tol(proba, heads))
    assert _risk(est, X) == pytest.approx(
        float(ac.empirical_risk(heads, X, inverse_temperature=est.inverse_temperature_)),
        rel=0, abs=_risk_tol(X, heads, est.inverse_temperature_))
    # predict on raw (unnormalized) rows equals predict on normalized rows (normalized by
    # the library's own norms: off ties)
    assert_same_labels(est.predict(data.data), est.labels_, X, heads)


def test_center_scale_preprocessing():
    X = load_iris().data
    est = SphereClustering(3, normalize="center-scale", random_state=0).fit(X)
    np.testing.assert_allclose(est.mean_, X.mean(0))
    Xn = (X - X.mean(0)) / est.scale_
    assert np.mean(np.sum(Xn**2, axis=1)) == pytest.approx(1.0)
    proba = est.predict_proba(X)
    assert np.all(np.abs(est.layer_output(X) - proba @ est.cluster_centers_)
                  <= _out_tol(proba, est.cluster_centers_))


def test_float32_matches_float64():
    mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.2)
    X = mix.sample(2000, rng=0)
    a = SphereClustering(3, normalize=None, random_state=0).fit(X)
    b = SphereClustering(3, normalize=None, random_state=0, dtype="float32", tol=1e-5).fit(X)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-3)
    assert np.mean(a.labels_ == b.labels_) > 0.999


def test_callback_receives_every_step():
    infos = []
    X = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1).sample(300, rng=0)
    est = SphereClustering(3, normalize=None, random_state=0, callback=infos.append).fit(X)
    n_stages = len(set(est.inverse_temperature_curve_))
    assert len(infos) == est.n_iter_ == len(est.loss_curve_) - n_stages
    assert [i.loss for i in infos] == pytest.approx(
        [v for i, v in enumerate(est.loss_curve_) if i not in _stage_starts(est)])


def _stage_starts(est):
    t = est.inverse_temperature_curve_
    return {0} | {i for i in range(1, len(t)) if t[i] != t[i - 1]}


# -- bad input -------------------------------------------------------------------------------
def test_zero_row_with_row_normalization_names_the_row():
    X = np.ones((10, 3))
    X[4] = 0
    with pytest.raises(ValueError, match="row 4"):
        SphereClustering(2).fit(X)
    est = SphereClustering(2, random_state=0).fit(np.abs(X) + 1e-3 * np.arange(30).reshape(10,
                                                                                              3))
    with pytest.raises(ValueError, match="row 4"):
        est.predict(X)


@pytest.mark.parametrize("bad, match", [
    (dict(n_clusters=11), "n_clusters=11"),
    (dict(n_clusters=0), "n_clusters"),
    (dict(normalize="l2"), "normalize"),
    (dict(inverse_temperature=-1.0), "inverse_temperature"),
    (dict(inverse_temperature="hot"), "inverse_temperature"),
    (dict(init=np.ones((2, 2))), "init"),
    (dict(init=None), r"init must be 'kmeans\+\+' or 'sphere' or 'anneal' or an array of "
                      r"shape \(n_clusters, n_features\), got None"),
    (dict(init=5), r"or an array of shape .*, got 5"),
    # checked before K is chosen (it was refused after, naming the n_clusters chosen)
    (dict(n_clusters="auto", init=np.eye(3)[:2] + 0.1), r"init given as 2 heads fixes K: "
                                                       r"pass n_clusters=2, not 'auto'"),
    (dict(penalty="ridge"), "penalty"),
    (dict(dtype="float16"), "dtype"),
    (dict(solver="newton"), "solver"),
    (dict(rho="a"), "rho must be a finite number >= 0, got 'a'"),
    (dict(rho=-1.0), "rho"),
    (dict(tol=None), "tol must be 'auto' or a finite number >= 0, got None"),
    (dict(n_clusters="Auto"), "n_clusters must be 'auto' or an integer >= 1, got 'Auto'"),
    (dict(max_iter=True), "max_iter must be an integer >= 1, got True"),
    (dict(max_iter=2.5), "max_iter"),
    (dict(n_clusters=True), "n_clusters"),
    (dict(batch_size=0), "batch_size"),
    (dict(chunk_size=1.5), "chunk_size must be None or an integer >= 1, got 1.5"),
    (dict(device="foo"), "device 'foo'"),
    (dict(random_state=-1), "random_state must be None, an int >= 0, a numpy Generator"),
    (dict(callback=5), "callback must be None or a callable, got 5"),
])
def test_bad_parameters(bad, match):
    X = np.random.default_rng(0).uniform(size=(10, 3)) + 0.1
    with pytest.raises(ValueError, match=match):
        SphereClustering(**{"n_clusters": 2, **bad}).fit(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_cuda_device_without_cuda_is_a_value_error():
    X = np.random.default_rng(0).uniform(size=(10, 3)) + 0.1
    with pytest.raises(ValueError, match="device 'cuda'"):
        SphereClustering(2, device="cuda").fit(X)


@pytest.mark.parametrize("factor", [1e200, 1e-200])
def test_row_normalization_survives_huge_and_tiny_rows(factor):
    # squares of 1e200 overflow and squares of 1e-200 underflow: the rows must still
    # become unit vectors, giving the fit of the unscaled data
    mix = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.1)
    X = mix.sample(300, rng=0)
    ref = SphereClustering(3, random_state=0).fit(X)
    est = SphereClustering(3, random_state=0).fit(X * factor)
    assert np.all(np.isfinite(est.cluster_centers_))
    np.testing.assert_allclose(np.linalg.norm(est.cluster_centers_, axis=1), 1.0, rtol=0,
                               atol=_unit_tol(X.shape[1]))
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, atol=1e-8)
    # the rows' norms rounded otherwise: two fits rounding apart, labels off their ties
    assert_labels_off_ties(ref.labels_, est.labels_, _log_proba(ref, X),
                           _log_proba(est, X * factor))
    assert_labels_off_ties(ref.labels_, est.predict(X * factor), _log_proba(ref, X),
                           _log_proba(est, X * factor))
    X[5] = 0.0
    with pytest.raises(ValueError, match="row 5"):
        SphereClustering(3).fit(X * factor)


def test_overflowing_rows_without_normalization_are_an_error():
    X = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.1).sample(300, rng=0)
    big = X.copy()
    big[7] *= 1e200
    with pytest.raises(ValueError, match="squared norm of row 7 .* overflows"):
        SphereClustering(3, normalize=None).fit(big)
    est = SphereClustering(3, normalize=None, random_state=0).fit(X)
    with pytest.raises(ValueError, match="row 7"):
        est.predict(big)


@pytest.mark.parametrize("far", [1e17, 1e100, 1e155])
def test_far_rows_go_to_the_head_farthest_along_their_direction(far):
    """A row ``r u`` far from the heads (``r`` 1e17 to 1e155 times their spread) is
    nearest the head of largest ``<u, mu_h>``: predict says so and predict_proba is that
    head's (product-form logits; the squared distances tied every head from 1e17 and
    overflowed at 1e155, giving head 0 and NaN)."""
    est = AttentionClustering(3, covariance_type="spherical", random_state=0).fit(
        np.random.RandomState(0).randn(300, 2))
    u = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    nearest = (u @ est.cluster_centers_.T).argmax(1)
    np.testing.assert_array_equal(est.predict(far * u), nearest)
    np.testing.assert_array_equal(est.predict_proba(far * u), np.eye(3)[nearest])


def test_a_density_that_overflows_names_the_row():
    """Densities of a row at 1e155 (its squared distance overflows float64): an error
    naming the row, where they returned inf; at 1e100, finite."""
    est = ac.AttentionClustering(3, random_state=0).fit(np.random.RandomState(0).randn(300, 2))
    far = np.array([[0.0, 1.0], [1e100, 0.0], [1e155, 0.0]])
    with pytest.raises(ValueError, match="row 2 of X is too far from the fitted heads"):
        est.score_samples(far)
    assert np.all(np.isfinite(est.score_samples(far[:2])))


def test_a_distance_whose_square_overflows_is_still_a_distance():
    """transform of rows at 1e155 and 1e300 (their squares overflow float64) is their
    distance (``math.dist`` scales as it sums: the reference), within a few roundings
    of its size; refused, naming the row, only where the distance itself overflows."""
    est = ac.AttentionClustering(3, random_state=0).fit(np.random.RandomState(0).randn(300, 2))
    far = np.array([[0.0, 1.0], [1e155, -3e154], [-1e300, 1e300]])
    reference = [[math.dist(x, mu) for mu in est.cluster_centers_] for x in far]
    # roundings relative to the distance: the differences, their scaling, the squares,
    # the sum of d = 2, the square root and the product (6), math.dist's result (1)
    np.testing.assert_allclose(est.transform(far), reference, rtol=7 * eps(), atol=0)
    with pytest.raises(ValueError, match="row 1 of X is too far from the fitted heads"):
        est.transform([[0.0, 0.0], [1.5e308, 1.5e308]])
    # kept in float32, a distance past its range is refused alike (it was inf, with
    # NumPy's cast warning)
    est32 = ac.AttentionClustering(3, random_state=0).fit(
        np.random.RandomState(0).randn(300, 2).astype(np.float32))
    with pytest.raises(ValueError, match="overflow float64 or X's float32"):
        est32.transform(np.array([[0.0, 0.0], [3e38, 3e38]], dtype=np.float32))


def test_a_label_whose_logits_overflow_is_refused_not_head_0():
    """Diagonal heads and a row at 1e155 (its Mahalanobis distance overflows), or a
    given lambda of 1e250 and a row at 1e60 (the logits overflow): every logit is -inf
    or +inf and predict returned head 0; it raises as predict_proba does. With a noise
    head such a row is noise (-1)."""
    X = np.r_[np.random.RandomState(0).randn(300, 2), np.random.RandomState(1).randn(300, 2)
              + [6.0, 0.0]]
    shaped = AttentionClustering(2, covariance_type="diag", random_state=0).fit(X)
    assert shaped.predict([[1e150, 0.0]]).tolist() == shaped.predict([[1e150, 1.0]]).tolist()
    big = AttentionClustering(2, covariance_type="spherical", inverse_temperature=1e250,
                              random_state=0).fit(X)
    for est, row in ((shaped, [1e155, 0.0]), (big, [1e60, 1e60])):
        with pytest.raises(ValueError, match="row 1 of X is too far from the fitted heads"):
            est.predict([[0.0, 0.0], row])
    noisy = AttentionClustering(2, noise_head=True, random_state=0).fit(X)
    assert noisy.predict([[1e155, 0.0]]).tolist() == [-1]


def test_center_scale_is_scale_invariant_even_when_squares_overflow():
    X = load_iris().data
    ref = SphereClustering(3, normalize="center-scale", random_state=0).fit(X)
    est = SphereClustering(3, normalize="center-scale", random_state=0).fit(X * 1e200)
    assert np.isfinite(est.scale_) and est.scale_ == pytest.approx(1e200 * ref.scale_)
    np.testing.assert_allclose(np.linalg.norm(est.cluster_centers_, axis=1), 1.0, rtol=0,
                               atol=_unit_tol(X.shape[1]))
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, atol=1e-8)
    # centre and scale rounded otherwise: labels off the two fits' ties
    assert_labels_off_ties(ref.labels_, est.labels_, _log_proba(ref, X),
                           _log_proba(est, X * 1e200))
    # the column sums of 150 rows of ~1e307 overflow: no mean, an error
    with pytest.raises(ValueError, match="overflow"):
        SphereClustering(3, normalize="center-scale").fit(X * 1e306)


def test_nan_and_wrong_features():
    X = np.random.default_rng(0).uniform(size=(20, 3)) + 0.1
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SphereClustering(2).fit(bad)
    est = SphereClustering(2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="3 features"):
        est.predict(X[:, :2])


def test_off_scale_rows_warn_without_normalization():
    X = 10 * load_iris().data
    with pytest.warns(UserWarning, match="mean squared norm"):
        SphereClustering(3, normalize=None, random_state=0).fit(X)


# -- scikit-learn's estimator checks --------------------------------------------------------
_DTYPES_REASON = ("integer data with an all-zero row cannot be row-normalized (no direction); "
                  "the same check passes with normalize='center-scale'")


_WEIGHTS_REASON = ("k-means++ draws its seeds among the rows, so repeated rows change the "
                   "draws, as for scikit-learn's KMeans (which fails this check too); from the "
                   "same initial heads, weights and repeated rows give the same fit "
                   "(test_sample_weight.py)")


@parametrize_with_checks(
    # few steps: these checks test the API, the other tests test convergence
    [AttentionClustering(max_iter=20), SphereClustering(max_iter=20),
     SphereClustering(normalize="center-scale", max_iter=20)],
    expected_failed_checks=lambda est: {
        **({"check_estimators_dtypes": _DTYPES_REASON}
           if resolve(est.get_params()).normalize == "rows" else {}),
        "check_sample_weight_equivalence_on_dense_data": _WEIGHTS_REASON},
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ConvergenceWarning)  # tiny data, 20 steps
        check(estimator)


# -- geometry="sphere" is the previous release's estimator -------------------------------------
def test_sphere_reproduces_the_previous_release_exactly():
    """Reference values computed with the 0.1.0 estimator (unit heads, then the default).

    They come from another machine, so they are another computation: not exact. lambda is
    1 / s^2 with s^2 a variance within a cell of the rows' projections p on the heads,
    from E[p^2] - E[p]^2: its rounding is the sum's (n eps) times the cancellation kappa
    = E[p^2] / Var(p) (about 1.3e6 here: computed below), about 4e-8 relative; the heads
    (weighted means of unit rows, smooth in lambda) and the loss move about as much. That
    still catches a change of lambda's formula (n - 1 for n: 7e-3) by orders.
    """
    X = load_iris().data
    est = SphereClustering(3, random_state=0).fit(X)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    p = unit @ est.cluster_centers_.T
    kappa = max(np.max(np.mean(p[est.labels_ == h] ** 2, 0) / np.var(p[est.labels_ == h], 0))
                for h in range(3))
    rel = 4 * kappa * sum_tol(len(X))
    assert rel < 1e-6                                    # still a sharp reference
    assert est.inverse_temperature_ == pytest.approx(1365.8652055302155, rel=rel)
    assert est.n_iter_ == 22
    assert est.loss_curve_[-1] == pytest.approx(0.002016988362841327, rel=rel)
    np.testing.assert_allclose(est.cluster_centers_, [
        [0.751453843959, 0.350728964257, 0.533397256175, 0.166714369915],
        [0.802018103953, 0.547869191512, 0.234665762823, 0.039221036227],
        [0.7017429649, 0.31733838476, 0.599113017841, 0.218898955284]], rtol=0, atol=rel)


# -- Euclidean heads (the default) ------------------------------------------------------------
def _blobs(centers, n=300, std=1.0, seed=0):
    gen = np.random.default_rng(seed)
    centers = np.asarray(centers, dtype=float)
    X = np.concatenate([c + std * gen.standard_normal((n, centers.shape[1])) for c in centers])
    return X, np.repeat(np.arange(len(centers)), n)


@pytest.mark.parametrize("name, centers", [
    ("two blobs on one ray", [[2.0, 2.0], [6.0, 6.0]]),
    ("a central cluster among others", [[0, 0], [6, 0], [-6, 0], [0, 6], [0, -6]]),
    ("blobs around and at the origin", [[0, 0, 0], [4, 0, 0], [0, 4, 0], [0, 0, 4]]),
])
def test_default_clusters_cells_not_cones(name, centers):
    """What clustering directions from the origin gets wrong, the default gets right."""
    X, y = _blobs(centers, std=0.6)
    X[0] = 0.0                                 # a row at the origin is no error
    est = AttentionClustering(len(centers), random_state=0).fit(X)
    assert est.geometry == "euclidean" and est._plan.normalize is None
    assert ac.adjusted_rand_index(y, est.labels_) > 0.98
    assert ac.centroid_distance(est.cluster_centers_, centers).max < 0.15


def test_euclidean_fit_is_translation_and_scale_equivariant():
    X, _ = _blobs([[0, 0], [5, 1], [1, 5]], seed=1)
    ref = AttentionClustering(3, random_state=0).fit(X)
    moved = AttentionClustering(3, random_state=0).fit(1e-3 * X + 1e6)
    # 1e-3 x + 1e6 is rounded to ulp(1e6) / 2 = 6e-11: the rows, and the heads (their
    # means), move by a few of those; labels may differ only within that of a tie
    assert_same_labels(moved.labels_, ref.labels_, 1e-3 * X + 1e6, moved.cluster_centers_)
    # the default's heads are its cells' means (recomputed, not accumulated): each side's
    # rows and its map 1e-3 mu + 1e6 round by ulp(1e6) / 2, the cells' sums by n eps of
    # the centred rows (1e-3 of ref's)
    Xc = 1e-3 * (X - X.mean(0))
    atol = 2 * np.spacing(1e6) + 4 * sum_tol(len(X)) * float(np.abs(Xc).max())
    np.testing.assert_allclose(moved.cluster_centers_, 1e-3 * ref.cluster_centers_ + 1e6,
                               rtol=0, atol=atol)
    assert moved.inverse_temperature_ == pytest.approx(ref.inverse_temperature_ * 1e6, rel=1e-6)
    assert_same_labels(moved.predict(1e-3 * X + 1e6), ref.labels_, 1e-3 * X + 1e6,
                       moved.cluster_centers_)
    np.testing.assert_allclose(moved.predict_proba(1e-3 * X + 1e6), ref.predict_proba(X),
                               atol=1e-6)


@pytest.mark.parametrize("given", [False, True])
def test_euclidean_estimator_outputs_are_the_layer(given):
    """The fitted estimator is the layer at its heads and inverse temperature, whichever way
    the fit ended (the default's hard limit, or the soft fit at a given lambda)."""
    X, _ = _blobs([[0, 0], [3, 1], [1, 3]], seed=2)
    est = AttentionClustering(3, random_state=0,
                              inverse_temperature=0.8 if given else "auto").fit(X)
    layer = ac.AttentionHeads(est.cluster_centers_, est.inverse_temperature_, geometry="euclidean")
    out = layer(torch.as_tensor(X)).detach().numpy()
    # the estimator's logits (centred on the heads' mean) against the layer's (the rows as
    # given): each weight within 2 a_h times their difference, plus the softmax's (K + 2)
    # eps and eps |s_h - max s| of a far head's small weight (relative)
    heads, lam = est.cluster_centers_, est.inverse_temperature_
    logit_tol = _euclidean_logit_tol(X, heads, lam)[:, None]
    logits = -lam / 2 * ((X[:, None] - heads[None]) ** 2).sum(-1)
    rel = 2 * logit_tol + (len(heads) + 2) * eps() + 2 * eps() * (
        logits.max(1, keepdims=True) - logits)
    proba = est.predict_proba(X)
    ref = layer.weights(torch.as_tensor(X)).detach().numpy()
    assert np.all(np.abs(proba - ref) <= rel * ref)
    # the outputs, means of the heads: the weights' moves times max |mu|, K eps of the sum
    out_tol = (rel * ref).sum(1) * np.abs(heads).max() + _out_tol(proba, heads).max(1)
    assert np.all(np.abs(est.layer_output(X) - out).max(1) <= out_tol)
    assert_same_labels(proba.argmax(1), est.labels_, X, heads)    # the fit's pass: off ties
    assert_same_labels(est.predict(X), est.labels_, X, heads)
    # squared errors: 2 |x - T| times T's move, the mean sum_tol of them
    err = np.sum((X - out) ** 2, 1)
    assert _risk(est, X) == pytest.approx(np.mean(err), rel=0, abs=float(np.mean(
        2 * np.sqrt(err) * out_tol + X.shape[1] * eps() * err)) + sum_tol(len(X)) * err.mean())
    if given:   # the soft fit's curve ends at the fitted layer's risk
        assert est.loss_curve_[-1] == pytest.approx(_risk(est, X), rel=1e-8)
    assert est.converged_


def test_euclidean_fit_is_stationary_for_the_risk_in_the_data_space():
    """A given inverse temperature fits the soft layer: its heads are a stationary point of
    the risk at that lambda, in the data's units."""
    X, _ = _blobs([[0, 0], [2.5, 0], [0, 2.5]], seed=3)   # overlapping: soft attention
    lam = AttentionClustering(3, random_state=0).fit(X).inverse_temperature_
    est = AttentionClustering(3, inverse_temperature=lam, random_state=0, tol=1e-10,
                              max_iter=2000).fit(X)
    h = torch.as_tensor(est.cluster_centers_).requires_grad_(True)
    Xt = torch.as_tensor(X)
    risk = ((Xt - ac.attention_heads(Xt, h, inverse_temperature=lam,
                                     geometry="euclidean"))**2).sum(1)
    (g,) = torch.autograd.grad(risk.mean(), h)
    assert float(g.norm()) < 1e-7


def _cell_means(X, centers):
    labels = np.argmin(((X[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
    return np.stack([X[labels == h].mean(0) for h in range(len(centers))])


@pytest.mark.parametrize("sample", [None, 300])
def test_default_ends_at_a_fixed_point_of_the_hard_limit(sample):
    """The default's heads are a stable k-means partition's means: the fixed point of the
    layer's step as lambda -> infinity (the gradient of the k-means risk vanishes), on
    all rows whether or not they fit in the warm-start sample; its loss curve (the k-means
    objective over the passes) never increases."""
    settings = None if sample is None else FitSettings(warm_sample=sample)
    X, _ = _blobs([[0, 0], [2.5, 0], [0, 2.5]], n=400, seed=7)   # overlapping
    est = AttentionClustering(3, random_state=0, settings=settings).fit(X)
    # the stopping rule is scikit-learn's: squared moves at most 1e-4 of the mean variance
    grad = 2 * (est.cluster_centers_ - _cell_means(X, est.cluster_centers_))
    assert np.abs(grad).max() < 0.05 * X.std()
    # predict's float64 logits against the fit's pass: off rounding ties
    assert_same_labels(est.predict(X), est.labels_, X, est.cluster_centers_)
    assert np.all(np.diff(est.loss_curve_) <= 1e-12 * est.loss_curve_[0])
    assert est.converged_


def test_sample_and_passes_give_the_fit_on_every_row():
    """Fitted on a sample then by passes over all rows, or on every row at once (the
    small-data path): the same Lloyd fixed point of all rows, to rounding, on clusters
    whose partition both paths reach exactly."""
    X, y = _blobs([[0, 0], [8, 0], [0, 8], [8, 8]], n=300, seed=8)
    whole = AttentionClustering(4, random_state=0).fit(X)
    sampled = AttentionClustering(4, random_state=0,
                                  settings=FitSettings(warm_sample=500)).fit(X)
    assert ac.adjusted_rand_index(y, sampled.labels_) == 1.0
    assert ac.adjusted_rand_index(whole.labels_, sampled.labels_) == 1.0
    match = [int(np.argmin(np.linalg.norm(whole.cluster_centers_ - c, axis=1)))
             for c in sampled.cluster_centers_]
    # the same partition (blobs 8 apart), its cells' means summed in other orders (the
    # passes' chunks, NumPy): n eps of the largest coordinate for the sum, as much for the
    # division and the map out of the working space (eps (|mu - m| + |mu|))
    tol = (2 * sum_tol(len(X)) + 4 * eps()) * float(np.abs(X).max())
    np.testing.assert_allclose(sampled.cluster_centers_, whole.cluster_centers_[match],
                               rtol=0, atol=tol)
    np.testing.assert_allclose(whole.cluster_centers_, _cell_means(X, whole.cluster_centers_),
                               rtol=0, atol=tol)


def test_the_default_is_never_worse_than_its_kmeans_warm_start():
    """The end is never above the warm start's k-means objective of the working rows (the
    best of the plan's seedings, recomputed here from the same seed), and with many heads
    the swaps lower it where the seedings left two heads in one blob."""
    from attnclust.cluster.kmeans import best_of_seedings
    from attnclust.cluster.plan import resolve

    centres = [[4.0 * (i % 6), 4.0 * (i // 6)] for i in range(36)]   # touching blobs
    X, _ = _blobs(centres, n=20, seed=9)
    spread = np.sqrt(np.mean(np.sum((X - X.mean(0)) ** 2, 1)))
    working = (X - X.mean(0)) / spread
    ratios = []
    for seed in range(3):
        est = AttentionClustering(36, random_state=seed).fit(X)
        inertia = float(np.sum((X - est.cluster_centers_[est.labels_]) ** 2))
        start = best_of_seedings(working, 36, resolve(est.get_params()).n_init,
                                 np.random.default_rng(np.random.default_rng(seed)
                                                       .integers(2**31 - 1)))
        ratios.append(inertia / (start.objective * len(X) * spread**2))
    assert max(ratios) <= 1 + 1e-9
    assert min(ratios) < 0.99


def test_float32_data_is_fitted_in_float32():
    X, y = _blobs([[0, 0], [4, 0], [0, 4]], seed=4)
    a = AttentionClustering(3, random_state=0).fit(X)
    b = AttentionClustering(3, random_state=0).fit(X.astype(np.float32))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-4)
    assert np.mean(a.labels_ == b.labels_) > 0.999


def test_fitted_arrays_that_overflow_float32_are_refused():
    """float32 rows at 1e20 (finite): the covariances, 1e40, overflow float32; the fit
    says so rather than keep infinite covariances, and leaves the estimator unfitted."""
    X, _ = _blobs([[0, 0], [4, 0], [0, 4]], seed=4)
    refused = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"the fitted covariances_ overflow float32 \(at "
                                         r"most 3.4e\+38\): pass float64 rows"):
        refused.fit((X * 1e20).astype(np.float32))
    with pytest.raises(NotFittedError):            # neither this fit nor the earlier one
        refused.predict(X)
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X * 1e20)
    assert np.isfinite(est.covariances_).all() and est.covariances_.dtype == np.float64


def test_tensor_that_requires_grad_is_accepted():
    X, _ = _blobs([[0, 0], [4, 0]], seed=5)
    t = torch.as_tensor(X).requires_grad_(True)
    est = AttentionClustering(2, random_state=0).fit(t)
    assert_same_labels(est.predict(t), est.labels_, X, est.cluster_centers_)  # off ties


# -- no silent failure --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_opposite_sphere_heads_get_a_sensible_inverse_temperature(seed):
    """K = 2 centred blobs at (+-3, 0): spherical Lloyd ends with exactly opposite heads;
    lambda used to be rounding noise (1e-292 .. 1e6) and the fit silently one cluster."""
    X, y = _blobs([[3.0, 0.0], [-3.0, 0.0]], n=500, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        est = SphereClustering(2, normalize="center-scale", random_state=seed).fit(X)
    assert 0.5 < est.inverse_temperature_ < 100
    assert ac.adjusted_rand_index(y, est.labels_) > 0.95


def test_uniform_attention_warns():
    """At a tiny inverse temperature the risk pins down only the mean of the heads: a warning."""
    X, _ = _blobs([[3.0, 0.0], [-3.0, 0.0]], n=200)
    for est in (AttentionClustering(2, inverse_temperature=1e-292, random_state=0),
                SphereClustering(2, inverse_temperature=1e-292, normalize="center-scale",
                                 random_state=0),
                AttentionClustering(2, inverse_temperature=1e-3, random_state=0)):
        with pytest.warns(DegenerateFitWarning, match="nearly uniform"):
            est.fit(X)
        # the attention weights tie to rounding there, the logits do not: labels_ is
        # predict's argmax of the logits (it was the first of the tied weights)
        np.testing.assert_array_equal(est.labels_, est.predict(X))


@pytest.mark.parametrize("loader", [load_iris, load_wine, load_digits])
def test_auto_inverse_temperature_stays_clear_of_uniform_attention(loader):
    X, y = loader(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        est = AttentionClustering(len(np.unique(y)), random_state=0).fit(X)
    assert est.predict_proba(X).max(1).mean() > 0.85
    assert est.converged_


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_equal_rows_cap_lambda_and_warn_consistently(geometry, k):
    """All rows equal: lambda is the cap, 1e12 (it was 1 / float64's tiny, 4.49e307), and
    the warnings agree: the cap and dead heads, never "raise inverse_temperature"."""
    X = np.tile([[1.0, 2.0]], (50, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = AttentionClustering(k, geometry=geometry, random_state=0).fit(X)
    messages = [str(w.message) for w in caught]
    # the cap over a mean of 50 equal squared norms (1 on the sphere): its sum's rounding
    assert est.inverse_temperature_ == pytest.approx(1e12, rel=sum_tol(len(X)) + 4 * eps())
    assert any("at its cap" in m for m in messages)
    assert not any("raise inverse_temperature" in m for m in messages)
    assert sum("win no row" in m for m in messages) == (k > 1)
    np.testing.assert_array_equal(est.labels_, 0)


def test_dead_head_warns():
    X, _ = _blobs([[0.0, 0.0], [5.0, 0.0]], n=100)
    init = np.array([[0.0, 0.0], [5.0, 0.0], [1e3, 1e3]])     # a head far from every row
    with pytest.warns(DegenerateFitWarning, match=r"head\(s\) \[2\] win no row"):
        AttentionClustering(3, init=init, random_state=0).fit(X)


def test_clusters_without_spread_warn_that_lambda_is_capped():
    X = np.repeat([[0.0, 0.0], [1.0, 2.0], [4.0, 0.0]], 50, axis=0)
    with pytest.warns(DegenerateFitWarning, match="at its cap"):
        est = AttentionClustering(3, random_state=0).fit(X)
    assert ac.adjusted_rand_index(np.repeat([0, 1, 2], 50), est.labels_) == 1.0


def test_non_convergence_is_a_convergence_warning():
    X, _ = _blobs([[0, 0], [2, 0], [0, 2]], seed=6)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        AttentionClustering(3, max_iter=1, tol=0.0, random_state=0).fit(X)


@pytest.mark.parametrize("bad, match", [
    (dict(geometry="hyperbolic"), "geometry"),
    (dict(penalty="repulsion"), "geometry='sphere'"),
    (dict(solver="pgd"), "geometry='sphere'"),
    (dict(n_init=0), "n_init"),
    (dict(anneal="sometimes"), "anneal"),
])
def test_bad_euclidean_parameters(bad, match):
    X = np.random.default_rng(0).uniform(size=(10, 3))
    with pytest.raises(ValueError, match=match):
        AttentionClustering(2, **bad).fit(X)


@pytest.mark.parametrize("factor", [1e300, 1e-300])
def test_data_whose_inverse_temperature_float64_cannot_hold_is_a_clear_error(factor):
    X, _ = _blobs([[0.0, 0.0], [5.0, 0.0]], n=50)
    with pytest.raises(ValueError, match="out of float64's range; rescale"):
        AttentionClustering(2, random_state=0).fit(X * factor)
    est = AttentionClustering(2, random_state=0).fit(X * factor**0.5)   # 1e150: fine
    assert np.isfinite(est.inverse_temperature_) and est.inverse_temperature_ > 0


def test_an_outlier_does_not_cap_the_inverse_temperature():
    """One far outlier dominates the data's spread; the clusters' own spread still counts."""
    X, _ = _blobs([[0.0, 0.0], [5.0, 0.0]], n=200)
    X = np.vstack([X, [[1e6, 1e6]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        est = AttentionClustering(3, random_state=0).fit(X)
    assert 0.3 < est.inverse_temperature_ < 3          # about 1 / (unit spread)


def test_warnings_point_at_the_callers_line():
    """Also the checks run many frames deep (a shaped fit's floor, the noise head's), and
    through fit_predict and scikit-learn's fit_transform."""
    X, _ = _blobs([[3.0, 0.0], [-3.0, 0.0]], n=100)
    cells = np.c_[np.repeat([0.0, 1.0], 100), np.zeros(200)]    # a shaped head at the floor
    cases = [(X, dict(inverse_temperature=1e-9)), (cells, dict(covariance_type="diag")),
             (cells, dict(noise_head=True))]
    for rows, kw in cases:
        for call in ("fit", "fit_predict", "fit_transform"):
            with pytest.warns(DegenerateFitWarning) as record:
                getattr(AttentionClustering(2, random_state=0, **kw), call)(rows)
            assert {w.filename for w in record} == {__file__}, (kw, call)


def test_more_rows_than_the_sample_fit_all_rows():
    """Above the warm-start sample the soft fit at a given lambda ends with steps over all
    rows: a stationary point of the full-data risk, whose loss curve never increases."""
    small = FitSettings(warm_sample=300)
    X, y = _blobs([[0, 0], [2.5, 0], [0, 2.5]], n=400, seed=7)
    lam = AttentionClustering(3, random_state=0, settings=small).fit(X).inverse_temperature_
    est = AttentionClustering(3, inverse_temperature=lam, random_state=0, tol=1e-10,
                              max_iter=2000, settings=small).fit(X)
    assert np.all(np.diff(est.loss_curve_) <= 1e-12 * est.loss_curve_[0])
    assert est.loss_curve_[-1] == pytest.approx(_risk(est, X), rel=1e-8)
    h = torch.as_tensor(est.cluster_centers_).requires_grad_(True)
    Xt = torch.as_tensor(X)
    out = ac.attention_heads(Xt, h, inverse_temperature=est.inverse_temperature_,
                             geometry="euclidean")
    (g,) = torch.autograd.grad(((Xt - out) ** 2).sum(1).mean(), h)
    assert float(g.norm()) < 1e-7


def test_callback_heads_are_in_the_data_units():
    """The estimator's callback sees the iterates as ``cluster_centers_`` will be: mapped
    back from the centred, unit-RMS rows of the fit, with shifts and losses to match."""
    X = 50.0 + 7.0 * ac.GaussianMixture.orthogonal(d=4, k=3, sigma=0.2).sample(500, rng=1)
    infos = []
    est = ac.AttentionClustering(3, inverse_temperature=0.5, random_state=0,
                                 callback=infos.append).fit(X)
    # the last report's heads are the fit's, mapped out by the same elementwise scale and
    # shift: the same bits
    np.testing.assert_array_equal(infos[-1].heads.numpy(), est.cluster_centers_)
    path = np.stack([i.heads.numpy() for i in infos])
    moved = np.linalg.norm(np.diff(path, axis=0), axis=-1).max(-1)
    # the working shift times s against the mapped heads' differences: each mapped
    # coordinate rounds by eps (|mu - m| + |mu|) <= 3 eps max|x| (heads and mean within
    # the rows' range), two of them in a difference of d coordinates; absolute, as the last
    # moves are near 0; and the norms' own rounding
    shifts = np.array([i.shift for i in infos[1:]])
    d = X.shape[1]
    atol = 2 * 3 * eps() * float(np.abs(X).max()) * np.sqrt(d)
    assert np.all(np.abs(shifts - moved) <= atol + (sum_tol(d) + 2 * eps()) * moved)
    # the same risk mapped out as (l s) s for the callback and l (s s) for the curve: two
    # roundings each way
    assert infos[-1].loss == pytest.approx(est.loss_curve_[-1], rel=2 * eps())


def test_the_callback_sees_the_passes_over_all_rows():
    """Above the sample the default reports the sample's k-means partition, then each pass
    over all rows (at an infinite inverse temperature: the hard limit), whose k-means
    objectives are the loss curve: progress for the command line's bar."""
    X, _ = _blobs([[0, 0], [2.5, 0], [0, 2.5]], n=400, seed=11)
    infos = []
    est = AttentionClustering(3, random_state=0, callback=infos.append,
                              settings=FitSettings(warm_sample=300)).fit(X)
    assert len(infos) >= 2 and all(i.inverse_temperature == np.inf for i in infos)
    assert [i.iteration for i in infos] == sorted(i.iteration for i in infos)
    assert infos[-1].iteration <= est.n_iter_
    # the same heads mapped out by the same operations: the same bits
    np.testing.assert_array_equal(infos[-1].heads.numpy(), est.cluster_centers_)
    # the passes' objectives, mapped out as (l s) s for the callback and l (s s) for the
    # curve (two roundings each way); the curve's last entry is the objective recomputed
    # from the final heads and labels, the callback's the last pass's own
    losses = np.array([i.loss for i in infos[1:]])
    np.testing.assert_allclose(losses[:-1], est.loss_curve_[:-1], rtol=2 * eps(), atol=0)
    assert losses[-1] == pytest.approx(est.loss_curve_[-1], rel=2 * eps(), abs=objective_tol(
        X, est.cluster_centers_, est.labels_))
    inertia = np.mean(np.sum((X - est.cluster_centers_[est.labels_]) ** 2, 1))
    # updated step by step, from distances of one product, against recomputed
    assert est.loss_curve_[-1] == pytest.approx(inertia, rel=0, abs=objective_tol(
        X, est.cluster_centers_, est.labels_, steps=len(est.loss_curve_)))
    assert np.all(est.inverse_temperature_curve_ == np.inf)


def test_few_heads_on_a_sample_keep_ten_seedings():
    """Above the warm-start sample's size, a fit with fewer heads than the swaps need keeps
    ten seedings on the sample: one seeding (the rule for many heads) left 6 of 10 seeds
    7-15% above KMeans(n_init=10)'s objective on unbalanced clusters just past 20,000
    rows; here the threshold is lowered to keep the test small (ten seedings: within
    1.2% on every seed; one: 6 of 10 seeds 7-16% above)."""
    rng = np.random.default_rng(2)
    centres, share = rng.uniform(-10, 10, (8, 2)), np.array([8, 4, 2, 2, 1, 1, 1, 1]) / 20
    X = centres[rng.choice(8, 5000, p=share)] + rng.normal(size=(5000, 2))
    best = KMeans(8, n_init=10, random_state=0).fit(X).inertia_ / len(X)
    for seed in range(10):
        fit = AttentionClustering(8, random_state=seed,
                                  settings=FitSettings(warm_sample=1000)).fit(X)
        objective = ((X - fit.cluster_centers_[fit.labels_]) ** 2).sum(1).mean()
        assert objective <= 1.03 * best


@pytest.mark.parametrize("shaped", [False, True])
def test_every_method_takes_rows_in_any_memory_layout(shaped):
    """Reversed (negative strides), strided and Fortran-order rows give what their
    contiguous copy gives (torch refuses negative strides: predict raised on X[::-1])."""
    X = np.random.default_rng(0).normal(size=(200, 3)) + np.repeat(np.eye(3) * 4, [70, 70, 60], 0)
    fit = AttentionClustering(3, random_state=0,
                              covariance_type="full" if shaped else "spherical").fit(X)
    layouts = {"reversed": X[::-1], "columns reversed": np.ascontiguousarray(X[:, ::-1])[:, ::-1],
               "every other row": X[::2], "fortran": np.asfortranarray(X)}
    assert layouts["columns reversed"].strides[1] < 0
    for name, Y in layouts.items():
        # exact: every method copies its rows to C order first (the same computation)
        copy = np.ascontiguousarray(Y)
        np.testing.assert_array_equal(fit.predict(Y), fit.predict(copy), err_msg=name)
        np.testing.assert_array_equal(fit.predict_proba(Y), fit.predict_proba(copy))
        np.testing.assert_array_equal(fit.transform(Y), fit.transform(copy))
        np.testing.assert_array_equal(fit.layer_output(Y), fit.layer_output(copy))
        np.testing.assert_array_equal(fit.score_samples(Y), fit.score_samples(copy))
        assert fit.score(Y) == fit.score(copy)


def test_predict_is_labels_beside_a_far_row():
    """A row at 1e9 beside two blobs near 0: the "auto" lambda is then small in the
    data's units, the attention of the two blobs' heads equal to rounding, and predict
    (the highest logit, from exact distances) must still be labels_, the nearest head
    (it differed on 3 rows)."""
    gen = np.random.default_rng(0)
    X = np.vstack([gen.normal(size=(100, 2)), gen.normal(size=(100, 2)) + 6, [[1e9, 0]]])
    fit = AttentionClustering(3, random_state=0).fit(X)
    nearest = ((X[:, None] - fit.cluster_centers_[None]) ** 2).sum(-1).argmin(1)
    assert_same_labels(fit.labels_, nearest, X, fit.cluster_centers_)
    assert_same_labels(fit.predict(X), fit.labels_, X, fit.cluster_centers_)


def test_a_legacy_random_state_seeds_the_fit():
    """scikit-learn's random_state may be a RandomState: the same state, the same fit."""
    X = np.random.default_rng(0).normal(size=(200, 2)) + np.repeat([[0, 0], [5, 5]], 100, 0)
    fits = [AttentionClustering(2, random_state=np.random.RandomState(7)).fit(X)
            for _ in range(2)]
    np.testing.assert_array_equal(fits[0].cluster_centers_, fits[1].cluster_centers_)


def test_set_output_wraps_transform_as_fit_transform():
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).normal(size=(60, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    est = AttentionClustering(3, random_state=0).set_output(transform="pandas")
    fitted = est.fit_transform(frame)
    out = est.transform(frame)
    assert isinstance(out, pd.DataFrame) and isinstance(fitted, pd.DataFrame)
    assert list(out.columns) == list(est.get_feature_names_out())
    np.testing.assert_array_equal(out.to_numpy(), fitted.to_numpy())
    plain = AttentionClustering(3, random_state=0).fit(frame).transform(frame)
    assert isinstance(plain, np.ndarray)


@pytest.mark.parametrize("params, message", [
    (dict(inverse_temperature="2"), "inverse_temperature must be 'auto' or a positive number"),
    (dict(verbose="loud"), "verbose must be True or False or an integer >= 0"),
    (dict(verbose=None), "verbose must be"),
])
def test_strings_and_none_that_are_no_setting(params, message):
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ValueError, match=message):
        AttentionClustering(2, **params).fit(X)

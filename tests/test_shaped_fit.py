"""Tests of :mod:`attnclust.cluster.mixture.tempered`: tempered EM for shaped heads."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from _tolerance import eps, sum_tol
from attnclust import DegenerateFitWarning
from attnclust.cluster.mixture.shaped import shaped_weights
from attnclust.cluster.mixture.tempered import shaped_fit, tempered_log_joint, tempered_objective

K = 3
TYPES = ["full", "diag", "spherical"]


def _data(n=150, seed=0):
    """Tilted, elongated and unequal clusters in 3-D."""
    rng = np.random.default_rng(seed)
    tilt = np.array([[3.0, 0.0, 0.0], [2.5, 0.4, 0.0], [0.0, 0.0, 0.7]])
    return np.concatenate([rng.standard_normal((n, 3)) @ tilt,
                           rng.standard_normal((n, 3)) * [0.5, 2.0, 1.0] + [1.0, 5.0, 0.0],
                           rng.standard_normal((n // 2, 3)) + [-5.0, 3.0, 1.0]])


def _start(X, cov_type, seed=0):
    rng = np.random.default_rng(seed)
    means = X[rng.choice(len(X), K, replace=False)]
    d = X.shape[1]
    covs = {"full": np.stack([np.eye(d) * (1 + k) for k in range(K)]),
            "diag": np.ones((K, d)) * np.arange(1.0, K + 1)[:, None],
            "spherical": np.arange(1.0, K + 1)}[cov_type]
    return means, covs, np.array([0.5, 0.3, 0.2])


def _sklearn(X, cov_type, start, **kw):
    means, covs, w = start
    prec = np.linalg.inv(covs) if cov_type == "full" else 1.0 / covs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(K, covariance_type=cov_type, means_init=means, weights_init=w,
                               precisions_init=prec, reg_covar=0.0, **kw).fit(X)


def _kappa(covs, cov_type):
    """Largest condition number of the heads' covariances (1 for spherical ones)."""
    covs = np.asarray(covs)
    if cov_type == "full":
        return float(np.linalg.cond(covs).max())
    return float((covs.max(-1) / covs.min(-1)).max()) if cov_type == "diag" else 1.0


def _em_tol(X, steps, kappa):
    """Relative difference allowed between two computations of ``steps`` EM steps (another
    library, chunking, summation order): each step sums ``n`` rows (``sum_tol(n)``) and
    factors ``d x d`` covariances (``d^2`` roundings), both amplified by the covariances'
    condition ``kappa`` (the log-densities go through their inverses); the steps' errors
    add. Scaled by the size of each parameter's terms (``max |x|`` for the means,
    ``max |x|^2`` for the covariances, ``kappa`` times the factor for precisions)."""
    n, d = np.shape(X)
    return max(steps, 1) * (n + d * d) * eps() * kappa


def _row_scale(X, res, lam, cov_type):
    """Mean of the rows' terms ``|(1/lambda) log sum_h exp(lambda l~_h(x))|`` and their
    log-joints' size: what the objective's mean over rows sums."""
    logits = tempered_log_joint(torch.as_tensor(X), res.means, res.precisions_cholesky,
                                res.weights.log(), inverse_temperature=lam,
                                covariance_type=cov_type, floor=res.floor)
    return float(logits.abs().amax(-1).mean())


def _ours(X, cov_type, start, **kw):
    means, covs, w = (torch.as_tensor(a) for a in start)
    return shaped_fit(torch.as_tensor(X), means, covariance_type=cov_type, covariances0=covs,
                      weights0=w, **kw)


@pytest.mark.parametrize("cov_type", TYPES)
@pytest.mark.parametrize("steps", [1, 4, 12])
def test_lambda_one_is_scikit_learns_em_step_for_step(cov_type, steps):
    X = _data()
    start = _start(X, cov_type)
    gm = _sklearn(X, cov_type, start, max_iter=steps, tol=0.0)
    res = _ours(X, cov_type, start, n_steps=steps, tol=0.0, reg_covar=0.0)
    assert res.n_iter == steps
    kappa = max(_kappa(gm.covariances_, cov_type), _kappa(start[1], cov_type))
    tol, big = _em_tol(X, steps, kappa), np.abs(X).max()  # means near 0: absolute
    np.testing.assert_allclose(res.means.numpy(), gm.means_, rtol=0, atol=tol * big)
    np.testing.assert_allclose(res.covariances.numpy(), gm.covariances_, rtol=0,
                               atol=tol * big**2)
    np.testing.assert_allclose(res.weights.numpy(), gm.weights_, rtol=0, atol=tol)
    np.testing.assert_allclose(res.precisions_cholesky.numpy(), gm.precisions_cholesky_,
                               rtol=0, atol=tol * kappa * np.abs(gm.precisions_cholesky_).max())
    # the objective at the final parameters is minus scikit-learn's mean log-likelihood:
    # the parameters' difference moves each row's log-density by about tol (kappa
    # included), and the mean of n of them rounds
    scale = _row_scale(X, res, 1.0, cov_type)
    assert abs(res.loss_curve[-1] + gm.score(X)) < (tol + sum_tol(len(X))) * scale


@pytest.mark.parametrize("cov_type", TYPES)
def test_converged_fixed_point_is_scikit_learns(cov_type):
    X = _data(seed=1)
    start = _start(X, cov_type, seed=1)
    gm = _sklearn(X, cov_type, start, max_iter=2000, tol=1e-13)
    res = _ours(X, cov_type, start, n_steps=2000, tol=1e-13, reg_covar=0.0)
    assert res.converged
    np.testing.assert_allclose(res.means.numpy(), gm.means_, atol=1e-6)
    np.testing.assert_allclose(res.covariances.numpy(), gm.covariances_, atol=1e-6)


@pytest.mark.parametrize("cov_type", TYPES)
@pytest.mark.parametrize("lam", [0.5, 1.0, 2.5])
def test_objective_never_increases_and_matches_its_definition(cov_type, lam):
    X = _data(seed=2)
    start = _start(X, cov_type, seed=3)
    res = _ours(X, cov_type, start, inverse_temperature=lam, n_steps=60, tol=0.0,
                reg_covar=1e-3)
    # each value is a mean of n rows' terms: two of them round by sum_tol(n) of the terms
    round_off = 2 * sum_tol(len(X) + X.shape[1] ** 2) * _row_scale(X, res, lam, cov_type)
    assert np.all(np.diff(res.loss_curve) <= round_off)
    assert res.loss_curve[0] - res.loss_curve[-1] > 0.1          # it did descend
    f = tempered_objective(torch.as_tensor(X), res.means, res.precisions_cholesky, res.weights,
                           inverse_temperature=lam, covariance_type=cov_type, floor=res.floor)
    assert abs(float(f) - res.loss_curve[-1]) < round_off  # recomputed, maybe by chunks


def _unconstrained(res, cov_type):
    """Leaf tensors (means, log-diagonal, upper triangle, weight logits) of a fit."""
    means = res.means.clone().requires_grad_()
    u = res.precisions_cholesky
    diag = torch.diagonal(u, dim1=-2, dim2=-1) if cov_type == "full" else u
    log_diag = diag.log().clone().requires_grad_()
    upper = torch.triu(u, 1).clone().requires_grad_() if cov_type == "full" else None
    logits = res.weights.log().clone().requires_grad_()
    return means, log_diag, upper, logits


@pytest.mark.parametrize("cov_type", TYPES)
def test_fixed_point_is_stationary_for_autograd(cov_type):
    # the autograd gradient of f (over unconstrained parameters) vanishes at the fixed
    # point, at lambda != 1 and with a floor, and does not at the start
    X = torch.as_tensor(_data(seed=4))
    start = _start(X.numpy(), cov_type, seed=4)

    def grad_norm(res):
        means, log_diag, upper, logits = _unconstrained(res, cov_type)
        u = log_diag.exp() if upper is None else torch.triu(upper, 1) + torch.diag_embed(
            log_diag.exp())
        f = tempered_objective(X, means, u, torch.softmax(logits, 0), inverse_temperature=0.7,
                               covariance_type=cov_type, floor=res.floor)
        leaves = [t for t in (means, log_diag, upper, logits) if t is not None]
        return max(float(g.abs().max()) for g in torch.autograd.grad(f, leaves))

    first = _ours(X.numpy(), cov_type, start, inverse_temperature=0.7, n_steps=1,
                  tol=0.0, reg_covar=1e-2)
    fixed = _ours(X.numpy(), cov_type, start, inverse_temperature=0.7, n_steps=5000,
                  tol=1e-15, reg_covar=1e-2)
    assert grad_norm(first) > 1e-3
    assert grad_norm(fixed) < 1e-7


def _assert_same_argmax(res, X, moved, Y, agree):
    """Labels (argmax of the log-weights) of two fits that agree to ``agree`` in means and
    covariances, on ``X`` and its image ``Y``: equal on every row whose two best logits
    are further apart than the fits' difference moves them. A logit ``-(x - mu)^T P (x -
    mu) / 2 - log det / 2`` moves by at most ``P r agree + P^2 r^2 agree + d P agree``
    (``P`` the largest precision, ``r`` the largest ``|x - mu|``), both fits' logits."""
    logits = [shaped_weights(x, r.means, r.precisions_cholesky, r.weights.log()).log()
              for r, x in ((res, X), (moved, Y))]
    bound = 0.0
    for r, x in ((res, X), (moved, Y)):
        P = float(torch.linalg.matrix_norm(torch.linalg.inv(r.covariances), 2).max())
        far = float((torch.as_tensor(x)[:, None] - r.means).norm(dim=-1).max())
        bound += agree * (P * far + (P * far) ** 2 + x.shape[1] * P)
    top = logits[0].topk(2, dim=1).values
    clear = (top[:, 0] - top[:, 1]).numpy() > 2 * bound
    assert clear.mean() > 0.9  # the bound is not vacuous
    lab, lab2 = (t.argmax(1).numpy() for t in logits)
    np.testing.assert_array_equal(lab[clear], lab2[clear])


def test_full_labels_are_invariant_under_an_affine_map():
    X = _data(seed=5)
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 3)) + 2 * np.eye(3)
    b = np.array([10.0, -3.0, 100.0])
    means, covs, w = _start(X, "full", seed=5)
    res = _ours(X, "full", (means, covs, w), n_steps=300, tol=1e-10, reg_covar=0.0)
    moved = _ours(X @ A.T + b, "full", (means @ A.T + b, A @ covs @ A.T, w),
                  n_steps=300, tol=1e-10, reg_covar=0.0)
    np.testing.assert_allclose(moved.means.numpy(), res.means.numpy() @ A.T + b, atol=1e-6)
    np.testing.assert_allclose(moved.covariances.numpy(), A @ res.covariances.numpy() @ A.T,
                               atol=1e-6)

    # the fits agree to 1e-6 (above): labels off near ties must agree
    _assert_same_argmax(res, X, moved, X @ A.T + b, 1e-6)
    # and with the default (isotropic, relative) floor the labels still agree
    res = _ours(X, "full", (means, covs, w), n_steps=300, tol=1e-10)
    moved = _ours(X @ A.T + b, "full", (means @ A.T + b, A @ covs @ A.T, w), n_steps=300,
                  tol=1e-10)
    _assert_same_argmax(res, X, moved, X @ A.T + b, 1e-6)


@pytest.mark.parametrize("cov_type", TYPES)
@pytest.mark.parametrize("within", [False, True])
def test_a_column_without_spread_stays_finite_and_warns_only_within_clusters(cov_type, within):
    # a column constant within each cluster: full and diag heads have no spread along it
    # where the rows do, a warning; constant over all rows (within=False), every head sits
    # at the floor as the rows do: none. A spherical head's variance is the mean over the
    # columns, which the constant one does not make zero: never.
    X = _data(seed=6)
    X[:, 1] = np.repeat([7.0, 8.0, 9.0], [150, 150, 75]) if within else 7.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shaped_fit(torch.as_tensor(X), torch.as_tensor(X[[0, 200, 330]]),
                         covariance_type=cov_type)
    said = [str(w.message) for w in caught if issubclass(w.category, DegenerateFitWarning)]
    if cov_type == "spherical" or not within:
        assert said == []
    else:
        assert len(said) == 1 and "no spread in some direction" in said[0]
    for t in (res.means, res.covariances, res.precisions_cholesky, res.weights):
        assert bool(torch.isfinite(t).all())
    assert np.all(np.isfinite(res.loss_curve))


@pytest.mark.parametrize("cov_type", TYPES)
def test_repeated_rows_warn_and_the_head_sits_at_the_floor(cov_type):
    rng = np.random.default_rng(7)
    X = np.concatenate([rng.standard_normal((200, 2)), np.tile([[8.0, 8.0]], (60, 1))])
    with pytest.warns(DegenerateFitWarning, match=r"head\(s\) \[1\] have \(nearly\) no spread"):
        res = shaped_fit(torch.as_tensor(X), torch.tensor([[0.0, 0.0], [7.0, 7.0]]),
                         covariance_type=cov_type)
    covs, floor = res.covariances.numpy(), res.floor.numpy()
    floor_cov = {"full": np.diag(floor), "diag": floor, "spherical": floor.mean()}[cov_type]
    np.testing.assert_allclose(covs[1], floor_cov, rtol=1e-6)
    # a weighted mean of the 60 rows at (8, 8) (the others' weights underflow): n roundings
    np.testing.assert_allclose(res.means[1].numpy(), [8.0, 8.0], rtol=0,
                               atol=8.0 * sum_tol(len(X)))
    assert np.all(floor > 0) and np.all(np.isfinite(res.loss_curve))


def test_a_head_without_rows_warns_and_keeps_its_place():
    X = _data(seed=8)
    far = torch.tensor([[0.0, 0.0, 0.0], [1.0, 5.0, 0.0], [1e4, 1e4, 1e4]], dtype=torch.float64)
    with pytest.warns(DegenerateFitWarning, match=r"head\(s\) \[2\] hold less than one row"):
        res = shaped_fit(torch.as_tensor(X), far)
    np.testing.assert_allclose(res.means[2].numpy(), far[2].numpy())
    assert bool(torch.isfinite(res.precisions_cholesky).all())


@pytest.mark.slow
def test_sums_over_rows_chunks_ranks_and_weights():
    # chunks, a sum over "ranks" and integer sample weights all give the fit of the
    # corresponding repeated rows
    X = _data(seed=9)
    start = _start(X, "full", seed=9)
    kw = dict(n_steps=15, tol=0.0)
    ref = _ours(X, "full", start, **kw)
    # the same 15 steps with the rows' sums in other orders (chunks, 2n rows, weights):
    # absolute tolerances at the size of the terms (a mean may be near 0)
    kappa = max(_kappa(ref.covariances, "full"), _kappa(start[1], "full"))
    big = np.abs(X).max()
    tol = _em_tol(np.concatenate([X, X]), 15, kappa)
    chunked = _ours(X, "full", start, chunk_size=37, **kw)
    np.testing.assert_allclose(chunked.means.numpy(), ref.means.numpy(), rtol=0, atol=tol * big)
    twice = _ours(np.concatenate([X, X]), "full", start, **kw)
    ranks = _ours(X, "full", start, reduce=lambda t: 2.0 * t, **kw)   # two identical ranks
    np.testing.assert_allclose(ranks.means.numpy(), twice.means.numpy(), rtol=0, atol=tol * big)
    np.testing.assert_allclose(ranks.covariances.numpy(), twice.covariances.numpy(), rtol=0,
                               atol=tol * big**2)
    counts = np.random.default_rng(9).integers(0, 4, len(X))
    weighted = _ours(X, "full", start, sample_weight=torch.as_tensor(counts, dtype=torch.float64),
                     **kw)
    repeated = _ours(np.repeat(X, counts, axis=0), "full", start, **kw)
    tol = _em_tol(np.repeat(X, counts, axis=0), 15, kappa)
    np.testing.assert_allclose(weighted.means.numpy(), repeated.means.numpy(), rtol=0,
                               atol=tol * big)
    np.testing.assert_allclose(weighted.covariances.numpy(), repeated.covariances.numpy(),
                               rtol=0, atol=tol * big**2)
    assert abs(weighted.loss_curve[-1] - repeated.loss_curve[-1]) < \
        (tol + sum_tol(counts.sum())) * _row_scale(X, repeated, 1.0, "full")


@pytest.mark.parametrize("cov_type", TYPES)
def test_float32_follows_float64(cov_type):
    X = _data(seed=10)
    start = _start(X, cov_type, seed=10)
    ref = _ours(X, cov_type, start, n_steps=50)
    means, covs, w = start
    f32 = shaped_fit(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(means),
                     covariance_type=cov_type, covariances0=torch.as_tensor(covs),
                     weights0=torch.as_tensor(w), n_steps=50)
    assert f32.means.dtype == torch.float32
    np.testing.assert_allclose(f32.means.double().numpy(), ref.means.numpy(), atol=1e-3)


def test_kmeans_start_is_scikit_learns():
    # without covariances, the start is the moments of the nearest-mean partition, as
    # GaussianMixture's k-means initialisation (given the same k-means centres)
    X = _data(seed=11)
    centres = X[[0, 200, 330]]
    res = shaped_fit(torch.as_tensor(X), torch.as_tensor(centres), n_steps=0, tol=0.0,
                     reg_covar=0.0)
    labels = ((X[:, None] - centres) ** 2).sum(-1).argmin(1)
    # one pass of sums over each cell's rows, in another order than numpy's: absolute
    # tolerances at the terms' size (|x| for the means, |x|^2 for E[xx^T] - m m^T)
    big = np.abs(X).max()
    for h in range(K):
        n_h = int((labels == h).sum())
        np.testing.assert_allclose(res.means[h].numpy(), X[labels == h].mean(0), rtol=0,
                                   atol=sum_tol(n_h) * big)
        np.testing.assert_allclose(res.covariances[h].numpy(),
                                   np.cov(X[labels == h].T, bias=True), rtol=0,
                                   atol=2 * sum_tol(n_h) * big**2)
    np.testing.assert_allclose(res.weights.numpy(), np.bincount(labels) / len(X), rtol=0,
                               atol=sum_tol(len(X)))

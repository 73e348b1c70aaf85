"""Lloyd's steps in torch (any geometry) and the sample's k-means, against scikit-learn
and written-out references; the objective recomputed from the final heads and labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, make_blobs

import attnclust as ac
from _tolerance import assert_nearest, assert_same_labels, objective_tol, sum_tol
from attnclust.cluster.kmeans.lloyd import hard_lloyd, sample_kmeans
from attnclust.cluster.kmeans.result import objective


def test_hard_lloyd_stops_at_a_stable_partition():
    X = torch.as_tensor(load_iris().data)
    X = X / X.norm(dim=1, keepdim=True)
    res = hard_lloyd(X, ac.normalize(X[[0, 60, 120]]), 100)
    heads, labels = res.heads, res.labels
    assert_nearest(labels.numpy(), X, heads)    # the largest cosine, up to rounding
    means = ac.normalize(torch.stack([X[labels == h].sum(0) for h in range(3)]))
    # unit rows: a cell's sum added in another order, then normalized
    torch.testing.assert_close(heads, means, rtol=0, atol=sum_tol(len(X)))
    assert res.converged and 0 < res.n_iter < 100
    assert res.objective == pytest.approx(
        float(((X - heads[labels]) ** 2).sum(1).mean()), rel=0,
        abs=objective_tol(X, heads, labels))


def test_hard_lloyd_euclidean_is_kmeans():
    X = load_iris().data
    start = X[[0, 60, 120]]
    km = KMeans(3, init=start, n_init=1, tol=0, max_iter=100).fit(X)
    res = hard_lloyd(torch.as_tensor(X), torch.as_tensor(start), 100, geometry="euclidean")
    # cells' means summed in another order, each step: n eps of the rows' scale per step
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0,
                               atol=res.n_iter * sum_tol(len(X)) * np.abs(X).max())
    assert_same_labels(res.labels.numpy(), km.labels_, X, km.cluster_centers_)
    # both recomputed from the final heads and labels
    assert res.objective == pytest.approx(km.inertia_ / len(X), rel=0,
                                          abs=objective_tol(X, km.cluster_centers_, km.labels_))


def test_hard_lloyd_tol_stops_at_a_small_move():
    X = torch.as_tensor(make_blobs(600, centers=6, cluster_std=2.5, random_state=1)[0])
    start = X[:6].clone()
    full = hard_lloyd(X, start, 300, geometry="euclidean")
    loose = hard_lloyd(X, start, 300, geometry="euclidean", tol=1e-2)
    assert full.converged and loose.converged and loose.n_iter < full.n_iter
    assert loose.objective >= full.objective * (1 - 1e-12)
    capped = hard_lloyd(X, start, 1, geometry="euclidean")
    assert capped.n_iter == 1 and not capped.converged


@pytest.mark.parametrize("tol", [1e-4, 1e-1])
def test_sample_kmeans_tol_is_scikit_learns(tol):
    """The same stopping rule as KMeans(tol): scikit-learn's tol times the rows' mean
    variance per feature, on the heads' squared moves."""
    X = make_blobs(800, n_features=3, centers=5, cluster_std=2.5, random_state=2)[0]
    start = X[:5]
    km = KMeans(5, init=start, n_init=1, tol=tol, algorithm="lloyd").fit(X)
    res = sample_kmeans(torch.as_tensor(X), 5, init=torch.as_tensor(start), tol=tol)
    assert res.n_iter == km.n_iter_
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0,
                               atol=res.n_iter * sum_tol(len(X)) * np.abs(X).max())
    assert_same_labels(res.labels, km.labels_, X, km.cluster_centers_)


def test_the_recomputed_objective_of_float32_rows_is_within_their_rounding():
    """Each term ||x - mu_z||^2 of float32 rows is within (d + 2) eps_32 of its value
    in float64 (d subtractions, d products, a sum of d), and the float64 sum adds n
    eps_64: the objective is within (d + 2) eps_32 of the float64 one, relative."""
    gen = np.random.default_rng(0)
    X = gen.normal(size=(5000, 8)).astype(np.float32) * 3 + 1
    heads = gen.normal(size=(7, 8)).astype(np.float32)
    labels = gen.integers(0, 7, len(X))
    exact = float(((X.astype(np.float64) - heads.astype(np.float64)[labels]) ** 2)
                  .sum(1).mean())
    eps = float(np.finfo(np.float32).eps)
    assert abs(objective(X, heads, labels) - exact) <= (8 + 2) * eps * exact
    w = gen.uniform(0, 2, len(X))
    exact_w = float(((X.astype(np.float64) - heads.astype(np.float64)[labels]) ** 2)
                    .sum(1) @ w / w.sum())
    assert abs(objective(X, heads, labels, w) - exact_w) <= (8 + 2) * eps * exact_w


@pytest.mark.parametrize("case", ["sample", "passes", "float32", "weighted"])
def test_the_estimators_last_loss_is_the_objective_of_its_heads_and_labels(case):
    """``loss_curve_[-1]`` of a fit that ends in the hard limit is R_inf of its
    ``cluster_centers_`` and ``labels_``: recomputed on a sample that holds every row,
    carried by the sums of the steps over all rows otherwise, so only the rounding of
    the working space's rows and of those steps separate them (:func:`objective_tol` in
    the fit's dtype, with one update per step: ``loss_curve_`` has an entry per step)."""
    gen = np.random.default_rng(3)
    n = 25_000 if case in ("passes", "float32", "weighted") else 2000
    centres = gen.uniform(-10, 10, (6, 4))
    X = centres[gen.integers(0, 6, n)] + gen.normal(size=(n, 4))
    w = gen.uniform(0.5, 2.0, n) if case == "weighted" else None
    dtype = np.float32 if case == "float32" else np.float64
    est = ac.AttentionClustering(6, random_state=0, dtype="float32" if case == "float32"
                                 else "auto").fit(X.astype(dtype), sample_weight=w)
    dist = ((X - est.cluster_centers_[est.labels_]) ** 2).sum(1)
    value = float(dist.mean() if w is None else dist @ w / w.sum())
    assert est.loss_curve_[-1] == pytest.approx(value, rel=0, abs=objective_tol(
        X, est.cluster_centers_, est.labels_, steps=len(est.loss_curve_), dtype=dtype))


def test_the_three_lloyd_steps_share_one_signature_and_one_partition():
    """``lloyd_batch`` (an array, runs carried together), ``hard_lloyd`` (a tensor) and
    ``lloyd_passes`` (a RowReader, with bounds) take ``(rows, heads, max_iter, *, tol,
    weights)`` and, from the same heads, reach the same partition (heads to rounding:
    their sums are added in other orders)."""
    import inspect

    from attnclust.cluster.kmeans import RowReader, lloyd_batch, lloyd_passes

    for step in (lloyd_batch, hard_lloyd, lloyd_passes):
        names = list(inspect.signature(step).parameters)[:5]
        assert names == ["rows", "heads", "max_iter", "tol", "weights"], step.__name__
    X, _ = make_blobs(800, n_features=3, centers=6, cluster_std=1.5, random_state=4)
    w = np.random.default_rng(0).integers(1, 4, len(X)).astype(float)
    Xt, wt, start = torch.as_tensor(X), torch.as_tensor(w), X[:6] + 0.1
    batch = lloyd_batch(X, start[None], 300, weights=w)
    torch_run = hard_lloyd(Xt, torch.as_tensor(start), 300, weights=wt, geometry="euclidean")
    passes = lloyd_passes(RowReader.in_memory(Xt, 128, n_total=float(w.sum())),
                          torch.as_tensor(start), 300, weights=wt)
    assert batch.converged[0] and torch_run.converged and passes.converged
    for run in (torch_run, passes):
        np.testing.assert_array_equal(np.asarray(run.labels), batch.labels[0])
        np.testing.assert_allclose(np.asarray(run.heads), batch.heads[0], rtol=0,
                                   atol=300 * sum_tol(len(X)) * np.abs(X).max())
        assert run.objective == pytest.approx(objective(X, batch.heads[0], batch.labels[0], w),
                                              rel=1e-12)

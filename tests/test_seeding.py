"""Batched k-means++ seedings and Lloyd runs, against scikit-learn."""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.datasets import make_blobs

from attnclust.seeding import kmeans_plusplus_runs, lloyd_runs


def _blobs(seed=0, n=900, k=6, std=1.0):
    X, y = make_blobs(n, n_features=3, centers=k, cluster_std=std, random_state=seed)
    return torch.as_tensor(X), y


def test_every_run_is_scikit_learns_lloyd_from_its_heads():
    X, _ = _blobs(1, std=2.5)
    heads0 = kmeans_plusplus_runs(X, 6, 4, np.random.default_rng(0))
    res = lloyd_runs(X, heads0, 300, chunk=200)
    for r in range(4):
        km = KMeans(6, init=heads0[r].numpy(), n_init=1, algorithm="lloyd", tol=0.0,
                    max_iter=300).fit(X.numpy())
        np.testing.assert_allclose(res.heads[r].numpy(), km.cluster_centers_, rtol=0,
                                   atol=1e-10)
        assert float(res.objective[r]) == pytest.approx(km.inertia_ / X.shape[0], rel=1e-10)


def test_seeds_are_distinct_rows_one_per_separated_blob():
    X, y = _blobs(2, k=8, std=0.3)
    heads = kmeans_plusplus_runs(X, 8, 5, np.random.default_rng(1))
    rows = {tuple(x) for x in X.numpy()}
    for run in heads.numpy():
        assert all(tuple(h) in rows for h in run)
        blobs = {int(y[np.flatnonzero((X.numpy() == h).all(1))[0]]) for h in run}
        assert blobs == set(range(8))


def test_seeding_potential_matches_scikit_learns_in_distribution():
    X, _ = _blobs(3, n=600, k=10, std=2.0)

    def potential(C):
        return float(torch.cdist(X, torch.as_tensor(C)).min(1).values.pow(2).sum())
    ours = [potential(h) for h in kmeans_plusplus_runs(X, 10, 40, np.random.default_rng(2))]
    theirs = [potential(kmeans_plusplus(X.numpy(), 10, random_state=s)[0]) for s in range(40)]
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.1)


def test_the_same_generator_state_gives_the_same_seedings():
    X, _ = _blobs(4)
    a = kmeans_plusplus_runs(X, 6, 3, np.random.default_rng(7))
    b = kmeans_plusplus_runs(X, 6, 3, np.random.default_rng(7))
    assert torch.equal(a, b)

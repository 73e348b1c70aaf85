"""Batched k-means runs (engine): against scikit-learn's KMeans, one run at a time, the D^2 law."""

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.datasets import make_blobs

from _tolerance import assert_same_labels, near_ties, objective_tol, sum_tol
from attnclust.cluster.kmeans import batch as multistart
from attnclust.cluster.kmeans.batch import _augmented, _nearest, best_of_seedings, lloyd_batch
from attnclust.cluster.kmeans.seeding import kmeanspp_batch


def _data(seed=0, n=600, k=5, d=3, std=1.5):
    return make_blobs(n, n_features=d, centers=k, cluster_std=std, random_state=seed)[0]


def _head_tol(X) -> float:
    """Two computations of a head, a (weighted) mean of at most ``n`` rows summed in other
    orders (blocks, BLAS kernels, runs side by side): ``n eps`` of the rows' largest
    coordinate for the sum, as much again for the weights' sum that divides it."""
    return 2 * sum_tol(len(X)) * float(np.abs(X).max())


def _objective_tol(X, heads, labels, w=None) -> float:
    """:func:`objective_tol`, weighted: a weighted mean of the rows' bounds is at most
    ``max w / mean w`` times their plain mean."""
    return objective_tol(X, heads, labels) * (1.0 if w is None else w.max() / w.mean())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lloyd_from_given_heads_is_scikit_learns_lloyd(seed, weighted):
    X = _data(seed)
    w = np.random.default_rng(seed).uniform(0.2, 3.0, len(X)) if weighted else None
    init = X[np.random.default_rng(seed).choice(len(X), 5, replace=False)]
    km = KMeans(5, init=init, n_init=1, algorithm="lloyd", tol=1e-4).fit(X, sample_weight=w)
    ours = best_of_seedings(X, 5, 1, np.random.default_rng(0), init=init, weights=w)
    np.testing.assert_allclose(ours.heads, km.cluster_centers_, rtol=0, atol=_head_tol(X))
    assert_same_labels(ours.labels, km.labels_, X, ours.heads)
    total = len(X) if w is None else w.sum()
    assert ours.objective == pytest.approx(km.inertia_ / total, rel=0,
                                           abs=_objective_tol(X, ours.heads, ours.labels, w))


def test_runs_carried_together_equal_runs_one_at_a_time():
    X = _data(3, k=8, std=2.5)
    starts = kmeanspp_batch(X, 8, 6, np.random.default_rng(4))
    # tol=0: a run stops when its cells no longer change, which rounding can decide only
    # for a row within rounding of a tie (checked below), never a shift near a threshold
    runs = lloyd_batch(X, starts, max_iter=300, tol=0.0)
    for r in range(len(starts)):
        one = lloyd_batch(X, starts[r:r + 1], max_iter=300, tol=0.0)
        assert not near_ties(X, one.heads[0]).any()
        # products over several runs and over one may take other kernels: rounding apart
        np.testing.assert_allclose(runs.heads[r], one.heads[0], rtol=0, atol=_head_tol(X))
        assert_same_labels(runs.labels[r], one.labels[0], X, one.heads[0])
        assert runs.objective[r] == pytest.approx(
            one.objective[0], rel=0, abs=_objective_tol(X, one.heads[0], one.labels[0]))
        assert (runs.n_iter[r], runs.converged[r]) == (one.n_iter[0], one.converged[0])
    assert len(set(runs.n_iter.tolist())) > 1      # runs of different lengths left the batch


@pytest.mark.parametrize("tol", [0.0, 1e-2])
def test_each_runs_objective_and_labels_are_those_of_its_heads(tol):
    """Runs ended by stable labels (tol 0) and by a small move (their labels then come
    from one more assignment) report the objective of their final heads."""
    X = _data(10, k=5, std=2.0)
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(X))
    runs = lloyd_batch(X, kmeanspp_batch(X, 5, 4, np.random.default_rng(2)), max_iter=300,
                       tol=tol, weights=w)
    for heads, labels, objective in zip(runs.heads, runs.labels, runs.objective,
                                        strict=True):
        dist = ((X[:, None, :] - heads[None]) ** 2).sum(2)
        assert_same_labels(labels, dist.argmin(1), X, heads)     # products against direct
        assert objective == pytest.approx(dist.min(1) @ w / w.sum(), rel=0,
                                          abs=_objective_tol(X, heads, labels, w))


@pytest.mark.parametrize("k", [6, 20])          # scores laid out by run, and by row
def test_the_result_does_not_depend_on_the_block_size(monkeypatch, k):
    X = _data(5, k=k)
    whole = best_of_seedings(X, k, 4, np.random.default_rng(0))
    monkeypatch.setattr(multistart, "_BLOCK", {True: 97, False: 97})   # blocks of a few rows
    blocks = best_of_seedings(X, k, 4, np.random.default_rng(0))
    # the cells' sums add the blocks in another grouping: rounding apart
    np.testing.assert_allclose(blocks.heads, whole.heads, rtol=0, atol=_head_tol(X))
    assert_same_labels(blocks.labels, whole.labels, X, whole.heads)


def test_seedings_draw_rows_by_weight_then_by_squared_distance():
    X = np.array([[0.0], [0.1], [10.0]])
    heads = kmeanspp_batch(X, 1, 4000, np.random.default_rng(0), weights=np.array([1.0, 3.0, 0]))
    share = np.mean(heads[:, 0, 0] == 0.1)
    assert abs(share - 0.75) < 0.03                        # first head: P ~ weight
    assert not np.any(heads[:, 0, 0] == 10.0)              # weight zero: never drawn
    pairs = kmeanspp_batch(X, 2, 500, np.random.default_rng(1))
    assert np.all(np.isin(pairs, X))                        # heads are rows
    # the second head: D^2 from either near-origin row makes 10 over 99.9% likely, and
    # with 2 + ln 2 candidates the greedy pick always takes it when drawn
    assert np.mean(np.sort(pairs[:, :, 0], 1)[:, 1] == 10.0) > 0.99


@pytest.mark.parametrize("weighted", [False, True])
def test_one_seeding_from_a_random_state_is_scikit_learns_kmeans_plusplus(weighted):
    """Greedy D^2 sampling with scikit-learn's draws (a ``RandomState``'s uniforms): the
    same seeds as its ``kmeans_plusplus`` (an independent implementation), but where a
    draw falls within rounding of a boundary between rows (none in these 40 sets)."""
    for seed in range(40):
        gen = np.random.default_rng(seed)
        X = gen.normal(size=(int(gen.integers(20, 400)), int(gen.integers(1, 6))))
        K = int(gen.integers(1, 12))
        w = gen.integers(0, 4, len(X)).astype(float) if weighted else None
        ours = kmeanspp_batch(X, K, 1, np.random.RandomState(seed), weights=w)[0]
        np.testing.assert_array_equal(
            ours, kmeans_plusplus(X, K, random_state=seed, sample_weight=w)[0])


def test_objective_and_labels_are_those_of_the_heads():
    X = _data(6, k=4, std=3.0)
    res = best_of_seedings(X, 4, 5, np.random.default_rng(2))
    dist = ((X[:, None, :] - res.heads[None]) ** 2).sum(2)
    assert_same_labels(res.labels, dist.argmin(1), X, res.heads)     # products against direct
    assert res.objective == pytest.approx(dist.min(1).mean(), rel=0,
                                          abs=objective_tol(X, res.heads, res.labels))
    assert res.converged


@pytest.mark.slow
def test_ten_seedings_are_as_good_as_scikit_learns_ten():
    """Mean k-means objective over 20 seeds, on data with many local minima (25 blobs in
    2-D; one seed's objective varies by 2%): the batched restarts against
    KMeans(n_init=10)'s restarts, to 0.5% (about 2.5 standard errors of the difference)."""
    X = make_blobs(2500, centers=25, cluster_std=1.0, center_box=(-30, 30), random_state=9)[0]
    ours = [best_of_seedings(X, 25, 10, np.random.default_rng(s)).objective * len(X)
            for s in range(20)]
    theirs = [KMeans(25, n_init=10, random_state=s).fit(X).inertia_ for s in range(20)]
    assert np.mean(ours) <= np.mean(theirs) * (1 + 5e-3)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_ways_of_computing_a_step_agree(monkeypatch, weighted):
    """Sparse cell sums against 0/1-membership products, the scores laid out by run or
    by row: the same runs (the switches only choose the faster way)."""
    X = _data(11, k=7, d=4, std=2.0)
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(X)) if weighted else None
    starts = kmeanspp_batch(X, 7, 5, np.random.default_rng(4), weights=w)
    ref = lloyd_batch(X, starts, max_iter=300, tol=0.0, weights=w)
    monkeypatch.setattr(multistart, "_DENSE_SUMS", 0)
    monkeypatch.setattr(multistart, "_FEW_HEADS", 0)
    other = lloyd_batch(X, starts, max_iter=300, tol=0.0, weights=w)
    # sparse sums against products, other layouts: rounding apart (no step's labels or
    # stop within rounding of a tie on these draws, so the steps are the same)
    np.testing.assert_allclose(other.heads, ref.heads, rtol=0, atol=_head_tol(X))
    for a, b, heads in zip(other.labels, ref.labels, ref.heads, strict=True):
        assert_same_labels(a, b, X, heads)
    assert not any(near_ties(X, heads).any() for heads in ref.heads)
    np.testing.assert_array_equal(other.n_iter, ref.n_iter)


@pytest.mark.parametrize("K", [2, 5, 16, 17, 40])       # both layouts of the scores
def test_nearest_is_the_first_best_score_of_every_run(K):
    """Small integers, whose scores are exact in any order, with heads given twice: each
    run's labels are numpy's argmax of its scores (the first of equal ones), and the best
    scores theirs."""
    rng = np.random.default_rng(K)
    X = rng.integers(-4, 5, size=(700, 3)).astype(float)
    heads = rng.integers(-4, 5, size=(3, K, 3)).astype(float)
    heads[:, K - 1] = heads[:, (K - 1) // 2]              # K = 2: heads 0 and 1
    flat = np.concatenate([heads.reshape(-1, 3), 0.5 * (heads.reshape(-1, 3) ** 2).sum(1,
                                                                            keepdims=True)], 1)
    first, best = _nearest(_augmented(X), flat, 3, K)
    scores = np.einsum("nd,akd->akn", X, heads) - 0.5 * (heads ** 2).sum(2)[..., None]
    np.testing.assert_array_equal(first, scores.argmax(1))
    np.testing.assert_array_equal(best, scores.max(1))
    assert (first == (K - 1) // 2).any()

"""The single swap against a brute-force k-means cost, and its removal costs and split
against written-out references; the swap polish of a sample's k-means."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from _tolerance import assert_nearest, sq_dist_tol, sum_tol
from attnclust.cluster.kmeans.lloyd import sample_kmeans
from attnclust.cluster.kmeans.swap import SWAP_HEADS, nearest_two, single_swap, swap_polish
from attnclust.layer.geometry import as_geometry

EUCLID = as_geometry("euclidean")
CENTRES = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])


def _blobs(n_per, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([c + 0.5 * rng.standard_normal((n_per, 2)) for c in CENTRES])


def _kmeans_cost(X, heads, w=None):
    d2 = ((X[:, None, :] - heads[None]) ** 2).sum(-1).min(1)
    return float(d2.sum() if w is None else (w * d2).sum())


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=float))


def test_right_heads_do_not_move():
    X = _blobs(200)
    assert single_swap(_t(X), _t(CENTRES + 0.1), EUCLID) is None


def test_two_heads_in_one_cluster_and_one_on_two_are_repaired():
    X = _blobs(200)
    heads = np.array([[-0.4, 0.0], [0.4, 0.0], [3.0, 6.0], [6.0, 0.0]])  # 0 and 1 share one
    move = single_swap(_t(X), _t(heads), EUCLID)
    assert move is not None and move.h in (0, 1) and move.g == 2
    new = heads.copy()
    new[[move.h, move.g]] = move.new.numpy()
    # the moved heads are the two clusters the merged head held, to the blobs' noise
    assert np.abs(np.sort(new[[move.h, move.g]], axis=0) - CENTRES[[2, 3]]).max() < 0.1
    assert _kmeans_cost(X, new) < 0.5 * _kmeans_cost(X, heads)
    # the removal cost: what the cost grows by without head h (brute force); a difference
    # of two sums of n squared distances, each within (d + 2 + n) eps of its sum
    without, with_h = _kmeans_cost(X, np.delete(heads, move.h, 0)), _kmeans_cost(X, heads)
    tol = (X.shape[1] + 2 + len(X)) * sum_tol(1) * (without + with_h)
    assert move.cost == pytest.approx(without - with_h, rel=0, abs=tol)
    # the gain: the cell of g at g, minus the cell split between the two new centres
    cell = ((X[:, None, :] - heads[None]) ** 2).sum(-1).argmin(1) == move.g
    at_g, split = _kmeans_cost(X[cell], heads[[move.g]]), _kmeans_cost(X[cell], move.new.numpy())
    tol = (X.shape[1] + 2 + len(X)) * sum_tol(1) * (at_g + split)
    assert move.gain == pytest.approx(at_g - split, rel=0, abs=tol)


@pytest.mark.parametrize("seed", range(5))
def test_a_swap_lowers_the_batch_kmeans_cost(seed):
    rng = np.random.default_rng(seed)
    X = _blobs(50, seed) + rng.standard_normal((1, 2))
    heads = X[rng.choice(len(X), 4, replace=False)]
    move = single_swap(_t(X), _t(heads), EUCLID)
    if move is not None:
        new = heads.copy()
        new[[move.h, move.g]] = move.new.numpy()
        assert _kmeans_cost(X, new) < _kmeans_cost(X, heads)


def test_weights_are_repeated_rows():
    X = _blobs(60)
    w = np.random.default_rng(1).integers(0, 4, size=len(X))
    heads = np.array([[-0.4, 0.0], [0.4, 0.0], [3.0, 6.0], [6.0, 0.0]])
    weighted = single_swap(_t(X), _t(heads), EUCLID, weights=_t(w))
    repeated = single_swap(_t(np.repeat(X, w, axis=0)), _t(heads), EUCLID)
    assert (weighted.h, weighted.g) == (repeated.h, repeated.g)
    # weighted sums against sums of repeated rows: the same terms in another order
    n = int(w.sum())
    torch.testing.assert_close(weighted.new, repeated.new, rtol=0,
                               atol=sum_tol(n) * float(np.abs(X).max()))
    scale = _kmeans_cost(np.repeat(X, w, axis=0), heads[[weighted.g]])   # the cell's cost
    assert weighted.gain == pytest.approx(repeated.gain, rel=0,
                                          abs=(X.shape[1] + 2 + n) * sum_tol(1) * scale)


def test_sphere_moves_to_unit_heads():
    X = _blobs(100)[:, [0, 1]] + np.array([1.0, 1.0])
    X = np.column_stack([X, np.ones(len(X))])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    heads = X[[0, 1, 200, 300]]                      # two in the first blob, none in one
    move = single_swap(_t(X), _t(heads), as_geometry("sphere"))
    assert move is not None
    # normalized heads: a norm of d terms, within (d + 2) eps of 1
    np.testing.assert_allclose(np.linalg.norm(move.new.numpy(), axis=1), 1.0, rtol=0,
                               atol=(X.shape[1] + 2) * sum_tol(1))
    new = heads.copy()
    new[[move.h, move.g]] = move.new.numpy()
    assert _kmeans_cost(X, new) < _kmeans_cost(X, heads)


def test_swaps_never_raise_the_objective_and_repair_stuck_partitions():
    """From one seeding's Lloyd partition of 25 blobs (often two heads in one blob and one
    head on two), the swaps keep a partition only when its k-means objective is lower,
    and they lower it on most seeds."""
    X = make_blobs(2500, centers=25, cluster_std=0.6, center_box=(-30, 30), random_state=4)[0]
    S = torch.as_tensor((X - X.mean(0)) / X.std())
    lowered = 0
    for seed in range(8):
        start = sample_kmeans(S, 25, seed=seed)                    # one seeding
        kept, steps = swap_polish(S, start, EUCLID, max_iter=300)
        assert kept.objective <= start.objective
        lowered += kept.objective < start.objective * (1 - 1e-3)
        assert_nearest(kept.labels, S, kept.heads)     # the dense argmin, up to rounding
    assert lowered >= 4


def test_few_heads_take_no_swap():
    S = torch.tensor([[0.0], [0.1], [5.0], [5.1], [9.0], [9.1]], dtype=torch.float64)
    two_in_one = sample_kmeans(S, 3, init=S[[0, 1, 4]])
    assert 3 < SWAP_HEADS
    kept, steps = swap_polish(S, two_in_one, EUCLID, max_iter=100)
    assert kept is two_in_one and steps == 0


@pytest.mark.parametrize("K", [1, 2, 5, 7, 32, 33])     # both layouts of the scores
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nearest_two_against_direct_distances(K, dtype):
    """Labels, nearest and second-nearest squared distances and those to given labels,
    against distances computed directly in float64, to the rounding of
    ``||x||^2 - 2 <x, mu> + ||mu||^2`` (:func:`sq_dist_tol`)."""
    rng = np.random.default_rng(K)
    X, heads = rng.normal(size=(3000, 6)), rng.normal(size=(K, 6))
    old = rng.integers(0, K, X.shape[0])
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    z, d1, d2, dold = nearest_two(_t(X).to(dtype), _t(heads).to(dtype),
                                  (0.5 * (_t(heads) ** 2).sum(1)).to(dtype), torch.as_tensor(old))
    D = ((X[:, None, :] - heads[None]) ** 2).sum(-1)
    tol = sq_dist_tol(X, heads, np_dtype)
    rows = np.arange(X.shape[0])
    assert_nearest(z.numpy(), X, heads, np_dtype)
    assert np.all(np.abs(dold.double().numpy() - D[rows, old]) <= tol[rows, old])
    D.sort(1)
    assert np.all(np.abs(d1.double().numpy() - D[:, 0]) <= tol.max(1))
    if K == 1:
        assert torch.isinf(d2).all()
    else:
        assert np.all(np.abs(d2.double().numpy() - D[:, 1]) <= tol.max(1))


@pytest.mark.parametrize("K", [3, 7, 32, 33])
def test_nearest_two_takes_the_first_of_equal_heads(K):
    """Small integers, whose products and sums are exact in any order: heads 1 and K - 1
    are equal, so rows nearest to them get label 1, and their second distance is the
    first."""
    rng = np.random.default_rng(K)
    X = rng.integers(-4, 5, size=(2000, 3)).astype(float)
    heads = rng.integers(-4, 5, size=(K, 3)).astype(float)
    heads[K - 1] = heads[1]
    z, d1, d2, _ = nearest_two(_t(X), _t(heads), 0.5 * (_t(heads) ** 2).sum(1))
    D = ((X[:, None, :] - heads[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(z.numpy(), D.argmin(1))     # argmin: the first minimum
    at_tie = z.numpy() == 1
    assert at_tie.any() and torch.equal(d1[at_tie], d2[at_tie])


@pytest.mark.parametrize("K", [2, 7, 33])
def test_nearest_two_labels_stay_in_range_on_nan(K):
    """A NaN head or row gives NaN scores: the labels still index a head (the callers sum
    rows into cells by label), whatever the layout."""
    rng = np.random.default_rng(K)
    X, heads = _t(rng.normal(size=(50, 4))), _t(rng.normal(size=(K, 4)))
    heads[K - 1, 0] = float("nan")
    X[3, 1] = float("nan")
    z, *_ = nearest_two(X, heads, 0.5 * (heads ** 2).sum(1))
    assert ((z >= 0) & (z < K)).all()

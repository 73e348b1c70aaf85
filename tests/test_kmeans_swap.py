"""The single swap of a streamed fit against a brute-force k-means cost, and its removal
costs and split against written-out references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnclust.geometry import as_geometry
from attnclust.swap import single_swap

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
    # the removal cost: what the cost grows by without head h (brute force)
    assert move.cost == pytest.approx(_kmeans_cost(X, np.delete(heads, move.h, 0))
                                      - _kmeans_cost(X, heads), rel=1e-10)
    # the gain: the cell of g at g, minus the cell split between the two new centres
    cell = ((X[:, None, :] - heads[None]) ** 2).sum(-1).argmin(1) == move.g
    assert move.gain == pytest.approx(_kmeans_cost(X[cell], heads[[move.g]])
                                      - _kmeans_cost(X[cell], move.new.numpy()), rel=1e-10)


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
    torch.testing.assert_close(weighted.new, repeated.new, rtol=0, atol=1e-12)
    assert weighted.gain == pytest.approx(repeated.gain, rel=1e-12)


def test_sphere_moves_to_unit_heads():
    X = _blobs(100)[:, [0, 1]] + np.array([1.0, 1.0])
    X = np.column_stack([X, np.ones(len(X))])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    heads = X[[0, 1, 200, 300]]                      # two in the first blob, none in one
    move = single_swap(_t(X), _t(heads), as_geometry("sphere"))
    assert move is not None
    np.testing.assert_allclose(np.linalg.norm(move.new.numpy(), axis=1), 1.0, atol=1e-12)
    new = heads.copy()
    new[[move.h, move.g]] = move.new.numpy()
    assert _kmeans_cost(X, new) < _kmeans_cost(X, heads)

import numpy as np
import pytest

import attnclust as ac
from attnclust.sphere import random_sphere


def test_centroid_distance_is_invariant_to_relabelling():
    c = random_sphere(4, 6, rng=0).numpy()
    noisy = c + 0.01 * np.random.default_rng(1).standard_normal(c.shape)
    perm = np.array([2, 0, 3, 1])
    d1 = ac.centroid_distance(noisy, c)
    d2 = ac.centroid_distance(noisy[perm], c)
    assert d1.max == pytest.approx(d2.max) and d1.rms == pytest.approx(d2.rms)
    np.testing.assert_array_equal(noisy[perm][d2.matching], noisy)
    ref = np.linalg.norm(noisy - c, axis=1)
    assert d1.max == pytest.approx(ref.max()) and d1.rms == pytest.approx(np.sqrt(np.mean(ref**2)))


def test_matching_is_optimal_against_brute_force():
    from itertools import permutations

    rng = np.random.default_rng(3)
    heads, cents = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    best = min(
        sum(np.linalg.norm(heads[list(p)][i] - cents[i]) for i in range(5))
        for p in permutations(range(5))
    )
    m = ac.metrics.match_heads(heads, cents)
    assert sum(np.linalg.norm(heads[m] - cents, axis=1)) == pytest.approx(best)


def test_distortion_and_errors():
    assert ac.distortion([[1.0, 1.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 2.0]]) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="same shape"):
        ac.distortion(np.zeros((2, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="share d"):
        ac.centroid_distance(np.zeros((2, 3)), np.zeros((2, 4)))


def test_assignment_error_close_to_bayes_with_true_centroids():
    mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.5)
    X, z = mix.sample(50_000, rng=0, return_labels=True)
    res = ac.assignment_error(mix.centroids, X, z, inverse_temperature=1.0, mixture=mix)
    # equal weights: argmax_h <x, mu*_h> is the Bayes rule itself
    assert res.error == pytest.approx(res.bayes_error, abs=1e-12)
    assert 0.05 < res.bayes_error < 0.1  # Phi(-sqrt(2)/(2*0.5)) ~ 0.079
    # swapped heads are matched back
    swapped = ac.assignment_error(mix.centroids[::-1], X, z, inverse_temperature=1.0)
    assert swapped.error == pytest.approx(res.error) and np.isnan(swapped.bayes_error)


def test_adjusted_rand_index_relabelling():
    assert ac.adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0


@pytest.mark.parametrize("labels", [[], [0, 1], [[0, 1, 0]], [0.0, 1.0, 0.0], [0, -1, 0]])
def test_assignment_error_rejects_bad_labels(labels):
    X = np.eye(3)
    with pytest.raises(ValueError, match="labels must be a non-empty 1-D array"):
        ac.assignment_error(np.eye(3)[:2], X, labels, inverse_temperature=1.0)
    with pytest.raises(ValueError, match="labels must be a non-empty 1-D array"):
        ac.assignment_error(np.eye(3)[:2], X[:0], [], inverse_temperature=1.0)

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage

import attnclust as ac
from _tolerance import eps, near_ties
from attnclust.layer.sphere import random_sphere
from attnclust.study.in_context import infinite_prompt_limit
from attnclust.study.metrics import count_clusters, limit_distance, spread_ratio

SIGMA = 0.3
LAM = 1.0 / (1.0 + 2.0 * SIGMA**2)  # the running example's inverse temperature


@pytest.fixture(scope="module")
def mix():
    return ac.GaussianMixture.orthogonal(d=10, k=2, sigma=SIGMA)


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
    m = ac.study.metrics.match_heads(heads, cents)
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
    res = ac.assignment_error(mix.centroids, X, z, inverse_temperature=1.0, mix=mix)
    # equal weights: argmax_h <x, mu*_h> is the Bayes rule itself; the two counts may
    # differ only on rows within rounding of the tie (unit centroids: nearest = argmax)
    ties = int(near_ties(X, mix.centroids).sum())
    assert abs(res.error - res.bayes_error) <= (ties + 0.5) / len(X)
    assert 0.05 < res.bayes_error < 0.1  # Phi(-sqrt(2)/(2*0.5)) ~ 0.079
    # swapped heads are matched back
    swapped = ac.assignment_error(mix.centroids[::-1], X, z, inverse_temperature=1.0)
    assert swapped.error == pytest.approx(res.error) and np.isnan(swapped.bayes_error)


def _reference_ari(a, b) -> float:
    """The adjusted Rand index by pair counting on the contingency table (Hubert and
    Arabie, 1985), independent of scikit-learn."""
    from math import comb
    a, b = np.asarray(a), np.asarray(b)
    table = np.array([[np.sum((a == i) & (b == j)) for j in np.unique(b)] for i in np.unique(a)])
    pairs = sum(comb(int(x), 2) for x in table.ravel())
    rows = sum(comb(int(x), 2) for x in table.sum(1))
    cols = sum(comb(int(x), 2) for x in table.sum(0))
    expected = rows * cols / comb(len(a), 2)
    return (pairs - expected) / (0.5 * (rows + cols) - expected)


def test_adjusted_rand_index_matches_pair_counting_and_ignores_label_names():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, 60)
    pred = np.where(rng.random(60) < 0.7, truth, rng.integers(0, 4, 60))  # a partial match
    value = ac.adjusted_rand_index(truth, pred)
    assert 0.2 < value < 0.9  # neither trivial value: the comparisons below can fail
    # integer pair counts (exact), then a few roundings of terms up to C(n, 2) over the
    # denominator 0.5 (rows + cols) - expected, in another order than the reference's
    from math import comb
    table_rows = sum(comb(int(c), 2) for c in np.bincount(truth))
    table_cols = sum(comb(int(c), 2) for c in np.bincount(pred))
    denom = 0.5 * (table_rows + table_cols) - table_rows * table_cols / comb(len(truth), 2)
    assert value == pytest.approx(_reference_ari(truth, pred),
                                  abs=8 * eps() * comb(len(truth), 2) / denom)
    # renamed or transposed: the same integer counts in another order, a symmetric formula
    renamed = np.array([7, 3, 11, 5])[pred]  # other names for the same partition
    assert ac.adjusted_rand_index(truth, renamed) == value
    assert ac.adjusted_rand_index(pred, truth) == value
    assert ac.adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0


@pytest.mark.parametrize("labels", [[], [0, 1], [[0, 1, 0]], [0.0, 1.0, 0.0], [0, -1, 0]])
def test_assignment_error_rejects_bad_labels(labels):
    """Each bad labelling is refused, the message showing it; the same call with good
    labels goes through (so the refusal is the labels' doing)."""
    X, heads = np.eye(3), np.eye(3)[:2]
    with pytest.raises(ValueError, match="labels must be a non-empty 1-D array") as err:
        ac.assignment_error(heads, X, labels, inverse_temperature=1.0)
    assert repr(np.asarray(labels)) in str(err.value)
    ac.assignment_error(heads, X, [0, 1, 0], inverse_temperature=1.0)


def test_assignment_error_rejects_empty_data():
    with pytest.raises(ValueError, match="labels must be a non-empty 1-D array"):
        ac.assignment_error(np.eye(3)[:2], np.eye(3)[:0], [], inverse_temperature=1.0)


# -- quantization metrics ------------------------------------------------------------------
def test_spread_ratio_by_hand():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [9.0, 9.0], [9.0, 11.0]])
    Y = np.array([[0.0, 0.0], [1.0, 0.0], [9.0, 9.0], [9.0, 9.0]])
    res = spread_ratio(X, Y, [0, 0, 1, 1])
    np.testing.assert_allclose(res.per_cluster, [0.25, 0.0])
    assert res.ratio == pytest.approx(0.5 / 4.0)
    assert res.input_spread == pytest.approx(1.0) and res.output_spread == pytest.approx(0.125)


def test_count_clusters_matches_single_linkage():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((5, 4)) * 3
    Y = centers[rng.integers(0, 5, 300)] + 1e-5 * rng.standard_normal((300, 4))
    res = count_clusters(Y, tol=1e-3)
    reference = fcluster(linkage(Y, "single"), t=1e-3, criterion="distance")
    assert res.n_clusters == len(np.unique(reference)) == 5
    assert ac.adjusted_rand_index(reference, res.labels) == 1.0
    np.testing.assert_allclose(np.sort(res.centers[:, 0]), np.sort(centers[:, 0]), atol=1e-5)


def test_limit_distance_is_zero_on_the_limit_itself(mix):
    X = mix.sample(50, rng=9)
    res = limit_distance(X, infinite_prompt_limit(X, mix, inverse_temperature=LAM), mix,
                         inverse_temperature=LAM)
    # the limit recomputed from the same rows by the same operations: exactly 0
    assert res.max == 0.0 and res.rms <= res.max


def test_metric_inputs_are_checked(mix):
    with pytest.raises(ValueError, match="NaN"):
        limit_distance([[np.nan] * 10], [[0.0] * 10], mix, inverse_temperature=LAM)
    with pytest.raises(ValueError, match="same tokens"):
        spread_ratio(np.ones((3, 2)), np.ones((3, 2)), [0, 1])
    for tol in (0.0, "1", True):        # a string gave NumPy's TypeError
        with pytest.raises(ValueError, match="tol must be a positive number"):
            count_clusters(np.ones((3, 2)), tol=tol)


def test_centroid_distance_needs_a_centroid():
    with pytest.raises(ValueError, match="at least one centroid"):
        ac.centroid_distance(np.empty((0, 2)), np.empty((0, 2)))


def test_heads_of_nan_are_refused_not_scored():
    mix = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2)
    X, labels = mix.sample(20, rng=0, return_labels=True)
    with pytest.raises(ValueError, match="finite"):
        ac.centroid_distance(np.full((2, 4), np.nan), mix.centroids)
    with pytest.raises(ValueError, match="NaN"):
        ac.assignment_error(np.full((2, 4), np.nan), X, labels, inverse_temperature=1.0)

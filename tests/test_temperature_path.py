"""The temperature path: where the heads split, against the derivation and independent
formulas; determinism; no clusters of a handful of rows."""

import warnings

import matplotlib
import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import eps, sum_tol
from attnclust.cluster.annealing import predicted_first_split, temperature_path
from attnclust.cluster.choice.path_choice import FAST_SETTINGS

matplotlib.use("Agg")


def _two_blobs(n=600, sigma=0.3, d=2, rng=0):
    return ac.GaussianMixture.antipodal(d=d, sigma=sigma).sample(n, rng=rng)


def _blobs(k, n_each=150, sep=6.0, d=2, rng=0, outliers=0):
    gen = np.random.default_rng(rng)
    centres = sep * np.eye(max(k, d))[:k, :d] if k <= d else gen.uniform(0, 4 * sep, (k, d))
    X = np.concatenate([c + gen.standard_normal((n_each, d)) for c in centres])
    if outliers:
        X = np.concatenate([X, 40.0 * sep + gen.standard_normal((outliers, d))])
    return X


def test_one_cluster_below_the_critical_value_and_two_above():
    X = _two_blobs()
    lam_c = 1.0 / np.linalg.eigvalsh(np.cov(X.T, bias=True)).max()   # independent
    grid = lam_c * np.geomspace(0.7, 1.4, 36)
    path = temperature_path(X, max_clusters=2, inverse_temperatures=grid, max_iter=5000,
                            tol=1e-10)
    # two computations of C (sums of n products, maybe as E[x x^T] - m m^T: n eps of
    # E||x||^2 per entry) and of its largest eigenvalue (backward stable: d eps ||C||)
    scale = float((X**2).sum(1).mean()) * lam_c
    rel = sum_tol(len(X)) * scale + X.shape[1] * eps()
    assert path.predicted_first_split == pytest.approx(lam_c, rel=rel)
    split = path.split_inverse_temperatures[0]
    assert lam_c <= split <= 1.05 * lam_c           # the derivation, to 5% (the figure's)
    assert np.all(path.n_clusters[path.inverse_temperatures < split] == 1)
    assert np.all(path.n_clusters[path.inverse_temperatures >= split] == 2)


def test_the_path_is_deterministic_and_does_not_depend_on_row_order():
    X = _blobs(3, d=3)
    a, b = temperature_path(X, max_clusters=5), temperature_path(X, max_clusters=5)
    np.testing.assert_array_equal(a.heads, b.heads)                   # the same run twice
    np.testing.assert_array_equal(a.n_clusters, b.n_clusters)
    perm = np.random.default_rng(1).permutation(len(X))
    c = temperature_path(X[perm], max_clusters=5)
    # counts: rounding of the permuted sums moves no count (no merge test within rounding
    # of its threshold on these blobs, 6 standard deviations apart)
    np.testing.assert_array_equal(a.n_clusters, c.n_clusters)
    np.testing.assert_allclose(a.heads, c.heads, atol=1e-8)


def test_more_heads_than_clusters_finds_the_clusters_without_outlier_clusters():
    X = _blobs(3, d=3, outliers=3)
    path = temperature_path(X, max_clusters=8)
    choice = path.choose_n_clusters()
    assert choice.n_clusters == 3, choice.reason
    assert np.all(choice.plateau.sizes >= 150)      # the 3 outliers are no cluster
    for plateau in path.plateaus:
        assert np.all(plateau.sizes >= path.min_cluster_size)
    for bad in (np.nan, -1.0):          # they read as 0, silently
        with pytest.raises(ValueError, match="min_width must be a finite number >= 0"):
            path.choose_n_clusters(min_width=bad)


def test_one_gaussian_blob_is_one_cluster_and_clear_blobs_are_found():
    X = np.random.default_rng(0).standard_normal((400, 2))
    assert temperature_path(X, max_clusters=8).choose_n_clusters().n_clusters == 1
    X = _blobs(4, d=4, rng=2)
    assert temperature_path(X, max_clusters=8).choose_n_clusters().n_clusters == 4


def test_second_variation_of_the_risk_at_the_mean_is_negative_at_every_lambda():
    # R(+-eps v) - R(0) = -2 lambda eps^2 v^T C v + O(eps^4), with a dense formula
    X = _two_blobs(n=400, sigma=0.5)
    X = X - X.mean(0)
    C = X.T @ X / len(X)
    v = np.linalg.eigh(C)[1][:, -1]
    for lam in (0.05, 0.5, 5.0):
        eps = 1e-3 / np.sqrt(lam)
        heads = np.stack([eps * v, -eps * v])
        logits = lam * X @ heads.T - 0.5 * lam * (heads**2).sum(1)
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        change = ((X - a @ heads) ** 2).sum(1).mean() - (X**2).sum(1).mean()
        assert change == pytest.approx(-2 * lam * eps**2 * v @ C @ v, rel=1e-4)


def test_the_risk_path_has_no_merged_phase():
    X = _two_blobs(sigma=0.3)
    lam_c = predicted_first_split(X)
    path = temperature_path(X, max_clusters=2, objective="risk",
                            inverse_temperatures=[0.05 * lam_c])
    assert path.predicted_first_split == 0.0
    assert path.n_distinct[0] == 2 and path.n_clusters[0] == 2
    gap = np.linalg.norm(path.heads[0, 0] - path.heads[0, 1])
    assert gap > 2 * np.sqrt(np.trace(np.cov(X.T)))      # far outside the data


def test_sphere_split_agrees_with_its_derivation():
    mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    X = mix.sample(4000, rng=0)
    lam_c = predicted_first_split(X, geometry="sphere")
    # population value sqrt(2) / (1 + 2 sigma^2), up to sampling error
    assert lam_c == pytest.approx(np.sqrt(2) / (1 + 2 * 0.09), rel=0.05)
    path = temperature_path(X, max_clusters=2, geometry="sphere", max_iter=5000,
                            inverse_temperatures=lam_c * np.geomspace(0.7, 1.4, 36))
    assert lam_c <= path.split_inverse_temperatures[0] <= 1.05 * lam_c
    assert np.allclose(np.linalg.norm(path.heads, axis=2), 1.0)


def test_plot_and_summary():
    path = temperature_path(_two_blobs(), max_clusters=3)
    fig = path.plot()
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    summary = path.to_dict()
    assert summary["n_clusters"] == path.n_clusters.tolist()
    assert summary["plateaus"][0]["n_clusters"] == 1


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(X=[[0.0, np.nan], [1.0, 1.0]]), "NaN"),
    (dict(X=[[1.0, 2.0]]), "n >= 2"),
    (dict(X=[[1.0, 2.0], [1.0, 2.0]]), "no spread"),
    (dict(max_clusters=0), "max_clusters"),
    (dict(objective="loss"), "objective"),
    (dict(geometry="torus"), "geometry"),
    (dict(inverse_temperatures=[1.0, -1.0]), "positive"),
    (dict(stride=0), "stride"),
    (dict(n_decades=1e6), r"n_decades=1000000.0 at grid_ratio=1.08 is a grid of 2.99e\+07"),
    (dict(grid_ratio=1 + 1e-9, n_decades=3.0), r"is a grid of 6.91e\+09 inverse temperatures"),
    (dict(max_iter=0), "max_iter must be an integer >= 1"),
    (dict(merge_tol=np.nan), "merge_tol must be a finite number >= 0"),
    (dict(merge_tol=-1.0), "merge_tol must be a finite number >= 0"),
    (dict(tol=-1.0), "tol must be a finite number >= 0"),
    (dict(min_cluster_size=51), "min_cluster_size=51 is more than the 50 rows"),
    (dict(inverse_temperatures=[[1.0, 2.0]]), r"one-dimensional, got shape \(1, 2\)"),
    # a grid read backwards or twice gave plateaus of negative width
    (dict(inverse_temperatures=[4.0, 2.0, 1.0]), "inverse_temperatures must increase strictly"),
    (dict(inverse_temperatures=[1.0, 2.0, 1.0, 2.0]), "must increase strictly"),
    (dict(X=np.array([[0.0, 1j], [1.0, 1.0]])), "X must be real, got complex values"),
])
def test_bad_inputs_name_the_bad_value(kwargs, match):
    args = dict(X=_two_blobs(n=50), max_clusters=2) | kwargs
    with pytest.raises(ValueError, match=match):
        temperature_path(args.pop("X"), **args)


def test_a_few_rows_count_their_clusters():
    # the default min_cluster_size, max(5, n // 100), is at most n // 2: two clusters of
    # four rows each are counted (at 5, no cluster of 8 rows could be)
    X = np.r_[np.zeros((4, 2)), np.full((4, 2), 10.0)] + np.arange(8)[:, None] * 1e-3
    path = temperature_path(X, max_clusters=2)
    assert path.n_clusters.max() == 2


def test_heads_stay_in_the_dtype_independent_path():
    X = torch.as_tensor(_two_blobs(n=200), dtype=torch.float32)
    path = temperature_path(X, max_clusters=2)
    assert path.heads.dtype == np.float64 and path.n_clusters[-1] == 2


# -- the strided path, the stop callback, and the pieces that make the path fast ------------
def _unequal_blobs(k, d, rng):
    """``k`` blobs of spreads 0.6-1.4, 100-300 rows each, centres at least 5 apart (the
    mixtures of benchmarks/bench_auto_k.py)."""
    gen = np.random.default_rng(rng)
    side, centres = 5.0 * max(2.0, 2.0 * k ** (1.0 / d)), []
    while len(centres) < k:
        c = gen.uniform(0.0, side, d)
        if all(np.linalg.norm(c - o) >= 5.0 for o in centres):
            centres.append(c)
    return np.concatenate([c + s * gen.standard_normal((m, d)) for c, s, m in zip(
        centres, gen.uniform(0.6, 1.4, k), gen.integers(100, 301, k), strict=True)])


@pytest.mark.parametrize(("k", "d", "rng"), [(3, 2, 0), (6, 2, 1), (9, 5, 2), (5, 20, 3)])
def test_a_strided_path_finds_its_changes_where_single_steps_do(k, d, rng):
    X = _unequal_blobs(k, d, rng)
    one = temperature_path(X, 12, **FAST_SETTINGS | {"stride": 1})
    strided = temperature_path(X, 12, **FAST_SETTINGS | {"stride": 4})
    assert len(strided.inverse_temperatures) < len(one.inverse_temperatures)  # it strides
    assert set(strided.inverse_temperatures) <= set(one.inverse_temperatures)
    np.testing.assert_array_equal(strided.split_inverse_temperatures,    # values of the grid
                                  one.split_inverse_temperatures)
    count = dict(zip(one.inverse_temperatures, one.n_clusters, strict=True))
    assert all(count[lam] == c for lam, c in zip(strided.inverse_temperatures,
                                                 strided.n_clusters, strict=True))
    assert ([(p.n_clusters, p.start, p.stop) for p in strided.plateaus]
            == [(p.n_clusters, p.start, p.stop) for p in one.plateaus])
    assert strided.choose_n_clusters().n_clusters == one.choose_n_clusters().n_clusters == k


def test_a_callback_that_returns_true_stops_the_path():
    X = _blobs(3, d=3)
    seen = []
    path = temperature_path(X, 6, callback=lambda i, lam, k: seen.append((i, lam, k)) or k >= 2)
    full = temperature_path(X, 6)
    assert path.n_clusters[-1] >= 2 and np.all(path.n_clusters[:-1] < 2)
    assert len(path.inverse_temperatures) < len(full.inverse_temperatures)
    assert [s[1] for s in seen] == path.inverse_temperatures.tolist()
    np.testing.assert_array_equal(path.n_clusters,                       # the same steps
                                  full.n_clusters[:len(path.n_clusters)])


def test_groups_are_scipys_connected_components():
    from scipy.sparse.csgraph import connected_components

    from attnclust.cluster._path_step import _groups

    gen = np.random.default_rng(0)
    for _ in range(500):
        K, d = int(gen.integers(1, 30)), int(gen.integers(1, 4))
        heads = 0.01 * gen.integers(0, 4, (K, d)) + 1e-4 * gen.standard_normal((K, d))
        tol = float(gen.choice([0.005, 0.01, 0.015, 0.03]))
        dist = np.linalg.norm(heads[:, None] - heads[None], axis=-1)
        close = dist <= tol
        # no distance within rounding of tol (the 1e-4 draws set the margin): the same graph
        assert (np.abs(dist - tol) > 8 * eps() * tol).all()
        np.testing.assert_array_equal(_groups(heads, tol),
                                      connected_components(close, directed=False)[1])


def test_the_fixed_point_on_distinct_heads_is_the_map_on_all_heads():
    """Coincident heads iterated as one point (their summed weight) against the plain map
    ``mu_h = sum_i a_ih x_i / sum_i a_ih``, ``p_h = mean_i a_ih`` on every head."""
    from attnclust.cluster._path_step import _annealing_fixed_point

    X = _blobs(3, d=2, rng=4) / 6.0
    gen = np.random.default_rng(5)
    heads = np.repeat(gen.standard_normal((3, 2)), [2, 3, 1], axis=0)
    weights = gen.uniform(0.5, 1.5, 6)
    weights /= weights.sum()
    lam = 2.0
    H, p, moves = heads.copy(), weights.copy(), []
    for _ in range(25):
        logits = lam * X @ H.T - 0.5 * lam * (H ** 2).sum(1) + np.log(p)
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        new, p = (a.T @ X) / a.sum(0)[:, None], a.mean(0)
        moves.append(np.abs(new - H).max())
        H = new
    ours, w, converged = _annealing_fixed_point(X, heads, weights, lam, "euclidean", 25, 0.0)
    # a step's rounding: the logits lam <x, mu> - lam ||mu||^2 / 2 within lam (d + 2) eps
    # (||x|| + ||mu||)^2 / 2, so each a_ih within twice that relatively (a softmax), and
    # the means and weights sum n terms (sum_tol); a later step carries an error at most
    # by the map's growth on these iterates, read off the successive moves (G ~ 1.06 as
    # the heads drift apart; 1 at least), so 25 steps add sum_t G^t steps' rounding
    d, norms = X.shape[1], np.linalg.norm(X, axis=1).max() + np.linalg.norm(H, axis=1).max()
    step = sum_tol(len(X)) + lam * (d + 2) * eps() * norms**2
    assert min(moves[1:]) > 0                       # the growth below is a ratio of moves
    growth = max(1.0, max(b / a for a, b in zip(moves[1:], moves[2:], strict=False)))
    assert growth < 1.5                              # else the bound below says little
    carried = step * sum(growth**t for t in range(25))
    np.testing.assert_allclose(ours, H, rtol=0, atol=carried * np.abs(X).max())
    np.testing.assert_allclose(w, p, rtol=carried)
    assert not converged                             # tol = 0: it ran all 25


@pytest.mark.parametrize("scale", [1e155, 1e160, 1e-155, 1e-300, "one at the largest"])
def test_a_spread_beyond_float64s_lambdas_says_so(scale):
    """Rows of spread 1e155 to 1e160 or 1e-155 (distinct rows, 1e-300 included), or one
    entry at float64's largest, put the path's inverse temperatures ``~ 1 / spread^2`` out
    of float64's range: the error says so (it was eigh failing to converge on a covariance
    that overflowed, 'inverse_temperatures must be positive' that the caller never
    passed, or 'no spread')."""
    X = _two_blobs(n=50)
    if scale == "one at the largest":
        X[3, 0] = np.finfo(np.float64).max
    else:
        X = X * scale
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match=r"X's spread \(.*\) puts the path's inverse "
                           "temperatures out of float64's range; rescale the data"):
            temperature_path(X, 2)
    with pytest.raises(ValueError, match="100 decades from .* leave float64's range"):
        temperature_path(_two_blobs(n=50) * 1e-140, 2, n_decades=100)


def test_wide_rows_follow_the_path_without_a_dense_covariance():
    """300 columns, beyond attnclust._spectral.DENSE_FEATURES: the first split is 1 over
    the largest eigenvalue of the covariance (NumPy's dense eigvalsh as the reference, to
    Lanczos' convergence) and the three blobs make a path of three clusters."""
    from attnclust.cluster.annealing import predicted_first_split

    rng = np.random.default_rng(0)
    centres = 3.0 * rng.normal(size=(3, 300))
    X = np.concatenate([c + rng.normal(size=(60, 300)) for c in centres])
    reference = 1.0 / np.linalg.eigvalsh(np.cov(X.T, bias=True))[-1]
    assert predicted_first_split(X) == pytest.approx(reference, rel=1e-9)
    assert temperature_path(X, max_clusters=4).choose_n_clusters().n_clusters == 3
    sphere = X / np.linalg.norm(X, axis=1, keepdims=True)
    assert temperature_path(sphere, max_clusters=4, geometry="sphere"
                            ).choose_n_clusters().n_clusters == 3


def test_wide_rows_without_spread_in_a_group_or_at_all():
    """Two points repeated, 300 columns: a group whose rows all sit on its mean has no
    direction (Lanczos cannot start from a zero operator; the Gram matrix says 0), and a
    tensor that requires grad is read as the dense branch reads it."""
    import torch

    from attnclust.cluster.annealing import predicted_first_split

    X = np.r_[np.zeros((10, 300)), np.ones((10, 300))]
    assert temperature_path(X, max_clusters=3).choose_n_clusters().n_clusters == 2
    assert predicted_first_split(np.ones((20, 300))) == np.inf
    wide = torch.randn(20, 300, dtype=torch.float64, requires_grad=True)
    reference = 1.0 / np.linalg.eigvalsh(np.cov(wide.detach().numpy().T, bias=True))[-1]
    assert predicted_first_split(wide) == pytest.approx(reference, rel=1e-9)

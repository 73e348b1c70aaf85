"""``AttentionClustering(n_clusters="auto")`` (K scored by the BIC of the shaped layer,
:mod:`attnclust.cluster.choice.k_choice`; the temperature path's plateau rule,
:mod:`attnclust.cluster.choice.path_choice`) and ``init="anneal"``, a start that does not
depend on the seed."""

from __future__ import annotations

import warnings
from itertools import groupby

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust as ac
from _tolerance import sum_tol
from attnclust.cli import main
from attnclust.cluster.settings import FitSettings

SETTINGS = FitSettings()     # the defaults of the choice of K


def _blobs(k, d=3, n_each=200, sep=8.0, rng=0):
    gen = np.random.default_rng(rng)
    centres = sep * gen.standard_normal((k, d))
    while min(np.linalg.norm(a - b) for i, a in enumerate(centres) for b in centres[:i]) < sep:
        centres = sep * gen.standard_normal((k, d))
    labels = np.repeat(np.arange(k), n_each)
    return centres[labels] + gen.standard_normal((k * n_each, d)), labels


@pytest.mark.parametrize("k", [2, 3, 5])
def test_auto_finds_clear_clusters(k):
    X, z = _blobs(k, rng=k)
    est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == k, est.n_clusters_reason_
    assert est.get_params()["n_clusters"] == "auto"          # fit leaves the parameter
    assert est.cluster_centers_.shape == (k, 3)
    assert ac.adjusted_rand_index(z, est.labels_) > 0.99
    choice = est.k_choice_
    assert choice.best == 2 + int(np.argmin(choice.bic[1:])) == k
    assert choice.structure_z > 3 and not choice.weak


def test_auto_says_one_cluster_for_one_blob():
    X = np.random.default_rng(3).standard_normal((500, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 1 and "no structure" in est.n_clusters_reason_


def test_more_clusters_than_max_clusters_say_so_in_the_reason():
    """12 blobs, at most 10 clusters scored: the least BIC is at the edge, K = 10, and the
    choice warns that the rows may hold more; with 20, K = 12."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    X, _ = _blobs(12, d=5, n_each=100, sep=12.0, rng=4)
    with pytest.warns(WeakChoiceWarning, match="raise max_clusters"):
        est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 10 and est.k_choice_.weak
    wider = ac.AttentionClustering("auto", max_clusters=20, random_state=0).fit(X)
    assert wider.n_clusters_ == 12 and "max_clusters" not in wider.n_clusters_reason_


def test_auto_refuses_other_strings_and_bad_max_clusters():
    X, _ = _blobs(2)
    with pytest.raises(ValueError, match="n_clusters"):
        ac.AttentionClustering("many").fit(X)
    with pytest.raises(ValueError, match="max_clusters"):
        ac.AttentionClustering("auto", max_clusters=0).fit(X)



def test_max_clusters_one_answers_one_cluster_without_blaming_the_rows():
    X, _ = _blobs(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no WeakChoiceWarning: the user asked
        est = ac.AttentionClustering("auto", max_clusters=1, random_state=0).fit(X)
    assert est.n_clusters_ == 1 and est.n_clusters_reason_ == (
        "K = max_clusters = 1: no other K to compare")
    # nothing was scored: no BIC, no structure test (they read 0 and 0)
    assert np.isinf(est.k_choice_.bic).all() and np.isnan(est.k_choice_.structure_z)


@pytest.mark.parametrize("X", [np.repeat([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], 20, 0),
                               np.repeat(5.0 * np.eye(4), 20, 0)])
def test_one_cluster_of_a_few_repeated_points_is_a_weak_choice(X):
    """Four points, each repeated 20 times, fill their grid at its resolution and the
    structure test calls them one cluster; the choice then says that it is weak, and how to
    keep them apart (a Gaussian blob's one cluster stays quiet:
    test_auto_says_one_cluster_for_one_blob)."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    with pytest.warns(WeakChoiceWarning, match=r"only 4 distinct values.*n_clusters=4"):
        est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 1

def test_anneal_init_does_not_depend_on_the_seed_and_matches_kmeans():
    X, _ = _blobs(4, rng=1)
    a = ac.AttentionClustering(4, init="anneal", random_state=0).fit(X)
    b = ac.AttentionClustering(4, init="anneal", random_state=123).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    km = KMeans(4, n_init=10, random_state=0).fit(X)
    ours = ((X - a.cluster_centers_[a.labels_]) ** 2).sum()
    assert ours <= km.inertia_ * (1 + 1e-6)


def test_anneal_init_ends_in_the_hard_limit_as_the_default_does():
    """From the path's heads the fit runs Lloyd to a stable partition: its heads are the
    means of their cells (the layer's fixed point as lambda -> infinity), on touching
    blobs where the path's own heads are not."""
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal((i, j), 0.45, (60, 2)) for i in range(3) for j in range(3)])
    est = ac.AttentionClustering(9, init="anneal", random_state=0).fit(X)
    labels = ((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1).argmin(1)
    means = np.stack([X[labels == h].mean(0) for h in range(9)])
    np.testing.assert_allclose(est.cluster_centers_, means, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(est.labels_, labels)
    start = ac.cluster.annealing.anneal_heads(X - X.mean(0), 9) + X.mean(0)
    assert np.abs(np.sort(start, 0) - np.sort(est.cluster_centers_, 0)).max() > 1e-3


def test_fixed_k_fit_sets_n_clusters_():
    X, _ = _blobs(2)
    assert ac.AttentionClustering(2, random_state=0).fit(X).n_clusters_ == 2


def test_cli_fit_auto_prints_the_chosen_k(tmp_path, capsys):
    X, _ = _blobs(3)
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "auto", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("chose K=3: BIC") and "K=3" in out
    assert np.load(tmp_path / "x.centers.npy").shape == (3, 3)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "several"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'several'" in err[0]


def test_cli_fit_auto_needs_the_rows_on_one_process(tmp_path, capsys):
    X, _ = _blobs(2)
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "auto", "--batch-rows", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-k auto" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def _choice(lams, counts):
    """``choose_n_clusters`` of a path with these counts (the plateaus' heads are dummies)."""
    from attnclust.cluster.annealing import TemperaturePath
    from attnclust.cluster.choice.path_choice import plateaus_of

    reps = [(np.zeros((c, 1)), np.ones(c, dtype=int)) for c in counts]
    path = TemperaturePath(lams, counts, counts, np.zeros(len(lams)),
                           np.zeros((len(lams), 1, 1)), np.array([]), 1.0,
                           plateaus_of(lams, counts, reps))
    return path.choose_n_clusters().n_clusters


def test_the_settled_stop_never_changes_the_choice():
    """Random count sequences: the choice of the path cut where the stop says it is settled
    equals the choice of the whole path (which may end before the grid does). A stop one
    grid value too eager (by log 1.12) fails it."""
    from attnclust.cluster.choice.path_choice import MIN_PLATEAU_WIDTH, _Settled

    gen = np.random.default_rng(0)
    stopped = 0
    for _ in range(3000):
        grid = 0.01 * 1.12 ** np.arange(int(gen.integers(3, 70)))
        steps = gen.choice([0] * 8 + [1, 1, 2, -1], len(grid))
        counts = np.maximum(1, 1 + np.cumsum(steps * (np.arange(len(grid)) > 3)))
        end = int(gen.choice([gen.integers(1, len(grid) + 1), len(grid)]))  # or earlier
        settled = _Settled(grid, MIN_PLATEAU_WIDTH)
        cut = next((i + 1 for i in range(end) if settled(i, grid[i], counts[i])), end)
        stopped += cut < end
        assert _choice(grid[:cut], counts[:cut]) == _choice(grid[:end], counts[:end])
    assert stopped >= 300                                    # the stop does cut paths (408)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_auto_follows_the_path_until_its_choice_is_settled(k):
    from attnclust.cluster.choice.path_choice import FAST_SETTINGS, choose_from_path

    X = _blobs(k, rng=k)[0] if k > 1 else np.random.default_rng(3).standard_normal((500, 2))
    choice, path = choose_from_path(X, 12, geometry="euclidean")
    whole = ac.temperature_path(X, 12, **FAST_SETTINGS)
    assert choice.n_clusters == whole.choose_n_clusters().n_clusters == k
    n = len(path.inverse_temperatures)
    np.testing.assert_array_equal(path.n_clusters, whole.n_clusters[:n])
    if k > 1:                     # settled inside the grid: the cascade after it is skipped
        assert n < len(whole.inverse_temperatures)


def test_auto_path_does_not_depend_on_the_seed_or_the_row_order():
    from attnclust.cluster.choice.path_choice import choose_from_path

    X, _ = _blobs(4, rng=6)
    a = choose_from_path(X, 10, geometry="euclidean", random_state=0)[1]
    b = choose_from_path(X, 10, geometry="euclidean", random_state=123)[1]
    perm = np.random.default_rng(1).permutation(len(X))
    c = choose_from_path(X[perm], 10, geometry="euclidean", random_state=0)[1]
    # b: the same rows in the same order (the seed plays no part): the same computation
    np.testing.assert_array_equal(a.inverse_temperatures, b.inverse_temperatures)
    np.testing.assert_array_equal(a.n_clusters, b.n_clusters)
    np.testing.assert_array_equal(a.heads, b.heads)
    # c: permuted rows, so every sum in another order. The grid is 1 / lambda_max of the
    # rows' covariance: entries within n eps of their scale, lambda_max within d of them
    np.testing.assert_allclose(a.inverse_temperatures, c.inverse_temperatures, rtol=2 *
                               X.shape[1] * sum_tol(len(X)))
    # near a split the heads' fixed point is ill-conditioned (singular at the critical
    # lambda), so rounding may split one grid step apart: counts and heads are compared
    # away from the steps where either path's count changes, and the counts' sequence
    assert [k for k, _ in groupby(a.n_clusters)] == [k for k, _ in groupby(c.n_clusters)]
    change = np.zeros(len(a.n_clusters), dtype=bool)
    for counts in (a.n_clusters, c.n_clusters):
        at = np.flatnonzero(np.diff(counts) != 0)
        change[at] = change[at + 1] = True
    assert change.mean() < 0.5
    np.testing.assert_array_equal(a.n_clusters[~change], c.n_clusters[~change])
    # each lambda's walk stops at a step of at most tol = 1e-7 of the rows' scale: another
    # rounding may stop it one step apart, no farther
    scale = np.sqrt(np.mean(np.sum((X - X.mean(0)) ** 2, 1)))
    np.testing.assert_allclose(a.heads[~change], c.heads[~change], rtol=0, atol=1e-7 * scale)


def test_auto_with_spare_heads_finds_no_cluster_of_a_few_outliers():
    from attnclust.cluster.choice.path_choice import choose_from_path

    X, _ = _blobs(3, d=3, rng=7)
    X = np.concatenate([X, 200.0 + np.random.default_rng(8).standard_normal((3, 3))])
    choice, path = choose_from_path(X, 12, geometry="euclidean")
    assert choice.n_clusters == 3, choice.reason
    assert np.all(choice.plateau.sizes >= 190)      # the 3 outliers are no cluster
    assert all(np.all(p.sizes >= path.min_cluster_size) for p in path.plateaus)


# -- the criterion of n_clusters="auto" (attnclust.cluster.choice.k_choice) -----------------
@pytest.mark.parametrize("cov", ["full", "diag", "spherical"])
def test_mixture_bic_matches_scipy_densities(cov):
    """With no EM step, the BIC is that of the cells' moments in the shape plus the floor
    ``D = 1e-6 I``, weights (1 - 0.05) N_h / n and a uniform background of weight 0.05,
    each head's density times ``exp(-tr(P_h D) / 2)`` (the shaped layer's log-joint),
    computed here with scipy's densities: two sums of n log-densities, within n eps of
    their scale."""
    from scipy.stats import multivariate_normal

    from _tolerance import sum_tol
    from attnclust.cluster.choice.k_choice import mixture_bic

    X, z = _blobs(3, d=2, n_each=60, sep=6.0, rng=2)
    log_volume = float(np.log(np.ptp(X, 0)).sum())
    dens = np.full(len(X), 0.05 / np.exp(log_volume))
    for h in range(3):
        rows = X[z == h]
        cov_h = np.cov(rows.T, bias=True)
        if cov == "diag":
            cov_h = np.diag(np.diag(cov_h))
        elif cov == "spherical":
            cov_h = np.trace(cov_h) / 2 * np.eye(2)
        cov_h = cov_h + 1e-6 * np.eye(2)
        trace = 1e-6 * np.trace(np.linalg.inv(cov_h))
        dens += 0.95 * len(rows) / len(X) * np.exp(-0.5 * trace) * multivariate_normal(
            rows.mean(0), cov_h).pdf(X)
    p = 3 * {"full": 2 + 3, "diag": 4, "spherical": 3}[cov] + 2 + 1
    ref = -2 * np.log(dens).sum() + p * np.log(len(X))
    ours = mixture_bic(X, z, 3, log_volume=log_volume, steps=0, covariance_type=cov)
    assert abs(ours - ref) <= 100 * sum_tol(len(X)) * np.abs(np.log(dens)).sum()


def test_mixture_bic_em_steps_never_lower_the_likelihood():
    """EM steps (the layer's fixed point at lambda = 1) raise the likelihood: with the
    same parameter count, the BIC after 1, 5 and 10 steps is at most the BIC of the
    cells, in every shape."""
    from attnclust.cluster.choice.k_choice import mixture_bic

    X, z = _blobs(3, d=2, n_each=60, sep=4.0, rng=5)
    lv = float(np.log(np.ptp(X, 0)).sum())
    for cov in ("full", "diag", "spherical"):
        bics = [mixture_bic(X, z, 3, log_volume=lv, steps=s, covariance_type=cov)
                for s in (0, 1, 5, 10)]
        assert all(b <= bics[0] for b in bics[1:]), (cov, bics)


def _one_cluster(kind, seed, n=500):
    rng = np.random.default_rng([seed, 77, len(kind)])
    if kind == "gaussian":
        return rng.standard_normal((n, 2))
    if kind == "uniform":
        return rng.uniform(0, 1, (n, 2))
    rot = np.linalg.qr(rng.standard_normal((2, 2)))[0]
    return rng.standard_normal((n, 2)) * [5.0, 1.0] @ rot


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gaussian", "uniform", "elongated"])
def test_no_structure_test_on_one_cluster_data(kind):
    """One-cluster data, 10 fixed seeds. A Gaussian blob, round or elongated 5:1, gives
    ``z`` far below 0 (its cells remove less scatter than a uniform's) and one Gaussian
    has the least BIC: ``K = 1`` on every seed. A uniform square is the structure test's
    null (``z`` near N(0, 1): its mean was 0.55 over 300 squares, ``K*`` being the ``K``
    whose cells fit best), but Gaussians fit a flat square better than one does: the BIC
    splits it, and the choice says it is weak and why (the documented cost of requiring
    both tests for ``K = 1``)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    found = [choose_n_clusters(_one_cluster(kind, s), 10, random_state=s) for s in range(10)]
    zs = np.array([c.structure_z for c in found])
    if kind == "uniform":
        assert abs(zs.mean()) < 3 / np.sqrt(10) + 0.5       # mean of N(0, 1)-like draws
        split = [c for c in found if c.n_clusters > 1]
        assert all(c.weak and "no more scatter than in uniform rows" in c.reason
                   for c in split), [c.reason for c in split]
        assert all(c.structure_z <= SETTINGS.structure_z for c in split)
    else:
        assert all(c.n_clusters == 1 for c in found), [c.reason for c in found]
        assert zs.max() < 0


def test_auto_is_blind_to_feature_units():
    """The BIC scores the Gaussian components in the standardized space: rescaling the
    columns by 1e-3 and 1e4 leaves their count as it is (the raw k-means cells would follow
    the large column). The clusters of heads are read in the rows' own units, as every fit
    of the default is: there the second column alone holds two clusters."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1.0, (150, 2)) for c in ((0, 0), (7, 0), (0, 7))])
    plain = ac.AttentionClustering("auto", random_state=0).fit(X)
    scaled = ac.AttentionClustering("auto", random_state=0).fit(X * [1e-3, 1e4])
    assert plain.k_choice_.best == scaled.k_choice_.best == plain.n_clusters_ == 3
    assert scaled.n_clusters_ == 2 and scaled.n_clusters_reason_.startswith("2 clusters of ")


def test_auto_finds_elongated_clusters_and_their_shape():
    """Elongated clusters (8:1) in three orientations: the full-covariance criterion counts
    them where a spherical BIC (scikit-learn's GaussianMixture) needs more components;
    with covariance_type="full" one call gives K and the shape."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(1)
    parts = []
    for c, a in zip(((0, 0), (14, 0), (7, 12)), (0.0, np.pi / 3, 2 * np.pi / 3), strict=True):
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        parts.append(c + rng.standard_normal((300, 2)) * [4.0, 0.5] @ rot.T)
    X, z = np.concatenate(parts), np.repeat(np.arange(3), 300)
    est = ac.AttentionClustering("auto", covariance_type="full", random_state=0).fit(X)
    assert est.n_clusters_ == 3 and est.covariances_.shape == (3, 2, 2), est.n_clusters_reason_
    assert ac.adjusted_rand_index(z, est.labels_) > 0.95
    sph = [GaussianMixture(k, covariance_type="spherical", random_state=0).fit(X).bic(X)
           for k in range(1, 11)]
    assert 1 + int(np.argmin(sph)) > 3


@pytest.mark.parametrize("cov", ["spherical", "diag", "full"])
def test_auto_with_every_covariance_type(cov):
    X, z = _blobs(3, d=3, rng=3)
    est = ac.AttentionClustering("auto", covariance_type=cov, random_state=0).fit(X)
    assert est.n_clusters_ == 3 and ac.adjusted_rand_index(z, est.labels_) > 0.99


def _noisy_blobs(seed):
    X, _ = _blobs(4, d=2, n_each=200, sep=10.0, rng=seed)
    rng = np.random.default_rng(seed + 1)
    return np.r_[X, rng.uniform(X.min(0), X.max(0), (120, 2))]


@pytest.mark.slow
def test_auto_sees_clusters_through_uniform_noise():
    """13% uniform background over 4 blobs: the mixture's background term takes most
    scattered rows, so the criterion spends fewer Gaussians on them than BIC over
    scikit-learn's GaussianMixture(full) does; it still adds one on some seeds (K = 5:
    a limit, stated in docs/guide/temperature-path.md)."""
    from sklearn.mixture import GaussianMixture

    from attnclust.cluster.choice.k_choice import choose_n_clusters

    ours, theirs = [], []
    for s in range(9, 14):
        X = _noisy_blobs(s)
        ours.append(choose_n_clusters(X, 10, random_state=0).n_clusters)
        theirs.append(1 + int(np.argmin([GaussianMixture(k, random_state=0).fit(X).bic(X)
                                         for k in range(1, 11)])))
    assert all(4 <= a <= b for a, b in zip(ours, theirs, strict=True)), (ours, theirs)
    assert sum(ours) < sum(theirs) and ours.count(4) >= 3, (ours, theirs)


def test_a_weak_choice_warns():
    """A set of the test above where the BIC weight of K = 5 is below 0.9 (0.77): fit says
    so with a WeakChoiceWarning, and the reason with how sure it is."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    with pytest.warns(WeakChoiceWarning, match=r"BIC weight 0\.\d\d < 0\.9"):
        est = ac.AttentionClustering("auto", random_state=0).fit(_noisy_blobs(9))
    assert est.k_choice_.weak and "weak: other K are close" in est.n_clusters_reason_


def _separated(k, d, seed):
    """The benchmark's separated mixtures: ``k`` isotropic blobs at least 5 apart, spreads
    0.6-1.4, 100-300 rows each."""
    rng = np.random.default_rng(seed)
    side, centres = 5.0 * max(2.0, 2.0 * k ** (1.0 / d)), []
    while len(centres) < k:
        c = rng.uniform(0.0, side, d)
        if all(np.linalg.norm(c - o) >= 5.0 for o in centres):
            centres.append(c)
    sizes = rng.integers(100, 301, k)
    X = np.concatenate([c + s * rng.standard_normal((m, d)) for c, s, m in zip(
        centres, rng.uniform(0.6, 1.4, k), sizes, strict=True)])
    return X, np.repeat(np.arange(k), sizes)


def test_auto_lets_the_bic_choose_the_shape_in_many_dimensions():
    """Seven separated blobs in d = 20, 100-300 rows each: 230 parameters per full-
    covariance head are more than the rows support (the full shape alone counted too few
    clusters on 18 of 30 such mixtures in benchmarks/bench_auto_k.py); the least BIC over
    the shapes is a spherical or diagonal one, at K = 7, and on the true partition the
    diagonal shape's BIC is below the full one's."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters, mixture_bic, standardized

    X, y = _separated(7, 20, seed=3)
    choice = choose_n_clusters(X, 12, random_state=0)
    assert choice.n_clusters == 7 and choice.covariance_type != "full", choice.reason
    Z = standardized(X)
    lv = float(np.log(np.ptp(Z @ np.linalg.svd(Z, full_matrices=False)[2].T, 0)).sum())
    diag, full = (mixture_bic(Z, y, 7, log_volume=lv, covariance_type=c) for c in ("diag", "full"))
    assert diag < full


def test_structure_test_also_in_the_rows_own_units():
    """Two blobs apart along x only: standardizing scales y's noise up to unit variance,
    and in that space the gap test alone finds no more structure than in uniform rows; in
    the rows' own units it does, so K = 2 (z is then the larger of the two)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters, standardized
    from attnclust.cluster.choice.structure import kmeans_cells, structure_z

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, [1.4, 1.4], (270, 2)), rng.normal([5.5, 0], [0.6, 0.6], (170, 2))]
    Z = standardized(X)
    z_std = structure_z(Z, kmeans_cells(Z, 2, np.random.default_rng(0))[1], 2,
                        np.random.default_rng(1))
    choice = choose_n_clusters(X, 10, random_state=0)
    assert z_std <= 3 < choice.structure_z and choice.n_clusters == 2, (z_std, choice.reason)


@pytest.mark.parametrize("patience", [SETTINGS.patience, 1, 5])
def test_the_scan_stops_once_the_bic_has_risen(patience):
    """Three blobs, max_clusters = 12: the scan stops ``settings.patience`` values of K
    past the least BIC; the K not scanned have BIC = inf and weight 0."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    X, _ = _blobs(3, rng=3)
    choice = choose_n_clusters(X, 12, random_state=0, settings=FitSettings(patience=patience))
    scanned = int(np.isfinite(choice.bic).sum())
    assert choice.n_clusters == 3 and scanned == 3 + patience
    assert np.all(np.isinf(choice.bic[scanned:])) and len(choice.bic) == 12


def test_merged_cells_join_a_blob_cut_in_two():
    """The scan's other candidate partition: the cells of K + 1 merged where Ward's cost is
    least, then Lloyd's steps. Four blobs, one cut in two by its median along x: the two
    halves are merged (the cheapest pair by far) and the four cells are the blobs, with
    the blobs' within sum of squares (within rounding of n + d products)."""
    from attnclust.cluster.choice.k_choice import _merged
    from attnclust.cluster.choice.structure import kmeans_cells

    X, z = _blobs(4, d=2, n_each=150, sep=10.0, rng=4)
    cut = z.copy()
    half = (z == 2) & (X[:, 0] > np.median(X[z == 2, 0]))
    cut[half] = 4
    heads = np.array([X[cut == h].mean(0) for h in range(5)])
    labels, within, fewer = _merged(X, (cut, None, heads), np.random.default_rng(0))
    assert ac.adjusted_rand_index(z, labels) == 1.0 and fewer.shape == (4, 2)
    truth = sum(((X[z == h] - X[z == h].mean(0)) ** 2).sum() for h in range(4))
    assert abs(within - truth) <= sum(X.shape) * np.finfo(float).eps * truth
    assert kmeans_cells(X, 1, None)[1] > within


def test_the_scan_keeps_the_merged_cells_where_they_are_better():
    """Every K scored by the scan has cells no worse (W_K) than those of K + 1 merged:
    the merge is tried at each K + 1 and kept when it lowers W_K."""
    import attnclust.cluster.choice.k_choice as kc

    X, _ = _separated(10, 5, seed=2)
    Z = kc.standardized(X)
    _, lo, hi = kc.principal_box(Z)
    cells, scores, _ = kc._scan(Z, 12, np.random.default_rng(0),
                             float(np.log(hi - lo).sum()), SETTINGS)
    tie = sum(Z.shape) * np.finfo(float).eps
    for k in range(2, min(len(scores) + 1, len(cells))):
        merged = kc._merged(Z, cells[k], np.random.default_rng(0))
        assert cells[k - 1][1] <= merged[1] * (1 + tie), k


def test_early_bounds_are_the_t_quantiles_and_hold_their_level():
    """c_b is the 1 - early_level quantile of t with b - 1 degrees of freedom; with D and
    the references i.i.d. normal (the null), z_b passes it with probability early_level:
    counted over 400,000 simulated tests, within 5 binomial standard deviations."""
    from scipy.stats import t

    from attnclust.cluster.choice.structure import early_bound

    rng = np.random.default_rng(0)
    m = 400_000
    for b in SETTINGS.looks:
        level = SETTINGS.early_level
        assert abs(early_bound(b) - t.ppf(1 - level, b - 1)) <= 1e-9 * early_bound(b)
        assert abs(early_bound(b, 0.01) - t.ppf(0.99, b - 1)) <= 1e-9 * early_bound(b, 0.01)
        draws = rng.standard_normal((m, b + 1))
        refs = draws[:, 1:]
        z = (draws[:, 0] - refs.mean(1)) / (refs.std(1, ddof=1) * np.sqrt(1 + 1 / b))
        passed = int((z > early_bound(b)).sum())
        expect = m * SETTINGS.early_level
        assert abs(passed - expect) <= 5 * np.sqrt(expect), (b, passed, expect)


def _full_and_sequential(Z, k, seed):
    """The structure test with all references and the sequential one, same draws."""
    from attnclust.cluster.choice.structure import kmeans_cells, structure_z

    within = kmeans_cells(Z, k, np.random.default_rng(seed))[1]
    return (structure_z(Z, within, k, np.random.default_rng(seed), looks=()),
            structure_z(Z, within, k, np.random.default_rng(seed)))


def test_sequential_structure_test_stops_early_on_clear_cases():
    """Separated blobs: z passes c_4 after 4 references, so the sequential z is the full
    test's computed on the first 4 draws (bit for bit: the same draws, the same sums), and
    both say structure."""
    from attnclust.cluster.choice.structure import early_bound, kmeans_cells, structure_z

    for k, d in ((2, 2), (4, 5), (7, 20)):
        X, _ = _separated(k, d, seed=k)
        within = kmeans_cells(X, k, np.random.default_rng(0))[1]
        full, seq = _full_and_sequential(X, k, 0)
        first4 = structure_z(X, within, k, np.random.default_rng(0), n_references=4, looks=())
        assert seq == first4 > early_bound(4) and full > SETTINGS.structure_z, (k, d, full, seq)


@pytest.mark.parametrize("kind", ["gaussian", "uniform", "elongated"])
def test_sequential_structure_test_decides_as_the_full_one_on_one_cluster_data(kind):
    """One-cluster data (the null, a uniform square, and Gaussian blobs): on 10 seeds the
    sequential test says no structure, as the full one does; on the uniform square no
    early look stops (|z_b| stays far below c_b), so z is the full test's exactly."""

    for s in range(10):
        full, seq = _full_and_sequential(_one_cluster(kind, s, n=300), 3, s)
        assert full <= SETTINGS.structure_z and seq <= SETTINGS.structure_z, (s, full, seq)
        if kind == "uniform":
            assert seq == full, (s, full, seq)


def test_a_near_tie_takes_the_fewer_clusters():
    """Four blobs in 13% uniform noise where one or two more Gaussians take noise rows for a
    BIC lower by less than settings.bare_mention (0.7 and 1.1): evidence not worth more than a bare
    mention adds no cluster, so K = 4, and the reason says so; the choice is weak."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    for seed in (23, 29):
        choice = choose_n_clusters(_noisy_blobs(seed), 10, random_state=0)
        least = 2 + int(np.argmin(choice.bic[1:]))
        assert choice.n_clusters == choice.best == 4 < least, choice.reason
        assert choice.bic[3] <= choice.bic[least - 1] + SETTINGS.bare_mention < choice.bic[2]
        assert "bare mention" in choice.reason and choice.weak


def _thirty_rows_in_three_blobs(seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 1.0, (10, 2)) for c in ((0, 0), (3, 0), (1.5, 2.6))])


def test_one_cluster_needs_strong_evidence():
    """Thirty rows in three blobs 3 sd apart (seed 7): no structure by the gap test, and one
    component has the least BIC by 4.9, positive but not strong evidence (Kass and
    Raftery: 6). K = 1 needs strong evidence, so the choice is the best K >= 2, weak, and
    the reason says why; asking only for positive evidence (2) answers one cluster."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    X = _thirty_rows_in_three_blobs(7)
    choice = choose_n_clusters(X, 6, random_state=0)
    one = choice.bic[0] - np.min(choice.bic[1:])
    assert -SETTINGS.strong_evidence < one < -2.0 and choice.structure_z <= SETTINGS.structure_z
    assert choice.n_clusters >= 2 and choice.weak, choice.reason
    assert "not the BIC's choice by 6" in choice.reason
    positive = choose_n_clusters(X, 6, random_state=0, settings=FitSettings(strong_evidence=2))
    assert positive.n_clusters == 1, positive.reason


def test_positive_evidence_suffices_where_the_gap_test_finds_structure_absent():
    """An elongated Gaussian (seed 4 of the one-cluster data): one component has the least
    BIC by 5.5 only, but its cells remove far less scatter than uniform rows (z = -12.8):
    the test finds structure absent, not only unproven, and positive evidence suffices."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    choice = choose_n_clusters(_one_cluster("elongated", 4), 10, random_state=4)
    one = choice.bic[0] - np.min(choice.bic[1:])
    assert -SETTINGS.strong_evidence < one < -SETTINGS.bare_mention
    assert choice.structure_z < -SETTINGS.structure_z and choice.n_clusters == 1


def test_strong_evidence_keeps_gaussians_whole_and_splits_more_small_mixtures():
    """Both error rates of K = 1 on thirty rows, 20 seeds each, against asking only for
    positive evidence (2): one Gaussian is one cluster as often (18; on the other two the
    BIC does not prefer one component at all), and thirty rows in three blobs 3 sd apart
    answer K = 1 less often (11 against 16)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    weaker = FitSettings(strong_evidence=2)
    ones = np.zeros((2, 2), dtype=int)           # (Gaussian, mixture) x (strong, positive)
    for s in range(20):
        gaussian = np.random.default_rng(s).normal(size=(30, 2))
        for row, X in enumerate((gaussian, _thirty_rows_in_three_blobs(s))):
            for col, settings in enumerate((SETTINGS, weaker)):
                ones[row, col] += choose_n_clusters(X, 6, random_state=s,
                                                    settings=settings).n_clusters == 1
    assert ones[0, 0] == ones[0, 1] >= 18, ones
    assert ones[1, 0] < ones[1, 1], ones


def test_a_mixture_with_a_head_at_the_floor_is_not_scored():
    """A Gaussian on fewer rows than dimensions sits at the covariance floor, and its
    likelihood is the floor's: mixture_bic gives it an infinite BIC when told the least
    floor, a finite one (far below one component's) when not."""
    from attnclust.cluster.choice.k_choice import mixture_bic

    rng = np.random.default_rng(0)
    Z = np.r_[rng.normal(size=(40, 5)), rng.normal(size=(2, 5)) + 10.0]   # two far rows
    labels = np.repeat([0, 1], [40, 2])
    volume = float(np.log(np.ptp(Z, 0)).sum())
    least = np.full(5, 1e-6)
    free = mixture_bic(Z, labels, 2, log_volume=volume, covariance_type="full", floor=least)
    one = mixture_bic(Z, np.zeros(42, int), 1, log_volume=volume, covariance_type="full",
                      floor=least)
    assert np.isfinite(free) and free < one
    assert mixture_bic(Z, labels, 2, log_volume=volume, covariance_type="full",
                       floor=least, least_floor=least) == np.inf


def test_few_rows_per_cluster_or_feature_give_no_gaussians_on_single_rows():
    """Gaussians on one or two rows won the BIC without bound: 30 rows of three blobs 10
    sd apart gave six clusters (one of one row) and one Gaussian of 100 rows in 30
    dimensions seven or eight. With the heads at the floor not scored: three clusters on
    seeds 0-7 and one cluster on 3 draws."""
    from sklearn.datasets import make_blobs

    from attnclust.cluster.choice.k_choice import choose_n_clusters

    for s in range(8):
        X, _ = make_blobs(30, 2, centers=[[0, 0], [10, 0], [0, 10]], random_state=s)
        assert choose_n_clusters(X, 10, random_state=0).n_clusters == 3, s
    for s in (100, 101, 102):
        X = np.random.default_rng(s).normal(size=(100, 30))
        assert choose_n_clusters(X, 10, random_state=0).n_clusters == 1, s


def test_clusters_of_equal_rows_or_of_a_constant_feature_still_count():
    """A head at the floor on enough rows is a cluster, not a Gaussian fitting a row or
    two: 15 equal rows beside two blobs (three clusters), and a blob whose second
    feature is 0 exactly (a clipped column) beside another (two clusters, seeds 0-2)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal((0, 0), 1, (100, 2)), rng.normal((8, 0), 1, (100, 2)),
              np.tile([[0.0, 6.0]], (15, 1))]
    assert choose_n_clusters(X, 10, random_state=0).n_clusters == 3
    for s in range(3):
        rng = np.random.default_rng(s)
        X = np.r_[rng.normal((0, 0), 1, (200, 2)), np.c_[rng.normal(6, 1, 200), np.zeros(200)]]
        assert choose_n_clusters(X, 10, random_state=s).n_clusters == 2, s


def test_a_scan_where_every_k_has_a_gaussian_on_one_row_says_so():
    """One row far from three blobs is alone in the k-means cells of every K: the mixtures
    are scored as they are, and the choice says so (weak)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    choice = choose_n_clusters(np.r_[_three_blobs(), [[1e5, 1e5]]], 10, random_state=0)
    assert choice.weak and "every K >= 2 put a Gaussian on fewer rows" in choice.reason


def test_a_cluster_of_a_few_rows_makes_the_choice_weak():
    """Three blobs of 20 rows and two rows far from them, close together: four clusters,
    one of two rows, and the choice says its Gaussian may fit those rows (weak)."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(60, 2, centers=[[0, 0], [10, 0], [0, 10]], random_state=0)
    X = np.r_[X, [[40.0, 40.0], [40.5, 40.2]]]
    with pytest.warns(ac.WeakChoiceWarning, match="a cluster of 2 rows, fewer than 5"):
        est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.k_choice_.n_clusters == 4 and est.k_choice_.weak


@pytest.mark.parametrize("z, said, marginal", [(3.176, "3.2", "3.2"), (4.97, "5.0", "4.9")])
def test_a_marginal_structure_quotes_its_z_as_the_reason_does(monkeypatch, z, said, marginal):
    """The reason quotes z twice: the same digits, but where rounding shows 5.0 (below
    the bound 5), which the doubt shows as 4.9 (it read 'z = 3.2 ... marginal (z = 3.1')."""
    from attnclust.cluster.choice import k_choice

    monkeypatch.setattr(k_choice, "structure_z", lambda *a, **k: z)
    choice = k_choice.choose_n_clusters(_three_blobs(0), 6, random_state=0)
    assert f"structure test z = {said}" in choice.reason
    assert f"the structure is marginal (z = {marginal} < 5)" in choice.reason


def test_integer_weights_choose_k_as_repeated_rows_do():
    """An integer weight is that many copies of its row, for the choice of K too: six rows
    of weight 30 beside two blobs give the BIC of the rows repeated, bit for bit, and the
    same K (the choice read them once each, and answered as without weights)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal((0, 0), 1, (150, 2)), rng.normal((8, 0), 1, (150, 2)),
              rng.normal((4, 7), 1, (6, 2))]
    w = np.r_[np.ones(300), np.full(6, 30.0)]
    weighted = ac.AttentionClustering("auto", random_state=0).fit(X, sample_weight=w)
    repeated = ac.AttentionClustering("auto", random_state=0).fit(
        np.repeat(X, w.astype(int), axis=0))
    np.testing.assert_array_equal(weighted.k_choice_.bic, repeated.k_choice_.bic)
    assert weighted.n_clusters_ == repeated.n_clusters_
    unweighted = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert not np.array_equal(unweighted.k_choice_.bic, weighted.k_choice_.bic)


def test_nearly_equal_weights_choose_k_as_no_weights_do():
    """Other weights give each row ``floor(n p_i)`` copies and the rest by largest
    remainder: weights whose range is less than their mean (one of 1.01 among ones, or
    uniform on 0.7-1.3) leave every row once, the unweighted BIC bit for bit; drawn with
    replacement, repeated rows had read as tiny clusters (``K = 10`` for the 1.01)."""
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(c, 1.0, (10, 2)) for c in ((0, 0), (9, 0), (0, 9))])
    near = np.ones(30)
    near[0] = 1.01
    for w in (near, rng.uniform(0.7, 1.3, 30)):
        for seed in range(3):
            plain = ac.AttentionClustering("auto", random_state=seed).fit(X)
            weighted = ac.AttentionClustering("auto", random_state=seed).fit(X, sample_weight=w)
            np.testing.assert_array_equal(weighted.k_choice_.bic, plain.k_choice_.bic)
            assert weighted.n_clusters_ == plain.n_clusters_ == 3
    from attnclust.cluster.rows import residual_copies
    # expected copies 0.6 (weight 1) and 1.8 (weight 3): the larger remainders first
    copies = residual_copies(np.r_[np.ones(20), np.full(10, 3.0)], 30)
    assert copies.tolist() == [1] * 10 + [0] * 10 + [2] * 10


def test_the_scan_goes_on_while_a_shape_falls_towards_the_least():
    """Twelve separated Gaussians of 40 rows in 24-D: full covariances, each over a few
    clusters, had the least BIC at K = 4 and rose after it while the spherical BIC fell
    by thousands a step; the scan stopped at 7 and answered 4. A shape
    still falling towards the least keeps it going, to 12."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    rng = np.random.RandomState(0)
    X = np.vstack([c + 3.0 * rng.randn(40, 24) for c in rng.uniform(0, 100, (12, 24))])
    choice = choose_n_clusters(X, 24, random_state=0)
    assert choice.n_clusters == 12 and choice.covariance_type == "spherical", choice.reason


def test_a_refit_with_a_given_k_leaves_no_choice_of_k():
    """k_choice_ and n_clusters_reason_ belong to the fit that chose K: a refit with a
    given K drops them (they were kept, quoting the old K)."""
    X = _three_blobs(0)
    est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.k_choice_.n_clusters == 3
    est.set_params(n_clusters=5).fit(X)
    assert not hasattr(est, "k_choice_") and not hasattr(est, "n_clusters_reason_")


# -- hostile inputs ---------------------------------------------------------------------
def _three_blobs(seed=0, n=150):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 0.5, (n, 2)) for c in ((0, 0), (6, 0), (0, 6))])


@pytest.mark.parametrize("value", [0.0, 3.5])
def test_auto_says_one_cluster_for_rows_with_no_spread(value):
    est = ac.AttentionClustering(n_clusters="auto", random_state=0)
    with pytest.warns(ac.DegenerateFitWarning):     # one head: nothing to spread it over
        est.fit(np.full((50, 3), value))
    assert est.n_clusters_ == 1
    assert est.n_clusters_reason_.startswith("no spread")


@pytest.mark.parametrize("scale", [1e170, 1e-170])
def test_auto_k_does_not_depend_on_the_rows_magnitude(scale):
    # D = log(W_1 / W_K) and the standardized rows do not depend on the scale: the choice
    # at 1e170 (squares overflow) or 1e-170 (squares underflow) is the choice at 1
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    X = _three_blobs()
    at_one = choose_n_clusters(X, 6, random_state=0)
    scaled = choose_n_clusters(X * scale, 6, random_state=0)
    assert (scaled.n_clusters, at_one.n_clusters) == (3, 3)
    est = ac.AttentionClustering(n_clusters="auto", normalize="center-scale", random_state=0)
    assert ac.adjusted_rand_index(est.fit(X * scale).labels_, np.repeat([0, 1, 2], 150)) == 1.0


def test_fit_out_of_range_names_the_fix():
    with pytest.raises(ValueError, match="normalize='center-scale'"):
        ac.AttentionClustering(3, random_state=0).fit(_three_blobs() * 1e-170)


def _grades(seed, sizes=(200, 150), d=12):
    """Two clusters of grades 0-3 (the features of a questionnaire or a clinical table)."""
    rng = np.random.default_rng(seed)
    G = np.r_[rng.choice(4, (sizes[0], d), p=[0.6, 0.3, 0.1, 0.0]),
              rng.choice(4, (sizes[1], d), p=[0.0, 0.1, 0.3, 0.6])]
    return G.astype(float), np.repeat([0, 1], sizes)


def test_resolution_floor_of_a_grid_and_of_continuous_features():
    """h^2 / 12 of the least gap between distinct values, in the standardized units; 1e-6
    where the values are continuous (their least gap far below); at most the feature's
    variance (a rare binary feature)."""
    from attnclust.cluster.choice.k_choice import resolution_floor, standardized

    rng = np.random.default_rng(0)
    grid = rng.integers(0, 5, 500).astype(float)
    Z = standardized(np.c_[grid, rng.normal(size=500)])
    floor = resolution_floor(Z)
    assert floor[0] == pytest.approx((1.0 / grid.std()) ** 2 / 12, rel=1e-12)
    assert floor[1] == 1e-6
    rare = standardized(np.r_[np.ones(5), np.zeros(495)][:, None])   # 5 ones in 500 rows
    assert resolution_floor(rare)[0] == pytest.approx(1.0, rel=1e-12)  # its variance, not
    assert (1.0 / np.r_[np.ones(5), np.zeros(495)].std()) ** 2 / 12 > 8   # its grid's


@pytest.mark.parametrize("seed", range(5))
def test_grades_count_their_clusters_not_their_grid(seed):
    """Rows on a grid of step 1: without the floor, Gaussians narrower than the grid win
    the BIC (8 k-means cells beat the 2 clusters); at the resolution floor they do not,
    and the choice is that of the same rows spread uniformly within their grid cells
    (dequantized), an independent reference: two clusters."""
    from attnclust.cluster.choice.k_choice import (
        _principal_log_volume,
        choose_n_clusters,
        mixture_bic,
        resolution_floor,
        standardized,
    )

    G, y = _grades(seed)
    Z = standardized(G)
    cells = KMeans(8, n_init=3, random_state=0).fit_predict(Z)
    volume = _principal_log_volume(Z)

    def bic(labels, k, floor):
        return mixture_bic(Z, labels, k, log_volume=volume, covariance_type="diag", floor=floor)
    assert bic(cells, 8, None) < bic(y, 2, None)                       # the grid wins
    assert bic(y, 2, resolution_floor(Z)) < bic(cells, 8, resolution_floor(Z))
    spread = G + np.random.default_rng(9).uniform(-0.5, 0.5, G.shape)
    assert choose_n_clusters(G, 10, random_state=0).n_clusters == 2 == \
        choose_n_clusters(spread, 10, random_state=0).n_clusters
    est = ac.AttentionClustering("auto", random_state=seed).fit(G)
    assert est.n_clusters_ == 2 and ac.adjusted_rand_index(y, est.labels_) > 0.9


@pytest.mark.parametrize("far", [1e3, 1e5, 1e6])
def test_one_far_row_leaves_the_clusters_of_the_others(far):
    """One row far from three blobs inflates every feature's standard deviation: the
    blobs, standardized, became narrower than the covariance floor 1e-6 and one
    component (K = 2: the blobs and the far row). The floor follows the rows' typical
    spread (their quartile range), and the blobs are counted as without the far row."""
    X = _three_blobs()
    est = ac.AttentionClustering(n_clusters="auto", random_state=0).fit(np.r_[X, [[far, far]]])
    assert est.n_clusters_ in (3, 4)                  # the far row: the background or its own
    assert ac.adjusted_rand_index(est.labels_[:-1], np.repeat([0, 1, 2], 150)) == 1.0


@pytest.mark.parametrize(("far", "copies"), [(1e10, 1), (1e5, 10), (1e20, 10)])
def test_far_rows_leave_the_floor_above_the_ems_rounding(far, copies):
    """Far rows squeeze the blobs below what float64 resolves: the floor stays above the
    rounding of the EM's covariances, so the choice answers (a floor of 1e-26 gave 'the
    covariance of head(s) [1] is not positive definite')."""
    X = np.r_[_three_blobs(n=1500), np.full((copies, 2), far)]
    est = ac.AttentionClustering(n_clusters="auto", random_state=0).fit(X)
    assert est.n_clusters_ >= 2


def test_the_floor_of_a_mostly_zero_feature_follows_its_other_rows():
    """Four fifths of the rows at 0 (a count), the rest in 0.5-1.5, and one row at 30:
    the quartile range is 0, and the floor follows the 5-95% range (not the standardized
    variance 1, which the far row inflates)."""
    from attnclust.cluster.choice.k_choice import resolution_floor, standardized

    rng = np.random.default_rng(0)
    x = np.r_[np.zeros(800), rng.uniform(0.5, 1.5, 199), [30.0]]
    Z = standardized(x[:, None])
    q05, q25, q75, q95 = np.percentile(Z[:, 0], [5.0, 25.0, 75.0, 95.0])
    assert q25 == q75
    assert resolution_floor(Z)[0] == pytest.approx(1e-6 * ((q95 - q05) / 3.29) ** 2, rel=1e-12)
    assert resolution_floor(Z)[0] < 0.5e-6


@pytest.mark.parametrize("extra", ["constant", "near-constant"])
def test_a_constant_column_changes_no_choice(extra):
    X = _three_blobs()
    rng = np.random.default_rng(1)
    column = np.full(len(X), 7.0) + (1e-9 * rng.normal(size=len(X)) if extra != "constant"
                                     else 0.0)
    est = ac.AttentionClustering(n_clusters="auto", random_state=0).fit(np.c_[X, column])
    assert est.n_clusters_ == 3
    assert ac.adjusted_rand_index(est.labels_, np.repeat([0, 1, 2], 150)) == 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_a_column_constant_up_to_rounding_changes_no_choice(seed):
    """A column computed as a constant (5 within a few roundings, or 0.1 within one):
    standardized, its rounding became unit noise beside the blobs (K = 2 or 4)."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(600, centers=3, random_state=seed)
    rng = np.random.default_rng(seed)
    plain = ac.AttentionClustering("auto", random_state=seed).fit(X)
    assert plain.n_clusters_ == 3
    for column in (5.0 + 16 * np.finfo(float).eps * rng.standard_normal(600),
                   np.full(600, 0.1) * np.linspace(1.0, 1.0 + 1e-15, 600)):
        assert np.ptp(column) > 0
        est = ac.AttentionClustering("auto", random_state=seed).fit(np.c_[X, column])
        assert est.n_clusters_ == 3, est.n_clusters_reason_
        assert ac.adjusted_rand_index(est.labels_, plain.labels_) == 1.0


def _dense_disk_in_a_sparse_one(seed):
    """A dense disk of radius 0.5 inside a sparse disk of radius 3, 500 rows each: two
    clusters that a user sees, nested, with no convex cut between them."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, 2 * np.pi, 1000)
    radius = np.r_[0.5 * np.sqrt(rng.uniform(0, 1, 500)), 3.0 * np.sqrt(rng.uniform(0, 1, 500))]
    return np.c_[radius * np.cos(angle), radius * np.sin(angle)]


@pytest.mark.parametrize("seed", range(3))
def test_nested_clusters_are_not_called_structureless(seed):
    """The gap test alone finds no structure in nested clusters (``z`` far below 0: the
    k-means cells of a disk in a disk remove less scatter than a uniform's); the BIC of
    the mixture prefers several Gaussians by far, so ``K >= 2``, said to be weak."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    choice = choose_n_clusters(_dense_disk_in_a_sparse_one(seed), 10, random_state=seed)
    assert choice.structure_z <= SETTINGS.structure_z
    assert choice.bic[0] - choice.bic[1:].min() > 20
    assert choice.n_clusters >= 2 and choice.weak


@pytest.mark.parametrize("seed", range(3))
def test_blobs_over_uniform_noise_are_found(seed):
    """Three blobs (sd 0.5, 5 apart) under 17% uniform rows over their box: the
    background takes the noise, and no blob is lost (``K >= 3``; a fourth Gaussian may
    take a dense patch of the noise)."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    rng = np.random.default_rng(seed)
    blobs = np.concatenate([rng.normal(c, 0.5, (250, 2)) for c in ([0, 0], [5, 0], [0, 5])])
    X = np.r_[blobs, rng.uniform(-3, 8, (150, 2))]
    assert choose_n_clusters(X, 10, random_state=seed).n_clusters in (3, 4)


@pytest.mark.parametrize("seed", range(3))
def test_a_tiny_far_cluster_beside_a_large_one_is_a_cluster(seed):
    """20 rows 30 sd from 10,000 Gaussian rows: the k-means cells of two remove less
    scatter than a uniform's (the large cluster dominates ``W``), but the BIC of two
    components is below one's: ``K = 2``, weak, with the reason."""
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(0, 1, (10_000, 2)), rng.normal(30, 1, (20, 2))]
    with pytest.warns(ac.WeakChoiceWarning, match="no more scatter than in uniform rows"):
        est = ac.AttentionClustering("auto", random_state=seed).fit(X)
    assert est.n_clusters_ == 2
    assert (est.labels_[-20:] == est.labels_[-1]).all()
    assert (est.labels_[:-20] != est.labels_[-1]).mean() > 0.99


@pytest.mark.parametrize("n, d", [(5, 2), (8, 2), (12, 2), (25, 2), (16, 5), (20, 5)])
def test_few_rows_of_noise_are_one_cluster(n, d):
    """On a few rows the BIC's least K puts a Gaussian on one or two rows each (their
    likelihood grows without bound): 5 rows of noise were 4 clusters, 12 were 10. Where
    K* leaves fewer than settings.thin_rows rows per cluster, the structure test decides alone."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    X = np.random.default_rng(0).normal(size=(n, d))
    choice = choose_n_clusters(X, 10, random_state=0)
    assert choice.n_clusters == 1, choice.reason
    # one cluster for want of rows, not by evidence: weak, and it says so (two blobs of
    # five rows 3 sd apart in 30-D were one cluster with no warning)
    if "too few for its BIC" in choice.reason:
        assert choice.weak and "weak: too few rows to tell" in choice.reason


def test_two_blobs_of_five_rows_in_30_dimensions_are_a_weak_choice():
    """10 rows span 9 of the 30 axes: the principal box had 21 sides of no width (their
    background's density without bound, K = 1 'too few rows to tell'); at the heads'
    least width it is the two blobs, on weak evidence."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(5, 30)), rng.normal(size=(5, 30)) + 3])
    with pytest.warns(WeakChoiceWarning, match="weak evidence"):
        est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 2


def test_the_estimator_chooses_k_with_its_settings():
    """AttentionClustering(settings=...) reaches the choice of K: a smaller patience scans
    fewer K (the same choice on three separated blobs)."""
    X, _ = _blobs(3, rng=3)
    scanned = {}
    for patience in (1, 4):
        est = ac.AttentionClustering(n_clusters="auto", max_clusters=12, random_state=0,
                                     settings=FitSettings(patience=patience)).fit(X)
        assert est.n_clusters_ == 3
        scanned[patience] = int(np.isfinite(est.k_choice_.bic).sum())
    assert scanned == {1: 4, 4: 7}


def test_the_choice_of_k_reads_the_weights():
    """A row of weight zero is no row for the choice of K: four blobs, one of weight zero,
    are three clusters; two rows of positive weight are too few for more than one."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(2000, centers=4, cluster_std=0.5, random_state=0)
    w = np.where(y == 0, 0.0, 1.0)
    assert ac.AttentionClustering("auto", random_state=0).fit(X, sample_weight=w).n_clusters_ == 3
    w = np.zeros(2000)
    w[:2] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ac.AttentionClustering("auto", random_state=0).fit(X, sample_weight=w)
    assert est.n_clusters_ == 1 and "too few rows (2)" in est.n_clusters_reason_


_NO_STREAM = ("partial_fit needs n_clusters as a number: 'auto' chooses K on all the rows "
              "at once, and it raises a ValueError saying so")


@parametrize_with_checks([ac.AttentionClustering("auto", max_iter=20)],
                         expected_failed_checks=lambda est: {
                             "check_n_features_in_after_fitting": _NO_STREAM,
                             "check_estimators_partial_fit_n_features": _NO_STREAM})
def test_sklearn_compatible(estimator, check):
    """``n_clusters="auto"`` passes scikit-learn's estimator checks but for partial_fit's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


@pytest.mark.parametrize("extra", ["copy", "sum", "copy and noise"])
def test_a_column_that_repeats_others_changes_no_choice(extra):
    """A copy of a column, or a sum of two, left the principal box no width along one
    axis: a uniform background denser than any head took every row (K = 2 for three
    blobs). Its side is now at least that of a uniform of the heads' least variance."""
    from attnclust.cluster.choice.k_choice import choose_n_clusters

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1, (150, 2)) for c in ((0, 0), (8, 0), (0, 8))])
    column = {"copy": X[:, 0], "sum": 2 * X[:, 0] + X[:, 1] + 3,
              "copy and noise": X[:, 0] + 1e-6 * rng.normal(size=450)}[extra]
    assert choose_n_clusters(np.c_[X, column], 10, random_state=0).n_clusters == 3

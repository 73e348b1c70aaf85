"""``AttentionClustering(n_clusters="auto")`` and ``init="anneal"``: K read off the
temperature path, and a start that does not depend on the seed."""

from __future__ import annotations

from itertools import groupby

import numpy as np
import pytest
from sklearn.cluster import KMeans

import attnclust as ac
from _tolerance import sum_tol
from attnclust.cli import main


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
    assert est.path_.choose_n_clusters().n_clusters == k


def test_auto_says_one_cluster_for_one_blob():
    X = np.random.default_rng(3).standard_normal((500, 2))
    est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 1 and "factor" in est.n_clusters_reason_


def test_more_clusters_than_max_clusters_say_so_in_the_reason():
    """12 blobs and 10 heads: the heads come apart in a cascade, no plateau is wide enough
    and the path stops with all 10 apart, as it does for one blob: K = 1, and the reason
    says to raise max_clusters if there may be more; with 20 heads, K = 12."""
    X, _ = _blobs(12, d=5, n_each=100, sep=12.0, rng=4)
    est = ac.AttentionClustering("auto", random_state=0).fit(X)
    assert est.n_clusters_ == 1 and "raise max_clusters" in est.n_clusters_reason_
    wider = ac.AttentionClustering("auto", max_clusters=20, random_state=0).fit(X)
    assert wider.n_clusters_ == 12 and "max_clusters" not in wider.n_clusters_reason_


def test_auto_refuses_other_strings_and_bad_max_clusters():
    X, _ = _blobs(2)
    with pytest.raises(ValueError, match="n_clusters"):
        ac.AttentionClustering("many").fit(X)
    with pytest.raises(ValueError, match="max_clusters"):
        ac.AttentionClustering("auto", max_clusters=0).fit(X)


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
    assert out.startswith("chose K=3: the widest plateau") and "K=3" in out
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
    from attnclust.cluster.cluster_choice import plateaus_of

    reps = [(np.zeros((c, 1)), np.ones(c, dtype=int)) for c in counts]
    path = TemperaturePath(lams, counts, counts, np.zeros(len(lams)),
                           np.zeros((len(lams), 1, 1)), np.array([]), 1.0,
                           plateaus_of(lams, counts, reps))
    return path.choose_n_clusters().n_clusters


def test_the_settled_stop_never_changes_the_choice():
    """Random count sequences: the choice of the path cut where the stop says it is settled
    equals the choice of the whole path (which may end before the grid does). A stop one
    grid value too eager (by log 1.12) fails it."""
    from attnclust.cluster.cluster_choice import MIN_PLATEAU_WIDTH, _Settled

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
    from attnclust.cluster.cluster_choice import FAST_SETTINGS, choose_from_path

    X = _blobs(k, rng=k)[0] if k > 1 else np.random.default_rng(3).standard_normal((500, 2))
    choice, path = choose_from_path(X, 12, geometry="euclidean")
    whole = ac.temperature_path(X, 12, **FAST_SETTINGS)
    assert choice.n_clusters == whole.choose_n_clusters().n_clusters == k
    n = len(path.inverse_temperatures)
    np.testing.assert_array_equal(path.n_clusters, whole.n_clusters[:n])
    if k > 1:                     # settled inside the grid: the cascade after it is skipped
        assert n < len(whole.inverse_temperatures)


def test_auto_path_does_not_depend_on_the_seed_or_the_row_order():
    X, _ = _blobs(4, rng=6)
    a = ac.AttentionClustering("auto", random_state=0).fit(X).path_
    b = ac.AttentionClustering("auto", random_state=123).fit(X).path_
    perm = np.random.default_rng(1).permutation(len(X))
    c = ac.AttentionClustering("auto", random_state=0).fit(X[perm]).path_
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
    from attnclust.cluster.cluster_choice import choose_from_path

    X, _ = _blobs(3, d=3, rng=7)
    X = np.concatenate([X, 200.0 + np.random.default_rng(8).standard_normal((3, 3))])
    choice, path = choose_from_path(X, 12, geometry="euclidean")
    assert choice.n_clusters == 3, choice.reason
    assert np.all(choice.plateau.sizes >= 190)      # the 3 outliers are no cluster
    assert all(np.all(p.sizes >= path.min_cluster_size) for p in path.plateaus)

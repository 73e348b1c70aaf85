"""Heads merged into clusters (attnclust.cluster.merge) and the estimator's merge_heads."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from attnclust import AttentionClustering, DegenerateFitWarning, load_model, save_model
from attnclust.cluster.head_graph import dequantized
from attnclust.cluster.merge import (
    MergeSettings,
    adjusted_rand,
    cluster_argmax,
    cluster_count,
    cluster_labels,
    cluster_membership,
    gini_index,
    gini_linkage,
    head_attention,
    majority_labels,
    merge_heads,
    n_heads,
    normalized_cut,
    posterior_cut,
    split_gain,
    squared_distances,
    tile_heads,
)


# -- data built with their labels (an independent construction of the truth) --------------
def _rings(seed, n=400):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 2 * n)
    r = np.repeat([1.0, 3.0], n)
    X = np.c_[r * np.cos(t), r * np.sin(t)] + rng.normal(0, 0.08, (2 * n, 2))
    return X, np.repeat([0, 1], n)


def _crescents(seed, n=400):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, 2 * n)
    upper = np.c_[np.cos(t[:n]), np.sin(t[:n])]
    lower = np.c_[1 - np.cos(t[n:]), 0.5 - np.sin(t[n:])]
    return np.r_[upper, lower] + rng.normal(0, 0.06, (2 * n, 2)), np.repeat([0, 1], n)


def _spirals(seed, n=500):
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.05, 1, 2 * n)) * 3 * np.pi
    arm = np.repeat([0, 1], n)
    angle = t + np.pi * arm
    X = np.c_[t * np.cos(angle), t * np.sin(angle)] + rng.normal(0, 0.15, (2 * n, 2))
    return X, arm


def _blobs(seed, centers=((0, 0), (6, 0), (0, 6), (6, 6)), n=250):
    rng = np.random.default_rng(seed)
    X = np.concatenate([np.asarray(c) + rng.standard_normal((n, 2)) for c in centers])
    return X, np.repeat(np.arange(len(centers)), n)


def _fit(X, K, seed, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(K, random_state=seed, **params).fit(X)


# -- the estimator -------------------------------------------------------------------------
@pytest.mark.parametrize("make", [_rings, _crescents, _spirals])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shapes_are_merged(make, seed):
    X, y = make(seed)
    est = _fit(X, 2, seed)
    assert est.merge_heads_, est.merge_heads_reason_
    assert adjusted_rand_score(y, est.labels_) > 0.98
    assert len(est.heads_) > 2 and est.covariance_type_ == "spherical"
    # the K-head fit alone cuts the shapes across
    plain = _fit(X, 2, seed, merge_heads=False)
    assert adjusted_rand_score(y, plain.labels_) < 0.6


@pytest.mark.parametrize("seed", range(3))
def test_separated_blobs_skip_the_merge_before_any_head(seed, monkeypatch):
    """Blobs 12 standard deviations apart: the K-head fit is sure of every row, the
    normalized cut of its posterior overlap is ~0, and the merge is skipped without tiling
    heads (the same fit as merge_heads=False); rings, whose fit cuts across, still merge."""
    import attnclust.cluster.merge as merge_module
    X, y = _blobs(seed, centers=((0, 0), (12, 0), (0, 12), (12, 12)))
    tiled = []
    real = merge_module.tile_heads
    monkeypatch.setattr(merge_module, "tile_heads",
                        lambda *a, **k: tiled.append(1) or real(*a, **k))
    est = _fit(X, 4, seed)
    assert not tiled and not est.merge_heads_
    assert est.merge_heads_reason_.startswith("not merged: the 4 clusters barely overlap (")
    np.testing.assert_array_equal(est.heads_, est.cluster_centers_)
    plain = _fit(X, 4, seed, merge_heads=False)
    np.testing.assert_array_equal(est.labels_, plain.labels_)
    np.testing.assert_array_equal(est.cluster_centers_, plain.cluster_centers_)
    assert adjusted_rand_score(y, est.labels_) == 1.0
    rings = _fit(*_rings(seed)[:1], 2, seed)
    assert tiled and rings.merge_heads_, rings.merge_heads_reason_
    off = _fit(X, 4, seed, merge_heads=MergeSettings(skip_cut=0))     # the check off: tiled
    assert len(tiled) == 2 and "barely overlap" not in off.merge_heads_reason_


# -- n_clusters="auto": clusters of several Gaussian components ---------------------------
@pytest.mark.parametrize("make", [_rings, _crescents, _spirals])
@pytest.mark.parametrize("seed", range(3))
def test_auto_counts_shapes_not_components(make, seed):
    """The BIC spends several Gaussian components on each shape; the heads' overlap
    graph holds two clusters, and the fit reports those (with the components' count in
    its record of the choice); a WeakChoiceWarning only where the structure is in doubt,
    not for the components' count."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    X, y = make(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = AttentionClustering("auto", random_state=seed).fit(X)
    weak = [w for w in caught if issubclass(w.category, WeakChoiceWarning)]
    # the heads' count: only a doubt about structure is still worth a warning
    assert bool(weak) == (est.k_choice_.weak and est.k_choice_.structure_z < 5)
    for w in weak:       # the count the fit reports, not the components' (it said K = 10)
        assert str(w.message).startswith(f"n_clusters='auto' chose K = 2 (the heads' "
                                         f"clusters; the mixture's choice was "
                                         f"{est.k_choice_.n_clusters})")
    assert est.k_choice_.best > 2                       # the components
    assert est.n_clusters_ == 2 and len(est.cluster_centers_) == 2, est.n_clusters_reason_
    assert est.n_clusters_reason_.startswith("2 clusters of the heads (merged: ")
    assert adjusted_rand_score(y, est.labels_) > 0.98
    assert est.predict_proba(X).shape == (len(X), 2)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def _three_rings(seed, n=400):
    rng = np.random.default_rng(seed)
    X = [r * np.c_[np.cos(t), np.sin(t)] + rng.normal(0, 0.05, (n, 2))
         for r, t in zip((1.0, 2.0, 3.0), rng.uniform(0, 2 * np.pi, (3, n)), strict=True)]
    return np.concatenate(X), np.repeat([0, 1, 2], n)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_auto_counts_concentric_rings_the_components_undercount(seed):
    """Three concentric rings, on seeds where the BIC of Gaussian components and the
    structure test say one cluster or two (the rings' k-means cells remove less scatter
    than a uniform disk's; on seed 2 the BIC takes 9 components): the heads' graph holds
    three, which three k-means cells cut through, so the fit reports three clusters, more
    than its components."""
    from attnclust.cluster.choice.k_choice import WeakChoiceWarning

    X, y = _three_rings(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeakChoiceWarning)    # the doubts are moot
        est = AttentionClustering("auto", random_state=seed).fit(X)
    assert est.k_choice_.n_clusters < 3                  # the components' count
    assert est.n_clusters_ == 3, est.n_clusters_reason_
    assert est.n_clusters_reason_.startswith("3 clusters of the heads (merged: ")
    assert "a shape convex cells cut through" in est.n_clusters_reason_
    assert adjusted_rand_score(y, est.labels_) > 0.98
    assert est.predict_proba(X).shape == (len(X), 3)


def _stripes(seed, n=2500):
    rng = np.random.default_rng(seed)
    turn = np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
    a = np.c_[rng.uniform(0, 10, n), rng.normal(0, 0.15, n)]
    b = np.c_[rng.uniform(0, 10, n), rng.normal(1.0, 0.15, n)]
    return np.r_[a, b] @ turn.T, np.repeat([0, 1], n)


def test_two_close_stripes_are_merged():
    """Two parallel stripes 1 apart (spread 0.15), the 2-head fit cutting both across: on
    seed 2 the merged cut was 17 times below the fit's, not the 20 times that
    ``cut_ratio`` 0.05 asked (ARI 0); at 0.1 every seed of 8 merges."""
    for seed in range(8):
        X, y = _stripes(seed)
        assert adjusted_rand_score(y, _fit(X, 2, seed).labels_) > 0.95, seed


def test_more_clusters_than_components_only_for_a_shape():
    """The heads' count above the components' is kept only where its cut is below
    ``count_cut_ratio`` times that of as many k-means cells: at ``count_cut_ratio`` 1e-9
    the rings stay what the components say, and the reason says why."""
    X, _ = _three_rings(0)
    est = _fit(X, "auto", 0, merge_heads=MergeSettings(count_cut_ratio=1e-9))
    assert est.n_clusters_ == est.k_choice_.n_clusters < 3
    assert "no other count of clusters: 3 clusters of the heads cut" in \
        est.merge_heads_reason_ and "times that of 3 k-means cells" in \
        est.merge_heads_reason_, est.merge_heads_reason_


def _four_rings(seed, n=250):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 4 * n)
    r = np.repeat([1.0, 2.0, 3.0, 4.0], n)
    return np.c_[r * np.cos(t), r * np.sin(t)] + rng.normal(0, 0.03, (4 * n, 2)), \
        np.repeat([0, 1, 2, 3], n)


def test_auto_counts_four_rings_whose_cut_less_than_quintuples():
    """Four thin concentric rings, which the components' choice calls one cluster (or two,
    where one component's BIC is lower by less than strong evidence: seed 1): the heads'
    cut rises 3.5-6-fold after four clusters, so at ``min_rise`` 2 the fit finds the rings
    (a fifth cluster at most, one ring cut in two) on seeds 0-4, where a 5-fold rise left
    most of them at the components' count."""
    fits = [_fit(_four_rings(seed)[0], "auto", seed) for seed in range(5)]
    for seed, est in enumerate(fits):
        assert est.k_choice_.n_clusters <= 2 and est.n_clusters_ in (4, 5), \
            est.n_clusters_reason_
        assert adjusted_rand_score(_four_rings(seed)[1], est.labels_) > 0.9
    assert sum(est.k_choice_.n_clusters == 1 for est in fits) >= 3
    five = [_fit(_four_rings(seed)[0], "auto", seed, merge_heads=MergeSettings(min_rise=5.0))
            for seed in range(5)]
    assert sum(est.n_clusters_ == est.k_choice_.n_clusters <= 2 for est in five) >= 3


def test_merge_heads_counts_more_clusters_than_one_component():
    """merge_heads itself, one component (K = 1, the posterior all ones: nothing to merge)
    with count_up_to: three rings, weighted rows (the weights of one ring doubled) give
    three clusters of heads; without count_up_to, one cluster, nothing tiled."""
    X, y = _three_rings(0)
    w = np.where(y == 1, 2.0, 1.0)
    ones = np.ones((len(X), 1))
    res = merge_heads(X, np.zeros(len(X), int), 1, rng=np.random.default_rng(0), weights=w,
                      proba=ones, count_up_to=6)
    assert res.merged and int(res.head_labels.max()) + 1 == 3, res.reason
    z = cluster_membership(X, res).argmax(1)
    assert adjusted_rand_score(y, z) == 1.0
    alone = merge_heads(X, np.zeros(len(X), int), 1, rng=np.random.default_rng(0), weights=w,
                        proba=ones)
    assert not alone.merged and len(alone.heads) == 0
    assert alone.reason == "not merged: one cluster, no two to merge"


def test_a_model_file_keeps_the_heads_count(tmp_path):
    """save_model / load_model of an auto fit whose heads hold fewer clusters than the
    components: the same count, labels and memberships."""
    from attnclust import load_model, save_model

    X, _ = _crescents(0)
    est = _fit(X, "auto", 0)
    assert est.n_clusters_ == 2 < est.k_choice_.best
    save_model(est, tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.n_clusters_ == 2 and back.n_clusters_reason_ == est.n_clusters_reason_
    np.testing.assert_array_equal(back.predict(X), est.labels_)
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


@pytest.mark.parametrize("seed", range(3))
def test_auto_keeps_one_cluster_per_gaussian_blob(seed):
    """Gaussian blobs 6 standard deviations apart: their posterior barely overlaps, so
    no head is tiled and the components are the clusters."""
    X, y = _blobs(seed)
    est = _fit(X, "auto", seed)
    assert est.n_clusters_ == est.k_choice_.best == 4, est.n_clusters_reason_
    assert adjusted_rand_score(y, est.labels_) > 0.95


def test_auto_keeps_close_blobs_whose_components_barely_share_rows():
    """Three blobs of spread 0.1 in 3-D, two of them close: at the count's wide attention
    the two close ones are one group, and two k-means cells cut nothing either; but the
    two components that group would join barely share their rows (below
    ``min_shared``), so they stay three clusters (merged into 2 without that check)."""
    from attnclust import GaussianMixture

    mix = GaussianMixture.random(d=3, k=3, sigma=0.1, rng=2)
    X, z = mix.sample(300, rng=0, return_labels=True)
    est = _fit(X, "auto", 0, max_clusters=6)
    assert est.n_clusters_ == 3, est.n_clusters_reason_
    assert adjusted_rand_score(z, est.labels_) > 0.95
    loose = _fit(X, "auto", 0, max_clusters=6,    # the components' posterior cut is below
                 merge_heads=MergeSettings(min_shared=1e-4, skip_cut=0))   # skip_cut too
    assert loose.n_clusters_ == 2 and "clusters apart" in loose.n_clusters_reason_


def test_a_component_without_heads_joins_no_cluster():
    """The share of the components a cluster joins (Q = P^T P): components 0 and 1 in
    cluster 0 share a quarter of their rows; component 2 wins no head's majority and is
    in no cluster (it was counted in cluster 0, whose share it brought down)."""
    from attnclust.cluster.head_count import _least_shared

    P = np.array([[0.75, 0.25, 0.0], [0.25, 0.75, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    kept, labels = np.array([0, 1, 1]), np.array([0, 0, 1])   # three heads: none for 2
    Q = P.T @ P
    expected = np.mean([Q[0, 1] / Q[0].sum(), Q[1, 0] / Q[1].sum()])
    assert _least_shared(P, kept, labels, 2, np.ones(3), None) == pytest.approx(expected)
    assert _least_shared(P, np.array([0, 1, 2]), np.array([0, 1, 1]), 2, np.ones(3),
                         None) == pytest.approx(np.mean([Q[1, 2] / Q[1].sum(),
                                                         Q[2, 1] / Q[2].sum()]))


def test_cluster_count_against_the_cuts_it_returns():
    """The count is where the returned cuts rise most, each cut that of the Genie linkage
    at that count (an independent computation of each), and ``most`` bounds it."""
    rng = np.random.default_rng(0)
    blocks = [3, 4, 5]                                   # three groups of heads
    O = np.zeros((12, 12))
    start = 0
    for b in blocks:
        O[start:start + b, start:start + b] = rng.uniform(0.5, 1.0, (b, b))
        start += b
    O = (O + O.T) / 2 + 1e-6                             # faint links everywhere
    S = O / np.sqrt(np.outer(np.diag(O), np.diag(O)))
    sizes = np.ones(12)
    count, cuts, top, labels = cluster_count(O, S, sizes, 6)
    assert count == 3 and sorted(cuts) == [2, 3, 4, 5, 6, 7]
    for C, cut in cuts.items():
        assert cut == normalized_cut(O, gini_linkage(S, sizes, C))
    f = MergeSettings().cut_floor
    rise = {C: (cuts[C + 1] + f) / (cuts[C] + f) for C in range(2, 7)}
    assert max(rise, key=rise.get) == 3 and top == rise[3]
    assert labels.tolist() == [0] * 3 + [1] * 4 + [2] * 5          # the three blocks
    assert cluster_count(O, S, sizes, 2).count == 2                 # at most ``most``
    assert cluster_count(O[:2, :2], S[:2, :2], sizes[:2], 2).labels is None   # no rise


def test_posterior_cut():
    sure = np.eye(3)[[0, 1, 2, 2]]
    assert posterior_cut(sure) == 0.0
    even = np.full((4, 2), 0.5)                    # each cluster keeps half its volume
    assert posterior_cut(even) == pytest.approx(1.0)
    P = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    Q = P.T @ P
    assert posterior_cut(P) == pytest.approx(sum(1 - Q[c, c] / Q[c].sum() for c in range(2)))
    w = np.array([1.0, 2.0, 0.0])
    assert posterior_cut(P, w) == pytest.approx(posterior_cut(P[:2][[0, 1, 1]]))
    with pytest.raises(ValueError, match="skip_cut must be a number >= 0, got -1"):
        MergeSettings(skip_cut=-1)


@pytest.mark.parametrize("seed", range(4))
def test_gaussian_blobs_are_not_merged(seed):
    X, y = _blobs(seed)
    est = _fit(X, 4, seed)
    plain = _fit(X, 4, seed, merge_heads=False)
    assert not est.merge_heads_, est.merge_heads_reason_
    assert est.merge_heads_reason_.startswith("not merged: ")
    np.testing.assert_array_equal(est.labels_, plain.labels_)
    np.testing.assert_array_equal(est.cluster_centers_, plain.cluster_centers_)
    np.testing.assert_array_equal(est.heads_, est.cluster_centers_)
    assert est.head_labels_.tolist() == [0, 1, 2, 3]
    assert adjusted_rand_score(y, est.labels_) > 0.95


def test_merged_fit_invariants():
    X, _ = _crescents(0)
    est = _fit(X, 2, 0)
    assert est.merge_heads_
    K = 2
    assert set(np.unique(est.labels_)) <= set(range(K))
    assert set(est.head_labels_.tolist()) == set(range(K))        # every cluster has heads
    assert est.heads_.shape == (len(est.head_labels_), 2)
    P = est.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    # predict, the argmax of the clusters' summed attention, is labels_ on the training rows
    np.testing.assert_array_equal(P.argmax(1), est.predict(X))
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    # a cluster's membership is the sum of its heads' attention (independent reference)
    d2 = ((X[:, None] - est.heads_[None]) ** 2).sum(-1)
    logits = -est.inverse_temperature_ / 2 * d2
    A = np.exp(logits - logits.max(1, keepdims=True))
    A /= A.sum(1, keepdims=True)
    ref = np.stack([A[:, est.head_labels_ == c].sum(1) for c in range(K)], 1)
    np.testing.assert_allclose(P, ref, atol=1e-10)
    # centres are the means of the clusters' rows
    for c in range(K):
        np.testing.assert_allclose(est.cluster_centers_[c], X[est.labels_ == c].mean(0),
                                   atol=1e-10)
    assert est.transform(X).shape == (len(X), K)
    # the layer's output and risk are those of the m heads fitted, not of the clusters'
    # means (a crescent's mean is off its rows)
    T = A @ est.heads_
    np.testing.assert_allclose(est.layer_output(X), T, atol=1e-10)
    np.testing.assert_allclose(est.squared_errors(X), ((X - T) ** 2).sum(1), atol=1e-10)
    # the likelihood: the equal-weight mixture of the heads, N(mu_h, I / lambda)
    lam, d = est.inverse_temperature_, X.shape[1]
    log_p = np.log(np.exp(-lam / 2 * d2).mean(1)) + d / 2 * np.log(lam / (2 * np.pi))
    np.testing.assert_allclose(est.score_samples(X), log_p, rtol=1e-10)
    n_params = est.heads_.size + 1
    assert est.bic(X) == pytest.approx(-2 * log_p.sum() + n_params * np.log(len(X)))
    for name in ("covariances_", "weights_", "precisions_"):
        assert not hasattr(est, name)


def test_predict_on_new_rows_follows_the_heads():
    X, y = _rings(0)
    est = _fit(X, 2, 0)
    X_new, y_new = _rings(7)
    assert adjusted_rand_score(y_new, est.predict(X_new)) > 0.98


def test_merge_heads_false_true_and_settings():
    X, y = _blobs(0)
    forced = _fit(X, 4, 0, merge_heads=True)
    assert forced.merge_heads_ and "(merge_heads=True; against the 4-head fit's" in \
        forced.merge_heads_reason_
    off = _fit(X, 4, 0, merge_heads=False)
    assert not off.merge_heads_ and off.merge_heads_reason_ == "not merged: merge_heads=False"
    # NumPy's booleans, which the checks accept, are the same settings
    assert _fit(X, 4, 0, merge_heads=np.True_).merge_heads_reason_ == forced.merge_heads_reason_
    assert _fit(X, 4, 0, merge_heads=np.False_).merge_heads_reason_ == off.merge_heads_reason_
    X, y = _crescents(0)
    # as many heads as clusters: nothing to merge, whatever the cuts (a merged cut that
    # underflows to 0 is below any cut_ratio times the kept one)
    one_each = _fit(X, 2, 0, merge_heads=MergeSettings(heads_per_cluster=1, min_heads=2))
    assert not one_each.merge_heads_ and len(one_each.heads_) == 2
    more = _fit(X, 2, 0, merge_heads=MergeSettings(min_heads=40))
    assert len(more.heads_) == 40


def test_rows_of_one_feature_are_not_merged():
    """On a line every cluster of heads is an interval, which the K-head fit's cells draw:
    two overlapping Gaussians (rounded to integers, as public benchmark sets store them)
    were merged at the widest gap between heads, 0.35 ARI where the fit has 0.61."""
    r = np.random.RandomState(0)
    sd = 60 * np.sqrt(0.5)
    X = np.round(np.r_[r.randn(1024, 1) * sd + 500, r.randn(1024, 1) * sd + 600])
    est = _fit(X, 2, 0)
    assert not est.merge_heads_ and "one feature" in est.merge_heads_reason_
    np.testing.assert_array_equal(est.labels_, _fit(X, 2, 0, merge_heads=False).labels_)
    assert _fit(X, 2, 0, merge_heads=True).merge_heads_         # forced, it merges
    # n_clusters="auto": the heads may count clusters, but there is no merge at K either
    # (it was taken there: a pair of 1-D Gaussians, 0.82 -> 0.59 at a cut ratio of 0.1)
    auto = _fit(X, "auto", 0)
    assert not auto.merge_heads_ and auto.merge_heads_reason_.startswith(
        "not merged: one feature") and "no other count of clusters" in auto.merge_heads_reason_


@pytest.mark.parametrize("value, message", [
    ("yes", "merge_heads must be 'auto' or True or False or a MergeSettings, got 'yes'"),
    (1.5, "merge_heads must be 'auto' or True or False or a MergeSettings, got 1.5"),
])
def test_bad_merge_heads(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AttentionClustering(2, merge_heads=value).fit(np.random.default_rng(0).random((50, 2)))


@pytest.mark.parametrize("params", [dict(n_clusters="auto"), dict(covariance_type="full"),
                                    dict(geometry="sphere"), dict(inverse_temperature=2.0),
                                    dict(init="sphere")])
def test_merge_heads_true_needs_the_default_fit(params):
    X = np.random.default_rng(0).random((60, 2))
    with pytest.raises(ValueError, match="merge_heads=True merges the heads of the default fit"):
        AttentionClustering(**{"n_clusters": 2, **params}, merge_heads=True).fit(X)


def test_other_fits_do_not_merge():
    X, _ = _crescents(0)
    est = _fit(X, 2, 0, covariance_type="spherical")
    assert not est.merge_heads_
    assert est.merge_heads_reason_.startswith("not merged: only the default")
    np.testing.assert_array_equal(est.heads_, est.cluster_centers_)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=0.0), "temperature must be a positive number, got 0.0"),
    (dict(gini_threshold=1.5), "gini_threshold must be in [0, 1], got 1.5"),
    (dict(min_heads=0), "min_heads must be an integer >= 1, got 0"),
    (dict(max_rows=2.5), "max_rows must be an integer >= 1, got 2.5"),
    (dict(cut_ratio=-1), "cut_ratio must be a positive number, got -1"),
    (dict(min_redraw=2), "min_redraw must be in [-1, 1], got 2"),
    (dict(linkage="ward"), "linkage must be one of ('single', 'average'), got 'ward'"),
    (dict(cut_floor=0), "cut_floor must be a positive number, got 0"),
    (dict(min_rise=True), "min_rise must be a positive number, got True"),
    (dict(min_shared=-0.1), "min_shared must be a positive number, got -0.1"),
    (dict(min_split_gain=float("nan")), "min_split_gain must be a finite number, got nan"),
    (dict(split_gain_floor="low"), "split_gain_floor must be a finite number, got 'low'"),
    (dict(split_rows=0), "split_rows must be a positive number, got 0"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError) as err:
        MergeSettings(**kwargs)
    assert str(err.value) == message


# -- the module's functions ----------------------------------------------------------------
def _brute_force_genie(S, sizes, K, threshold):
    """Genie's rule by enumeration: at each step, every allowed pair of groups is scored by
    single linkage (the largest similarity between their items) and the best kept."""
    groups = [[i] for i in range(len(S))]
    while len(groups) > K:
        gsize = [sum(sizes[i] for i in g) for g in groups]
        allowed = list(itertools.combinations(range(len(groups)), 2))
        if gini_index(gsize) > threshold:
            small = min(gsize)
            allowed = [(a, b) for a, b in allowed if small in (gsize[a], gsize[b])]
        a, b = max(allowed, key=lambda p: max(S[i][j] for i in groups[p[0]]
                                              for j in groups[p[1]]))
        groups[a] = groups[a] + groups[b]
        del groups[b]
    out = np.empty(len(S), int)
    for c, g in enumerate(sorted(groups, key=min)):
        out[g] = c
    return out


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("threshold", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("m, least, most", [(7, 1, 20), (12, 1, 3), (9, 0, 3)])
def test_gini_linkage_against_brute_force(seed, threshold, m, least, most):
    """(12, 1, 3): groups of equal sizes; (9, 0, 3): items of no rows too."""
    rng = np.random.default_rng(seed)
    S = rng.random((m, m))
    S = (S + S.T) / 2                         # distinct values: no ties
    sizes = rng.integers(least, most, m).tolist()
    for K in (1, 2, 3):
        got = gini_linkage(S, sizes, K, gini_threshold=threshold)
        np.testing.assert_array_equal(got, _brute_force_genie(S, sizes, K, threshold))


def test_gini_index_reference():
    rng = np.random.default_rng(0)
    s = rng.random(9)
    ref = np.abs(s[:, None] - s[None]).sum() / 2 / ((len(s) - 1) * s.sum())
    assert gini_index(s) == pytest.approx(ref, rel=1e-12)


def test_normalized_cut_reference():
    rng = np.random.default_rng(1)
    W = rng.random((6, 6))
    W = W + W.T
    labels = np.array([0, 0, 1, 1, 2, 2])
    ref = sum(W[labels == c][:, labels != c].sum() / W[labels == c].sum() for c in range(3))
    assert normalized_cut(W, labels) == pytest.approx(ref, rel=1e-12)
    assert normalized_cut(W, np.zeros(6, int)) == pytest.approx(0.0, abs=1e-12)


def test_majority_labels_weighted():
    nearest, labels = np.array([0, 0, 0, 1]), np.array([1, 1, 0, 0])
    weights = np.array([1.0, 1.0, 5.0, 1.0])
    assert majority_labels(nearest, labels, 2, 2, weights).tolist() == [0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_adjusted_rand_against_sklearn(seed):
    """The redraw check's ARI (a contingency table by bincount) is scikit-learn's, ties and
    single-cluster labelings included."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        a = rng.integers(0, rng.integers(1, 6), n)
        b = a.copy() if rng.random() < 0.2 else rng.integers(0, rng.integers(1, 6), n)
        assert adjusted_rand(a, b) == pytest.approx(adjusted_rand_score(a, b), abs=1e-12)


def test_merge_heads_function_and_membership():
    X, y = _spirals(0)
    settings = MergeSettings(max_rows=500)
    res = merge_heads(X, (X[:, 0] > 0).astype(int), 2, rng=np.random.default_rng(0),
                      settings=settings)
    assert res.merged and res.ncut_merged < 0.05 * res.ncut_kept
    assert len(res.heads) == n_heads(2, 500, settings) == 100      # one per 5 sampled rows
    P = cluster_membership(X, res)
    np.testing.assert_allclose(P.sum(1), 1.0)
    assert adjusted_rand_score(y, P.argmax(1)) > 0.98
    A = head_attention(X, res.heads, res.variance)
    np.testing.assert_allclose(P[:, 0], A[:, res.head_labels == 0].sum(1))


@pytest.mark.parametrize("seed", range(5))
def test_cluster_argmax_is_the_argmax_of_the_summed_attention(seed):
    # logits near ties between clusters (a shared offset per row and small differences)
    # and far apart; clusters of 1 to 40 heads, one without heads; the full sums are the
    # independent reference
    rng = np.random.default_rng(seed)
    sizes = np.r_[rng.integers(1, 40, 4), 0, 1]
    logits = rng.normal(0, rng.choice([0.01, 1.0, 30.0], (500, 1)), (500, sizes.sum()))
    logits += rng.normal(0, 1e3, (500, 1))
    labels, top = cluster_argmax(logits, sizes)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    A = np.exp(logits - logits.max(1, keepdims=True))
    sums = np.stack([A[:, owner == c].sum(1) for c in range(len(sizes))], 1)
    np.testing.assert_array_equal(labels, sums.argmax(1))
    np.testing.assert_array_equal(top, logits.max(1))
    assert 4 not in labels


def test_cluster_labels_agree_with_the_membership():
    X, _ = _spirals(0)
    res = merge_heads(X, (X[:, 0] > 0).astype(int), 2, rng=np.random.default_rng(0),
                      force=True)
    labels, nearest = cluster_labels(X, res)
    np.testing.assert_array_equal(labels, cluster_membership(X, res).argmax(1))
    # both ||x||^2 - 2 <x, mu> + ||mu||^2 in some order: (d + 4) rounding units of
    # (||x|| + ||mu||)^2 apart at most (the logits' division by v and product by v: two)
    scale = np.linalg.norm(X, axis=1) + np.linalg.norm(res.heads, axis=1).max()
    tol = (X.shape[1] + 4) * np.finfo(np.float64).eps * scale ** 2
    assert np.all(np.abs(nearest - squared_distances(X, res.heads).min(1)) <= tol)


def _split_gain(X, labels, K, seed):
    rng = np.random.default_rng(seed)
    heads = tile_heads(X, 150, rng)
    return split_gain(X, None, labels, heads, squared_distances(X, heads).argmin(1), K, rng)


@pytest.mark.parametrize("seed", range(3))
def test_split_gain_tells_shapes_from_gaussian_clusters(seed):
    """Twice as many Gaussians describe crescents and spirals cut in two convex halves
    better than the halves do (a gain above ``min_split_gain``, 0.05), and Gaussian blobs or
    two elongated sticks no better than one Gaussian each (a gain below 0)."""
    for make in (_crescents, _spirals):
        X, _ = make(seed)
        assert _split_gain(X, (X[:, 0] > np.median(X[:, 0])).astype(int), 2, seed) > 0.05
    X, y = _blobs(seed)
    assert _split_gain(X, y, 4, seed) < 0
    rng = np.random.default_rng(seed)
    sticks = np.r_[rng.normal(0, 1, (400, 2)) * [4, 0.3], rng.normal(0, 1, (400, 2)) * [0.3, 4]
                   + [6, 0]]
    assert _split_gain(sticks, np.repeat([0, 1], 400), 2, seed) < 0


def test_bic_gain_is_blind_to_units():
    """Columns rescaled by powers of two: the standardized rows, hence the gain, are the
    same bits."""
    from attnclust.cluster.choice.k_choice import bic_gain

    X, y = _crescents(0)
    halves = (X[:, 0] > 0.5).astype(int)
    assert bic_gain(X * [2.0 ** 10, 2.0 ** -7], halves, y) == bic_gain(X, halves, y)


@pytest.mark.parametrize("seed", range(5))
def test_the_split_gain_reads_grades_at_their_resolution(seed):
    """Two clusters of grades 0-3 on 6 features: 4 k-means cells do not describe them
    better (the gain is below 0, no under-fit). At a floor of 1e-6 along the grid, the
    4 components' Gaussians could sit on its values and call the 2 clusters under-fit;
    the split gain reads the rows at the K choice's resolution floor."""
    from attnclust.cluster.choice.k_choice import bic_gain
    from test_auto_k import _grades

    G, y = _grades(seed)
    G = G[:, :6]
    cells = KMeans(4, n_init=3, random_state=0).fit_predict(G)
    assert bic_gain(G, y, cells) < 0


def test_each_rule_of_the_merge():
    """The crescents' merge cuts the graph far below the fit's halves: merged by the cut
    ratio; with that rule off (a split floor above any gain) by the split gain (the
    halves under-fit the rows), and with both off not at all. Separated blobs, which the
    fit's cells already cut nowhere (its cut below ``cut_floor``), are never merged."""
    X, _ = _crescents(0)
    halves = (X[:, 0] > 0.5).astype(int)
    rng = np.random.default_rng

    def merge(**settings):
        return merge_heads(X, halves, 2, rng=rng(0), settings=MergeSettings(**settings))
    assert merge().merged
    gain = merge(split_gain_floor=10.0)
    assert gain.merged and "the 2 components under-fit the rows" in gain.reason
    assert not merge(split_gain_floor=10.0, min_split_gain=10.0).merged
    X, y = _blobs(0, centers=((0, 0), (30, 0), (0, 30), (30, 30)))
    apart = merge_heads(X, y, 4, rng=rng(0))
    assert apart.ncut_kept < MergeSettings().cut_floor and not apart.merged


def test_a_partition_the_heads_cannot_redraw_is_not_merged():
    """The distinguishing case of ``min_redraw``: the same rings, cut in two by a column
    1,000 times finer than their noise. The heads (spherical, in the rows' units) cannot
    draw that partition (ARI near 0), so its cut says nothing about the merge: turned
    down, though the merged cut is far below the fit's; with the check off, merged."""
    X, _ = _rings(0)
    bit = np.random.default_rng(1).integers(0, 2, len(X))
    Xb = np.c_[X, 1e-4 * bit]
    res = merge_heads(Xb, bit, 2, rng=np.random.default_rng(0))
    # chance level: each of 150 heads takes the majority of its ~5 rows' random bits
    assert res.ncut_merged < 0.05 * res.ncut_kept and abs(res.redraw) < 0.2
    assert not res.merged and "below 0.6: they do not see what it sees" in res.reason
    # with the check off, the cut ratio merges: the fine column is a grid of two values,
    # on which two Gaussians, one per value, gain nothing at its resolution floor (at a
    # floor of 1e-6 they sat on the two values and fit the rows far better than four);
    # a split floor above any gain turns it down
    off = merge_heads(Xb, bit, 2, rng=np.random.default_rng(0),
                      settings=MergeSettings(min_redraw=0))
    assert off.merged and "split gain" in off.reason
    off = merge_heads(Xb, bit, 2, rng=np.random.default_rng(0),
                      settings=MergeSettings(min_redraw=0, split_gain_floor=100))
    assert not off.merged and "the 2 components fit the rows" in off.reason
    # labels the heads can draw (a convex cut across the rings) are compared as before
    half = merge_heads(Xb, (X[:, 0] > 0).astype(int), 2, rng=np.random.default_rng(0))
    assert half.merged and half.redraw > 0.8


def test_wine_is_not_merged():
    """Wine's columns on scales 10^3 apart: the diag fit separates the cultivars (ARI
    0.92); spherical heads in the rows' units see proline only and redraw its partition
    at ARI about 0.45, so the merge (ARI about 0.35) is not taken."""
    from sklearn.datasets import load_wine
    X, y = load_wine(return_X_y=True)
    for seed in range(3):
        est = _fit(X, 3, seed)
        plain = _fit(X, 3, seed, merge_heads=False)
        assert not est.merge_heads_, est.merge_heads_reason_
        np.testing.assert_array_equal(est.labels_, plain.labels_)
        assert adjusted_rand_score(y, est.labels_) > 0.9


def test_too_few_rows_for_more_heads():
    X = np.random.default_rng(0).random((12, 2))
    res = merge_heads(X, np.repeat([0, 1], 6), 2, rng=np.random.default_rng(0))
    assert not res.merged and res.reason.startswith("not merged: 12 rows")
    est = _fit(X, 2, 0)
    assert not est.merge_heads_ and len(est.heads_) == 2


# -- rows that the heads sit on exactly: duplicated rows ----------------------------------
def test_repeated_rows_are_one_place_to_tile():
    """Three distinct rows, each 100 times: no head beyond the rows' places, so no merge,
    even when forced (heads on repeated rows attend to one row each: every cut is 0)."""
    X = np.repeat([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], 100, axis=0)
    res = merge_heads(X, np.repeat([0, 1, 1], 100), 2, rng=np.random.default_rng(0),
                      force=True)
    assert not res.merged and res.reason.startswith("not merged: 3 distinct sampled rows")


@pytest.mark.parametrize("seed", range(4))
def test_seeds_stop_at_the_pools_distinct_rows(seed):
    """1,700 copies of one row and 300 others: once every distinct row of the pool was a
    head, the distances' rounding (4e-16, not 0) had k-means++ seed the repeated row again
    (60 heads on 26 places on seed 1). Heads on one place are one head."""
    rng = np.random.default_rng(0)
    X = np.r_[np.zeros((1700, 2)), rng.normal(0, 1, (150, 2)), rng.normal(5, 1, (150, 2))]
    heads = tile_heads(X, 60, np.random.default_rng(seed), max_iter=0)
    assert len(np.unique(heads, axis=0)) == len(heads)


def test_one_feature_under_auto_skips_clusters_that_barely_overlap():
    """Under n_clusters="auto" the heads may count clusters on one feature, but clusters
    that barely overlap are still not tiled at all (the skip came after the rule of one
    feature, and tiled them)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, 300), rng.normal(20, 1, 300), rng.normal(40, 1, 300)][:, None]
    est = _fit(X, "auto", 0)
    assert est.n_clusters_ == 3 and "barely overlap" in est.merge_heads_reason_


@pytest.mark.parametrize("seed", range(3))
def test_counts_are_not_merged_into_a_corner(seed):
    """Two blobs of Poisson counts (156 distinct rows among 1,000): 150 heads sat on the
    repeated rows, every cut of theirs was near 0, and the merge took a corner of one blob
    for a cluster (ARI 0.08-0.13 against the fit's 0.81). One head per 5 distinct rows
    keeps the fit's partition, which k-means finds too."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.poisson(2, (500, 2)), rng.poisson(7, (500, 2))].astype(float)
    truth = np.repeat([0, 1], 500)
    kmeans = KMeans(2, n_init=10, random_state=seed).fit_predict(X)
    est = _fit(X, 2, seed)
    assert len(est.heads_) <= len(np.unique(X, axis=0)) // MergeSettings().rows_per_head \
        or not est.merge_heads_
    assert adjusted_rand_score(truth, est.labels_) >= adjusted_rand_score(truth, kmeans) - 0.05


def _blobs_beside(categories: str, seed: int):
    """Three blobs (900 rows) beside a categorical column independent of them: a yes/no
    column, or a three-level category one-hot encoded."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(900, 2, centers=3, random_state=seed)
    level = np.random.default_rng(50 + seed).integers(0, 2 if categories == "yes/no" else 3, 900)
    column = level[:, None] if categories == "yes/no" else np.eye(3)[level]
    return np.hstack([X, column]).astype(float), y


@pytest.mark.parametrize("categories", ["yes/no", "one-hot"])
def test_a_category_spread_over_its_cells_is_no_gap_between_clusters(categories):
    """A categorical column cuts the rows into slabs with no row between them, and the
    heads of two slabs share no attention: by default the merge took the slabs for
    clusters on 3 of these 10 seeds (ARI 0.44 on seed 2 beside the yes/no column; mean
    0.82 against k-means' 0.92). With ``grid_variance`` set the grid is spread over its
    cells and has no such gap: no merge, the fit's labels."""
    grid = MergeSettings(grid_variance=1e-4)
    merged = []
    for seed in range(10):
        X, y = _blobs_beside(categories, seed)
        merged.append(_fit(X, 3, seed).merge_heads_)
        est = AttentionClustering(3, random_state=seed, merge_heads=grid).fit(X)
        assert not est.merge_heads_, (seed, est.merge_heads_reason_)
    assert sum(merged) >= 3                       # the default: the case of the setting


@pytest.mark.parametrize("seed", range(3))
def test_a_yes_no_column_that_carries_the_clusters_is_cut_along(seed):
    """Why spreading a grid is not the default: two overlapping blobs beside a yes/no
    column that is their label. The round fit cannot see the column (diag and full heads
    sit at the floor along it, constant within each cluster), and the merge's cut along
    its gap finds the clusters; spread over its cells, that gap is gone (ARI 0.42 over
    five seeds, where the default and GaussianMixture(full) get 0.98 and 1.0)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 900)
    X = np.c_[rng.normal(size=(900, 2)) + np.c_[1.5 * y, 0 * y], y].astype(float)
    est = _fit(X, 2, seed)
    assert est.merge_heads_ and adjusted_rand_score(y, est.labels_) > 0.9


def test_a_gap_of_more_than_one_step_of_a_grid_stays():
    """Spreading a grid over its cells closes the gaps between neighbouring values only:
    two groups of counts 10 steps apart along one column still part, and crescents beside
    a yes/no column are still merged into the crescents."""
    from sklearn.datasets import make_moons

    X, y = make_moons(600, noise=0.06, random_state=0)
    B = np.random.default_rng(0).integers(0, 2, (600, 1))
    est = AttentionClustering(2, random_state=0, merge_heads=MergeSettings(
        grid_variance=1e-4)).fit(np.hstack([X, B]))
    assert est.merge_heads_ and adjusted_rand_score(y, est.labels_) == 1.0
    rng = np.random.default_rng(1)
    G = np.r_[rng.integers(0, 4, (300, 2)), rng.integers(0, 4, (300, 2)) + [14, 0]]
    Z = dequantized(G.astype(float), rng, MergeSettings().grid_variance)
    assert np.abs(Z - G).max() <= 0.5 and Z[300:, 0].min() - Z[:300, 0].max() >= 10.0


def test_repeated_rows_are_tiled_as_their_distinct_rows():
    """Crescents of 80 distinct rows drawn 1,000 times: at most 16 heads, as for the 80
    rows; 150 heads on 78 places merged a few rows into a cluster (ARI 0.005-0.25 over
    these seeds, mean 0.16). Now 1.0 on 4 of 6 seeds (the 80 rows themselves: 6 of 6)."""
    X, y = _crescents(0, n=40)
    scores = []
    for seed in range(6):
        take = np.random.default_rng(seed).integers(0, 80, 1000)
        est = _fit(X[take], 2, seed)
        assert len(est.heads_) <= 80 // MergeSettings().rows_per_head
        scores.append(adjusted_rand_score(y[take], est.labels_))
    assert np.mean(scores) > 0.6


@pytest.mark.parametrize("K", [2, 3])
def test_forced_merge_of_duplicated_rows_fits(K):
    X = np.repeat(np.random.default_rng(0).normal(size=(3, 2)), 100, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = AttentionClustering(n_clusters=K, merge_heads=True, random_state=0).fit(X)
    assert np.isfinite(est.cluster_centers_).all()
    assert np.isfinite(est.predict_proba(X)).all() and np.isfinite(est.score_samples(X)).all()
    assert (est.labels_ == est.predict(X)).all()


def test_no_merge_when_fewer_distinct_rows_than_clusters_plus_one():
    """All rows equal: one head is tiled, not more than K; the merge is turned down even
    when forced (as when n_heads is not above K), and no cluster is left without heads."""
    few = np.repeat(np.eye(3), 100, axis=0)                 # 3 distinct rows, K = 5
    assert not merge_heads(few, np.repeat([0, 1, 2], 100), 5, rng=np.random.default_rng(0),
                           force=True).merged
    X = np.ones((200, 3))
    res = merge_heads(X, np.zeros(200, np.int64), 2, rng=np.random.default_rng(0), force=True)
    assert not res.merged and "no more heads than clusters" in res.reason
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = AttentionClustering(n_clusters=2, merge_heads=True, random_state=0).fit(X)
    assert not est.merge_heads_ and np.isfinite(est.cluster_centers_).all()
    assert np.isfinite(est.predict_proba(X)).all()


def test_partial_fit_after_a_merged_fit_streams_one_head_per_cluster():
    """The stream moves cluster_centers_; the merged heads, left in place, went on
    predicting (labels_ of the batch disagreed with predict on it)."""
    X, _ = _rings(0, 200)
    est = AttentionClustering(n_clusters=2, merge_heads=True, random_state=0).fit(X)
    assert est.merge_heads_
    with pytest.warns(UserWarning, match=r"streams one head per cluster .* merged heads, "
                                         "which drew the clusters' shapes, are dropped"):
        est.partial_fit(X[:100])
    assert not est.merge_heads_ and "partial_fit" in est.merge_heads_reason_
    assert est.head_labels_.tolist() == [0, 1]
    assert np.array_equal(est.heads_, est.cluster_centers_)
    assert (est.labels_ == est.predict(X[:100])).all()


def test_partial_fit_after_a_merged_fit_streams_at_the_clusters_lambda(tmp_path):
    """The merged heads' lambda is theirs (150 heads a small distance apart: 1,550 on two
    moons); one head per cluster streamed at it made every row's attention 0 or 1 and a
    score 180 times a fresh stream's (-336 against -1.9). The stream reads the clusters'
    own lambda on its first batch, as a fresh stream does: the two streams' lambda and
    score are then of one size (within a factor of two: the centres differ, the merged
    fit's are the crescents' means), and a model file streams on alike."""
    from sklearn.datasets import make_moons

    X, _ = make_moons(600, noise=0.05, random_state=0)
    est = _fit(X, 2, 0)
    assert est.merge_heads_ and est.inverse_temperature_ > 100
    save_model(est, tmp_path / "merged.npz")
    loaded = load_model(tmp_path / "merged.npz")
    fresh = AttentionClustering(2, random_state=0).partial_fit(X[:100])
    with pytest.warns(UserWarning, match="merged heads, which drew the clusters' shapes"):
        est.partial_fit(X[:100])
    with pytest.warns(UserWarning, match="merged heads, which drew the clusters' shapes"):
        loaded.partial_fit(X[:100])
    assert 0.5 < est.inverse_temperature_ / fresh.inverse_temperature_ < 2.0
    assert 2.0 * fresh.score(X) < est.score(X) < 0.5 * fresh.score(X)
    assert loaded.inverse_temperature_ == est.inverse_temperature_
    np.testing.assert_array_equal(loaded.cluster_centers_, est.cluster_centers_)


def test_a_merged_cluster_of_no_row_warns():
    """A forced merge of 60 rows of noise in 300 dimensions leaves cluster 0 without a row
    (sizes 0, 59, 1): it warns as a fit's dead head does (it was silent)."""
    X = np.random.default_rng(0).normal(size=(60, 300))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = AttentionClustering(3, random_state=0, merge_heads=True).fit(X)
    empty = np.flatnonzero(np.bincount(est.labels_, minlength=3) == 0).tolist()
    assert est.merge_heads_ and empty                     # the case: a cluster of no row
    said = [w for w in caught if issubclass(w.category, DegenerateFitWarning)
            and f"cluster(s) {empty} win no row" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__   # at the caller of fit


def test_draw_copies_has_the_law_of_the_repeated_rows_draw():
    """Integer weights: the copies of each row in a draw of ``size`` rows without
    replacement from the rows repeated (multivariate hypergeometric): ``size`` in all, never
    more than the weight, and each row's mean over ``R`` draws within 5 standard errors of
    ``size p_i`` (variance ``size p_i (1 - p_i) (N - size) / (N - 1)``, ``p_i = w_i / N``).
    Other weights: ``size`` draws in proportion to them (multinomial)."""
    from attnclust.cluster.head_graph import draw_copies

    rng = np.random.default_rng(0)
    w, size, R = np.array([0.0, 1.0, 2.0, 5.0, 12.0]), 7, 4000
    N, p = w.sum(), w / w.sum()
    draws = np.stack([draw_copies(w, size, rng) for _ in range(R)])
    assert (draws.sum(1) == size).all() and (draws <= w).all()
    sd = np.sqrt(size * p * (1 - p) * (N - size) / (N - 1) / R)
    assert np.all(np.abs(draws.mean(0) - size * p) <= 5 * sd)
    real = np.stack([draw_copies(w * 0.3, size, rng) for _ in range(R)])
    assert (real.sum(1) == size).all() and real[:, 0].max() == 0
    assert np.all(np.abs(real.mean(0) - size * p) <= 5 * np.sqrt(size * p * (1 - p) / R))


def test_tiling_weighted_rows_seeds_as_the_repeated_rows():
    """One head seeded from three rows of weights 1, 1 and 8 (no Lloyd step): the seed is
    each row with probability ``w_i / 10``, as from the ten repeated rows (within 5
    standard errors over 3,000 seedings). A pool drawn by weight without replacement, then
    a uniform seed in it, had put the heavy row at 0.49, not 0.8."""
    X, w, R = np.array([[0.0], [1.0], [2.0]]), np.array([1.0, 1.0, 8.0]), 3000
    rng = np.random.default_rng(0)
    seeds = [tile_heads(X, 1, rng, max_iter=0, weights=w)[0, 0] for _ in range(R)]
    repeated = [tile_heads(np.repeat(X, [1, 1, 8], axis=0), 1, rng, max_iter=0)[0, 0]
                for _ in range(R)]
    p = w / w.sum()
    for drawn in (seeds, repeated):
        share = np.bincount(np.asarray(drawn, dtype=np.int64), minlength=3) / R
        assert np.all(np.abs(share - p) <= 5 * np.sqrt(p * (1 - p) / R))


def test_a_far_row_the_merge_sample_missed_moves_no_centre():
    """Four blobs of 1,000 rows and one row at 1e6: the merge reads a sample of 3,000
    rows; on a seed whose sample misses the far row, that row keeps a label but its
    cluster's centre is the mean of the cluster's other rows (it was dragged 1e6 / 1,000
    away when every member counted), and every other centre is its blob's mean."""
    from attnclust.cluster.estimator_fits import fit_merge
    from attnclust.cluster.rows import WorkingRows
    from attnclust.layer.geometry import Euclidean

    gen = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 1000)
    X = np.array([[0.0, 0.0], [12.0, 0.0], [0.0, 12.0], [12.0, 12.0]])[y] + \
        gen.normal(size=(4000, 2)) * [3.0, 0.5]
    X[0] = 1e6
    seed = next(s for s in range(50)                         # a sample without row 0
                if 0 not in np.random.default_rng(s).choice(4000, 3000, replace=False))
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None)
    merge, fitted = fit_merge(rows, y, 4, True, gen=np.random.default_rng(seed))
    assert merge.merged and len(fitted.labels_) == 4000     # a forced merge labels all rows
    z = fitted.labels_
    for c in range(4):
        members = (z == c) & (np.arange(4000) > 0)
        np.testing.assert_allclose(fitted.cluster_centers_[c], X[members].mean(0),
                                   rtol=0, atol=1e-9 * 1e6)


def test_merged_centres_are_their_rows_means_beyond_the_merge_sample():
    """On 20,000 rows of two moons (no outlier) the merge reads 3,000 of them; every
    merged centre is still the mean of all the rows of its label: the clusters' tails,
    a little beyond the sample's farthest row, count."""
    from sklearn.datasets import make_moons

    X, _ = make_moons(20_000, noise=0.06, random_state=0)
    est = AttentionClustering(2, merge_heads=True, random_state=0).fit(X)
    assert est.merge_heads_
    for c in range(2):
        np.testing.assert_allclose(est.cluster_centers_[c], X[est.labels_ == c].mean(0),
                                   rtol=0, atol=1e-12 * 20_000)


def test_rows_of_weight_zero_do_not_steer_the_merge():
    """Junk rows of weight zero spread far around two moons are no rows: the moons are
    merged and found as without them."""
    from sklearn.datasets import make_moons

    X, y = make_moons(1000, noise=0.05, random_state=0)
    junk = np.random.default_rng(0).uniform(-30, 30, (1500, 2))
    w = np.r_[np.ones(1000), np.zeros(1500)]
    est = AttentionClustering(2, random_state=0).fit(np.r_[X, junk], sample_weight=w)
    alone = AttentionClustering(2, random_state=0).fit(X)
    assert est.merge_heads_ and alone.merge_heads_
    assert adjusted_rand_score(y, est.labels_[:1000]) == adjusted_rand_score(y, alone.labels_)


def _zigzags(rng, n=84):
    """Three thin zigzag lines (5 segments each) stacked 1.4 apart: separated shapes."""
    X, y = [], []
    for i in range(3):
        corners = np.c_[np.linspace(0, 4, 6), 1.4 * i + 0.5 * (np.arange(6) % 2)]
        step = np.diff(corners, axis=0)
        lengths = np.linalg.norm(step, axis=1)
        s = rng.uniform(0, lengths.sum(), n)
        k = np.minimum(np.searchsorted(np.cumsum(lengths), s), 4)
        t = (s - np.r_[0, np.cumsum(lengths)][k]) / lengths[k]
        X.append(corners[k] + step[k] * t[:, None] + rng.normal(0, 0.05, (n, 2)))
        y.append(np.full(n, i))
    return np.concatenate(X), np.concatenate(y)


def test_separated_shapes_merge_where_the_fit_cuts_nothing():
    """The 3-head fit's cells can join the end of one zigzag to the next and cut nothing
    (the heads' cut of its partition below cut_floor, 5 draws of 12 at ARI 0.50-0.54);
    the merged partition, whose cut is 20 times lower still (0), is kept."""
    for seed in range(12):
        X, y = _zigzags(np.random.default_rng(seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = AttentionClustering(3, random_state=0).fit(X)
        assert adjusted_rand_score(y, est.labels_) > 0.99, seed
        assert est.merge_heads_ or "barely overlap" in est.merge_heads_reason_, seed

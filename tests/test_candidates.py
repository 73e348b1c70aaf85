"""The shape choice's second EM start, one head on the densest region
(:func:`attnclust.cluster.mixture.candidates.core_start`), and where it is tried."""

import math
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import attnclust.cluster.mixture.shape_choice as shape_choice
from attnclust import AttentionClustering
from attnclust.cluster.mixture.candidates import core_start, merges_cells
from attnclust.cluster.settings import FitSettings


def _ball_in_shell(seed, n=400):
    """A dense ball (sd 0.5) inside a shell of radius 4 in 3-D: Voronoi cells cut both."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n, 3))
    shell = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.normal(4, 0.3, n)[:, None]
    return np.r_[rng.normal(0, 0.5, (n, 3)), shell], np.repeat([0, 1], n)


def _blob_in_ring(seed):
    """A blob inside a ring, over 10% uniform outliers (labelled -1)."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 700)
    ring = np.c_[np.cos(t), np.sin(t)] * rng.normal(5, 0.3, 700)[:, None]
    X = np.vstack([rng.normal(0, 0.6, (500, 2)), ring, rng.uniform(-8, 8, (120, 2))])
    return X, np.r_[np.zeros(500, int), np.ones(700, int), -np.ones(120, int)]


def _fit(X, K, seed, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(K, random_state=seed, **params).fit(X)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("K", [2, 3, 5])
def test_the_core_is_the_rows_nearest_a_row_holding_a_Kth_of_the_weight(K, weighted):
    """Invariants of the start: head 0 is the rows nearest one row (no other row nearer
    than a core row), holding at least ``1/K`` of the weight and less than ``1/K`` plus
    one row's; the other rows keep their cells, renamed ``1..K-1``, except the dissolved
    cell's, which join another."""
    rng = np.random.default_rng(K)
    X = rng.normal(size=(600, 3)) * [1.0, 2.0, 0.5]
    labels = rng.integers(0, K, 600)
    w = rng.uniform(0.5, 2.0, 600) if weighted else np.ones(600)
    start = core_start(X, labels, K, np.random.default_rng(0), w if weighted else None)
    core = start == 0
    assert start.min() == 0 and start.max() <= K - 1
    held = w[core].sum() / w.sum()
    assert 1 / K <= held < 1 / K + w.max() / w.sum()
    # the peak: the core row from which the core is a ball (all core rows nearer than all
    # others); the start expands ||x - p||^2 = |x|^2 + |p|^2 - 2 x.p, whose rounding is
    # a few eps times the squared norms (about 10 here)
    d2 = ((X[core][:, None, :] - X[None]) ** 2).sum(2)             # (core rows, n)
    slack = 64 * np.finfo(float).eps * float((X * X).sum(1).max())
    assert any(d2[i, core].max() <= d2[i, ~core].min() + slack for i in range(core.sum()))
    # the rest keep their cells: each old cell maps into one new head (the dissolved
    # cell's rows may go to several)
    rest = ~core
    mapped = [np.unique(start[rest & (labels == h)]) for h in range(K)]
    assert sum(m.size == 1 for m in mapped) >= K - 1
    assert all(np.all(m >= 1) for m in mapped)
    # it moves at least settings.min_moved of the weight out of the default cells, each named as
    # in the start: the cell holding most of the core's weight 0, the others their head
    dissolved = np.bincount(labels[core], weights=w[core], minlength=K).argmax()
    names = np.array([0 if h == dissolved else int(np.bincount(start[rest & (labels == h)])
                                                   .argmax()) for h in range(K)])
    assert w[start != names[labels]].sum() / w.sum() >= FitSettings().min_moved


@pytest.mark.parametrize("K", [2, 3, 7])
def test_unit_weights_give_the_unweighted_start(K):
    """The unweighted core (a partial sort: the ceil(n / K) rows nearest the peak) is the
    weighted one (a sort and a running sum of the weights) at unit weights."""
    X, _ = _ball_in_shell(0, n=301)
    labels = np.random.default_rng(K).integers(0, K, X.shape[0])
    plain = core_start(X, labels, K, np.random.default_rng(1))
    unit = core_start(X, labels, K, np.random.default_rng(1), np.ones(X.shape[0]))
    assert plain is not None
    np.testing.assert_array_equal(plain, unit)


def test_no_second_start_when_it_is_the_default_partition():
    """Equal separated blobs: the core is one blob, the start the default cells renamed."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 0.1, (100, 2)), rng.normal(0, 0.1, (100, 2)) + [10, 0]]
    labels = np.repeat([1, 0], 100)
    assert core_start(X, labels, 2, np.random.default_rng(0)) is None
    assert core_start(X, np.zeros(200, int), 1, np.random.default_rng(0)) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nested_clusters_get_a_narrow_head_inside_a_wide_one(seed):
    """A ball in a shell: EM from the default partition keeps its halves (ARI about 0);
    from the density core it reaches the nested mixture, of an ICL lower by hundreds,
    which the choice keeps. The recorded ICL is at most the default start's."""
    X, y = _ball_in_shell(100 + seed)
    assert adjusted_rand_score(y, _fit(X, 2, seed).labels_) > 0.8   # the default
    est = _fit(X, 2, seed, merge_heads=False)     # its shape choice (it may merge heads too)
    assert adjusted_rand_score(y, est.labels_) > 0.8
    assert est.covariance_type_ != "spherical"
    halves = _fit(X, 2, seed, merge_heads=False,      # the shape choice alone (merged
                  settings=FitSettings(rows_per_parameter=math.inf))
    assert adjusted_rand_score(y, halves.labels_) < 0.3  # heads also find ball and shell)
    chosen = est.covariance_type_criteria_[est.covariance_type_]["icl"]
    assert chosen < min(s["icl"] for s in halves.covariance_type_criteria_.values()) - 100


@pytest.mark.parametrize("lean_rows", [10_000, 1_000])    # the lean EM, the chunked one
def test_the_nested_fit_of_a_sample_carries_to_all_rows(lean_rows):
    """On more rows than ``settings.choice_rows`` the chosen shape is fitted on all rows
    from the sample's fit when the density core's start won (from the default partition it
    would fall back to the halves)."""
    X, y = _ball_in_shell(7, n=1500)
    est = _fit(X, 2, 0, settings=FitSettings(lean_rows=lean_rows))
    assert est.covariance_type_criteria_[est.covariance_type_]["n_rows"] == 2000
    assert est.labels_.shape == (3000,)
    assert adjusted_rand_score(y, est.labels_) > 0.8


def test_a_blob_inside_a_ring_over_outliers():
    """The held-out battery's trap: a blob inside a ring over 10% outliers (ARI on the
    clusters' rows)."""
    X, y = _blob_in_ring(2000)
    keep = y >= 0
    for seed in range(3):
        assert adjusted_rand_score(y[keep], _fit(X, 2, seed).labels_[keep]) > 0.7


def test_the_core_start_needs_rows_per_parameter(monkeypatch):
    """Full heads on 300 rows in 12-D have 181 parameters, diag 49: neither has 10 rows
    per parameter, so the density core is not computed; on the ball in a shell it is."""
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return core_start(*args, **kwargs)
    monkeypatch.setattr(shape_choice, "core_start", spy)
    rng = np.random.default_rng(0)
    _fit(np.r_[rng.normal(size=(150, 12)), rng.normal(size=(150, 12)) + 4], 2, 0)
    assert not calls
    _fit(_ball_in_shell(0)[0], 2, 0)
    assert calls


def _blobs_over_noise():
    """Four blobs and 10% uniform rows over their box (labelled -1): the battery's
    "noise 10% K=4"."""
    X, y = make_blobs(2000, centers=4, cluster_std=1.0, random_state=16)
    rng = np.random.default_rng(17)
    lo, hi = X.min(0), X.max(0)
    noise = rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), (200, 2))
    return np.r_[X, noise], np.r_[y, -np.ones(200, int)]


def test_merges_cells_against_a_direct_count():
    """A head merges two cells when it holds at least ``settings.merge_share`` of the
    weight of each:
    checked against a loop over the cells on random partitions, with and without weights."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        K = int(rng.integers(2, 6))
        a = rng.integers(0, K, 40)
        b = np.where(rng.random(40) < 0.8, a // 2, rng.integers(0, K, 40))   # often merged
        w = rng.uniform(0.1, 3.0, 40) if trial % 2 else np.ones(40)
        merged = False
        for h in range(K):
            held = [w[(a == c) & (b == h)].sum() / w[a == c].sum() for c in range(K)
                    if (a == c).any()]
            merged |= sum(x >= FitSettings().merge_share for x in held) >= 2
        assert merges_cells(a, b, K, None if trial % 2 == 0 else w) == merged


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_a_core_fit_that_merges_two_cells_is_not_kept(seed, monkeypatch):
    """Blobs over uniform noise, the second start forced (``settings.min_moved`` 0): its
    fit of lower ICL spends a head on the noise and merges two blobs' cells. The guard
    drops it (the blobs are found); without the guard that fit is kept and two blobs are
    one."""
    forced = FitSettings(min_moved=0.0)
    fired = []

    def spy(default, labels, K, weights=None, **kwargs):
        fired.append(merges_cells(default, labels, K, weights, **kwargs))
        return fired[-1]
    monkeypatch.setattr(shape_choice, "merges_cells", spy)
    X, y = _blobs_over_noise()
    keep = y >= 0
    est = _fit(X, 4, seed, settings=forced)
    assert fired == [True]
    assert adjusted_rand_score(y[keep], est.labels_[keep]) > 0.85
    monkeypatch.setattr(shape_choice, "merges_cells", lambda *args, **kwargs: False)
    unguarded = _fit(X, 4, seed, settings=forced)
    assert adjusted_rand_score(y[keep], unguarded.labels_[keep]) < 0.8


@pytest.mark.parametrize("stop_steps", [1, 2, 5])
def test_a_candidate_stops_after_settings_stop_steps_hopeless_steps(stop_steps):
    """With a least ICL no candidate can reach (``-inf``), every decelerating step is a
    hit: the candidate stops early after ``settings.stop_steps`` of them, its first two
    steps only setting the gains' history."""
    from attnclust.cluster.mixture.candidates import run_or_stop
    from attnclust.cluster.mixture.covariance import Full
    from attnclust.cluster.mixture.em import LeanEM
    from attnclust.cluster.settings import FitSettings

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(200, 2)) * [3, 0.3],
                        rng.normal(size=(200, 2)) * [3, 0.3] + [0, 1.0]])
    em = LeanEM(X, 2, Full(), np.full(2, 1e-6), (X[:, 0] > 0).astype(int), tol=1e-12)
    assert run_or_stop(em, 300, 0.0, -np.inf, settings=FitSettings(stop_steps=stop_steps))
    assert em.n_iter == 1 + stop_steps

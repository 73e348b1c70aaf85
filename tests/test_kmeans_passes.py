"""Lloyd passes of the hard ending, against scikit-learn's Lloyd k-means."""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from attnclust.hard_ending import SETTLED, lloyd_passes, sample_kmeans


def _data(seed=0):
    X, _ = make_blobs(600, n_features=3, centers=5, cluster_std=2.0, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(X[:5] + 0.5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_passes_reach_scikit_learns_lloyd_fixed_point(seed):
    X, heads0 = _data(seed)
    res = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                       chunk=128)
    km = KMeans(5, init=heads0.numpy(), n_init=1, algorithm="lloyd", tol=0.0,
                max_iter=300).fit(X.numpy())
    assert res.converged
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0, atol=1e-10)
    # the objective of the pass that found no move is the k-means inertia per row
    assert res.objective[-1] == pytest.approx(km.inertia_ / X.shape[0], rel=1e-10)


def test_objective_never_increases_and_is_the_hard_limit_risk():
    X, heads0 = _data(3)
    res = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                       chunk=100)
    assert res.n_passes > 2
    assert np.all(np.diff(res.objective) <= 1e-12 * res.objective[0])
    dist = torch.cdist(X, heads0).min(1).values ** 2          # dense reference, first pass
    assert res.objective[0] == pytest.approx(float(dist.mean()), rel=1e-12)


def test_chunks_and_workers_do_not_change_the_result():
    X, heads0 = _data(4)
    one = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=50, tol=0.0,
                       chunk=X.shape[0])
    many = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=50, tol=0.0,
                        chunk=37, workers=3)
    np.testing.assert_allclose(many.heads.numpy(), one.heads.numpy(), rtol=0, atol=1e-12)
    assert many.n_passes == one.n_passes


def test_stops_at_tol_and_at_max_passes():
    X, heads0 = _data(5)
    full = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                        chunk=600)
    capped = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=2, tol=0.0,
                          chunk=600)
    assert capped.n_passes == 2 and not capped.converged
    loose = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=1.0,
                         chunk=600)
    assert loose.converged and loose.n_passes < full.n_passes


def test_a_head_with_an_empty_cell_stays_put():
    X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    heads0 = torch.tensor([[0.0, 0.0], [10.0, 0.0], [100.0, 100.0]], dtype=torch.float64)
    res = lloyd_passes(lambda a, b: X[a:b], 3, heads0, max_passes=10, tol=0.0, chunk=2)
    assert res.heads[2].tolist() == [100.0, 100.0]
    assert res.heads[0].tolist() == [0.5, 0.0]


def test_rtol_stops_once_the_objective_and_the_partition_settle():
    X, heads0 = _data(6)
    full = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                        chunk=600)
    loose = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                         rtol=1e-2, chunk=600)
    assert loose.converged and loose.n_passes < full.n_passes
    drops = -np.diff(loose.objective)
    labels = torch.cdist(X[None], loose.path).argmin(-1).numpy()     # (T, n), dense
    changed = (labels[1:] != labels[:-1]).mean(1)
    assert drops[-1] <= 1e-2 * loose.objective[-2] and changed[-1] <= SETTLED
    assert np.all((drops[:-1] > 1e-2 * loose.objective[:-2]) | (changed[:-1] > SETTLED))


def test_rtol_does_not_stop_on_the_way_to_a_far_row():
    """One row 1e8 away dominates R_inf: the head whose cell takes it gains little in its
    first step (it moves 1e8 / 30,000), but moves half the rows to another cell, so the
    rule does not stop there; the next step puts that head on the far row."""
    gen = np.random.default_rng(0)
    X = torch.as_tensor(np.concatenate([gen.normal(size=(30_000, 3)),
                                        gen.normal(size=(30_000, 3)) + 4, [[1e8, 0, 0]]]))
    heads0 = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [4.0, 4.0, 4.0]],
                          dtype=torch.float64)
    res = lloyd_passes(_read(X), len(X), heads0, max_passes=300, tol=1e-8, rtol=1e-3,
                       chunk=8192, take=_take(X))
    exact = lloyd_passes(_read(X), len(X), heads0, max_passes=300, tol=0.0, chunk=8192)
    assert res.objective[1] > (1 - 1e-3) * res.objective[0]       # the small first gain
    assert res.heads[:, 0].max() == pytest.approx(1e8)
    assert res.objective[-1] == pytest.approx(exact.objective[-1], rel=1e-6)


@pytest.mark.parametrize("max_passes", [1, 3, 300])
def test_labels_are_the_nearest_returned_heads_and_the_objective_theirs(max_passes):
    X, heads0 = _data(7)
    labels = np.full(X.shape[0], -1)
    res = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=max_passes,
                       tol=1e-6, chunk=128, workers=2, labels=labels)
    dist = torch.cdist(X, res.heads) ** 2                      # dense reference
    np.testing.assert_array_equal(labels, dist.argmin(1).numpy())
    assert res.objective[-1] == pytest.approx(float(dist.min(1).values.mean()), rel=1e-12)


def test_callback_reports_every_pass():
    X, heads0 = _data(10)
    infos = []
    res = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                       chunk=128, callback=infos.append)
    assert [i.iteration for i in infos] == list(range(1, res.n_passes + 1))
    np.testing.assert_allclose([i.loss for i in infos], res.objective, rtol=0, atol=0)
    assert infos[-1].shift == 0.0 and all(i.inverse_temperature == np.inf for i in infos)


def test_integer_weights_are_repeated_rows():
    X, heads0 = _data(12)
    counts = np.random.default_rng(0).integers(0, 4, X.shape[0])
    w = torch.as_tensor(counts, dtype=X.dtype)
    weighted = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                            chunk=97, weights=w, n_total=float(counts.sum()))
    Xr = torch.as_tensor(np.repeat(X.numpy(), counts, axis=0))
    repeated = lloyd_passes(lambda a, b: Xr[a:b], Xr.shape[0], heads0, max_passes=300,
                            tol=0.0, chunk=97)
    np.testing.assert_allclose(weighted.heads.numpy(), repeated.heads.numpy(), atol=1e-10)
    np.testing.assert_allclose(weighted.objective, repeated.objective, rtol=1e-10)
    # the rtol rule counts the changed rows by weight: the same stop, bounded or not
    loose_w = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                           rtol=1e-2, chunk=97, weights=w, n_total=float(counts.sum()),
                           take=_take(X))
    loose_r = lloyd_passes(lambda a, b: Xr[a:b], Xr.shape[0], heads0, max_passes=300,
                           tol=0.0, rtol=1e-2, chunk=97)
    assert loose_w.n_passes == loose_r.n_passes < repeated.n_passes
    np.testing.assert_allclose(loose_w.heads.numpy(), loose_r.heads.numpy(), atol=1e-10)


def test_swaps_never_raise_the_objective_and_repair_stuck_partitions():
    """From one seeding's Lloyd partition of 25 blobs (often two heads in one blob and one
    head on two), the swaps keep a partition only when its k-means objective is lower,
    and they lower it on most seeds."""
    from attnclust.geometry import Euclidean
    from attnclust.hard_ending import swap_polish

    X = make_blobs(2500, centers=25, cluster_std=0.6, center_box=(-30, 30), random_state=4)[0]
    S = torch.as_tensor((X - X.mean(0)) / X.std())
    lowered = 0
    for seed in range(8):
        start = sample_kmeans(S, 25, seed=seed)                    # one seeding
        kept, steps = swap_polish(S, start, Euclidean(), max_iter=300)
        assert kept.objective <= start.objective
        lowered += kept.objective < start.objective * (1 - 1e-3)
        labels = ((S[:, None, :] - kept.heads[None]) ** 2).sum(-1).argmin(1).numpy()
        np.testing.assert_array_equal(kept.labels, labels)
    assert lowered >= 4


def test_few_heads_take_no_swap():
    from attnclust.geometry import Euclidean
    from attnclust.hard_ending import SWAP_HEADS, swap_polish

    S = torch.tensor([[0.0], [0.1], [5.0], [5.1], [9.0], [9.1]], dtype=torch.float64)
    two_in_one = sample_kmeans(S, 3, init=S[[0, 1, 4]])
    assert 3 < SWAP_HEADS
    kept, steps = swap_polish(S, two_in_one, Euclidean(), max_iter=100)
    assert kept is two_in_one and steps == 0


def _read(X):
    return lambda a, b: X[a:b]


def _take(X):
    return lambda idx: X[idx]


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_bounded_steps_are_whole_passes(seed):
    """With ``take``, steps after the first score only the rows whose gap bound (second-
    nearest minus nearest distance, lowered by the heads' moves) is no longer positive: the
    same steps, heads, objectives and labels as passes over every row."""
    X, heads0 = _data(seed)
    X = torch.cat([X, X[:40] + 0.01])          # more rows near shared boundaries
    a_labels, b_labels = np.empty(X.shape[0], np.int64), np.empty(X.shape[0], np.int64)
    whole = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                         chunk=128, labels=a_labels)
    bounded = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300,
                           tol=0.0, chunk=128, workers=2, labels=b_labels, take=_take(X))
    assert whole.full_passes == whole.n_passes
    assert bounded.full_passes < bounded.n_passes == whole.n_passes
    np.testing.assert_allclose(bounded.heads.numpy(), whole.heads.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(bounded.objective, whole.objective, rtol=1e-12)
    np.testing.assert_array_equal(b_labels, a_labels)


def test_bounded_steps_with_weights_tied_heads_and_a_full_pass_rule():
    """Weighted sums follow the rows that change cell; two heads at one point tie every
    row of their cell (a gap of 0, always rescored); a small ``chunk`` and a step that
    doubts many rows (a whole pass again) change nothing."""
    X, heads0 = _data(12)
    heads0 = torch.cat([heads0, heads0[:1]])                      # a duplicate head
    w = torch.as_tensor(np.random.default_rng(0).uniform(0, 3, X.shape[0]), dtype=X.dtype)
    whole = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                         chunk=50, weights=w, n_total=float(w.sum()))
    bounded = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300,
                           tol=0.0, chunk=50, weights=w, n_total=float(w.sum()),
                           take=_take(X))
    assert bounded.full_passes < bounded.n_passes == whole.n_passes
    np.testing.assert_allclose(bounded.heads.numpy(), whole.heads.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(bounded.objective, whole.objective, rtol=1e-12)
    # the first step moves every head far: the next one reads every row again
    far = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0 * 0.0 + X[:6] * 0.1,
                       max_passes=3, tol=0.0, chunk=50, take=_take(X))
    assert far.full_passes >= 2


def test_bounded_steps_reach_scikit_learns_fixed_point_on_many_rows():
    X, _ = make_blobs(20_000, n_features=4, centers=12, cluster_std=1.5, random_state=3)
    X = torch.as_tensor(X)
    heads0 = X[:12] + 0.3
    labels = np.empty(X.shape[0], np.int64)
    res = lloyd_passes(lambda a, b: X[a:b], X.shape[0], heads0, max_passes=300, tol=0.0,
                       chunk=4096, workers=2, labels=labels, take=_take(X))
    km = KMeans(12, init=heads0.numpy(), n_init=1, algorithm="lloyd", tol=0.0,
                max_iter=300).fit(X.numpy())
    assert res.converged and res.full_passes < res.n_passes
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(labels, km.labels_)
    assert res.objective[-1] == pytest.approx(km.inertia_ / X.shape[0], rel=1e-10)


def test_bounded_steps_in_float32_rescore_rows_on_two_nearly_equal_heads():
    """Rows on a point with two heads 3e-5 apart: in float32 both squared distances round
    to 0, so their gap is 0 / 0 (``nan``, always rescored), never an infinite bound that
    would keep the rows' label after their head moves away."""
    gen = np.random.default_rng(0)
    for _ in range(12):
        p = gen.normal(size=4).astype(np.float32)
        u = gen.normal(size=4).astype(np.float32)
        u /= np.linalg.norm(u)
        far = np.full(4, 5.0, np.float32)
        X = torch.as_tensor(np.concatenate([
            np.repeat(p[None], 100, 0), np.repeat((p + 0.5 * u)[None], 40, 0),
            far + 0.3 * gen.normal(size=(600, 4)).astype(np.float32)]))
        heads0 = torch.as_tensor(np.stack([p, p + 3e-5 * u, far]))
        whole, bounded = np.empty(len(X), np.int64), np.empty(len(X), np.int64)
        lloyd_passes(_read(X), len(X), heads0, max_passes=50, tol=0.0, chunk=256,
                     labels=whole)
        res = lloyd_passes(_read(X), len(X), heads0, max_passes=50, tol=0.0, chunk=256,
                           labels=bounded, take=_take(X))
        np.testing.assert_array_equal(bounded, whole)
        dist = ((X[:, None].double() - res.heads[None].double()) ** 2).sum(-1)
        np.testing.assert_array_equal(bounded, dist.argmin(1).numpy())


def test_rtol_does_not_stop_when_the_far_rows_cell_is_small():
    """Here the cell that takes the far row holds 3,000 of 400,001 rows: its head's first
    move changes under 1% of the rows and gains under 1e-3, but the move it is about to
    make is sure to gain more (n_h ||move||^2), so the rule does not stop."""
    gen = np.random.default_rng(2)
    X = torch.as_tensor(np.concatenate([gen.normal(size=(397_000, 2)),
                                        gen.normal(size=(3_000, 2)) + [10.0, 0.0],
                                        [[1e8, 0.0]]]))
    heads0 = torch.tensor([[-0.5, 0.0], [0.5, 0.0], [10.0, 0.0]], dtype=torch.float64)
    res = lloyd_passes(_read(X), len(X), heads0, max_passes=300, tol=1e-8, rtol=1e-3,
                       chunk=65_536, take=_take(X))
    exact = lloyd_passes(_read(X), len(X), heads0, max_passes=300, tol=0.0, chunk=65_536,
                         take=_take(X))
    assert res.heads[:, 0].max() == pytest.approx(1e8)
    assert res.objective[-1] == pytest.approx(exact.objective[-1], rel=1e-2)


def test_the_default_fit_on_many_rows_gives_a_far_row_its_own_head():
    """Above the warm-start sample's size the sample may miss a far row; the steps over
    all rows still reach the k-means fixed point that gives it a head (as KMeans does)."""
    import attnclust as ac

    gen = np.random.default_rng(1)
    X = np.concatenate([gen.normal(size=(12_000, 3)), gen.normal(size=(12_000, 3)) + 4,
                        [[1e8, 0, 0]]])
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    km = KMeans(3, n_init=1, random_state=0).fit(X)
    assert np.sum(est.labels_ == est.labels_[-1]) == 1                # the far row alone
    assert est.loss_curve_[-1] <= km.inertia_ / len(X) * (1 + 1e-6)


def test_per_chunk_sums_held_in_groups_give_the_same_steps(monkeypatch):
    """With room for one chunk's sums per worker at a time (many groups, each added up in
    chunk order), the steps are those of one group of every chunk."""
    import attnclust.hard_ending as hard_ending

    X, heads0 = _data(8)
    kwargs = dict(max_passes=300, tol=0.0, chunk=50, workers=2, take=_take(X))
    one = lloyd_passes(_read(X), len(X), heads0, **kwargs)
    monkeypatch.setattr(hard_ending, "_PARTS_BYTES", 1)
    grouped = lloyd_passes(_read(X), len(X), heads0, **kwargs)
    assert grouped.n_passes == one.n_passes and grouped.full_passes == one.full_passes
    np.testing.assert_allclose(grouped.heads.numpy(), one.heads.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grouped.objective, one.objective, rtol=1e-12)


def test_a_far_row_the_sample_missed_joins_it_and_the_swaps_repair_the_rest(monkeypatch):
    """12 blobs in 5-D and one row at 1e6, the warm-start sample (lowered to 1,000 of
    6,001 rows) missing it: the passes give that row a head taken from a blob, merged
    into a neighbour wherever it was. The rows' objective is then far above the sample's,
    so the rows farthest from the sample's heads join it and single swaps move the
    merge: the objective was about 2x KMeans(n_init=10)'s, now within 1.2x."""
    import attnclust as ac
    from attnclust import hard_ending, warm_start

    monkeypatch.setattr(warm_start, "WARM_SAMPLE", 1000)
    gen = np.random.default_rng(1)
    centres = gen.uniform(-20, 20, (12, 5))
    X = np.concatenate([centres[gen.integers(0, 12, 6000)] + gen.normal(size=(6000, 5)),
                        [[1e6] * 5]])
    best = KMeans(12, n_init=10, random_state=0).fit(X).inertia_ / len(X)
    repairs = []
    real = hard_ending._with_far_rows
    monkeypatch.setattr(hard_ending, "_with_far_rows", lambda *a: repairs.append(1) or real(*a))
    for seed in range(4):
        before = len(repairs)
        fit = ac.AttentionClustering(12, random_state=seed).fit(X)
        objective = ((X - fit.cluster_centers_[fit.labels_]) ** 2).sum(1).mean()
        assert objective <= 1.2 * best
        assert fit.loss_curve_[-1] == pytest.approx(objective, rel=1e-9)
        if len(repairs) > before:        # the passes before the repair, then those kept
            assert fit.loss_curve_.max() > 1.5 * objective
    assert len(repairs) >= 2                         # the claim's path was taken
    repairs.clear()                                  # and blobs alone never take it
    ac.AttentionClustering(12, random_state=0).fit(X[:-1])
    assert not repairs

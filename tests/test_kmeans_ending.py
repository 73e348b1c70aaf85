"""The end of a fit in the hard limit: swaps, steps over all rows, the far-row repair
(in one process and across ranks)."""

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans

import attnclust as ac
from _tolerance import objective_tol
from attnclust.cluster.communicator import Communicator
from attnclust.cluster.distributed import shard_bounds
from attnclust.cluster.kmeans import ending
from attnclust.cluster.rows import WorkingRows
from attnclust.cluster.settings import FitSettings
from test_distributed import _run_ranks, _ThreadGroup


def _far_row_data():
    """12 blobs in 5-D and one row at 1e6."""
    gen = np.random.default_rng(1)
    centres = gen.uniform(-20, 20, (12, 5))
    return np.concatenate([centres[gen.integers(0, 12, 6000)] + gen.normal(size=(6000, 5)),
                           [[1e6] * 5]])


def test_the_default_fit_on_many_rows_gives_a_far_row_its_own_head():
    """Above the warm-start sample's size the sample may miss a far row; the steps over
    all rows still reach the k-means fixed point that gives it a head (as KMeans does)."""
    gen = np.random.default_rng(1)
    X = np.concatenate([gen.normal(size=(12_000, 3)), gen.normal(size=(12_000, 3)) + 4,
                        [[1e8, 0, 0]]])
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    km = KMeans(3, n_init=1, random_state=0).fit(X)
    assert np.sum(est.labels_ == est.labels_[-1]) == 1                # the far row alone
    assert est.loss_curve_[-1] <= km.inertia_ / len(X) * (1 + 1e-6)


def test_a_far_row_the_sample_missed_joins_it_and_the_swaps_repair_the_rest(monkeypatch):
    """12 blobs in 5-D and one row at 1e6, the warm-start sample (lowered to 1,000 of
    6,001 rows) missing it: the passes give that row a head taken from a blob, merged
    into a neighbour wherever it was. The rows' objective is then far above the sample's,
    so the rows farthest from the sample's heads join it and single swaps move the
    merge: the objective was about 2x KMeans(n_init=10)'s, now within 1.2x."""
    small = FitSettings(warm_sample=1000)
    X = _far_row_data()
    best = KMeans(12, n_init=10, random_state=0).fit(X).inertia_ / len(X)
    repairs = []
    real = ending._with_far_rows
    monkeypatch.setattr(ending, "_with_far_rows", lambda *a: repairs.append(1) or real(*a))
    for seed in range(4):
        before = len(repairs)
        fit = ac.AttentionClustering(12, covariance_type="spherical", random_state=seed,
                                     settings=small).fit(X)
        objective = ((X - fit.cluster_centers_[fit.labels_]) ** 2).sum(1).mean()
        assert objective <= 1.2 * best
        # recomputed at the end from one matrix product of the working rows: the far
        # row's norm (2e6), not the objective (~12), sets the rounding
        assert fit.loss_curve_[-1] == pytest.approx(objective, rel=0, abs=objective_tol(
            X, fit.cluster_centers_, fit.labels_))
        if len(repairs) > before:        # the passes before the repair, then those kept
            assert fit.loss_curve_.max() > 1.5 * objective
    assert len(repairs) >= 2                         # the claim's path was taken
    repairs.clear()                                  # and blobs alone never take it
    ac.AttentionClustering(12, covariance_type="spherical", random_state=0,
                           settings=small).fit(X[:-1])
    assert not repairs


def _fit_ranks(X, world, comm_of=None, **params):
    group = _ThreadGroup(world)
    bounds = [shard_bounds(len(X), r, world) for r in range(world)]

    def body(r):
        comm = group.context(r, bounds[r][0], len(X))
        return ac.AttentionClustering(**params).fit(
            X[slice(*bounds[r])], comm=comm if comm_of is None else comm_of(comm))
    return _run_ranks(group, body)


@pytest.mark.parametrize("seed", [1, 2])   # seeds whose sample misses the far row
def test_the_repair_gathers_the_far_rows_of_every_rank(monkeypatch, seed):
    """Three ranks, the far row on the last: each rank's farthest rows are gathered, the
    same far rows join the sample on every rank, and the fit is one process's (the
    repair ran in both)."""
    small = FitSettings(warm_sample=1000)
    X = _far_row_data()
    repairs = []
    real = ending._with_far_rows
    monkeypatch.setattr(ending, "_with_far_rows", lambda *a: repairs.append(1) or real(*a))
    one = ac.AttentionClustering(12, random_state=seed, settings=small).fit(X)
    assert len(repairs) == 1
    ests = _fit_ranks(X, 3, n_clusters=12, random_state=seed, settings=small)
    assert len(repairs) == 4
    for est in ests:
        np.testing.assert_allclose(est.cluster_centers_, one.cluster_centers_, atol=1e-6,
                                   rtol=0)
        np.testing.assert_array_equal(est.cluster_centers_, ests[0].cluster_centers_)
        assert est.n_iter_ == one.n_iter_
    np.testing.assert_array_equal(np.concatenate([e.labels_ for e in ests]), one.labels_)


def test_the_far_rows_are_ordered_by_distance_then_global_index():
    """Two rows at one distance, the first on rank 0 and the second on rank 1, then rows
    of distance 0: ordered by distance, then by global index, on every rank as in one
    process (every sum of these rows is exact, so the working rows agree bitwise)."""
    X = np.concatenate([[[5.0, 0.0]], np.zeros((30, 2)), [[-5.0, 0.0]]])
    geometry = ac.layer.geometry.Euclidean()
    one = WorkingRows.prepare(X, geometry=geometry, comm=None)
    heads = one.rows.new_zeros(1, 2)
    ref = ending._far_rows(one, heads, 4)
    assert ref[0][0, 0] > 0 > ref[0][1, 0] and not ref[0][2:].any()
    group = _ThreadGroup(2)
    bounds = [shard_bounds(len(X), r, 2) for r in range(2)]
    assert bounds[0][1] <= 31                                  # the two on two ranks

    def body(r):
        rows = WorkingRows.prepare(X[slice(*bounds[r])], geometry=geometry,
                                   comm=group.context(r, bounds[r][0], len(X)))
        return ending._far_rows(rows, heads, 4)
    for far, w in _run_ranks(group, body):
        np.testing.assert_array_equal(far.numpy(), ref[0].numpy())
        np.testing.assert_array_equal(w.numpy(), ref[1].numpy())


def test_a_communicator_without_its_ranks_skips_the_repair_with_a_warning():
    X = _far_row_data()

    def no_ranks(comm):                    # as a communicator built before rank/world
        return Communicator(comm.reduce, comm.broadcast, comm.offset, comm.n_total)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _fit_ranks(X, 2, no_ranks, n_clusters=12, random_state=0,
                   settings=FitSettings(warm_sample=1000))
    assert any("far-row repair" in str(w.message) for w in seen)

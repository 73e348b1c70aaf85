"""Lloyd's steps over all rows (with bounds), against scikit-learn's Lloyd k-means."""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from _tolerance import assert_nearest, assert_same_labels, objective_tol, sum_tol
from attnclust.cluster.kmeans.passes import (
    CARRIED_RTOL,
    SETTLED,
    RowReader,
    _carried_rounding,
    lloyd_passes,
)


def _data(seed=0):
    X, _ = make_blobs(600, n_features=3, centers=5, cluster_std=2.0, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(X[:5] + 0.5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_passes_reach_scikit_learns_lloyd_fixed_point(seed):
    X, heads0 = _data(seed)
    res = lloyd_passes(RowReader(_read(X), len(X), 128), heads0, 300)
    km = KMeans(5, init=heads0.numpy(), n_init=1, algorithm="lloyd", tol=0.0,
                max_iter=300).fit(X.numpy())
    assert res.converged
    # the same cells, their means summed in another order: n eps of the rows' scale
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0,
                               atol=_mean_tol(X))
    # the objective of the pass that found no move is the k-means inertia per row
    assert res.objective == pytest.approx(
        km.inertia_ / X.shape[0], rel=0, abs=objective_tol(X, km.cluster_centers_, km.labels_))


def test_objective_never_increases_and_is_the_hard_limit_risk():
    X, heads0 = _data(3)
    res = lloyd_passes(RowReader(_read(X), len(X), 100), heads0, 300)
    assert res.n_iter > 2
    # each value computed afresh from its heads: within rounding of the exact objective
    # (a pass that rose would do so by far more at some step of such a run)
    rounding = 2 * objective_tol(X, res.heads)
    assert np.all(np.diff(res.history.objective) <= rounding)
    dist = torch.cdist(X, heads0).min(1)                    # dense reference, first pass
    assert res.history.objective[0] == pytest.approx(
        float((dist.values ** 2).mean()), rel=0,
        abs=objective_tol(X, heads0, dist.indices.numpy()))


def test_chunks_and_workers_do_not_change_the_result():
    X, heads0 = _data(4)
    one = lloyd_passes(RowReader(_read(X), len(X), X.shape[0]), heads0, 50)
    many = lloyd_passes(RowReader(_read(X), len(X), 37, workers=3), heads0, 50)
    # the cells' sums are added per chunk: another order for another chunk size (the same
    # for any number of workers: test_threads), so the heads agree to rounding, each step
    np.testing.assert_allclose(many.heads.numpy(), one.heads.numpy(), rtol=0,
                               atol=one.n_iter * _mean_tol(X))
    assert many.n_iter == one.n_iter


def test_stops_at_tol_and_at_max_iter():
    X, heads0 = _data(5)
    full = lloyd_passes(RowReader(_read(X), len(X), 600), heads0, 300)
    capped = lloyd_passes(RowReader(_read(X), len(X), 600), heads0, 2)
    assert capped.n_iter == 2 and not capped.converged
    loose = lloyd_passes(RowReader(_read(X), len(X), 600), heads0, 300, tol=1.0)
    assert loose.converged and loose.n_iter < full.n_iter


def test_a_head_with_an_empty_cell_stays_put():
    X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    heads0 = torch.tensor([[0.0, 0.0], [10.0, 0.0], [100.0, 100.0]], dtype=torch.float64)
    res = lloyd_passes(RowReader(_read(X), 3, 2), heads0, 10)
    assert res.heads[2].tolist() == [100.0, 100.0]
    assert res.heads[0].tolist() == [0.5, 0.0]


def test_rtol_stops_once_the_objective_and_the_partition_settle():
    X, heads0 = _data(6)
    full = lloyd_passes(RowReader(_read(X), len(X), 600), heads0, 300)
    loose = lloyd_passes(RowReader(_read(X), len(X), 600), heads0, 300, rtol=1e-2)
    assert loose.converged and loose.n_iter < full.n_iter
    drops = -np.diff(loose.history.objective)
    labels = torch.cdist(X[None], loose.history.heads).argmin(-1).numpy()     # (T, n), dense
    changed = (labels[1:] != labels[:-1]).mean(1)
    assert drops[-1] <= 1e-2 * loose.history.objective[-2] and changed[-1] <= SETTLED
    assert np.all((drops[:-1] > 1e-2 * loose.history.objective[:-2]) | (changed[:-1] > SETTLED))


def test_rtol_does_not_stop_on_the_way_to_a_far_row():
    """One row 1e8 away dominates R_inf: the head whose cell takes it gains little in its
    first step (it moves 1e8 / 30,000), but moves half the rows to another cell, so the
    rule does not stop there; the next step puts that head on the far row."""
    gen = np.random.default_rng(0)
    X = torch.as_tensor(np.concatenate([gen.normal(size=(30_000, 3)),
                                        gen.normal(size=(30_000, 3)) + 4, [[1e8, 0, 0]]]))
    heads0 = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [4.0, 4.0, 4.0]],
                          dtype=torch.float64)
    res = lloyd_passes(RowReader.in_memory(X, 8192), heads0, 300, tol=1e-8, rtol=1e-3)
    exact = lloyd_passes(RowReader(_read(X), len(X), 8192), heads0, 300)
    first, second = res.history.objective[:2]
    assert second > (1 - 1e-3) * first                                  # the small first gain
    assert res.heads[:, 0].max() == pytest.approx(1e8)
    assert res.objective == pytest.approx(exact.objective, rel=1e-6)


@pytest.mark.parametrize("bounds", [False, True])
@pytest.mark.parametrize("max_iter", [1, 3, 300])
def test_labels_are_the_nearest_returned_heads_and_the_objective_theirs(max_iter, bounds):
    """The objective is the steps' sums: fresh after a whole pass, moved with the heads
    and the rows that change cell after a step with bounds (at most one update per step
    since the last whole pass: ``steps``)."""
    X, heads0 = _data(7)
    labels = np.full(X.shape[0], -1)
    res = lloyd_passes(RowReader.in_memory(X, 128, bounds=bounds, workers=2),
                       heads0, max_iter, tol=1e-6, labels=labels)
    if bounds and max_iter == 300:             # steps with bounds were taken
        assert res.history.full_passes < res.n_iter
    dist = torch.cdist(X, res.heads) ** 2                      # dense reference
    assert_nearest(labels, X, res.heads)            # its argmin, but for rounding near ties
    assert res.objective == pytest.approx(float(dist.min(1).values.mean()), rel=0, abs=(
        objective_tol(X, res.heads, labels, steps=res.n_iter - res.history.full_passes + 1)))


def test_callback_reports_every_pass():
    X, heads0 = _data(10)
    infos = []
    res = lloyd_passes(RowReader(_read(X), len(X), 128), heads0, 300, callback=infos.append)
    assert [i.iteration for i in infos] == list(range(1, res.n_iter + 1))
    # the steps' own sums, but the last entry: the objective (maybe recomputed)
    losses = [i.loss for i in infos]
    np.testing.assert_array_equal(losses[:-1], res.history.objective[:-1])
    assert res.history.objective[-1] == res.objective
    assert losses[-1] == pytest.approx(res.objective, rel=0, abs=objective_tol(X, res.heads))
    assert infos[-1].shift == 0.0 and all(i.inverse_temperature == np.inf for i in infos)


def test_integer_weights_are_repeated_rows():
    X, heads0 = _data(12)
    counts = np.random.default_rng(0).integers(0, 4, X.shape[0])
    w = torch.as_tensor(counts, dtype=X.dtype)
    weighted = lloyd_passes(RowReader(_read(X), len(X), 97, n_total=float(counts.sum())),
                            heads0, 300, weights=w)
    Xr = torch.as_tensor(np.repeat(X.numpy(), counts, axis=0))
    repeated = lloyd_passes(RowReader(_read(Xr), len(Xr), 97), heads0, 300)
    # weighted sums against sums of repeated rows: another order, n_total terms
    heads_tol = repeated.n_iter * _mean_tol(Xr)
    np.testing.assert_allclose(weighted.heads.numpy(), repeated.heads.numpy(), rtol=0,
                               atol=heads_tol)
    np.testing.assert_allclose(weighted.history.objective, repeated.history.objective, rtol=0,
                               atol=objective_tol(Xr, repeated.heads, steps=repeated.n_iter))
    # the rtol rule counts the changed rows by weight: the same stop, bounded or not
    loose_w = lloyd_passes(RowReader.in_memory(X, 97, n_total=float(counts.sum())),
                           heads0, 300, rtol=1e-2, weights=w)
    loose_r = lloyd_passes(RowReader(_read(Xr), len(Xr), 97), heads0, 300, rtol=1e-2)
    assert loose_w.n_iter == loose_r.n_iter < repeated.n_iter
    np.testing.assert_allclose(loose_w.heads.numpy(), loose_r.heads.numpy(), rtol=0,
                               atol=heads_tol)


def _read(X):
    return lambda a, b: X[a:b]


def _mean_tol(X, steps=1):
    """Absolute difference allowed between two computations of a mean of some rows of
    ``X`` (a cell's mean: its sum added in another order, :func:`sum_tol`)."""
    X = np.asarray(X)
    return steps * sum_tol(len(X), X.dtype) * float(np.abs(X).max())


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
    whole = lloyd_passes(RowReader(_read(X), len(X), 128), heads0, 300, labels=a_labels)
    bounded = lloyd_passes(RowReader.in_memory(X, 128, workers=2), heads0, 300, labels=b_labels)
    assert whole.history.full_passes == whole.n_iter
    assert bounded.history.full_passes < bounded.n_iter == whole.n_iter
    # the bounded steps update the cells' sums by the rows that moved, the whole passes
    # recompute them: equal up to the rounding of n_passes sums and updates
    np.testing.assert_allclose(bounded.heads.numpy(), whole.heads.numpy(), rtol=0,
                               atol=whole.n_iter * _mean_tol(X))
    np.testing.assert_allclose(bounded.history.objective, whole.history.objective, rtol=0,
                               atol=objective_tol(X, whole.heads, steps=whole.n_iter))
    assert_same_labels(b_labels, a_labels, X, whole.heads)


def test_bounded_steps_with_weights_tied_heads_and_a_full_pass_rule():
    """Weighted sums follow the rows that change cell; two heads at one point tie every
    row of their cell (a gap of 0, always rescored); a small ``chunk`` and a step that
    doubts many rows (a whole pass again) change nothing."""
    X, heads0 = _data(12)
    heads0 = torch.cat([heads0, heads0[:1]])                      # a duplicate head
    w = torch.as_tensor(np.random.default_rng(0).uniform(0, 3, X.shape[0]), dtype=X.dtype)
    whole = lloyd_passes(RowReader(_read(X), len(X), 50, n_total=float(w.sum())),
                         heads0, 300, weights=w)
    bounded = lloyd_passes(RowReader.in_memory(X, 50, n_total=float(w.sum())),
                           heads0, 300, weights=w)
    assert bounded.history.full_passes < bounded.n_iter == whole.n_iter
    # updated against recomputed sums (see test_bounded_steps_are_whole_passes)
    np.testing.assert_allclose(bounded.heads.numpy(), whole.heads.numpy(), rtol=0,
                               atol=whole.n_iter * _mean_tol(X))
    np.testing.assert_allclose(bounded.history.objective, whole.history.objective, rtol=0,
                               atol=objective_tol(X, whole.heads, steps=whole.n_iter))
    # the first step moves every head far: the next one reads every row again
    far = lloyd_passes(RowReader.in_memory(X, 50), heads0 * 0.0 + X[:6] * 0.1, 3)
    assert far.history.full_passes >= 2


def test_bounded_steps_reach_scikit_learns_fixed_point_on_many_rows():
    X, _ = make_blobs(20_000, n_features=4, centers=12, cluster_std=1.5, random_state=3)
    X = torch.as_tensor(X)
    heads0 = X[:12] + 0.3
    labels = np.empty(X.shape[0], np.int64)
    res = lloyd_passes(RowReader.in_memory(X, 4096, workers=2), heads0, 300, labels=labels)
    km = KMeans(12, init=heads0.numpy(), n_init=1, algorithm="lloyd", tol=0.0,
                max_iter=300).fit(X.numpy())
    assert res.converged and res.history.full_passes < res.n_iter
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0,
                               atol=res.n_iter * _mean_tol(X))
    assert_same_labels(labels, km.labels_, X, km.cluster_centers_)
    assert res.objective == pytest.approx(km.inertia_ / X.shape[0], rel=0, abs=objective_tol(
        X, km.cluster_centers_, km.labels_, steps=res.n_iter))


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
        lloyd_passes(RowReader(_read(X), len(X), 256), heads0, 50, labels=whole)
        res = lloyd_passes(RowReader.in_memory(X, 256), heads0, 50, labels=bounded)
        # the same labels but where float32 cannot tell the heads apart; no label kept
        # from a head that moved away (the float64 argmin, up to float32 rounding)
        assert_same_labels(bounded, whole, X, res.heads, np.float32)


def test_rtol_does_not_stop_when_the_far_rows_cell_is_small():
    """Here the cell that takes the far row holds 3,000 of 400,001 rows: its head's first
    move changes under 1% of the rows and gains under 1e-3, but the move it is about to
    make is sure to gain more (n_h ||move||^2), so the rule does not stop."""
    gen = np.random.default_rng(2)
    X = torch.as_tensor(np.concatenate([gen.normal(size=(397_000, 2)),
                                        gen.normal(size=(3_000, 2)) + [10.0, 0.0],
                                        [[1e8, 0.0]]]))
    heads0 = torch.tensor([[-0.5, 0.0], [0.5, 0.0], [10.0, 0.0]], dtype=torch.float64)
    res = lloyd_passes(RowReader.in_memory(X, 65_536), heads0, 300, tol=1e-8, rtol=1e-3)
    exact = lloyd_passes(RowReader.in_memory(X, 65_536), heads0, 300)
    assert res.heads[:, 0].max() == pytest.approx(1e8)
    assert res.objective == pytest.approx(exact.objective, rel=1e-2)


def test_per_chunk_sums_held_in_groups_give_the_same_steps(monkeypatch):
    """With room for one chunk's sums per worker at a time (many groups, each added up in
    chunk order), the steps are those of one group of every chunk."""
    import attnclust.cluster.kmeans.passes as passes

    X, heads0 = _data(8)
    rows = RowReader.in_memory(X, 50, workers=2)
    one = lloyd_passes(rows, heads0, 300)
    monkeypatch.setattr(passes, "_PARTS_BYTES", 1)
    grouped = lloyd_passes(rows, heads0, 300)
    assert grouped.n_iter == one.n_iter and grouped.history.full_passes == one.history.full_passes
    # groups of chunks add their sums in chunk order, but as group totals: another
    # association of the same terms, so rounding apart
    np.testing.assert_allclose(grouped.heads.numpy(), one.heads.numpy(), rtol=0,
                               atol=one.n_iter * _mean_tol(X))
    np.testing.assert_allclose(grouped.history.objective, one.history.objective, rtol=0,
                               atol=objective_tol(X, one.heads, steps=one.n_iter))


@pytest.mark.parametrize("spread", [1e-1, 1e-3])
def test_the_objective_is_recomputed_where_the_sums_would_round_too_much(spread):
    """float32 rows of 5 clusters ``spread`` wide in a space of unit spread: at 0.1 the
    sums' rounding bound is within CARRIED_RTOL of the objective and they are reported
    (within that bound); at 1e-3 their error (2e-3 of the objective, measured) is not,
    and the objective is recomputed: within (d + 2) eps_32 of the float64 one."""
    gen = np.random.default_rng(0)
    z = gen.integers(0, 5, 40_000)
    X = gen.normal(size=(5, 8))[z] + spread * gen.normal(size=(40_000, 8))
    X = (X - X.mean(0)) / np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean())
    X32 = torch.as_tensor(X, dtype=torch.float32)
    read, take = _read(X32), _take(X32)
    start = torch.as_tensor(np.stack([X[z == h].mean(0) for h in range(5)])
                            + 0.1 * spread * gen.normal(size=(5, 8)), dtype=torch.float32)
    res = lloyd_passes(RowReader(read, len(X), 8192, take=take), start, 50, tol=1e-8, rtol=1e-3)
    heads = res.heads.double().numpy()
    exact = float(((X.astype(np.float32).astype(np.float64) - heads[res.labels]) ** 2)
                  .sum(1).mean())
    error = abs(res.objective - exact)
    bound = _carried_rounding(_flat(X32, res), res.heads, len(X), res.n_iter)
    if spread == 1e-1:
        assert bound <= CARRIED_RTOL * res.objective and error <= bound
    else:
        assert bound > CARRIED_RTOL * res.objective
        assert error <= (8 + 2) * float(np.finfo(np.float32).eps) * exact


def _flat(X, res):
    """The final cells' [counts, sums, squared distances, 0] of ``res`` on rows ``X``."""
    K = res.heads.shape[0]
    z = torch.as_tensor(res.labels)
    dist = ((X.double() - res.heads.double()[z]) ** 2).sum(1)
    counts = torch.bincount(z, minlength=K).double()
    sums = torch.zeros(K, X.shape[1], dtype=torch.float64).index_add_(0, z, X.double())
    return torch.cat([counts, sums.reshape(-1),
                      torch.zeros(K, dtype=torch.float64).index_add_(0, z, dist),
                      torch.zeros(1, dtype=torch.float64)])

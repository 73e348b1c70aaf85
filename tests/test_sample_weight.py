"""``AttentionClustering.fit(X, sample_weight=...)``: integer weights are repeated rows,
zero weights are absent rows (one process, simulated ranks, two gloo processes), and bad
weights are one clear error."""

from __future__ import annotations

import copy
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_moons

import attnclust as ac
from _tolerance import assert_labels_off_ties, assert_same_labels, eps, sum_tol
from attnclust.cluster.clustering import AttentionClustering
from attnclust.cluster.communicator import Communicator
from attnclust.cluster.distributed import shard_bounds
from attnclust.cluster.settings import FitSettings

MIX = ac.GaussianMixture.random(d=5, k=3, sigma=0.3, rng=0)   # overlapping: soft attention
X, Z = MIX.sample(400, rng=0, return_labels=True)
X = X * 2.0 + 1.0                                              # off the origin, not unit
COUNTS = np.random.default_rng(1).integers(1, 4, size=len(X))  # weights 1, 2 or 3
INIT = X[[0, 1, 2]] + 0.05                                      # the same initial heads

PARAMS = [dict(geometry="euclidean"),
          dict(geometry="euclidean", normalize="center-scale"),
          dict(geometry="euclidean", inverse_temperature=2.0),
          dict(geometry="sphere"),
          dict(geometry="sphere", normalize="center-scale", penalty="balance", rho=0.05)]


def _fit(X, weights=None, **params):
    params = dict(dict(init=INIT, tol=1e-12, max_iter=1000, random_state=0), **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(3, **params).fit(X, sample_weight=weights)


def _labels_agree_off_ties(a, b, labels_b, rows) -> None:
    """``a.labels_`` and ``labels_b`` (``b``'s labels of the same ``rows``) agree except
    within the two fits' difference of a tie (:func:`assert_labels_off_ties` on their
    log-probabilities, whose rounding is ``4 d eps`` of their size)."""
    tiny = np.finfo(np.float64).tiny
    la, lb = (np.log(np.maximum(e.predict_proba(rows), tiny)) for e in (a, b))
    assert_labels_off_ties(a.labels_, labels_b, la, lb,
                           slack=4 * len(rows[0]) * eps() * (1 + np.abs(la).max(1)))


def _same_fit(a, b, *, labels_b=None, rows=None, at=X) -> None:
    """Two fits of the same weighted rows written two ways (weights against repeated or
    absent rows, weights scaled): their sums are added in other orders, so they agree to
    rounding. float64: the fits stop at tol=1e-12 (the heads to about 1e-8 at this data's
    scale, ~5) far above the sums' rounding (n eps ~ 1e-13), so 1e-8 and 1e-9 hold.
    float32 (``rows``: the float32 rows of both fits): the sums of n terms are within
    n eps32 of each other, relative; labels may differ only within rounding of a tie
    (float64: within the fits' difference of a tie, :func:`_labels_agree_off_ties` on
    ``at``, the rows ``a`` was fitted on)."""
    labels_b = b.labels_ if labels_b is None else labels_b
    if rows is None or rows.dtype == np.float64:
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=0, atol=1e-8)
        assert a.inverse_temperature_ == pytest.approx(b.inverse_temperature_, rel=1e-9)
        assert a.loss_curve_[-1] == pytest.approx(b.loss_curve_[-1], rel=1e-9)
        _labels_agree_off_ties(a, b, labels_b, at)
        return
    rel = sum_tol(len(rows), rows.dtype)            # ~5e-5 for 400 rows: far below a bug
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=0,
                               atol=rel * float(np.abs(rows).max()))
    assert a.inverse_temperature_ == pytest.approx(b.inverse_temperature_, rel=rel)
    assert a.loss_curve_[-1] == pytest.approx(b.loss_curve_[-1], rel=rel)
    assert_same_labels(a.labels_, labels_b, rows, b.cluster_centers_, rows.dtype)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in
                                                                   p.items()))
def test_integer_weights_are_repeated_rows(params):
    weighted = _fit(X, COUNTS, **params)
    repeated = _fit(np.repeat(X, COUNTS, axis=0), **params)
    assert weighted.n_iter_ > 3                     # a real fit, not the initial heads
    _same_fit(repeated, weighted, labels_b=np.repeat(weighted.labels_, COUNTS),
              at=np.repeat(X, COUNTS, axis=0))


@pytest.mark.parametrize("params", PARAMS[:1] + PARAMS[3:4])
@pytest.mark.parametrize("init", ["kmeans++", "given"])
def test_zero_weights_are_absent_rows(params, init):
    """Also from a k-means++ seeding: rows of weight zero are never drawn, and the draws of
    the others are those of the data without them."""
    keep = np.random.default_rng(2).random(len(X)) < 0.7
    extra = {} if init == "given" else {"init": "kmeans++"}
    weighted = _fit(X, keep.astype(float), **params, **extra)
    dropped = _fit(X[keep], **params, **extra)
    _same_fit(dropped, weighted, labels_b=weighted.labels_[keep], at=X[keep])


def test_scaling_all_weights_changes_nothing_on_the_sampled_path():
    """Weights are relative: all ones, all sevens, all 1e-4 (cells of total weight below
    one) and none give the same fit, also when the warm start runs on a sample of the rows
    (which carries the sampled rows' weights)."""
    small = FitSettings(warm_sample=150)
    ref = _fit(X, init="kmeans++", settings=small)
    for c in (1.0, 7.0, 1e-4):
        _same_fit(_fit(X, np.full(len(X), c), init="kmeans++", settings=small), ref)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("factor", [1e-300, 1e-46, 1e39, 1e300])
def test_weights_of_any_magnitude_give_the_same_fit(factor, dtype):
    """Weights are brought to at most one before the fit: scaled by 1e39 or 1e-46 they
    were inf or 0 in float32 (an IndexError, or "no row of positive sample_weight"), and
    by 1e300 their sums overflowed float64."""
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(X))
    ref = _fit(X.astype(dtype), w, init="kmeans++")
    _same_fit(_fit(X.astype(dtype), w * factor, init="kmeans++"), ref, rows=X.astype(dtype))


@pytest.mark.parametrize("params", [{}, dict(covariance_type="spherical", init=INIT)])
def test_inertia_is_the_weighted_sum_of_squared_distances(params):
    """``inertia_`` is ``sum_i w_i ||x_i - c(x_i)||^2`` in the weights' own scale, as
    ``KMeans.inertia_`` (the fit divides the weights by their largest; twice every weight
    had given the same inertia), and integer weights give the repeated rows' inertia."""
    def fit(rows, w=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AttentionClustering(3, random_state=0, **params).fit(rows, sample_weight=w)
    for w in (COUNTS, 2.0 * COUNTS, 1e-3 * COUNTS):
        est = fit(X, w)
        d2 = ((X - est.cluster_centers_[est.labels_]) ** 2).sum(1)
        # the fit's distances are those of its working space (centred, scaled): each
        # within a few eps ||x||^2 of these, far below a factor of two
        rel = sum_tol(len(X)) + 16 * eps() * float((X * X).sum(1).max() / d2.mean())
        assert est.inertia_ == pytest.approx(float(w @ d2), rel=rel)
    if "init" in params:                       # the same start: the same fit, to rounding
        assert fit(X, COUNTS).inertia_ == pytest.approx(
            fit(np.repeat(X, COUNTS, axis=0)).inertia_, rel=1e-8)


def test_weights_that_leave_no_spread_are_one_clear_error():
    """One row weighing 1e300 times the others: the weighted rows are that row, to
    rounding; the error names the weights (it said "inverse temperature nan")."""
    w = np.ones(len(X))
    w[0] = 1e300
    with pytest.raises(ValueError, match="under its sample_weight .* make the weights less") \
            as caught:
        _fit(X, w, init="kmeans++")
    assert "nan" not in str(caught.value)            # no "inverse temperature nan" (1e200)
    w[0] = 1e200
    with pytest.raises(ValueError, match=r"puts the inverse temperature out of") as caught:
        _fit(X, w, init="kmeans++")
    tiny = X * 1e-160                         # no spread of its own: equal weights not named
    with pytest.raises(ValueError, match="spread") as caught:
        _fit(tiny, np.ones(len(X)), init="kmeans++")
    assert "sample_weight" not in str(caught.value)


def test_weights_move_the_heads():
    """The claim can fail: a heavy cluster pulls the head of a two-cluster fit of three
    blobs, as the repeated rows would."""
    w = np.where(Z == 0, 10.0, 1.0)
    a, b = _fit(X), _fit(X, w)
    assert np.abs(a.cluster_centers_ - b.cluster_centers_).max() > 1e-3


def test_weighted_score_is_the_weighted_mean_of_the_errors():
    est = _fit(X, COUNTS)
    errors = np.array([-est.score(X[i:i + 1]) for i in range(len(X))])
    # a row's -log p(x) alone and in a block of rows: -lambda ||x - mu_h||^2 / 2 (sums of
    # d squares of differences) within (d + 2) eps of itself, their log-sum-exp and its
    # constant within (K + 2) eps of the terms' sizes; the means add n terms in other orders
    sq = est.transform(X) ** 2
    row = 2 * (3 + X.shape[1] + 4) * eps() * (np.abs(errors) + est.inverse_temperature_ * sq.max(1))
    n = int(COUNTS.sum())
    tol = float(np.sum(COUNTS * row) / n) + sum_tol(n) * float(errors.max())
    assert est.score(X, sample_weight=COUNTS) == pytest.approx(
        -np.sum(COUNTS * errors) / COUNTS.sum(), rel=0, abs=tol)
    assert est.score(X) == pytest.approx(-errors.mean(), rel=0,
                                         abs=float(row.mean()) + sum_tol(len(X)) * errors.max())
    assert est.score(np.repeat(X, COUNTS, axis=0)) == pytest.approx(
        est.score(X, sample_weight=COUNTS), rel=0, abs=tol)


@pytest.mark.parametrize("weights, match", [
    (-np.ones(len(X)), r"non-negative, got -1.0 at index 0"),
    (np.r_[np.ones(len(X) - 1), np.nan], r"finite, got nan at index 399"),
    (np.r_[np.ones(len(X) - 1), np.inf], r"finite, got inf at index 399"),
    (np.ones(len(X) - 1), r"shape \(400,\), one weight per row, got shape \(399,\)"),
    (np.ones((len(X), 1)), r"shape \(400,\)"),
    (np.zeros(len(X)), "sums to zero"),
    (["a"] * len(X), "must be numbers"),
])
def test_bad_weights_are_one_clear_error(weights, match):
    with pytest.raises(ValueError, match=match):
        AttentionClustering(3).fit(X, sample_weight=weights)


def test_weights_need_the_fixed_point_solver():
    with pytest.raises(ValueError, match="sample_weight needs solver='fixed-point'"):
        AttentionClustering(3, geometry="sphere", solver="pgd").fit(X, sample_weight=COUNTS)


def test_a_scalar_weight_is_every_rows():
    _same_fit(_fit(X, 3.0), _fit(X))


# -- the default fit's merge of heads: its heads and draws count rows ----------------------
MOONS = make_moons(600, noise=0.06, random_state=0)[0]       # the default fit merges them


def _merged(rows, weights=None, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = AttentionClustering(2, random_state=seed).fit(rows, sample_weight=weights)
    assert est.merge_heads_                          # the claims are about merged fits
    return est


def _same_merge(a, b, *, labels_b=None, rows=MOONS) -> None:
    """Two merged fits of the same weighted rows written two ways, whose merges make the
    same draws: their working rows differ by the rounding of a (weighted) mean and spread
    over the ``n`` rows (``n eps`` of the rows' size, :func:`sum_tol`), which the heads
    (means of rows) and their lambda (a mean of squared distances) carry; labels may
    differ only within that of a tie (:func:`_labels_agree_off_ties`)."""
    tol = sum_tol(len(rows))
    assert len(a.heads_) == len(b.heads_)
    np.testing.assert_allclose(a.heads_, b.heads_, rtol=0, atol=tol * np.abs(rows).max())
    assert a.inverse_temperature_ == pytest.approx(b.inverse_temperature_, rel=tol)
    _labels_agree_off_ties(a, b, b.labels_ if labels_b is None else labels_b, rows)


@pytest.mark.parametrize("c", [1.0, 7.0, 1e-4])
def test_equal_weights_are_no_weights_when_the_heads_merge(c):
    """All ones (all sevens, all 1e-4) are no weights in the merge too: the same heads,
    drawn alike. The merge drew its samples by weight (another random stream than without
    weights): lambda 1,198 with all ones against 1,249 without."""
    _same_merge(_merged(MOONS, np.full(len(MOONS), c)), _merged(MOONS))


@pytest.mark.parametrize("kind", ["ones", "twos", "integers", "reals"])
def test_zero_weights_are_absent_rows_when_the_heads_merge(kind):
    """Rows of weight zero are no rows in the merge too, beside equal, integer or other
    weights (it drew its samples by weight, even equal ones: lambda 1,033 with rows of
    weight zero against 970 without them)."""
    keep = np.random.default_rng(2).random(len(MOONS)) < 0.7
    w = {"ones": np.ones(len(MOONS)), "twos": np.full(len(MOONS), 2.0),
         "integers": np.random.default_rng(5).integers(1, 4, len(MOONS)).astype(float),
         "reals": np.random.default_rng(5).uniform(0.5, 2.0, len(MOONS))}[kind]
    weighted = _merged(MOONS, np.where(keep, w, 0.0))
    dropped = _merged(MOONS[keep], None if kind in ("ones", "twos") else w[keep])
    _same_merge(dropped, weighted, labels_b=weighted.labels_[keep], rows=MOONS[keep])


def test_integer_weights_merge_as_the_repeated_rows_in_distribution():
    """Integer weights are copies of rows in the merge: as many heads as for the repeated
    rows (one per 5 distinct rows, a repeated row being one place: 91 for 923 copies of
    456 rows), samples drawn with the repeated rows' law (not their draws), so that the
    merged lambda over eight seeds has the repeated rows' mean, within 4 standard errors
    of the difference of the two means (it was half of it: 1,015 against 2,227)."""
    w = np.random.default_rng(1).integers(0, 4, len(MOONS))
    weighted = [_merged(MOONS, w.astype(float), seed) for seed in range(8)]
    repeated = [_merged(np.repeat(MOONS, w, axis=0), seed=seed) for seed in range(8)]
    assert {len(e.heads_) for e in weighted} == {len(e.heads_) for e in repeated} == \
        {np.count_nonzero(w) // ac.MergeSettings().rows_per_head}
    a, b = (np.array([e.inverse_temperature_ for e in fits]) for fits in (weighted, repeated))
    assert abs(a.mean() - b.mean()) < 4 * np.sqrt(a.var(ddof=1) / 8 + b.var(ddof=1) / 8)


# -- data-parallel: weights per row, sums over ranks ---------------------------------------
class _Ranks:
    """``world`` threads whose ``reduce`` sums in rank order (as tests/test_distributed.py)."""

    def __init__(self, world: int):
        self.world, self.slots = world, [None] * world
        self.barrier = threading.Barrier(world)

    def _exchange(self, rank, t, combine):
        self.slots[rank] = t.clone()
        self.barrier.wait()
        out = combine(self.slots)
        self.barrier.wait()
        return out

    def comm(self, rank, offset, n_total) -> Communicator:
        return Communicator(lambda t: self._exchange(rank, t, lambda s: sum(s[1:], s[0])),
                            lambda t: self._exchange(rank, t, lambda s: s[0].clone()),
                            offset, n_total)


def _fit_ranks(X, weights, world, monkeypatch, **params):
    ranks = _Ranks(world)
    bounds = [shard_bounds(len(X), r, world) for r in range(world)]
    results, errors = [None] * world, []

    def body(r):
        try:
            est = AttentionClustering(3, init=INIT, tol=1e-12, max_iter=1000, **params)
            sl = slice(*bounds[r])
            results[r] = est.fit(X[sl], sample_weight=weights[sl],
                                 comm=ranks.comm(r, bounds[r][0], len(X)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
            ranks.barrier.abort()
    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


@pytest.mark.parametrize("params", [PARAMS[0], PARAMS[3]])
def test_two_simulated_ranks_with_weights_are_one_weighted_process(params, monkeypatch):
    """On a warm-start sample assembled over the ranks, which carries the weights (one
    process with weights is repeated rows: the tests above)."""
    params = dict(params, random_state=0, settings=FitSettings(warm_sample=150))
    ests = _fit_ranks(X, COUNTS.astype(float), 2, monkeypatch, **params)
    one = _fit(X, COUNTS, **params)
    for est in ests:
        np.testing.assert_allclose(est.cluster_centers_, one.cluster_centers_, atol=1e-8)
    _labels_agree_off_ties(one, ests[0], np.concatenate([e.labels_ for e in ests]), X)


def test_a_rank_with_only_zero_weights_takes_part(monkeypatch):
    w = np.ones(len(X))
    w[:len(X) // 2] = 0.0                                  # rank 0 holds weight zero only
    ests = _fit_ranks(X, w, 2, monkeypatch)
    one = _fit(X[len(X) // 2:])
    for est in ests:
        np.testing.assert_allclose(est.cluster_centers_, one.cluster_centers_, atol=1e-8)


@pytest.mark.slow
def test_two_gloo_processes_with_weights_are_repeated_rows(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_distributed import _finish, _launch

    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", COUNTS.astype(float))
    np.save(tmp_path / "init.npy", INIT)
    procs = _launch("weighted", tmp_path / "x.npy", tmp_path / "c",
                    extra=(str(tmp_path / "w.npy"), str(tmp_path / "init.npy")))
    results = _finish(procs, timeout=120)
    assert all(rc == 0 for rc, _, _ in results), [err[-1500:] for _, _, err in results]
    c0, c1 = (np.load(tmp_path / f"c.rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(c0, c1)          # one reduce: the same sums on both ranks
    repeated = _fit(np.repeat(X, COUNTS, axis=0))
    np.testing.assert_allclose(c0, repeated.cluster_centers_, rtol=0, atol=1e-8)
    labels = np.concatenate([np.load(tmp_path / f"c.labels{r}.npy") for r in range(2)])
    gloo = copy.copy(repeated)                     # the processes' heads, attended alike
    gloo.cluster_centers_ = c0
    _labels_agree_off_ties(repeated, gloo, np.repeat(labels, COUNTS),
                           np.repeat(X, COUNTS, axis=0))


@pytest.mark.slow
def test_weights_on_the_device_of_the_fit():
    """The weights follow the rows to the fit's dtype (float32 data: float32 sums)."""
    X32 = X.astype(np.float32)
    a = _fit(X32, COUNTS, dtype="auto")
    b = _fit(np.repeat(X32, COUNTS, axis=0), dtype="auto")
    # float32 sums of len(X) * 2 rows in two orders (n eps32 ~ 1e-4 of the rows' scale)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=0,
                               atol=sum_tol(COUNTS.sum(), np.float32) * np.abs(X32).max())


def test_a_warm_start_sample_without_weight_is_a_clear_error():
    """Four rows of positive weight among 300,000: the 20,000-row sample, drawn
    uniformly, holds none of them; one line says so and what to do."""
    X = np.random.default_rng(0).normal(size=(300_000, 2))
    w = np.zeros(len(X))
    w[:4] = 1.0
    with pytest.raises(ValueError, match="holds no row of positive sample_weight; drop"):
        ac.AttentionClustering(3, random_state=0).fit(X, sample_weight=w)
    keep = w > 0
    est = ac.AttentionClustering(3, random_state=0).fit(X[keep], sample_weight=w[keep])
    assert est.cluster_centers_.shape == (3, 2)


def test_weights_of_any_scale_merge_alike():
    """Integer-valued weights near 1e308, whose sum overflows, are no copies of rows: the
    merge reads them as the same weights near 1e-6 (exactly, scaled by a power of two),
    where it drew every sample on the last row and skipped the merge."""
    from sklearn.datasets import make_moons

    X, _ = make_moons(600, noise=0.06, random_state=0)
    w = np.random.default_rng(0).choice([1.0, 2.0, 4.0], 600)
    big, small = (AttentionClustering(2, random_state=0).fit(X, sample_weight=w * scale)
                  for scale in (2.0 ** 1020, 2.0 ** -20))
    assert big.merge_heads_ and small.merge_heads_
    np.testing.assert_array_equal(big.labels_, small.labels_)


def test_the_merge_tiles_rows_weighed_as_probabilities():
    """Weights summing to one (below a row each) are a draw of the pool too: all 3,000
    rows made a 3,000 x 3,000 matrix, and merge_heads saw one row and tiled nothing."""
    from attnclust.cluster.merge import merge_heads

    rng = np.random.default_rng(0)
    t = rng.uniform(0, 2 * np.pi, 3000)
    r = np.repeat([1.0, 4.0], 1500)
    X = np.c_[r * np.cos(t), r * np.sin(t)] + rng.normal(0, 0.1, (3000, 2))
    p = rng.uniform(0.5, 1.5, 3000)
    p /= p.sum()
    res = merge_heads(X, (X[:, 0] > 0).astype(int), 2, rng=np.random.default_rng(0),
                      weights=p)
    assert res.merged and len(res.heads) > 2

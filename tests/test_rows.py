"""Tests of :mod:`attnclust.cluster.rows`: the working space and its inverse, the sample, chunked
passes (chunks and workers change nothing), and the preprocessing helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import (
    assert_labels_off_ties,
    assert_same_labels,
    eps,
    sum_tol,
)
from attnclust.cluster import rows as rows_module
from attnclust.cluster.communicator import Communicator
from attnclust.cluster.rows import (
    WorkingRows,
    center_scale,
    chunk_rows,
    computation_dtype,
    fit_threads,
    preprocess,
)
from attnclust.layer.geometry import Euclidean, Sphere
from attnclust.layer.results import IterationInfo


def _data(n=500, d=4, seed=0):
    gen = np.random.default_rng(seed)
    return gen.standard_normal((n, d)) * [1.0, 3.0, 0.5, 2.0] + [10.0, -4.0, 0.0, 7.0]


def _mean_atol(X, dtype=None):
    """The difference allowed between two computations of a column mean of ``X`` (another
    order or precision): ``n eps sum |x_i| / n`` (:func:`sum_tol`), the largest over the
    columns. Absolute, not relative: a mean near 0 (the third column of ``_data``) is a
    sum that cancels."""
    X = np.asarray(X)
    return sum_tol(len(X), X.dtype if dtype is None else dtype) * float(np.abs(X).mean(0).max())


def _logit_tol(X, heads, lam) -> np.ndarray:
    """Per row, how far two computations of the Euclidean logits ``-lambda ||x - mu||^2 /
    2`` (products of rows ``X`` and heads, maybe centred on ``m``, maybe in the working
    space, up to a constant per row) can be apart: ``lambda / 2 (d + 2) eps (|x| + max |mu|
    + |m|)^2`` for each (d-term products; mapping into the frame rounds a coordinate by
    ``eps (|x| + |m|)``), both counted. ``m`` here: the rows' mean."""
    m = X.mean(0)
    reach = np.linalg.norm(X, axis=1) + np.linalg.norm(heads, axis=1).max() + np.linalg.norm(m)
    return lam * (X.shape[1] + 2) * eps() * reach**2


def _weights_close(a, b, logit_tol, logits) -> None:
    """Softmax weights of logits apart by at most ``logit_tol`` per row: ``a_h`` moves by at
    most ``2 a_h logit_tol``, plus the softmax's rounding (``K + 2`` eps) and that of
    ``s_h - max s`` (``eps |s_h - max s|`` in each, relative on far heads' small weights)."""
    gap = logits.max(1, keepdims=True) - logits
    rel = 2 * np.asarray(logit_tol).reshape(-1, 1) + (b.shape[1] + 2) * eps() + 2 * eps() * gap
    excess = np.abs(np.asarray(a) - np.asarray(b)) / (rel * np.asarray(b))
    assert excess.max() <= 1, f"{excess.max():.3g} times the tolerance"


def _round_trip_tol(heads, shift) -> np.ndarray:
    """``(mu - m) / s * s + m`` against ``mu``, per coordinate: the subtraction, division and
    product each round by ``eps |mu - m|``, the addition by ``eps |mu|``."""
    return eps() * (3 * np.abs(heads - shift) + np.abs(heads))


def _all(rows: WorkingRows) -> torch.Tensor:
    return torch.cat([c for _, c in ((s, rows.read(s, s + rows.chunk))
                                     for s in range(0, rows.rows.shape[0], rows.chunk))])


def test_euclidean_working_rows_are_centred_with_unit_rms_norm():
    X = _data()
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None, chunk_size=64)
    Y = _all(rows).numpy()
    # the library's sums against numpy's: n eps of the rows' scale (X's in Y's units)
    np.testing.assert_allclose(Y.mean(0), 0.0, atol=_mean_atol(Y) + _mean_atol(X) / rows.scale)
    assert np.mean(np.sum(Y**2, axis=1)) == pytest.approx(1.0, rel=2 * sum_tol(len(X)))
    np.testing.assert_allclose(rows.shift, X.mean(0), rtol=0, atol=_mean_atol(X))
    assert rows.scale == pytest.approx(np.sqrt(np.mean(np.sum((X - X.mean(0))**2, 1))),
                                       rel=sum_tol(len(X)))
    np.testing.assert_array_equal(rows.take(torch.tensor([3, 7])).numpy(), Y[[3, 7]])


@pytest.mark.parametrize("factor", [1e-40, 1e-20, 1.0, 1e18, 1e30])
def test_float32_centre_and_scale_agree_with_float64_at_any_magnitude(factor):
    """float32 data sums its squares in float32; squares that overflow (1e30^2) or
    underflow (1e-40^2, below float32's smallest normal) take the rescaled pass."""
    X = (_data() * factor).astype(np.float32)       # 1e-40: subnormal float32 data
    m64, s64 = center_scale(X.astype(np.float64), Communicator.local(X.shape[0]), "X")
    m32, s32 = center_scale(X, Communicator.local(X.shape[0]), "X")
    # float32 sums of 500 terms against float64 ones: n eps32 (6e-5), relative to the
    # sum of |terms| (the mean's, absolute: a column's mean is near 0)
    assert s32 == pytest.approx(s64, rel=sum_tol(len(X), np.float32))
    np.testing.assert_allclose(m32, m64, rtol=0, atol=_mean_atol(X.astype(np.float64),
                                                                 np.float32))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("value", [1e50, 1e300, -7.3e12])
def test_a_constant_column_adds_no_spread_whatever_its_value(value, weighted):
    """The mean of a constant column, ``sum / n``, is off by a rounding error; before it
    was corrected, that error counted as spread (a column of 1e50: s ~ 1e34, and a fit
    that merged every cluster)."""
    X = _data()
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(X)) if weighted else None
    comm = Communicator.local(X.shape[0])
    m, s = center_scale(X, comm, "X", w)
    Xc = np.insert(X, 2, value, axis=1)
    mc, sc = center_scale(Xc, comm, "X", w)
    assert abs(mc[2] - value) <= np.spacing(abs(value))          # to a unit in the last place
    # the other columns' means, summed beside another column: maybe in another order
    np.testing.assert_allclose(np.delete(mc, 2), m, rtol=0, atol=_mean_atol(X))
    # the squares are taken about the corrected mean: the column adds nothing
    assert sc == pytest.approx(s, rel=sum_tol(len(X)))


def test_the_corrected_mean_of_float32_rows_is_their_mean():
    """float32 rows whose spread is one unit in the last place of their mean: the
    correction is taken from the mean the pass subtracted (rounded to float32), and the
    result is the float64 rows' mean (adding it to the float64 mean doubled the error)."""
    gen = np.random.default_rng(0)
    X = (1e4 + gen.integers(0, 2, (1000, 2)) * np.spacing(np.float32(1e4))).astype(np.float32)
    comm = Communicator.local(X.shape[0])
    m32, s32 = center_scale(X, comm, "X")
    m64, s64 = center_scale(X.astype(np.float64), comm, "X")
    # the correction is summed in float64: within n eps64 (2e-13) of the float64 mean
    np.testing.assert_allclose(m32, m64, rtol=0, atol=_mean_atol(X, np.float64))
    np.testing.assert_allclose(m32, X.astype(np.float64).mean(0), rtol=0,
                               atol=_mean_atol(X, np.float64))
    assert s32 == pytest.approx(s64, rel=1e-6)      # about that mean, not the rounded one


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sorted_rows", [False, True])
def test_centre_and_scale_from_a_provisional_centre(sorted_rows, dtype, monkeypatch):
    """The centre of the pass is the mean of evenly spaced rows (every 12th of these
    50,000): near the rows' mean when they are shuffled, one read of the rows; far from
    it when a far cluster lies between the rows it reads (every row it reads is near the
    origin, half of the others at 1e6), and the squares are summed again about the
    corrected mean, a second read. Both give the float64 mean and root-mean-square norm
    computed directly, to the rounding of sums over the rows."""
    gen = np.random.default_rng(0)
    n = 50_000
    X = gen.normal(size=(n, 3)) + 1e6 * (gen.uniform(size=(n, 1)) < 0.5)
    if sorted_rows:
        X[::12] = gen.normal(size=X[::12].shape)
    X = X.astype(dtype)
    reads = []
    sums = rows_module._centred_sums
    monkeypatch.setattr(rows_module, "_centred_sums",
                        lambda c, w, mean, unit: reads.append(mean.tobytes()) or
                        sums(c, w, mean, unit))
    m, s = center_scale(X, Communicator.local(n), "X", workers=2)
    assert len(set(reads)) == (2 if sorted_rows else 1)        # centres the rows were read about
    X64 = X.astype(np.float64)
    mean = X64.mean(0)
    np.testing.assert_allclose(m, mean, rtol=0, atol=_mean_atol(X, dtype))
    assert s == pytest.approx(np.sqrt(((X64 - mean) ** 2).sum(1).mean()),
                              rel=sum_tol(n, dtype))


def test_a_fit_ignores_a_constant_column_of_any_value():
    gen = np.random.default_rng(0)
    X = gen.normal(size=(300, 3)) + np.repeat(np.eye(3) * 5, 100, 0)
    ref = ac.AttentionClustering(3, random_state=0).fit(X)
    tiny = np.finfo(np.float64).tiny
    for value in (1e50, 1e300):
        with_column = np.insert(X, 1, value, axis=1)
        fit = ac.AttentionClustering(3, random_state=0).fit(with_column)
        # the centre and scale sum the columns in another grouping: the fits are rounding
        # apart, and their labels agree off rows within their difference of a tie
        assert_labels_off_ties(ref.labels_, fit.labels_,
                               np.log(np.maximum(ref.predict_proba(X), tiny)),
                               np.log(np.maximum(fit.predict_proba(with_column), tiny)),
                               slack=_logit_tol(X, ref.cluster_centers_,
                                                ref.inverse_temperature_))
        assert np.all(fit.cluster_centers_[:, 1] == value)


@pytest.mark.parametrize("factor", [1.0, 1e200])
def test_centre_and_scale_are_the_same_with_any_number_of_workers(factor):
    """The blocks' sums are added in block order: bit-identical with 1 or 3 workers, with
    weights and on the rescaled pass (1e200: the squares overflow)."""
    X = _data(40_000) * factor                     # three blocks of 16,384 rows
    w = np.random.default_rng(1).uniform(0, 2, len(X))
    comm = Communicator.local(len(X))
    for weights in (None, w):
        one = center_scale(X, comm, "X", weights, workers=1)
        three = center_scale(X, comm, "X", weights, workers=3)
        np.testing.assert_array_equal(three[0], one[0])
        assert three[1] == one[1]


def test_a_row_of_weight_zero_takes_no_part_even_when_its_square_overflows():
    X, w = _data(), np.ones(500)
    X[0], w[0] = 1e160, 0.0                       # (1e160)^2 overflows: 0 * inf = nan
    m, s = center_scale(X, Communicator.local(500), "X", w)
    m_ref, s_ref = center_scale(X[1:], Communicator.local(499), "X")
    # weighted sums of 500 rows against plain sums of 499: another computation
    np.testing.assert_allclose(m, m_ref, rtol=0, atol=_mean_atol(X[1:]))
    assert s == pytest.approx(s_ref, rel=sum_tol(len(X)))


def test_float32_centre_and_scale_near_float32s_largest():
    """X - mean itself overflows float32 here: the rescaled pass works in float64."""
    X = np.array([[3e38], [-3e38], [3e38]], dtype=np.float32)
    m32, s32 = center_scale(X, Communicator.local(3), "X")
    m64, s64 = center_scale(X.astype(np.float64), Communicator.local(3), "X")
    assert s32 == pytest.approx(s64, rel=1e-6) and m32 == pytest.approx(m64, rel=1e-6)


def test_sphere_rows_are_used_as_given():
    X = _data()
    rows = WorkingRows.prepare(X, geometry=Sphere(), comm=None, dtype="float32")
    assert rows.row_map is None and rows.shift is None and rows.scale == 1.0
    assert rows.rows.dtype == torch.float32
    np.testing.assert_array_equal(rows.read(0, 10).numpy(), X[:10].astype(np.float32))


def test_the_working_space_is_the_same_layer():
    """The Euclidean attention of x on mu at lambda is that of (x - m)/s on (mu - m)/s at
    lambda s^2: the maps in and out of the working space change no weight."""
    X = _data()
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None)
    heads = X[[0, 100, 200]] + 0.3
    lam = 0.7
    geo = Euclidean()
    direct = torch.softmax(geo.logits(torch.as_tensor(X), torch.as_tensor(heads), lam), 1)
    nu = torch.as_tensor(rows.heads_in(heads))
    working = torch.softmax(geo.logits(_all(rows), nu, rows.inverse_temperature_in(lam)), 1)
    # products of centred, scaled rows against products of the rows as given
    _weights_close(working.numpy(), direct.numpy(), _logit_tol(X, heads, lam),
                   -lam / 2 * ((X[:, None] - heads[None]) ** 2).sum(-1))
    assert np.all(np.abs(rows.heads_out(nu) - heads) <= _round_trip_tol(heads, rows.shift))
    assert rows.inverse_temperature_out(rows.inverse_temperature_in(lam)) == pytest.approx(lam)
    info = rows.info_out(offset=5)(IterationInfo(2, 0.5, rows.inverse_temperature_in(lam), 0.1,
                                                 nu))
    assert (info.iteration, info.loss, info.inverse_temperature, info.shift) == pytest.approx(
        (7, 0.5 * rows.scale**2, lam, 0.1 * rows.scale))
    # the report maps heads out by heads_out's elementwise product and sum: the same bits
    np.testing.assert_array_equal(info.heads.numpy(), rows.heads_out(nu))


def test_lambda_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="out of float64's range"):   # s^2 underflows
        WorkingRows.prepare(_data() * 1e-160, geometry=Euclidean(), comm=None)
    rows = WorkingRows.prepare(_data(), geometry=Euclidean(), comm=None)
    with pytest.raises(ValueError, match="out of float64's range"):
        rows.inverse_temperature_out(1e-310)


def test_sample_draws_the_generators_rows_in_order():
    X = _data(n=300)
    rows = WorkingRows.prepare(X, geometry=Sphere(), comm=None)
    S = rows.sample(np.random.default_rng(4), 50)
    idx = np.sort(np.random.default_rng(4).choice(300, 50, replace=False))
    np.testing.assert_array_equal(S.numpy(), X[idx])
    np.testing.assert_array_equal(rows.sample(np.random.default_rng(4), 300).numpy(), X)


def test_sample_of_a_rank_holds_only_its_rows():
    """Without the other ranks' sums, a rank's sample is its own rows and zeros elsewhere."""
    X = _data(n=300)
    comm = Communicator(lambda t: t, lambda t: t, offset=100, n_total=300)
    rows = WorkingRows.prepare(X[100:200], geometry=Sphere(), comm=comm)
    S = rows.sample(np.random.default_rng(4), 50).numpy()
    idx = np.sort(np.random.default_rng(4).choice(300, 50, replace=False))
    mine = (idx >= 100) & (idx < 200)
    np.testing.assert_array_equal(S[mine], X[idx[mine]])
    assert not S[~mine].any()


@pytest.mark.parametrize("chunk, workers", [(7, 1), (64, 3), (1000, 2)])
def test_assign_is_argmax_sizes_and_sharpness_whatever_the_chunks(chunk, workers):
    X = _data()
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None, chunk_size=chunk,
                               workers=workers)
    heads = torch.as_tensor(rows.heads_in(X[[0, 1, 2]]))

    def logits(c):
        return Euclidean().logits(c, heads, 2.0)
    labels, stats = rows.assign(logits, 3)
    Y = _all(rows)
    W = torch.softmax(logits(Y), 1).numpy()
    # products of blocks of other sizes (other kernels): labels off rounding ties, the
    # sizes those of the labels, the largest weights (each within its logits' rounding) summed
    # in other orders
    assert_same_labels(labels, W.argmax(1), Y.numpy(), heads.numpy())
    np.testing.assert_array_equal(stats[:3], np.bincount(labels, minlength=3))
    logit_tol = _logit_tol(Y.numpy(), heads.numpy(), 2.0)
    rel = sum_tol(len(X)) + 2 * logit_tol.max() + (3 + 2) * eps()
    assert stats[3] == pytest.approx(W.max(1).sum(), rel=rel)


def test_chunk_rule_and_threads():
    assert chunk_rows(None, 8, 3) == 16_384                 # narrow rows: the cap
    assert chunk_rows(None, 1000, 3) == (1 << 19) // 1000   # wide: about 2 MB of float32
    assert chunk_rows(None, 10**6, 3) == 256                # the floor
    assert chunk_rows(None, 8, 1000) == (1 << 19) // 1000   # many heads: (rows, K) blocks
    assert chunk_rows(123, 8, 3) == 123
    assert computation_dtype("auto", np.float32) == torch.float32
    assert computation_dtype("auto", np.float64) == torch.float64
    before = torch.get_num_threads()
    with fit_threads("cpu") as workers:
        assert torch.get_num_threads() == 1 and workers == before
    assert torch.get_num_threads() == before


def test_preprocess_options():
    X = _data(n=50)
    unit = preprocess(X, "rows", unit_heads=True)
    # x / ||x||, then its norm recomputed: two d-term sums (each within d u) and a
    # division per coordinate
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=(X.shape[1] + 2) * eps())
    mean, scale = X.mean(0), 2.0                    # the same elementwise operations
    np.testing.assert_array_equal(preprocess(X, "center-scale", unit_heads=False,
                                             center=(mean, scale)), (X - mean) / scale)
    assert preprocess(X, None, unit_heads=False) is X
    with pytest.warns(UserWarning, match="mean squared norm"):
        preprocess(X, None, unit_heads=True, comm=Communicator.local(50))
    X[3] = 0.0
    with pytest.raises(ValueError, match="row 3"):
        preprocess(X, "rows", unit_heads=True)


def test_the_estimator_fits_through_its_rows():
    """The estimator's fit is the fixed-point solver's on the working rows, mapped back."""
    X = _data()
    est = ac.AttentionClustering(3, init=X[[0, 1, 2]], inverse_temperature=0.2, tol=1e-10,
                                 max_iter=500).fit(X)
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None)
    res = ac.cluster.fixed_point.fixed_point_fit(
        _all(rows), torch.as_tensor(rows.heads_in(X[[0, 1, 2]])),
        inverse_temperature=rows.inverse_temperature_in(0.2), n_steps=500, tol=1e-10,
        geometry="euclidean")
    # the fit runs its passes under fit_threads (one torch thread, its own workers), this
    # call on torch's threads, so the products and sums may take other kernels and orders:
    # each step's heads, weighted means of n rows, within 2 n eps of the rows' largest
    # coordinate (the sums and the weights' sum), adding up over the contracting steps;
    # mapped out by s (and the map's own rounding)
    step = 2 * sum_tol(len(X)) * float(_all(rows).abs().max()) * rows.scale
    heads = rows.heads_out(res.heads)
    # both stop once a full step would move no head by more than tol; rounding can flip
    # that test only for a step within rounding of tol, which moves the heads by at most
    # tol (times s out of the working space): the counts agree to one step, the heads to
    # one such step more
    assert est.converged_ and res.converged and abs(est.n_iter_ - res.n_iter) <= 1
    extra = 0.0 if est.n_iter_ == res.n_iter else 1e-10 * rows.scale
    assert np.all(np.abs(est.cluster_centers_ - heads)
                  <= res.n_iter * step + extra + _round_trip_tol(heads, rows.shift))


def test_float32_rows_far_from_the_origin_keep_their_nearest_heads():
    """float32 rows 1e6 from 0 are centred on the mean rounded to float32 (up to 0.03
    from the float64 mean): the heads are mapped back with that same centre, then stored
    in the data's dtype, so every label is the nearest fitted centre in float64 up to
    the rounding of the distances and of the centres to float32; predict agrees off
    near ties."""
    from _tolerance import _sq_dists, sq_dist_tol

    X = (1e6 + np.random.default_rng(0).normal(size=(3000, 4))).astype(np.float32)
    est = ac.AttentionClustering(6, random_state=0).fit(X)
    assert est.cluster_centers_.dtype == np.float32
    X64 = X.astype(np.float64)
    c = X64.mean(0)
    rows, heads = X64 - c, est.cluster_centers_.astype(np.float64) - c
    # each centre is within half a float32 spacing per coordinate of the head the labels
    # were computed with: a squared distance moves by at most 2 a r + r^2 (a = ||x - mu||)
    r = np.sqrt(X.shape[1]) * float(np.spacing(np.abs(est.cluster_centers_).max())) / 2
    D = _sq_dists(rows, heads)
    tol = sq_dist_tol(rows, heads, np.float32) + 2 * np.sqrt(D) * r + r * r
    n = np.arange(len(X))
    best = D.argmin(1)
    predicted = est.predict(X)
    for labels in (est.labels_, predicted):
        excess = D[n, labels] - D[n, best]
        assert (excess <= tol[n, labels] + tol[n, best]).all()
    # off rows whose two nearest centres are within those bounds, the same labels
    order = np.argsort(D, 1)[:, :2]
    gap = D[n, order[:, 1]] - D[n, order[:, 0]]
    tie = gap <= tol[n, order[:, 0]] + tol[n, order[:, 1]]
    assert (predicted == est.labels_)[~tie].all()

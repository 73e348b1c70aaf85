"""``partial_fit``: the running-sums rule against MiniBatchKMeans's running means (hard
attention) and against autograd (the step), weights, the first batch, and
``attnclust fit --batch-rows``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import attention_risk_tol, eps, sum_tol
from attnclust.cli import main
from attnclust.cluster.clustering import AttentionClustering
from attnclust.cluster.degenerate import DegenerateFitWarning
from attnclust.cluster.fixed_point import pass_sums, step_from_sums

MIX = ac.GaussianMixture.random(d=4, k=3, sigma=0.1, min_angle=1.0, rng=0)
X, Z = MIX.sample(3000, rng=0, return_labels=True)
X = 3.0 * X + 1.0
INIT = X[[0, 1, 2]] + 0.5


def _stream_tol(rows, centers, lam, n_batches):
    """Centers of two streams over the same rows whose sums differ in order (weights
    against repeated rows): each batch's step is a ratio of sums over at most ``n`` rows
    (``n`` roundings of terms of size ``s``, the largest row plus head norm), whose
    weights carry the softmax's condition ``lambda s^2``; the batches' errors add."""
    rows = np.asarray(rows)
    K, d = np.shape(centers)
    s = float(np.linalg.norm(rows, axis=1).max() + np.linalg.norm(centers, axis=1).max())
    return n_batches * (len(rows) + K * K + d + lam * s * s) * eps() * s


def _batches(X, size):
    return [X[s:s + size] for s in range(0, len(X), size)]


def _running_means(batches, heads, *, sphere=False):
    """MiniBatchKMeans's rule with running counts, written out: each head is the mean (on
    the sphere: the normalized sum) of every row it has won so far."""
    heads = np.array(heads, dtype=float)
    sums, counts = np.zeros_like(heads), np.zeros(len(heads))
    for B in batches:
        z = (B @ heads.T).argmax(1) if sphere else \
            ((B[:, None, :] - heads[None]) ** 2).sum(-1).argmin(1)
        for h in range(len(heads)):
            sums[h] += B[z == h].sum(0)
            counts[h] += (z == h).sum()
        won = counts > 0
        heads[won] = sums[won] / (np.linalg.norm(sums[won], axis=1, keepdims=True) if sphere
                                  else counts[won, None])
    return heads


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
def test_hard_attention_is_minibatch_kmeans_running_means(geometry):
    sphere = geometry == "sphere"
    data = X / np.linalg.norm(X, axis=1, keepdims=True) if sphere else X
    init = data[[int(np.flatnonzero(Z == k)[0]) for k in range(3)]] + 0.1   # one per cluster
    est = AttentionClustering(3, geometry=geometry, init=init, inverse_temperature=1e9,
                              random_state=0)
    batches = _batches(data, 400)
    for B in batches:
        est.partial_fit(B)
    assert est.stream_state_.n_swaps == 0           # heads in every cluster: nothing moves
    ref = _running_means(batches, init / np.linalg.norm(init, axis=1, keepdims=True)
                         if sphere else init, sphere=sphere)
    # well separated clusters (sigma 0.1, min_angle 1, a head in each): the same winners
    # both ways; the running sums of n rows in another order, and the working space's
    # centring on the mean m (a head off by eps |m|)
    big = np.abs(data).max()
    np.testing.assert_allclose(est.cluster_centers_, ref, rtol=0,
                               atol=2 * sum_tol(len(data)) * big)
    assert est.n_steps_ == len(batches) and est.inverse_temperature_ == pytest.approx(1e9)
    np.testing.assert_array_equal(est.labels_, est.predict(batches[-1]))  # separated rows


def test_the_step_from_sums_is_minus_the_gradient_over_twice_the_soft_counts():
    """Soft attention: ``mu_h - grad_h f / (2 N_h)`` with the gradient of the risk (plus
    the key bias) by autograd, and sums of disjoint rows add up."""
    Xt = torch.as_tensor(MIX.sample(500, rng=1))
    heads = torch.as_tensor(MIX.centroids + 0.2, dtype=torch.float64)
    lam = 4.0
    sums = pass_sums(Xt[:200], heads, lam, geometry="euclidean") + \
        pass_sums(Xt[200:], heads, lam, geometry="euclidean", chunk=64)
    # sums of 500 rows' terms (counts, a x, a ||x||^2: at most n s^2 each) in other orders
    # and chunks: the bounds of attention_risk_tol per unit weight, times n
    s = float(Xt.norm(dim=1).max() + heads.norm(dim=1).max())
    vtol, gtol = attention_risk_tol(len(Xt), s, lam, *heads.shape)
    torch.testing.assert_close(sums, pass_sums(Xt, heads, lam, geometry="euclidean"),
                               rtol=0, atol=len(Xt) * vtol)
    new, risk = step_from_sums(sums, heads, lam, 500.0, geometry="euclidean")
    h = heads.clone().requires_grad_(True)
    A = torch.softmax(-lam * ((Xt[:, None, :] - h[None]) ** 2).sum(-1) / 2, dim=1)
    f = ((Xt - A @ h) ** 2).sum(1).mean()
    f.backward()
    N = A.detach().mean(0)
    assert float(N.min()) > 1e-3                    # the step divides by N_h
    # the gradient to gtol, divided by 2 N_h; the risk to vtol (attention_risk_tol)
    torch.testing.assert_close(new, heads - h.grad / (2 * N[:, None]), rtol=0,
                               atol=gtol / (2 * float(N.min())))
    assert abs(risk - f.item()) < vtol


def test_sphere_step_from_sums_keeps_the_radial_part_of_the_value_gradient():
    """Unit heads: ``normalize(mu_h - (tangent(grad_h) + <grad^value_h, mu_h> mu_h) /
    (2 N_h))``, with ``grad^value`` the gradient through the values alone (autograd)."""
    Xt = torch.as_tensor(MIX.sample(400, rng=2))
    heads = torch.nn.functional.normalize(torch.as_tensor(MIX.centroids + 0.3), dim=1)
    lam = 3.0
    new, _ = step_from_sums(pass_sums(Xt, heads, lam), heads, lam, 400.0)
    keys = heads.clone().requires_grad_(True)
    values = heads.clone().requires_grad_(True)
    A = torch.softmax(lam * Xt @ keys.T, dim=1)
    ((Xt - A @ values) ** 2).sum(1).mean().backward()
    grad = keys.grad + values.grad
    tangent = grad - (grad * heads).sum(1, keepdim=True) * heads
    radial = (values.grad * heads).sum(1, keepdim=True) * heads
    N = A.detach().mean(0)[:, None]
    assert float(N.min()) > 1e-3                    # the step divides by N_h
    ref = torch.nn.functional.normalize(heads - (tangent + radial) / (2 * N), dim=1)
    # the gradient to gtol (attention_risk_tol), over 2 N_h, then a normalization that
    # divides by the step's norm (>= 1 - its size)
    s = float(Xt.norm(dim=1).max() + 1.0)
    gtol = attention_risk_tol(len(Xt), s, lam, *heads.shape)[1]
    pre = (heads - (tangent + radial) / (2 * N)).norm(dim=1).min()
    torch.testing.assert_close(new, ref, rtol=0, atol=2 * gtol / (2 * float(N.min() * pre)))


def test_first_batch_fixes_lambda_as_fit_does():
    batches = _batches(X, 1000)
    est = AttentionClustering(3, random_state=0).partial_fit(batches[0])
    lam = est.inverse_temperature_
    # the first batch's lambda is fit's rule on the same rows: the same operations
    assert lam == AttentionClustering(3, random_state=0).fit(batches[0]).inverse_temperature_
    for B in batches[1:]:
        est.partial_fit(B)
    assert est.inverse_temperature_ == lam
    np.testing.assert_array_equal(est.inverse_temperature_curve_, lam)
    assert est.loss_curve_.shape == (3,)


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
def test_one_pass_reaches_the_batch_fit(geometry):
    est = AttentionClustering(3, geometry=geometry, random_state=0)
    for B in _batches(X, 300):
        est.partial_fit(B)
    fit = AttentionClustering(3, geometry=geometry, random_state=0).fit(X)
    ari = ac.adjusted_rand_index(Z, est.predict(X))
    assert ari >= ac.adjusted_rand_index(Z, fit.labels_) - 0.01
    assert ac.centroid_distance(est.cluster_centers_, fit.cluster_centers_).max < 0.05


def _four_blobs(n, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    z = rng.integers(0, 4, size=n)
    return centres[z] + 0.5 * rng.standard_normal((n, 2)), z


@pytest.mark.parametrize("inverse_temperature", [1e9, "auto"])
@pytest.mark.parametrize("init", [
    [[0.0, 0.0], [6.0, 0.0], [3.0, 6.0], [60.0, 60.0]],      # a dead head, far from the data
    [[-0.4, 0.0], [0.4, 0.0], [6.0, 0.0], [3.0, 6.0]],       # two heads in one, one on two
], ids=["dead head", "split and merge"])
def test_a_swap_repairs_the_seeding(init, inverse_temperature):
    """Without the swap the running means keep the seeding's mistake (the reference of
    MiniBatchKMeans's rule, written out: ARI at most 0.75); with it, every cluster."""
    Xb, zb = _four_blobs(4000)
    init = np.array(init)
    batches = _batches(Xb, 500)
    without = _running_means(batches, init)
    nearest = ((Xb[:, None, :] - without[None]) ** 2).sum(-1).argmin(1)
    assert ac.adjusted_rand_index(zb, nearest) < 0.75
    est = AttentionClustering(4, init=init, inverse_temperature=inverse_temperature,
                              random_state=0)
    for B in batches:
        est.partial_fit(B)
    assert est.stream_state_.n_swaps >= 1
    assert ac.adjusted_rand_index(zb, est.predict(Xb)) > 0.99
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    assert ac.centroid_distance(est.cluster_centers_, centres).max < 0.1


def test_streams_are_deterministic_given_random_state():
    Xb, _ = _four_blobs(3000, seed=1)
    fits = []
    for _ in range(2):
        est = AttentionClustering(4, random_state=3, init=[[-0.4, 0.0], [0.4, 0.0],
                                                           [6.0, 0.0], [3.0, 6.0]])
        for B in _batches(Xb, 400):
            est.partial_fit(B)
        fits.append(est)
    assert fits[0].stream_state_.n_swaps >= 1
    np.testing.assert_array_equal(fits[0].cluster_centers_, fits[1].cluster_centers_)
    np.testing.assert_array_equal(fits[0].loss_curve_, fits[1].loss_curve_)
    seeded = [AttentionClustering(8, random_state=5) for _ in range(2)]
    for B in _batches(X, 500):
        for est in seeded:
            est.partial_fit(B)
    np.testing.assert_array_equal(seeded[0].cluster_centers_, seeded[1].cluster_centers_)


def test_integer_weights_are_repeated_rows_and_zero_weights_absent_rows():
    rng = np.random.default_rng(0)
    w = rng.integers(0, 3, size=len(X)).astype(float)
    params = dict(init=INIT, inverse_temperature=2.0, random_state=0)
    weighted, repeated, dropped = (AttentionClustering(3, **params) for _ in range(3))
    for s in range(0, len(X), 500):
        B, wB = X[s:s + 500], w[s:s + 500]
        weighted.partial_fit(B, sample_weight=wB)
        repeated.partial_fit(np.repeat(B, wB.astype(int), axis=0))
        dropped.partial_fit(np.repeat(B, (wB > 0).astype(int), axis=0),
                            sample_weight=wB[wB > 0])
    tol = _stream_tol(np.repeat(X, w.astype(int), axis=0), weighted.cluster_centers_, 2.0,
                      len(range(0, len(X), 500)))  # weights against repeated rows
    for other in (repeated, dropped):
        np.testing.assert_allclose(weighted.cluster_centers_, other.cluster_centers_,
                                   rtol=0, atol=tol)
        assert other.stream_state_.n_swaps == weighted.stream_state_.n_swaps


def test_a_later_batch_of_weight_zero_adds_nothing_to_the_running_sums():
    """Rows of weight zero in the middle of a stream (a file's rows that count for
    nothing) add no weight; the batch's inertia is 0 (it raised ZeroDivisionError)."""
    est = AttentionClustering(3, init=INIT, inverse_temperature=2.0, random_state=0)
    est.partial_fit(X[:500])
    total = est.stream_state_.total
    est.partial_fit(X[500:1000], sample_weight=np.zeros(500))
    assert est.stream_state_.total == total and est.inertia_ == 0.0
    np.testing.assert_array_equal(est.labels_, est.predict(X[500:1000]))
    # a batch of weight zero and few rows: no swap (it split an empty cell: IndexError)
    rng = np.random.default_rng(0)
    blobs = np.r_[rng.normal(-3, 1, (300, 2)), rng.normal(3, 1, (300, 2))]
    for seed in range(3):
        stream = AttentionClustering(3, random_state=seed).partial_fit(blobs[::2])
        swaps = stream.stream_state_.n_swaps
        stream.partial_fit(blobs[1:100:2], sample_weight=np.zeros(50))
        assert stream.stream_state_.n_swaps == swaps


def test_a_first_batch_that_caps_lambda_warns_and_the_shape_is_recorded():
    """Three rows first: their clusters have no spread and lambda, fixed for the stream,
    is at its cap; it said nothing (fit warns). A stream records its heads' shape, as a
    fit does (covariance_type_ was missing)."""
    est = AttentionClustering(3, random_state=0)
    with pytest.warns(DegenerateFitWarning, match="of the first batch, which fixes lambda"):
        est.partial_fit(X[:3])
    assert (est.covariance_type_, est.covariance_type_reason_) == (
        "spherical", "spherical: partial_fit streams spherical heads")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)    # later batches: no repeat
        est.partial_fit(X[3:500])
    given = AttentionClustering(3, covariance_type="spherical", random_state=0)
    assert given.partial_fit(X[:500]).covariance_type_reason_ == "given"


def test_partial_fit_after_a_fit_of_shaped_heads_is_refused():
    """A default fit that chose full heads (iris): the stream's spherical steps would move
    the centres while predict read the fit's covariances (predict agreed with labels_ on
    82% of a batch); partial_fit says to fit spherical heads instead, and changes
    nothing."""
    from sklearn.datasets import load_iris

    iris = load_iris().data
    est = AttentionClustering(3, random_state=0).fit(iris)
    assert est.covariance_type_ == "full"
    before = est.cluster_centers_.copy()
    with pytest.raises(ValueError, match="partial_fit streams spherical heads, and this "
                                         "fit's heads are full"):
        est.partial_fit(iris[:50])
    np.testing.assert_array_equal(est.cluster_centers_, before)
    spherical = AttentionClustering(3, covariance_type="spherical", random_state=0).fit(iris)
    spherical.partial_fit(iris[:50])
    np.testing.assert_array_equal(spherical.predict(iris[:50]), spherical.labels_)


def test_a_stream_after_a_fit_starts_from_its_clusters_weight():
    """After a fit, a batch of one row, then the others: the stream starts from the fit's
    heads weighing their clusters' rows (as MiniBatchKMeans keeps its counts), so the
    centres stay the fit's; from empty running sums the heads the row barely touched
    leapt out of the data (a centre at (133, 139), then at 5.7e40 after the other
    rows, and a cluster with no row)."""
    from sklearn.datasets import make_blobs

    blobs, _ = make_blobs(400, centers=3, random_state=1)
    est = AttentionClustering(3, covariance_type="spherical", random_state=0).fit(blobs)
    fitted = est.cluster_centers_.copy()
    est.partial_fit(blobs[:1])
    est.partial_fit(blobs[1:])
    gaps = np.linalg.norm(est.cluster_centers_[:, None] - fitted[None], axis=-1).min(1)
    assert gaps.max() < 0.1, est.cluster_centers_
    assert np.bincount(est.predict(blobs), minlength=3).min() > 100


def test_partial_fit_after_fit_continues_from_its_heads():
    est = AttentionClustering(3, random_state=0).fit(X)
    before = est.cluster_centers_.copy()
    est.partial_fit(X)                      # all rows: the batch fit's own fixed point
    np.testing.assert_allclose(est.cluster_centers_, before, atol=1e-3)
    assert est.n_steps_ == 1
    est.partial_fit(X)
    est.fit(X)                              # a new fit keeps nothing of the stream's
    assert not hasattr(est, "n_steps_") and not hasattr(est, "stream_state_")


def test_bad_batches_are_clear_errors():
    est = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:100, :3])
    with pytest.raises(ValueError, match="non-negative"):
        est.partial_fit(X[:100], sample_weight=-np.ones(100))
    with pytest.raises(ValueError, match="without a penalty"):
        AttentionClustering(3, geometry="sphere", penalty="repulsion", rho=0.1).partial_fit(X)
    # three that raised unrelated errors (a TypeError; "the column sums overflow"), and
    # one that was ignored
    with pytest.raises(ValueError, match="partial_fit needs n_clusters as a number"):
        AttentionClustering("auto").partial_fit(X[:100])
    with pytest.raises(ValueError, match="no row has a positive weight"):
        AttentionClustering(3).partial_fit(X[:100], sample_weight=np.zeros(100))
    with pytest.raises(ValueError, match="n_clusters=5 but the estimator streams 3 heads"):
        est.set_params(n_clusters=5).partial_fit(X[:100])


def test_partial_fit_sets_n_clusters_and_streams_on_from_an_auto_fit():
    est = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    assert est.n_clusters_ == 3
    auto = AttentionClustering("auto", random_state=0).fit(X)
    chosen = auto.n_clusters_
    auto.partial_fit(X[:100])                 # n_clusters is still "auto": streams on
    assert auto.n_steps_ == 1 and auto.n_clusters_ == chosen == len(auto.cluster_centers_)


@pytest.mark.parametrize("params", [dict(penalty="repulsion", rho=0.1), dict(solver="pgd")])
def test_a_fit_that_cannot_stream_refuses_partial_fit_afterwards_too(params):
    """After a fit with a penalty or plain PGD, partial_fit would take plain fixed-point
    steps (no penalty): refused as for a fresh estimator, not silently changed."""
    est = AttentionClustering(3, geometry="sphere", random_state=0, max_iter=20, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    with pytest.raises(ValueError, match="without a penalty"):
        est.partial_fit(X[:100])


# -- attnclust fit --batch-rows ------------------------------------------------------------
def test_cli_batch_rows_writes_what_partial_fit_gives(tmp_path, capsys):
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    w = np.random.default_rng(1).integers(1, 3, size=len(X)).astype(float)
    np.save(tmp_path / "w.npy", w)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--batch-rows", "700", "--proba",
                 "--sample-weight", str(tmp_path / "w.npy"), "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    est = AttentionClustering(3, random_state=0)
    X32 = X.astype(np.float32)
    for s in range(0, len(X), 700):
        est.partial_fit(X32[s:s + 700], sample_weight=w[s:s + 700])
    # the command line's partial_fit on the same float32 batches, under its own thread
    # settings: sums in another order
    lam = est.inverse_temperature_
    tol = _stream_tol(np.repeat(X32.astype(float), w.astype(int), axis=0),
                      est.cluster_centers_, lam, 5)
    np.testing.assert_allclose(np.load(tmp_path / "r.centers.npy"), est.cluster_centers_,
                               rtol=0, atol=tol)
    labels = np.load(tmp_path / "r.labels.npy")
    np.testing.assert_array_equal(labels, est.predict(X32))  # well separated clusters
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "r.labels.csv", dtype=int, skiprows=1),
                                  labels)
    P = np.load(tmp_path / "r.proba.npy")
    # logits lambda <x, mu> - lambda ||mu||^2 / 2 moved by lambda 2 s tol, plus rounding
    s = float(np.linalg.norm(X, axis=1).max() + np.linalg.norm(est.cluster_centers_, axis=1).max())
    np.testing.assert_allclose(P, est.predict_proba(X32), rtol=0,
                               atol=2 * lam * s * tol + (4 + 3 + lam * s * s) * eps())
    assert (tmp_path / "r.proba.csv").read_text().startswith("cluster_0,cluster_1,cluster_2\n")
    np.testing.assert_allclose(np.loadtxt(tmp_path / "r.proba.csv", delimiter=",", skiprows=1), P)
    out = capsys.readouterr().out
    assert "batches=5 of at most 700 rows" in out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_cli_batch_rows_bad_chunk_is_one_line_and_no_file(tmp_path, capsys):
    bad = X.copy()
    bad[2500, 1] = np.nan                  # in the fourth chunk: after three were fitted
    np.save(tmp_path / "x.npy", bad)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--batch-rows", "700",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NaN or inf at row 2501, column 2" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--batch-rows", "0"]) == 2
    assert "--batch-rows must be a positive integer" in capsys.readouterr().err


def test_cli_batch_rows_weight_column_and_plot(tmp_path):
    w = np.random.default_rng(2).integers(1, 3, size=len(X)).astype(float)
    np.save(tmp_path / "xw.npy", np.column_stack([w, X]))
    assert main(["fit", str(tmp_path / "xw.npy"), "-k", "3", "--batch-rows", "1000",
                 "--weight-column", "1", "--plot", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    est = AttentionClustering(3, random_state=0)
    for s in range(0, len(X), 1000):
        est.partial_fit(X[s:s + 1000], sample_weight=w[s:s + 1000])
    # the command line's partial_fit under its own thread settings: sums in another order
    tol = _stream_tol(np.repeat(X, w.astype(int), axis=0), est.cluster_centers_,
                      est.inverse_temperature_, 3)
    np.testing.assert_allclose(np.load(tmp_path / "r.centers.npy"), est.cluster_centers_,
                               rtol=0, atol=tol)
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ac.adjusted_rand_index(Z, np.load(tmp_path / "r.labels.npy")) == 1.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("factor", [1e-46, 1e39, 1e300])
def test_weights_of_any_magnitude_stream_the_same(factor, dtype):
    """Every batch's weights are divided by the first batch's largest: scaled by 1e39 or
    1e-46 they were inf or 0 in float32 (an IndexError; 'no row of positive weight'),
    and the weights of later batches keep their ratio to the first's."""
    w = np.random.default_rng(5).uniform(0.5, 2.0, 1000)
    w[500:] *= 3.0                                  # the second batch weighs more

    def stream(scale):
        est = AttentionClustering(3, random_state=0)
        for start in (0, 500):
            est.partial_fit(X[start:start + 500].astype(dtype),
                            sample_weight=scale * w[start:start + 500])
        return est
    ref, scaled = stream(1.0), stream(factor)
    np.testing.assert_allclose(scaled.cluster_centers_, ref.cluster_centers_, rtol=1e-5)
    np.testing.assert_array_equal(scaled.labels_, ref.labels_)  # well separated clusters


def test_a_later_batch_keeps_its_weight_relative_to_the_first():
    """Weight 1 in the first batch, 3 in the second: the stream of three copies of the
    second batch's rows (weights are brought to a unit fixed by the first batch, never
    batch by batch)."""
    params = dict(init=INIT, inverse_temperature=2.0, random_state=0)
    weighted, repeated = AttentionClustering(3, **params), AttentionClustering(3, **params)
    weighted.partial_fit(X[:500], sample_weight=np.ones(500))
    weighted.partial_fit(X[500:1000], sample_weight=np.full(500, 3.0))
    repeated.partial_fit(X[:500])
    repeated.partial_fit(np.repeat(X[500:1000], 3, axis=0))
    tol = _stream_tol(np.concatenate([X[:500], np.repeat(X[500:1000], 3, axis=0)]),
                      weighted.cluster_centers_, 2.0, 2)  # weights against repeated rows
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_,
                               rtol=0, atol=tol)


def test_a_batch_without_weights_after_a_weighted_one_counts_each_row_once():
    """The first batch's largest weight (2 here) is the unit: a later batch without
    weights is a batch of weights 1, not of weights equal to that unit."""
    params = dict(init=INIT, inverse_temperature=2.0, random_state=0)
    none, ones = AttentionClustering(3, **params), AttentionClustering(3, **params)
    for est, later in ((none, None), (ones, np.ones(500))):
        est.partial_fit(X[:500], sample_weight=np.full(500, 2.0))
        est.partial_fit(X[500:1000], sample_weight=later)
        est.partial_fit(X[1000:1500], sample_weight=later)
    # no weights is a batch of weights 1: the same operations
    np.testing.assert_array_equal(none.cluster_centers_, ones.cluster_centers_)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_stream_maps_its_rows_as_fit_does(dtype):
    """partial_fit's working rows are fit's, bit for bit, in either dtype: the centre is
    subtracted in the data's dtype, then the rows are scaled (one WorkingSpace)."""
    from attnclust.cluster.rows import WorkingRows
    from attnclust.layer.geometry import Euclidean

    X = (np.random.default_rng(0).normal(size=(300, 3)) * [1e3, 1.0, 5.0] + 1e4).astype(dtype)
    est = AttentionClustering(3, random_state=0).partial_fit(X)
    rows = WorkingRows.prepare(X, geometry=Euclidean(), comm=None)
    state = est.stream_state_
    assert state.space.scale == rows.scale
    np.testing.assert_array_equal(state.space.shift, rows.shift)
    assert torch.equal(state.to_working(X), rows.read(0, len(X)).to(state.dtype))


def _snapshot(est) -> dict:
    """The estimator's fitted state, as comparable values."""
    return {"centers": est.cluster_centers_.copy(), "steps": est.n_steps_,
            "curve": est.loss_curve_.copy(), "total": est.stream_state_.total,
            "batches": est.stream_state_.n_batches}


def _same_state(a: dict, b: dict) -> None:
    np.testing.assert_array_equal(a["centers"], b["centers"])
    np.testing.assert_array_equal(a["curve"], b["curve"])
    assert (a["steps"], a["total"], a["batches"]) == (b["steps"], b["total"], b["batches"])


def test_a_refused_or_stopped_batch_changes_nothing(monkeypatch):
    """A batch of rows at 1e200 was refused only after its step (the centres at 1e198,
    every later predict refused); a batch stopped inside its step left the running sums
    with it and a retry counted it twice. Now either leaves the stream as it was."""
    import attnclust.cluster.streaming as streaming

    est = AttentionClustering(3, random_state=0)
    for batch in _batches(X[:1000], 500):
        est.partial_fit(batch)
    before = _snapshot(est)
    with pytest.raises(ValueError, match="out of float64's range"):
        est.partial_fit(X[1000:1010] * 1e200)
    _same_state(_snapshot(est), before)
    assert est.predict(X[:5]).shape == (5,)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(streaming, "step_from_sums", stopped)
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit(X[1000:1500])
    _same_state(_snapshot(est), before)
    monkeypatch.undo()
    retried = est.partial_fit(X[1000:1500])
    once = AttentionClustering(3, random_state=0)
    for batch in _batches(X[:1500], 500):
        once.partial_fit(batch)
    _same_state(_snapshot(retried), _snapshot(once))


def test_a_batch_of_weight_zero_takes_no_step():
    """It moved the heads (the last step repeated from unchanged sums) and counted a step."""
    est = AttentionClustering(3, random_state=0)
    for batch in _batches(X[:1000], 500):
        est.partial_fit(batch)
    before = _snapshot(est)
    est.partial_fit(X[1000:1100], sample_weight=np.zeros(100))
    _same_state(_snapshot(est), before)
    assert est.labels_.shape == (100,) and est.inertia_ == 0.0


def test_a_batch_of_weight_zero_after_a_fit_changes_nothing():
    """It raised AttributeError (no stream_state_: no stream had started)."""
    est = AttentionClustering(3, random_state=0, merge_heads=False).fit(X[:1000])
    centres = est.cluster_centers_.copy()
    est.partial_fit(X[1000:1100], sample_weight=np.zeros(100))
    np.testing.assert_array_equal(est.cluster_centers_, centres)
    assert est.labels_.shape == (100,) and est.inertia_ == 0.0
    est.partial_fit(X[1000:1100])                  # the stream then starts from the fit
    assert est.n_steps_ == 1


def test_a_batch_of_weight_zero_after_a_merged_fit_keeps_the_merge():
    """It dropped the merged heads (merge_heads_ False), so that the next batch streamed
    at the merged heads' lambda (score -339 on two moons, -1.9 streamed directly)."""
    from sklearn.datasets import make_moons

    M, _ = make_moons(600, noise=0.05, random_state=0)
    direct, est = (AttentionClustering(2, random_state=0).fit(M) for _ in range(2))
    assert est.merge_heads_
    heads, lam = est.heads_.copy(), est.inverse_temperature_
    est.partial_fit(M[100:200], sample_weight=np.zeros(100))
    assert est.merge_heads_ and not hasattr(est, "stream_state_")
    np.testing.assert_array_equal(est.heads_, heads)
    assert est.inverse_temperature_ == lam
    np.testing.assert_array_equal(est.labels_, est.predict(M[100:200]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # the merged heads are dropped
        direct.partial_fit(M[:100])
        est.partial_fit(M[:100])
    assert est.inverse_temperature_ == direct.inverse_temperature_


def test_inertia_of_a_batch_is_in_the_weights_own_scale():
    """Weights of 1e308 overflowed the batch's inertia (refused after the step); float32
    rows with weights of 1e39 gave inf. The stream's unit keeps them finite."""
    for rows, scale in ((X[:500], 1e308), (X[:500].astype(np.float32), 1e39)):
        est = AttentionClustering(3, random_state=0).partial_fit(
            rows, sample_weight=np.full(500, scale))
        ref = AttentionClustering(3, random_state=0).partial_fit(rows)
        assert est.inertia_ == pytest.approx(scale * ref.inertia_, rel=1e-5)

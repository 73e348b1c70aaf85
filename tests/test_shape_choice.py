"""``covariance_type="auto"``: the heads' shape chosen by ICL
(:mod:`attnclust.cluster.mixture.shape_choice`) and the lean EM of its candidates
(:mod:`attnclust.cluster.mixture.em`)."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnclust.cluster.mixture.shape_choice as shape_choice
from _tolerance import assert_labels_off_ties, eps, sum_tol
from attnclust import AttentionClustering
from attnclust.cluster.degenerate import DegenerateFitWarning
from attnclust.cluster.mixture.covariance import Diag, Full, Spherical
from attnclust.cluster.mixture.em import lean_em
from attnclust.cluster.mixture.floor import covariance_floor
from attnclust.cluster.mixture.tempered import shaped_fit
from attnclust.cluster.settings import FitSettings

SEEDS = range(5)


def _rotation(t):
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def _elongated(seed):
    """Three Gaussian sticks (axes 3 and 0.3) on the sides of a triangle: elongated,
    tilted, their ends close to each other's."""
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal((300, 2)) * [3.0, 0.3] @ _rotation(t).T + c
             for t, c in ((0.0, [0, 0]), (np.pi / 3, [5, 0]), (2 * np.pi / 3, [2.5, 4.3]))]
    return np.concatenate(parts), np.repeat(np.arange(3), 300)


def _spherical(K, seed, **params):
    """The spherical fit that ``covariance_type="auto"`` starts from: its seedings."""
    return AttentionClustering(K, covariance_type="spherical",
                               n_init=FitSettings().shape_choice_seedings,
                               random_state=seed, **params)


def _fit(X, K, seed, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(K, covariance_type="auto", random_state=seed,
                                   **params).fit(X)


@pytest.mark.parametrize("seed", SEEDS)
def test_auto_picks_full_on_elongated_gaussian_clusters(seed):
    X, y = _elongated(seed)
    est = _fit(X, 3, seed)
    assert est.covariance_type_ == "full", est.covariance_type_reason_
    assert est.covariances_.shape == (3, 2, 2)
    assert adjusted_rand_score(y, est.labels_) > 0.85      # the sticks' ends overlap
    # and spherical heads cut across them
    spherical = AttentionClustering(3, covariance_type="spherical", random_state=seed).fit(X)
    assert adjusted_rand_score(y, spherical.labels_) < 0.6


@pytest.mark.parametrize("seed", SEEDS)
def test_auto_picks_spherical_on_isotropic_blobs(seed):
    X, y = make_blobs(900, centers=4, cluster_std=1.0, random_state=seed)
    est = _fit(X, 4, seed)
    assert est.covariance_type_ == "spherical", est.covariance_type_reason_
    default = _spherical(4, seed).fit(X)
    # the chosen spherical fit is the spherical fit itself (with the same seedings)
    np.testing.assert_array_equal(est.cluster_centers_, default.cluster_centers_)
    np.testing.assert_array_equal(est.labels_, default.labels_)
    assert not hasattr(est, "covariances_")
    # its lambda, read once the spherical heads are chosen, is the spherical fit's
    assert est.inverse_temperature_ == default.inverse_temperature_
    np.testing.assert_array_equal(est.predict_proba(X), default.predict_proba(X))


def _working(X):
    """The working space of the fit: rows centred, scaled to unit root-mean-square norm."""
    m = X.mean(0)
    s = math.sqrt(float(np.mean(np.sum((X - m) ** 2, axis=1))))
    return (X - m) / s, m, s


def _criteria(X, log_joint, n_parameters):
    """Log-likelihood, entropy of the MAP labels, BIC and ICL from a log-joint (n, K)."""
    lse = logsumexp(log_joint, axis=1)
    ll = float(lse.sum())
    ent = float((lse - log_joint.max(1)).sum())
    bic = -2 * ll + n_parameters * math.log(len(X))
    return {"log_likelihood": ll, "entropy": ent, "bic": bic, "icl": bic + 2 * ent}


def _gaussian_log_joint(X, means, covs, weights, floor):
    """``log pi_h + log N(x; mu_h, Sigma_h) - tr(Sigma_h^{-1} D) / 2`` by Cholesky solves."""
    out = np.empty((len(X), len(means)))
    for h, (m, c, w) in enumerate(zip(means, covs, weights, strict=True)):
        L = np.linalg.cholesky(c)
        z = np.linalg.solve(L, (X - m).T)
        out[:, h] = (math.log(w) - 0.5 * (z * z).sum(0) - np.log(np.diag(L)).sum()
                     - 0.5 * X.shape[1] * math.log(2 * math.pi)
                     - 0.5 * np.trace(np.linalg.solve(c, np.diag(floor))))
    return out


def _log_joint_tol(X, means, covs):
    """Allowed difference (n, ) of the largest log-joint between the library's expanded
    quadratic forms (``x^T P x - 2 mu^T P x + mu^T P mu`` on the working rows, or whitened
    rows from one product) and the Cholesky solves above: ``(d + 2) eps kappa (||x|| +
    ||mu||)^2 lambda_max(P)`` in the working space (the squared-distance bound of
    ``_tolerance.sq_dist_tol`` in the metric ``P``, times the condition number ``kappa``
    of ``Sigma`` for its inverse), plus ``d eps kappa`` for the log-determinant."""
    Xw, m, s = _working(X)
    d = X.shape[1]
    bound = np.zeros((len(X), len(means)))
    for h, (mu, c) in enumerate(zip(means, covs, strict=True)):
        ev = np.linalg.eigvalsh(c / (s * s))
        kappa = ev[-1] / ev[0]
        a = np.linalg.norm(Xw, axis=1) + np.linalg.norm((mu - m) / s)
        bound[:, h] = (d + 2) * eps() * kappa * (a * a / ev[0] + d)
    return bound.max(1)


def _assert_criteria(recorded, expected, tol_ll, n):
    for key in ("log_likelihood", "entropy"):
        assert recorded[key] == pytest.approx(expected[key], abs=2 * tol_ll), key
    for key in ("bic", "icl"):
        assert recorded[key] == pytest.approx(expected[key], abs=8 * tol_ll), key
    assert recorded["n_rows"] == n


@pytest.mark.parametrize("seed", [0, 3])
def test_recorded_criteria_are_the_chosen_mixtures(seed):
    """The recorded criteria of the chosen full mixture, recomputed from its fitted
    attributes with Cholesky solves; those of the spherical candidate from the default
    fit's partition (one variance per head, the documented floor); the choice is their
    lowest ICL and the reason lists them."""
    X, _ = _elongated(seed)
    n, d, K = X.shape[0], X.shape[1], 3
    est = _fit(X, K, seed)
    crit = est.covariance_type_criteria_
    assert set(crit) == {"spherical", "diag", "full"}
    # full: the estimator's own attributes
    lj = _gaussian_log_joint(X, est.cluster_centers_, est.covariances_, est.weights_,
                             est.covariance_floor_)
    expected = _criteria(X, lj, K * (d + d * (d + 1) // 2) + K - 1)
    tol = float(_log_joint_tol(X, est.cluster_centers_, est.covariances_).sum()) \
        + sum_tol(n) * float(np.abs(logsumexp(lj, axis=1)).sum())
    _assert_criteria(crit["full"], expected, tol, n)
    # spherical: the default fit's partition, read as a mixture
    labels = _spherical(K, seed).fit(X).labels_
    variances = X.var(0)
    floor = 1e-6 * np.maximum(variances, 1e-10 * variances.mean())
    means = np.stack([X[labels == h].mean(0) for h in range(K)])
    spread = np.array([np.mean(np.sum((X[labels == h] - means[h]) ** 2, 1)) / d
                       for h in range(K)]) + floor.mean()
    covs = spread[:, None, None] * np.eye(d)
    weights = np.bincount(labels, minlength=K) / n
    lj = _gaussian_log_joint(X, means, covs, weights, np.full(d, floor.mean()))
    expected = _criteria(X, lj, K * d + K + K - 1)
    tol = float(_log_joint_tol(X, means, covs).sum()) \
        + sum_tol(n) * float(np.abs(logsumexp(lj, axis=1)).sum())
    _assert_criteria(crit["spherical"], expected, tol, n)
    # the choice and its reason
    eligible = {k: v for k, v in crit.items() if not v["at_floor"]}
    assert est.covariance_type_ == min(eligible, key=lambda k: eligible[k]["icl"])
    assert est.covariance_type_reason_.startswith(f"{est.covariance_type_}: lowest ICL")
    for name, values in crit.items():
        assert f"{name} {values['icl']:.6g}" in est.covariance_type_reason_


def test_lean_em_is_the_chunked_em_step_for_step():
    """From the same partition, floor and number of steps (no stopping rule), the lean EM
    and :func:`attnclust.cluster.mixture.tempered.shaped_fit` reach the same mixture: the same sums,
    formed about the origin in one and about the current means in the other, whose
    difference relative to the smallest covariance is at most ``n eps max ||x||^2 /
    lambda_min`` per step."""
    X, _ = _elongated(1)
    Xw, _, _ = _working(X)
    heads = np.stack([Xw[:300].mean(0), Xw[300:600].mean(0), Xw[600:].mean(0)])
    labels = ((Xw[:, None] - heads[None]) ** 2).sum(-1).argmin(1)
    floor = covariance_floor(torch.tensor(Xw.var(0)), 1e-6)
    steps = 5
    for cov in (Diag(), Full()):
        lean = lean_em(Xw, labels, 3, cov, floor.numpy(), tol=-np.inf, max_iter=steps)
        ref = shaped_fit(torch.tensor(Xw), torch.tensor(heads), covariance_type=cov,
                         n_steps=steps, tol=-np.inf)
        covs = lean.covariances if cov == Diag() else np.linalg.eigvalsh(lean.covariances)
        smallest = float(np.min(covs))
        tol = steps * len(Xw) * eps() * float((Xw * Xw).sum(1).max()) / smallest
        assert lean.n_iter == ref.n_iter == steps
        np.testing.assert_allclose(lean.means, ref.means.numpy(), atol=tol)
        np.testing.assert_allclose(lean.covariances, ref.covariances.numpy(),
                                   atol=tol * smallest)
        np.testing.assert_allclose(lean.weights, ref.weights.numpy(), atol=tol)
        np.testing.assert_allclose(lean.loss_curve[-1], ref.loss_curve[-1],
                                   atol=tol + sum_tol(len(Xw)) * abs(ref.loss_curve[-1]))


def test_choice_on_a_sample_fits_the_chosen_shape_on_all_rows():
    X, y = _elongated(2)
    est = _fit(X, 3, 2, settings=FitSettings(choice_rows=400))
    assert est.covariance_type_ == "full"
    assert "on 400 rows" in est.covariance_type_reason_
    assert est.labels_.shape == (900,) and adjusted_rand_score(y, est.labels_) > 0.85
    assert all(v["n_rows"] == 400 for v in est.covariance_type_criteria_.values())


def _sticks(seed, per):
    """Three Gaussian sticks as :func:`_elongated`, ``per`` rows each."""
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal((per, 2)) * [3.0, 0.3] @ _rotation(t).T + c
             for t, c in ((0.0, [0, 0]), (np.pi / 3, [5, 0]), (2 * np.pi / 3, [2.5, 4.3]))]
    return np.concatenate(parts), np.repeat(np.arange(3), per)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_choice_on_a_sample_is_the_choice_on_all_rows(seed):
    """Clear cases (sticks: full; round blobs: spherical) with more than
    ``settings.choice_rows`` rows choose on the sample what they choose on all rows. The
    spherical fit is the default fit, bit for bit; the shaped one, EM on all rows from the
    sample's fit, reaches the optimum the all-rows candidate reached from the default
    partition: the same labels off ties, the same mean log-likelihood within the stopping
    rule's reach (each stops at a step that gains less than ``tol`` = 1e-3 per row; at EM's
    rate here, below 0.5 a step, what is left to gain is below another ``tol``)."""
    assert FitSettings().choice_rows == 2_000
    X, _ = _sticks(seed, 800)
    blobs, _ = make_blobs(2400, centers=4, cluster_std=1.0, random_state=seed)
    sampled = [_fit(X, 3, seed), _fit(blobs, 4, seed)]
    every = FitSettings(choice_rows=10**6)
    whole = [_fit(X, 3, seed, settings=every), _fit(blobs, 4, seed, settings=every)]
    assert [e.covariance_type_ for e in sampled] == [e.covariance_type_ for e in whole] \
        == ["full", "spherical"]
    assert "on 2000 rows" in sampled[0].covariance_type_reason_
    assert "on 2400 rows" in whole[0].covariance_type_reason_
    np.testing.assert_array_equal(sampled[1].labels_, whole[1].labels_)
    np.testing.assert_array_equal(sampled[1].cluster_centers_, whole[1].cluster_centers_)
    a, b = sampled[0], whole[0]
    assert abs(a.score(X) - b.score(X)) < 2 * 1e-3
    assert_labels_off_ties(a.labels_, b.labels_, np.log(a.predict_proba(X)),
                           np.log(b.predict_proba(X)))


@pytest.mark.parametrize("seed", [0, 2])
def test_a_stopped_candidate_run_to_convergence_is_not_chosen_either(seed):
    """A cross of two sticks with one mean: diag follows the sticks, full's EM is stopped
    early (its projected ICL bound above diag's). Run on independently to convergence
    from the same partition and floor, full's ICL is still above the chosen diag's, and
    the recorded criteria of the stopped iterate are above it too. (The default
    partition's start only: the density core's is tested in test_candidate_em.py.)"""
    rng = np.random.default_rng(103 + seed)
    X = np.r_[rng.normal(size=(500, 2)) * [4.0, 0.3],
              (rng.normal(size=(500, 2)) * [4.0, 0.3]) @ _rotation(np.pi / 2).T]
    est = _fit(X, 2, seed, settings=FitSettings(rows_per_parameter=math.inf))
    crit = est.covariance_type_criteria_
    assert est.covariance_type_ == "diag", est.covariance_type_reason_
    assert crit["full"]["stopped"] and not crit["diag"]["stopped"]
    assert "full stopped before convergence" in est.covariance_type_reason_
    assert crit["full"]["icl"] > crit["diag"]["icl"]
    Xw, _, s = _working(X)
    labels = _spherical(2, seed).fit(X).labels_
    floor = covariance_floor(torch.tensor(Xw.var(0)), 1e-6).numpy()
    full = lean_em(Xw, labels, 2, Full(), floor, max_iter=1000)
    assert full.converged
    n, d = X.shape
    lj = full.log_joint.T - d * math.log(s)              # (n, K), data units
    icl_full = _criteria(X, lj, Full().n_parameters(2, d))["icl"]
    # rounding of the sums: far below the gap (thousands)
    tol = 8 * sum_tol(n) * float(np.abs(logsumexp(lj, axis=1)).sum())
    assert icl_full > crit["diag"]["icl"] + tol


def test_costly_candidates_are_not_tried():
    # full: 900 rows x 3 heads x 4 entries = 10,800 numbers; diag: 5,400
    est = _fit(_elongated(0)[0], 3, 0, settings=FitSettings(choice_numbers=6_000))
    assert set(est.covariance_type_criteria_) == {"spherical", "diag"}
    assert "not tried (full)" in est.covariance_type_reason_


@pytest.mark.parametrize("constant", [False, True, "sum"])
def test_the_chunked_choice_agrees_with_the_lean_one(constant):
    """Rows on several ranks or a device take the chunked solver: the same choice, the
    same criteria to the EM's tolerance (both stop where a step gains less than ``tol``
    per row, so their log-likelihoods differ by less than ``tol`` per row); beside a
    constant column, or the sum of the two columns, too, which both leave out of the
    criteria (full on the sticks)."""
    from attnclust.cluster.communicator import Communicator
    from attnclust.cluster.plan import resolve
    from attnclust.cluster.rows import WorkingRows
    from attnclust.layer.geometry import as_geometry

    X, _ = _elongated(4)
    if constant:
        X = np.column_stack([X, X.sum(1) if constant == "sum" else np.full(len(X), 7.0)])
    rows = WorkingRows.prepare(X, geometry=as_geometry("euclidean"),
                               comm=Communicator.local(len(X)))
    plan = resolve(AttentionClustering(3, covariance_type="auto").get_params()).with_clusters(3)
    heads = torch.as_tensor(_working(X)[0][[0, 300, 600]])
    labels = ((rows.read(0, len(X))[:, None] - heads[None]) ** 2).sum(-1).argmin(1).numpy()
    log_scale = math.log(rows.scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lean, _ = shape_choice.choose_lean(rows, labels, plan, log_scale, len(X))
        chunked, _ = shape_choice._choose_chunked(rows, labels, heads, plan, log_scale,
                                                  len(X))
    least = min(lean.scores, key=lambda score: score.icl).covariance   # (the lean choice
    assert least == chunked.covariance == Full()        # then checks its valley as well)
    assert not any(score.at_floor for score in chunked.scores)
    for a, b in zip(lean.scores, chunked.scores, strict=True):
        assert a.covariance == b.covariance
        tol = 1e-3 * len(X) if a.covariance.shaped else sum_tol(len(X)) * abs(a.log_likelihood)
        assert a.log_likelihood == pytest.approx(b.log_likelihood, abs=tol)


def test_shapes_are_chosen_for_the_default_fit_only():
    X, _ = _elongated(0)
    est = _fit(X, 3, 0, inverse_temperature=2.0)
    assert est.covariance_type_ == "spherical"
    assert est.covariance_type_reason_.startswith("spherical: shapes are chosen for the "
                                                  "default fit only")
    assert est.covariance_type_criteria_ == {}
    given = AttentionClustering(3, covariance_type="spherical", random_state=0).fit(X)
    assert (given.covariance_type_, given.covariance_type_reason_) == ("spherical", "given")
    # the default is "auto": with a given lambda it is the spherical fit, exactly
    default = AttentionClustering(3, inverse_temperature=2.0, random_state=0).fit(X)
    spherical = AttentionClustering(3, covariance_type="spherical", inverse_temperature=2.0,
                                    random_state=0).fit(X)
    np.testing.assert_array_equal(default.cluster_centers_, spherical.cluster_centers_)
    assert default.covariance_type_reason_.startswith("spherical: shapes are chosen")
    full = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    assert (full.covariance_type_, full.covariance_type_reason_) == ("full", "given")


def test_a_candidate_at_the_floor_is_left_out():
    """A column constant within each cluster puts a diagonal or full head at the floor,
    whose likelihood is then the floor's: that candidate is not chosen."""
    rng = np.random.default_rng(0)
    X, y = make_blobs(600, centers=3, cluster_std=1.0, random_state=0)
    X = np.column_stack([X, y.astype(float)])       # constant within each cluster
    est = _fit(X, 3, 0)
    crit = est.covariance_type_criteria_
    assert crit["diag"]["at_floor"] and crit["full"]["at_floor"]
    assert crit["diag"]["icl"] < crit["spherical"]["icl"]      # it would have won
    assert est.covariance_type_ == "spherical"
    assert "left out" in est.covariance_type_reason_
    del rng


@pytest.mark.parametrize("seed", range(3))
def test_a_column_without_spread_changes_no_choice(seed):
    """A column constant over all rows, or below the floor's resolution, puts every head
    at the floor along it as it puts the rows: no head's degeneracy, and no likelihood a
    spherical head can match. The choice reads the other features: the shape, and the
    partition, of the rows without it (elongated sticks: full; round blobs: spherical),
    where it left diag and full out, or chose them on any data."""
    rng = np.random.default_rng(seed)
    for (X, _), K in ((_elongated(seed), 3),
                      (make_blobs(600, centers=3, cluster_std=1.0, random_state=seed), 3)):
        plain = _fit(X, K, seed)
        for column in (np.full(len(X), 7.0), 1e-9 * rng.standard_normal(len(X))):
            est = _fit(np.column_stack([X, column]), K, seed)
            assert est.covariance_type_ == plain.covariance_type_, est.covariance_type_reason_
            assert adjusted_rand_score(plain.labels_, est.labels_) == 1.0
            assert not any(c["at_floor"] for c in est.covariance_type_criteria_.values())


def _iris_beside(column: str, seed: int):
    """Nine tenths of iris's rows, beside a column the others determine: the sum of two,
    or a copy of one."""
    from sklearn.datasets import load_iris

    data = load_iris()
    take = np.random.default_rng(seed).choice(150, 135, replace=False)
    X, y = data.data[take], data.target[take]
    extra = X[:, 0] + X[:, 2] if column == "sum" else X[:, 2]
    return np.column_stack([X, extra]), y, X


@pytest.mark.parametrize("column", ["sum", "copy"])
@pytest.mark.parametrize("seed", range(3))
def test_a_column_the_others_determine_changes_no_choice(column, seed):
    """Along a combination of columns the rows do not spread on (a sum, a copy), every
    full head sits at the floor as the rows do: full was left out as degenerate, and the
    diag fit kept (iris: ARI 0.73 with a sum column, 0.77 with a copy, where full gets
    0.92 without it). The criteria read the columns the rows span, less those the
    others determine: full, as without the column, and no warning."""
    X, y, plain = _iris_beside(column, seed)
    without = _fit(plain, 3, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        est = _fit(X, 3, seed)
    assert est.covariance_type_ == without.covariance_type_ == "full"
    assert not any(c["at_floor"] for c in est.covariance_type_criteria_.values())
    assert adjusted_rand_score(y, est.labels_) > 0.85


def test_rows_embedded_in_more_dimensions_than_they_span():
    """Elongated sticks in 2-D mapped linearly into 20 columns (rank 2): full heads sat
    at the floor along the 18 directions the rows do not spread in, and diag was kept
    (ARI 0.69 over 10 draws, full 0.93). The criteria read 2 of the 20 columns."""
    X, y = _elongated(1)
    mapped = X @ np.random.default_rng(1).normal(size=(X.shape[1], 20))
    est = _fit(mapped, 3, 1)
    assert est.covariance_type_ == "full"
    assert adjusted_rand_score(y, est.labels_) > 0.85


def test_the_mixture_spans_the_columns_the_rows_span():
    """:func:`spanned_features` reads the rows' covariance off a fitted mixture of full
    heads (the heads' covariances less the floor and their means' spread, weighted):
    the features of :func:`full_rank_features` of the rows' own covariance."""
    from attnclust.cluster.mixture.floor import full_rank_features, spanned_features

    X, _, _ = _iris_beside("sum", 0)
    est = AttentionClustering(3, covariance_type="full", random_state=0).fit(X)
    read = spanned_features(est.cluster_centers_, est.covariances_, est.weights_,
                            est.covariance_floor_, 1e-6)
    own = full_rank_features(np.cov(X.T, bias=True), np.ones(X.shape[1], bool), 1e-6)
    assert read.tolist() == own.tolist() == [True] * 4 + [False]


def test_a_column_without_spread_stops_no_candidate_early():
    """The early stop reads every feature; beside a constant column it would compare an
    ICL with the column against the spherical one without: on sticks in units of 1e9
    (the column's term then raises a shaped ICL) full was stopped and spherical chosen."""
    X, _ = _elongated(0)
    X = X * 1e9
    plain = _fit(X, 3, 0)
    est = _fit(np.column_stack([X, np.full(len(X), 7.0)]), 3, 0)
    assert plain.covariance_type_ == est.covariance_type_ == "full"
    assert not any(c["stopped"] for c in est.covariance_type_criteria_.values())


def test_a_given_shape_does_not_warn_of_a_column_without_spread():
    """Diag or full heads given, beside a constant column: no head is degenerate."""
    X, _ = _elongated(0)
    X = np.column_stack([X, np.full(len(X), 7.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateFitWarning)
        for shape in ("diag", "full"):
            AttentionClustering(3, covariance_type=shape, random_state=0).fit(X)


def test_predictions_follow_the_chosen_shape():
    X, _ = _elongated(0)
    est = _fit(X, 3, 0)
    assert est.covariance_type_ == "full"
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=10 * eps())
    # the score is the mixture's log-likelihood; the fit's loss also carries the covariance
    # floor's -tr(P_h D) / 2, so the two differ by between its least and largest half-trace
    t = np.einsum("hjj,j->h", est.precisions_, est.covariance_floor_) / 2
    gap, slack = est.score(X) + est.loss_curve_[-1], 1e-6 * abs(est.loss_curve_[-1])
    assert t.min() - slack <= gap <= t.max() + slack


def test_sample_weight_in_the_choice():
    # integer weights choose as repeated rows do (the same default fit from the same
    # heads is not guaranteed: compare the choice and the criteria's log-likelihood);
    # the choice of the K-head fit, not the merge of heads after it, whose draws (of the
    # repeated rows' law) merge these sticks on some seeds and not on others
    X, _ = _elongated(3)
    counts = np.random.default_rng(0).integers(1, 3, len(X))
    weighted = _fit(X, 3, 0, init="anneal", merge_heads=False).fit(X, sample_weight=counts)
    assert weighted.covariance_type_ == "full"
    assert Spherical().n_parameters(3, 2) == weighted.covariance_type_criteria_[
        "spherical"]["n_parameters"]


@parametrize_with_checks([AttentionClustering(covariance_type="auto", max_iter=20)],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "k-means++ draws its seeds among the rows, so repeated "
                                 "rows change the draws (as in the default fit)")})
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


@pytest.mark.parametrize("lean_rows", [10_000, 1_000])    # the lean EM, the chunked one
@pytest.mark.parametrize("seed", [0, 1, 2])    # seeds whose 2,000-row sample misses the far row
def test_a_shape_the_sample_chose_that_fails_on_all_rows_is_not_kept(seed, lean_rows):
    """12 blobs in 5-D and one row at 1e6: on a sample without that row full heads win,
    but fitted on all rows one head holds the far row alone, at the covariance floor (the
    blobs merge into the others). The fit checks the choice on all rows and keeps the
    spherical fit, the reason saying why."""
    gen = np.random.default_rng(1)
    centres = gen.uniform(-20, 20, (12, 5))
    X = np.concatenate([centres[gen.integers(0, 12, 6000)] + gen.normal(size=(6000, 5)),
                        [[1e6] * 5]])
    est = _fit(X, 12, seed, settings=FitSettings(lean_rows=lean_rows))
    assert est.covariance_type_ == "spherical"
    assert est.covariance_type_reason_.startswith(
        "spherical: full was chosen on a sample of 2000 rows, but its fit on all 6001 rows")
    assert est.covariance_type_criteria_["full"]["n_rows"] == 2000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spherical = _spherical(12, seed).fit(X)
    np.testing.assert_array_equal(est.cluster_centers_, spherical.cluster_centers_)
    np.testing.assert_array_equal(est.labels_, spherical.labels_)


def test_a_shape_too_costly_to_fit_on_all_rows_is_not_tried():
    """The rows of the choice are a sample of 2,000, but the chosen shape is fitted on all
    rows: a shape whose fit there would pass more than ``settings.fit_numbers`` numbers is
    left out. Sticks, 3 x 1,000 rows: full (3 heads x 4 entries) handles 36,000 numbers per
    pass on all rows, diag 18,000."""
    rng = np.random.default_rng(0)
    turns = [np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
             for t in (0.0, np.pi / 3, 2 * np.pi / 3)]
    X = np.concatenate([rng.normal(size=(1000, 2)) * [3.0, 0.3] @ u + c
                        for u, c in zip(turns, ([0, 0], [5, 0], [2.5, 4.3]), strict=True)])
    est = _fit(X, 3, 0, settings=FitSettings(fit_numbers=20_000))
    assert set(est.covariance_type_criteria_) == {"spherical", "diag"}
    assert "not tried (full)" in est.covariance_type_reason_
    assert est.covariance_type_criteria_["diag"]["n_rows"] == 2000    # chosen on the sample


def _radial_pair(seed, d=8, sep=1.5, n=1000):
    """Two clusters of rows at a Gaussian-distributed distance, in a uniform direction,
    from centres ``sep`` apart: a density peaked at each centre, with wide tails."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    y = np.repeat([0, 1], n // 2)
    return rng.standard_normal((n, 1)) * u + sep * np.eye(d)[0] * y[:, None], y


@pytest.mark.parametrize("seed", range(2))
def test_a_shaped_fit_that_parts_cores_from_tails_falls_back_to_spherical(seed, monkeypatch):
    """Diagonal heads on the cores and on the tails beat two clusters on ICL (ARI about
    0); the valley between the spherical cells turns them down for the spherical fit."""
    from attnclust.cluster.mixture import valley

    X, y = _radial_pair(seed)
    est = _fit(X, 2, seed)
    assert est.covariance_type_ == "spherical"
    assert "cores from tails" in est.covariance_type_reason_
    assert adjusted_rand_score(y, est.labels_) > 0.8
    monkeypatch.setattr(shape_choice, "cores_from_tails", lambda *a, **k: False)
    collapsed = _fit(X, 2, seed)
    assert collapsed.covariance_type_ != "spherical"
    assert adjusted_rand_score(y, collapsed.labels_) < 0.2
    assert valley.cores_from_tails(X, est.labels_, collapsed.labels_)


@pytest.mark.parametrize("d, sep", [(2, 0.8), (4, 0.7), (8, 0.5)])
def test_radial_clusters_a_spread_apart_keep_the_spherical_cells(d, sep):
    """The same clusters with their centres 0.5-0.8 times the spread of their distances
    apart (the held-out benchmarks' family at its widest spreads): the rows projected on
    the segment between the cells (the earlier guard) showed no valley, and the shaped
    fit parted cores from tails (ARI 0); the tube's density does, on every seed."""
    for seed in range(3):
        X, y = _radial_pair(seed, d=d, sep=sep, n=2000)
        est = _fit(X, 2, seed)
        spherical = _spherical(2, seed).fit(X)
        assert "cores from tails" in est.covariance_type_reason_      # the guard's doing
        assert adjusted_rand_score(y, est.labels_) > 0.25
        assert adjusted_rand_score(est.labels_, spherical.labels_) > 0.9


def test_a_core_beside_half_a_ring_is_no_valley():
    """A dense disk inside a ring: the spherical cells each hold half the ring, one of them
    the disk too; along their segment the disk is one peak, which the ring's half (spread
    around the tube) does not match. The earlier guard saw a valley there and turned the
    shaped fit (ARI 1) down for the spherical one (ARI 0.2)."""
    from attnclust.cluster.mixture.valley import cores_from_tails

    rng = np.random.default_rng(1)
    t = rng.uniform(0, 2 * np.pi, 400)
    ring = 3 * np.c_[np.cos(t), np.sin(t)] * (1 + 0.03 * rng.standard_normal((400, 1)))
    X, y = np.r_[0.3 * rng.standard_normal((400, 2)), ring], np.repeat([0, 1], 400)
    for seed in range(3):
        halves = _spherical(2, seed).fit(X).labels_
        assert adjusted_rand_score(y, halves) < 0.3
        assert not cores_from_tails(X, halves, y)


@pytest.mark.parametrize("seed", range(2))
def test_elongated_and_nested_clusters_have_no_valley(seed):
    """The shaped fits that must stay: sticks touching at their ends, a ball in a shell;
    the spherical cells cut them with no valley of density between the cells."""
    from attnclust.cluster.mixture.valley import cores_from_tails

    rng = np.random.default_rng(seed)
    u = rng.normal(size=(400, 3))
    shell = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.normal(4, 0.3, 400)[:, None]
    nested = np.r_[rng.normal(0, 0.5, (400, 3)), shell], np.repeat([0, 1], 400)
    for X, y in (_elongated(seed), nested):
        est = _fit(X, len(set(y)), seed, merge_heads=False)   # the shape choice (the ball
        assert est.covariance_type_ != "spherical"              # and shell may merge heads)
        spherical = _spherical(len(set(y)), seed).fit(X)
        assert not cores_from_tails(X, spherical.labels_, est.labels_)

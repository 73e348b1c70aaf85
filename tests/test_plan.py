"""The settings of a fit resolved once (``attnclust.cluster.plan``): the ``"auto"`` values, the
plan kept by the fitted estimator, the stream's public seam, and ``tol`` as documented."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

import attnclust as ac
from _tolerance import assert_same_labels, near_ties, sum_tol
from attnclust import AttentionClustering
from attnclust.cluster.kmeans import KMEANS_TOL
from attnclust.cluster.plan import SHAPED_TOL, FitPlan, resolve
from attnclust.cluster.settings import FitSettings
from attnclust.layer.geometry import Euclidean, Sphere

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnclust"


def _plan(**params) -> FitPlan:
    return resolve(AttentionClustering(**params).get_params())


def test_auto_values_resolve_by_ending_geometry_and_covariance():
    default = _plan()
    assert default.hard and default.tol == KMEANS_TOL == default.kmeans_tol
    # seven seedings where the fit chooses its shape (the default), ten for spherical heads
    assert (default.n_init, default.inverse_temperature, default.normalize) == \
        (FitSettings().shape_choice_seedings, None, None)
    assert _plan(covariance_type="spherical").n_init == 10
    assert _plan(covariance_type="spherical", n_init=7).n_init == 7
    assert _plan(penalty="balance").n_init == 10          # no shape to choose
    soft = _plan(inverse_temperature=2.0)
    assert not soft.hard and soft.tol == Euclidean.tol and soft.inverse_temperature == 2.0
    assert soft.kmeans_tol == KMEANS_TOL                 # the warm start keeps KMeans's rule
    sphere = _plan(geometry="sphere")
    assert (sphere.tol, sphere.normalize, sphere.n_init) == (Sphere.tol, "rows", 1)
    assert sphere.stages_at(8.0) == ([1.0, 2.0, 4.0, 8.0], [5, 5, 5, 300])
    shaped = _plan(covariance_type="diag")
    assert (shaped.hard, shaped.tol, shaped.n_init, shaped.inverse_temperature) \
        == (False, SHAPED_TOL, 1, 1.0)
    assert _plan(init="anneal").n_init == 1 and _plan(n_clusters="auto").n_clusters is None
    given = _plan(tol=0.25, n_init=3)
    assert (given.tol, given.kmeans_tol, given.n_init, given.n_init_auto) == (0.25, 0.25, 3, False)


def test_a_plan_is_immutable_and_kept_by_the_fit():
    plan = _plan(n_clusters=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tol = 1.0
    assert plan.with_clusters(5).n_clusters == 5 and plan.n_clusters == 2
    X = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.1).sample(200, rng=0)
    est = AttentionClustering(2, random_state=0).fit(X)
    est.set_params(normalize="rows", geometry="sphere")      # predictions keep the fit's
    # the fit's labels and predict's come from different passes: equal off rounding ties
    assert_same_labels(est.predict(X), est.labels_, X, est.cluster_centers_)


def test_fit_predict_and_partial_fit_never_call_get_params(monkeypatch):
    X = ac.GaussianMixture.orthogonal(d=4, k=3, sigma=0.1).sample(600, rng=0)
    ests = [AttentionClustering(3, random_state=0), AttentionClustering(3, geometry="sphere"),
            AttentionClustering(3, covariance_type="full", random_state=0)]

    def refused(self, deep=True):
        raise AssertionError("get_params called")
    monkeypatch.setattr(AttentionClustering, "get_params", refused)
    for est in ests:
        est.fit(X).predict(X)
        est.score(X)
    stream = AttentionClustering(3, random_state=0)
    for start in range(0, 600, 200):
        stream.partial_fit(X[start:start + 200])
    stream.predict(X)


def test_streaming_calls_no_private_method_of_the_estimator():
    tree = ast.parse((PACKAGE / "cluster" / "streaming.py").read_text())
    private = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Name) and node.value.id == "est"
               and node.attr.startswith("_")]
    assert private == []


# -- tol -----------------------------------------------------------------------------------------
def _overlapping(n_per: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.standard_normal((n_per, 2)) + c
                           for c in ([0.0, 0.0], [1.5, 0.0], [0.7, 1.3])])


def _fit(X, tol, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AttentionClustering(3, covariance_type="spherical", random_state=0, n_init=1,
                                   tol=tol, **kw).fit(X)


@pytest.mark.parametrize("n_per", [1_000, 20_000])   # the sample is every row / 768 of them
def test_a_looser_tol_stops_the_hard_ending_earlier(n_per):
    X = _overlapping(n_per)
    fits = [_fit(X, tol) for tol in ("auto", 1e-2, 1.0)]
    assert all(np.isinf(f.inverse_temperature_curve_).all() for f in fits)   # the hard limit
    n_iter = [f.n_iter_ for f in fits]
    assert n_iter[0] > n_iter[1] > n_iter[2] >= 1
    assert fits[0].loss_curve_[-1] <= fits[1].loss_curve_[-1] <= fits[2].loss_curve_[-1]
    # "auto" is KMeans's 1e-4: the same fit as tol=1e-4 given
    np.testing.assert_array_equal(_fit(X, KMEANS_TOL).cluster_centers_,     # same operations
                                  fits[0].cluster_centers_)


def _lloyd_until(X, heads, tol, steps):
    """Lloyd's steps from ``heads`` (reached after ``steps`` steps), stopping as the ``tol``
    docstring says: at the first step that moves the heads by a sum of squares of at most
    ``tol`` times the rows' mean variance per feature (or changes no label)."""
    bound, previous = tol * X.var(0).mean(), None
    while True:
        labels = ((X[:, None] - heads[None]) ** 2).sum(-1).argmin(1)
        new = np.stack([X[labels == h].mean(0) for h in range(len(heads))])
        steps += 1
        if previous is not None and (labels == previous).all():
            return heads, steps
        moved, heads, previous = ((new - heads) ** 2).sum(), new, labels
        if moved <= bound:
            return heads, steps


@pytest.mark.parametrize("tol", [KMEANS_TOL, 1e-2, 1e-1])
def test_tol_of_the_hard_ending_is_kmeans_rule(tol):
    """From the heads of one Lloyd step (a tolerance no step misses), Lloyd's steps with the
    docstring's rule give the fit's heads and step count."""
    X = _overlapping(1_000)
    one = _fit(X, 1e9)
    assert one.n_iter_ == 1
    heads, steps = _lloyd_until(X, one.cluster_centers_, tol, one.n_iter_)
    fit = _fit(X, tol)
    assert fit.n_iter_ == steps
    # both take the means of the same cells (no row within rounding of a tie), in other
    # orders; the fit's per-cell sums are updated over its steps: (steps + 1) sums of n rows
    assert not near_ties(X, heads).any()
    np.testing.assert_allclose(fit.cluster_centers_, heads, rtol=0,
                               atol=(steps + 1) * sum_tol(len(X)) * np.abs(X).max())


def test_the_batch_size_warning_points_at_the_callers_line():
    X = np.random.default_rng(0).standard_normal((100, 3))
    with pytest.warns(FutureWarning, match="batch_size as the rows per chunk") as record:
        AttentionClustering(2, batch_size=50, random_state=0).fit(X)
        AttentionClustering(2, batch_size=50, random_state=0).partial_fit(X)
    assert [w.filename for w in record] == [__file__, __file__]

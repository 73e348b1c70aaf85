"""The tuning settings of a fit's choices: :class:`attnclust.cluster.settings.FitSettings`."""

import ast
import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

import attnclust as ac
from attnclust.cluster import warm_start
from attnclust.cluster.plan import resolve
from attnclust.cluster.settings import FitSettings, MergeSettings


def _documented_defaults(doc: str = FitSettings.__doc__) -> dict:
    """``name : type, default=VALUE`` of the class docstring's parameters, evaluated."""
    found = re.findall(r"^    (\w+) : [^\n]*?, default=([^\n]+)$", doc, re.M)
    return {name: ast.literal_eval(value.strip()) for name, value in found}


def test_every_field_is_documented_with_its_default():
    documented = _documented_defaults()
    fields = {f.name: f.default for f in dataclasses.fields(FitSettings)}
    assert set(documented) == set(fields)
    assert documented == fields
    assert FitSettings() == FitSettings(**documented)


def test_the_documentation_check_can_fail():
    doc = "    warm_sample : int, default=20_000\n    per_head : int, default=265\n"
    assert _documented_defaults(doc) == {"warm_sample": 20_000, "per_head": 265}
    assert _documented_defaults(doc)["per_head"] != FitSettings().per_head


@pytest.mark.parametrize("change, message", [
    (dict(warm_sample=0), "warm_sample must be an integer >= 1, got 0"),
    (dict(per_head=2.5), "per_head must be an integer >= 1, got 2.5"),
    (dict(choice_rows=True), "choice_rows must be an integer >= 1, got True"),
    (dict(stop_steps=-1), "stop_steps must be an integer >= 1, got -1"),
    (dict(rows_per_parameter=0), r"rows_per_parameter must be a number > 0 \(inf: never\)"),
    (dict(merge_share=0.0), r"merge_share must be a number in \(0, 1\], got 0.0"),
    (dict(min_moved=1.5), r"min_moved must be a number in \[0, 1\], got 1.5"),
    (dict(early_level=1.0), r"early_level must be a number in \(0, 1\), got 1.0"),
    (dict(confident=math.nan), r"confident must be a number in \[0, 1\], got nan"),
    (dict(structure_z=-1.0), r"structure_z must be a number in \[0, inf\), got -1.0"),
    (dict(looks=(10, 4)), r"looks must be increasing integers in \[2, n_references\)"),
    (dict(looks=(4, 20)), r"= \[2, 20\), got \(4, 20\)"),
    (dict(looks=4), "looks must be increasing integers"),
    (dict(strong_evidence=1.0), r"strong_evidence must be at least bare_mention \(2.0\)"),
])
def test_bad_values_raise_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        FitSettings(**change)


def test_settings_are_frozen_and_hashable():
    settings = FitSettings(looks=[3, 6])
    assert settings.looks == (3, 6)             # a list becomes a tuple: hashable
    assert hash(settings) == hash(FitSettings(looks=(3, 6)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.warm_sample = 5
    assert FitSettings(rows_per_parameter=math.inf).rows_per_parameter == math.inf


def test_get_params_set_params_and_clone_keep_the_settings():
    small = FitSettings(warm_sample=300, choice_rows=400)
    est = ac.AttentionClustering(3, settings=small)
    assert est.get_params()["settings"] is small
    copy = clone(est)
    assert copy.settings == small and copy.settings is not small      # deep-copied
    assert clone(ac.AttentionClustering(3)).settings is None
    est.set_params(settings=FitSettings(per_head=64))
    assert est.get_params()["settings"].per_head == 64


def test_the_plan_carries_the_resolved_settings():
    assert resolve(ac.AttentionClustering(3).get_params()).settings == FitSettings()
    small = FitSettings(shape_choice_seedings=2)
    plan = resolve(ac.AttentionClustering(3, settings=small).get_params())
    assert plan.settings is small and plan.n_init == 2      # n_init="auto" reads it


def test_settings_of_another_type_raise():
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match="settings must be None or a FitSettings, got"):
        ac.AttentionClustering(2, settings={"warm_sample": 10}).fit(X)


def _blobs(n=400):
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    return centres[rng.integers(0, 3, n)] + rng.normal(size=(n, 2))


def test_a_small_warm_sample_is_the_sample_the_fit_starts_on(monkeypatch):
    """The warm start's k-means runs on ``warm_sample`` rows, then the passes over all rows
    take the fit to the same partition of these separated blobs."""
    seen = []
    real = warm_start.sample_kmeans
    monkeypatch.setattr(warm_start, "sample_kmeans", lambda rows, *a, **k: seen.append(
        rows.shape[0]) or real(rows, *a, **k))
    X = _blobs()
    whole = ac.AttentionClustering(3, covariance_type="spherical", random_state=0).fit(X)
    sampled = ac.AttentionClustering(3, covariance_type="spherical", random_state=0,
                                     settings=FitSettings(warm_sample=150)).fit(X)
    assert seen == [400, 150]
    assert ac.adjusted_rand_index(whole.labels_, sampled.labels_) == 1.0
    # on the sample the loss curve records each pass over all rows (the sample's own
    # partition is recorded alone when the sample holds every row)
    assert len(sampled.loss_curve_) > 1


def test_default_settings_give_the_fit_of_no_settings_bit_for_bit():
    X = _blobs(300)
    base = ac.AttentionClustering(3, random_state=0).fit(X)
    given = ac.AttentionClustering(3, random_state=0, settings=FitSettings()).fit(X)
    np.testing.assert_array_equal(base.cluster_centers_, given.cluster_centers_)
    np.testing.assert_array_equal(base.labels_, given.labels_)
    assert base.covariance_type_reason_ == given.covariance_type_reason_


def test_merge_settings_are_one_class_under_every_name():
    """MergeSettings lives beside FitSettings; the package, the cluster package and the
    merge module (its home until 0.4) name the same class."""
    import attnclust
    from attnclust import cluster
    from attnclust.cluster import merge, settings

    assert attnclust.MergeSettings is cluster.MergeSettings is merge.MergeSettings \
        is settings.MergeSettings


_QUOTED = re.compile(r"``(\w+)``\s+\(default\s+(-?[0-9][0-9_.e+-]*)")


def _quoted_defaults(text: str) -> list[tuple[str, float]]:
    """``name`` (default VALUE) in the text, for the names of settings' fields."""
    names = {f.name for cls in (FitSettings, MergeSettings) for f in dataclasses.fields(cls)}
    return [(name, float(value.rstrip(".").replace("_", "")))
            for name, value in _QUOTED.findall(text) if name in names]


def test_docstrings_that_quote_a_setting_quote_its_default():
    """The module docstrings explain a rule with its settings' defaults in words; those
    values are checked here against the settings, so that a changed default cannot leave a
    docstring behind."""
    defaults = {f.name: f.default for cls in (FitSettings, MergeSettings)
                for f in dataclasses.fields(cls)}
    quoted = [(path.name, name, value)
              for path in sorted(Path(ac.__file__).parent.rglob("*.py"))
              for name, value in _quoted_defaults(path.read_text(encoding="utf-8"))]
    assert len(quoted) >= 6               # merge.py and head_count.py quote several
    assert [q for q in quoted if q[2] != defaults[q[1]]] == []


def test_the_quoted_default_check_can_fail():
    text = ("kept where it is below ``cut_ratio``\n  (default 0.2: ...) and ``skip_cut`` "
            "(default 0.03)")
    assert _quoted_defaults(text) == [("cut_ratio", 0.2), ("skip_cut", 0.03)]
    assert MergeSettings().cut_ratio != 0.2

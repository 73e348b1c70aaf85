"""The old name ``temperature`` (0.1) still works for one release, with a FutureWarning,
and gives exactly what ``inverse_temperature`` gives."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone

import attnclust as ac
from attnclust.cli import main

MIX = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.3)
X = MIX.sample(60, rng=0)
HEADS = ac.init_on_manifold(MIX, rng=1)

CALLS = {
    "population_risk": lambda **kw: ac.population_risk(HEADS, MIX, **kw),
    "qmc_risk": lambda **kw: ac.qmc_risk(HEADS, MIX, n_samples=2**8, rng=0, **kw).value,
    "empirical_risk": lambda **kw: ac.empirical_risk(HEADS, X, **kw),
    "balance": lambda **kw: ac.balance(HEADS, MIX, **kw),
    "head_weights": lambda **kw: ac.head_weights(torch.as_tensor(X), HEADS, **kw),
    "attention_heads": lambda **kw: ac.attention_heads(torch.as_tensor(X), HEADS, **kw),
    "identity_attention": lambda **kw: ac.identity_attention(X, **kw),
    "infinite_prompt_limit": lambda **kw: ac.infinite_prompt_limit(X, MIX, **kw),
    "limit_distance": lambda **kw: ac.limit_distance(X, X, MIX, **kw).mean,
    "assignment_error": lambda **kw: ac.assignment_error(
        MIX.centroids, X, np.arange(60) % 2, **kw).error,
    "pgd": lambda **kw: ac.pgd(MIX, HEADS, step_size=0.5, n_steps=5, **kw).heads,
    "AttentionHeads": lambda **kw: ac.AttentionHeads(HEADS, **kw)(torch.as_tensor(X)).detach(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_old_keyword_warns_and_gives_the_same(name):
    new = CALLS[name](inverse_temperature=3.0)
    with pytest.warns(FutureWarning, match="'temperature' is deprecated.*'inverse_temperature'"):
        old = CALLS[name](temperature=3.0)
    np.testing.assert_array_equal(np.asarray(old), np.asarray(new))
    with pytest.raises(TypeError, match="both 'inverse_temperature' and its deprecated name"):
        CALLS[name](temperature=3.0, inverse_temperature=3.0)


def test_old_schedule_keyword_of_pgd():
    def run(**kw):
        return ac.pgd(MIX, HEADS, inverse_temperature=10.0, step_size=0.5, n_steps=5, **kw)
    with pytest.warns(FutureWarning, match="'temperature_schedule' is deprecated"):
        old = run(temperature_schedule="anneal")
    torch.testing.assert_close(old.heads, run(inverse_temperature_schedule="anneal").heads,
                               rtol=0, atol=0)
    with pytest.warns(FutureWarning, match="'temperature' is deprecated"):
        np.testing.assert_array_equal(old.history.temperature, old.history.inverse_temperature)


@pytest.mark.parametrize("cls", [ac.AttentionClustering, ac.AttentionQuantizer])
def test_estimators_take_the_old_keyword_but_show_only_the_new(cls):
    assert "temperature" not in inspect.signature(cls).parameters
    with pytest.warns(FutureWarning):
        est = cls(temperature=2.0)
    assert est.get_params()["inverse_temperature"] == 2.0
    assert "temperature" not in est.get_params()
    assert clone(est).inverse_temperature == 2.0


def test_fitted_attributes_under_their_old_names():
    est = ac.AttentionClustering(2, random_state=0).fit(X)
    with pytest.warns(FutureWarning, match="'temperature_' is deprecated"):
        assert est.temperature_ == est.inverse_temperature_
    with pytest.warns(FutureWarning, match="'temperature_curve_' is deprecated"):
        np.testing.assert_array_equal(est.temperature_curve_, est.inverse_temperature_curve_)
    q = ac.AttentionQuantizer().fit(X)
    with pytest.warns(FutureWarning):
        assert q.temperature_ == q.inverse_temperature_
    layer = ac.AttentionHeads(HEADS, inverse_temperature=4.0)
    with pytest.warns(FutureWarning):
        assert layer.temperature == 4.0
    # not fitted: no attribute under either name, as scikit-learn expects
    assert not hasattr(ac.AttentionClustering(2), "temperature_")


def test_an_old_attribute_name_warns_at_the_readers_line():
    """The warning of a renamed attribute pointed inside the package (the descriptor's
    line): it points at the line that reads the old name."""
    layer = ac.AttentionHeads(HEADS, inverse_temperature=4.0)
    q = ac.AttentionQuantizer().fit(X)
    with pytest.warns(FutureWarning) as caught:
        read = (layer.temperature, q.temperature_)
    assert read == (4.0, q.inverse_temperature_)
    assert [w.filename for w in caught] == [__file__] * 2


def test_callback_info_under_the_old_name():
    seen = []
    ac.AttentionClustering(2, random_state=0, callback=seen.append).fit(X)
    with pytest.warns(FutureWarning):
        assert seen[-1].temperature == seen[-1].inverse_temperature


def test_cli_old_option_warns_and_gives_the_same(tmp_path, capsys):
    np.save(tmp_path / "x.npy", X)
    outs = []
    for flag in ("--inverse-temperature", "--temperature"):
        out = tmp_path / f"q{len(outs)}.npy"
        assert main(["quantize", str(tmp_path / "x.npy"), flag, "2.5", "--out", str(out)]) == 0
        outs.append(np.load(out))
    err = capsys.readouterr().err
    assert err.count("warning: --temperature is deprecated") == 1
    np.testing.assert_array_equal(outs[0], outs[1])
    assert main(["quantize", str(tmp_path / "x.npy"), "--temperature", "1",
                 "--inverse-temperature", "1", "--out", str(tmp_path / "z.npy")]) == 2
    assert "--inverse-temperature: not allowed with argument --temperature" in \
        capsys.readouterr().err
    assert main(["quantize", str(tmp_path / "x.npy"), "--out", str(tmp_path / "z.npy")]) == 2
    assert "--inverse-temperature is required" in capsys.readouterr().err
    assert not (tmp_path / "z.npy").exists()


def test_assignment_error_takes_its_mixture_as_mix():
    """``mix`` names the mixture everywhere; ``mixture=`` (0.1) still works."""
    labels = np.arange(60) % 2
    new = ac.assignment_error(MIX.centroids, X, labels, inverse_temperature=3.0, mix=MIX)
    with pytest.warns(FutureWarning, match="'mixture' is deprecated.*'mix'"):
        old = ac.assignment_error(MIX.centroids, X, labels, inverse_temperature=3.0,
                                  mixture=MIX)
    assert old == new and not np.isnan(new.bayes_error)


@pytest.mark.parametrize("cls", [ac.AttentionClustering, ac.AttentionQuantizer])
def test_set_params_takes_the_old_name_until_0_5(cls):
    est = cls()
    with pytest.warns(FutureWarning, match=r"set_params\(\): 'temperature' is deprecated and "
                                           r"will be removed in 0\.5"):
        assert est.set_params(temperature=2.5) is est
    assert est.get_params()["inverse_temperature"] == 2.5
    with pytest.raises(ValueError, match="both 'inverse_temperature' and its deprecated"):
        est.set_params(temperature=1.0, inverse_temperature=1.0)


def test_grid_search_over_the_old_name():
    """A parameter grid written for 0.1 fits the same models as one written for 0.2."""
    from sklearn.model_selection import GridSearchCV

    def search(name):
        grid = GridSearchCV(ac.AttentionClustering(2, random_state=0),
                            {name: [3.0, 30.0]}, cv=2)
        return grid.fit(X)
    new = search("inverse_temperature")
    with pytest.warns(FutureWarning, match="'temperature' is deprecated"):
        old = search("temperature")
    np.testing.assert_array_equal(old.cv_results_["mean_test_score"],
                                  new.cv_results_["mean_test_score"])
    assert old.best_estimator_.inverse_temperature == new.best_estimator_.inverse_temperature


def test_old_names_are_kept_until_0_5():
    with pytest.warns(FutureWarning, match=r"will be removed in 0\.5"):
        ac.AttentionClustering(temperature=2.0)
    with pytest.warns(FutureWarning, match=r"will be removed in 0\.5"):
        assert ac.AttentionQuantizer().fit(X).temperature_ > 0


# -- the module paths of 0.2 -----------------------------------------------------------------
# the modules of the 0.2 release (its src/attnclust), each now at the top or in a half
MODULES_OF_0_2 = ["_bench", "_deprecation", "_io", "_quadrature", "_threads", "_validation",
                  "cli", "clustering", "communicator", "distributed", "experiments",
                  "fixed_point", "heads", "in_context", "metrics", "mixture", "objectives",
                  "pgd", "quantizer", "results", "risk", "sphere", "warm_start"]


def _forget(monkeypatch, old):
    """Import ``old`` afresh in this test, and leave no trace of it after."""
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        monkeypatch.delitem(sys.modules, name)
    if old.split(".")[1] in vars(ac):          # not hasattr: that reads the old path
        monkeypatch.delattr(ac, old.split(".")[1])


def test_every_public_module_of_0_2_is_still_importable_by_its_path():
    moved = {old.removeprefix("attnclust.") for old in ac._MOVED}
    for name in MODULES_OF_0_2:
        here = (Path(ac.__file__).parent / f"{name}.py").exists() or \
            (Path(ac.__file__).parent / name / "__init__.py").exists()
        private = name.startswith("_")
        assert here or name in moved or name == "pgd" or private, name


@pytest.mark.parametrize("old", sorted(ac._MOVED))
def test_an_old_module_path_warns_and_gives_the_new_module(monkeypatch, old):
    new = importlib.import_module(ac._MOVED[old])
    _forget(monkeypatch, old)
    with pytest.warns(FutureWarning, match=rf"{old} is now {ac._MOVED[old]}; .* 0\.5"):
        module = importlib.import_module(old)
    assert module is new                       # one module: one set of names to patch
    assert new.__spec__.name == new.__name__   # its own spec, as its relative imports need


def test_from_an_old_path_import_a_name(monkeypatch):
    _forget(monkeypatch, "attnclust.clustering")
    with pytest.warns(FutureWarning, match="attnclust.cluster.clustering"):
        from attnclust.clustering import AttentionClustering
    assert AttentionClustering is ac.AttentionClustering


def test_a_submodule_of_an_old_package_path_is_the_new_one(monkeypatch):
    from attnclust.study.experiments import _runner

    _forget(monkeypatch, "attnclust.experiments")
    with pytest.warns(FutureWarning, match="attnclust.study.experiments"):
        old = importlib.import_module("attnclust.experiments._runner")
    assert old is _runner


def test_an_old_module_read_as_an_attribute_warns(monkeypatch):
    _forget(monkeypatch, "attnclust.risk")
    with pytest.warns(FutureWarning, match="attnclust.risk is now attnclust.study.risk"):
        module = ac.risk
    assert module is importlib.import_module("attnclust.study.risk")
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        ac.no_such_module    # noqa: B018


@pytest.mark.parametrize("old", sorted(ac._MOVED_03))
def test_a_module_path_of_0_3_warns_until_0_5_and_gives_the_new_module(monkeypatch, old):
    """The layer's base moved to attnclust.layer and the clusterer's families into
    subpackages in 0.4: each old path is no file of its own any more, and importing it
    warns and gives the new module."""
    new = importlib.import_module(ac._MOVED_03[old])
    assert not (Path(ac.__file__).parent.parent / (old.replace(".", "/") + ".py")).exists()
    parent, _, leaf = old.rpartition(".")
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        monkeypatch.delitem(sys.modules, name)
    if leaf in vars(sys.modules[parent]):
        monkeypatch.delattr(sys.modules[parent], leaf)
    with pytest.warns(FutureWarning, match=rf"{old} is now {ac._MOVED_03[old]}; .* 0\.5"):
        module = importlib.import_module(old)
    assert module is new

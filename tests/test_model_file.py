"""``save_model`` / ``load_model``: a fitted estimator kept without pickle, that predicts,
weighs and scores as the one saved, and a file that is not one is refused in one line."""

from __future__ import annotations

import gc
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import attnclust as ac


@pytest.fixture(scope="module")
def rows():
    mix = ac.GaussianMixture.random(d=3, k=3, sigma=0.15, rng=4)
    X, _ = mix.sample(240, rng=1, return_labels=True)
    return X


@pytest.mark.parametrize("params", [
    {"covariance_type": "spherical"},
    {"covariance_type": "diag"},
    {"covariance_type": "full"},
    {},                                     # the default: the shape chosen
    {"noise_head": True},
    {"settings": ac.FitSettings(warm_sample=100, choice_rows=150, looks=(3, 7),
                                rows_per_parameter=float("inf"))},
    {"merge_heads": ac.cluster.merge.MergeSettings(temperature=1.0)},
])
def test_loaded_model_predicts_and_scores_as_the_saved_one(rows, tmp_path, params):
    est = ac.AttentionClustering(3, random_state=0, **params).fit(rows)
    path = tmp_path / "m.npz"
    ac.save_model(est, path)
    loaded = ac.load_model(path)
    assert loaded.get_params() == est.get_params()
    new = rows[::3] + 0.05
    # the same arrays and the same plan: the same operations, bit for bit
    np.testing.assert_array_equal(loaded.predict(new), est.predict(new))
    np.testing.assert_array_equal(loaded.predict_proba(new), est.predict_proba(new))
    np.testing.assert_array_equal(loaded.transform(new), est.transform(new))
    np.testing.assert_array_equal(loaded.score_samples(new), est.score_samples(new))
    np.testing.assert_array_equal(loaded.labels_, est.labels_)
    assert getattr(loaded, "covariance_type_", None) == getattr(est, "covariance_type_", None)


def test_the_file_holds_no_pickle(rows, tmp_path):
    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(2, random_state=0).fit(rows), path)
    with np.load(path, allow_pickle=False) as archive:     # raises on any object array
        for name in archive.files:
            assert archive[name].dtype != object, name


def test_info_is_kept_beside_the_model(rows, tmp_path):
    from attnclust.cluster.model_file import model_info

    path = tmp_path / "m.npz"
    info = {"data": "x.csv", "columns": ["a", "b", "c"]}
    ac.save_model(ac.AttentionClustering(2, random_state=0).fit(rows), path, info=info)
    assert model_info(path) == info



@pytest.mark.parametrize("info, message", [
    ({"when": object()}, r"info\['when'\] is a object: info holds JSON values only"),
    ({"runs": [1, {"seed": 1j}]}, r"info\['runs'\]\[1\]\['seed'\] is a complex"),
    ({1: "a"}, r"info has the key 1: info's keys are strings"),
])
def test_info_that_is_no_json_is_refused_by_name(rows, tmp_path, info, message):
    path = tmp_path / "m.npz"
    with pytest.raises(ValueError, match=message):
        ac.save_model(ac.AttentionClustering(2, random_state=0).fit(rows), path, info=info)
    assert not path.exists() and list(tmp_path.iterdir()) == []

def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_file_that_is_not_a_model_is_refused(rows, tmp_path):
    with pytest.raises(ValueError) as exc:
        ac.load_model(tmp_path / "absent.npz")
    assert "no such file" in _one_line(exc)
    text = tmp_path / "x.npz"
    text.write_text("1,2,3\n")
    with pytest.raises(ValueError) as exc:
        ac.load_model(text)
    assert "not an attnclust model file" in _one_line(exc)
    arrays = tmp_path / "a.npz"
    np.savez(arrays, X=rows)
    with pytest.raises(ValueError) as exc:
        ac.load_model(arrays)
    assert "not an attnclust model file" in _one_line(exc)
    with pytest.raises(ValueError) as exc:
        ac.load_model(tmp_path)
    assert "is a folder" in _one_line(exc)


def test_an_unfitted_estimator_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="not fitted"):
        ac.save_model(ac.AttentionClustering(2), tmp_path / "m.npz")
    assert not list(tmp_path.iterdir())          # nothing half-written


def test_a_path_that_cannot_be_written_is_one_line_and_writes_nothing(rows, tmp_path):
    """A file where the model's folder should be, or a folder that holds no files: one
    line naming the path asked for (the raw OS error named a hidden temporary file)."""
    est = ac.AttentionClustering(2, random_state=0).fit(rows)
    (tmp_path / "data.npy").write_bytes(b"")
    for path in (tmp_path / "data.npy" / "m.npz", Path("/proc/m.npz")):
        with pytest.raises(ValueError) as exc:
            ac.save_model(est, path)
        assert _one_line(exc).startswith(f"{path}: cannot write there (")
        assert "nothing was written" in _one_line(exc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npy"]


def test_a_truncated_file_is_refused_as_damaged_and_closed(rows, tmp_path):
    """A model file cut short was "not an attnclust model file (File is not a zip
    file)": it is one, damaged."""
    est = ac.AttentionClustering(2, random_state=0).fit(rows)
    ac.save_model(est, tmp_path / "m.npz")
    data = (tmp_path / "m.npz").read_bytes()
    (tmp_path / "m.npz").write_bytes(data[:len(data) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(ValueError) as exc:
            ac.load_model(tmp_path / "m.npz")
        gc.collect()               # a file left open warns when it is collected
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert _one_line(exc).startswith(f"{tmp_path / 'm.npz'}: the model file is damaged or "
                                     "truncated (")
    assert "not an attnclust model file" not in _one_line(exc)


def test_a_model_file_that_cannot_be_read_says_so(rows, tmp_path, monkeypatch):
    """A model file without read permission was "not an attnclust model file ([Errno 13]
    Permission denied ...)" (patched: as root, chmod 000 still reads)."""
    import errno

    from attnclust.cluster import model_file

    est = ac.AttentionClustering(2, random_state=0).fit(rows)
    ac.save_model(est, tmp_path / "m.npz")

    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(model_file, "open", denied, raising=False)
    with pytest.raises(ValueError) as exc:
        ac.load_model(tmp_path / "m.npz")
    assert _one_line(exc) == (f"{tmp_path / 'm.npz'}: cannot read the model file "
                              "(Permission denied)")


def _rewrite(path, change) -> None:
    """Rewrite the archive at ``path`` with ``change(entries)`` applied to its arrays."""
    with np.load(path, allow_pickle=False) as archive:
        entries = {name: archive[name] for name in archive.files}
    change(entries)
    with open(path, "wb") as f:
        np.savez(f, **entries)


def test_a_changed_file_is_refused(rows, tmp_path):
    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(3, random_state=0).fit(rows), path)

    def move_a_center(entries):
        entries["attr.cluster_centers_"] = entries["attr.cluster_centers_"] + 1.0

    _rewrite(path, move_a_center)
    with pytest.raises(ValueError) as exc:
        ac.load_model(path)
    assert "digest does not match" in _one_line(exc)


def test_another_format_version_is_refused(rows, tmp_path):
    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(3, random_state=0).fit(rows), path)
    meta_name = next(n for n in zipfile.ZipFile(path).namelist() if n.startswith("meta"))
    key = meta_name.removesuffix(".npy")

    def next_version(entries):
        meta = json.loads(str(entries[key]))
        meta["format_version"] += 1
        entries[key] = np.array(json.dumps(meta))

    _rewrite(path, next_version)
    with pytest.raises(ValueError) as exc:
        ac.load_model(path)
    assert "format version" in _one_line(exc) and "refit" in str(exc.value)


def test_a_npy_is_refused_in_one_sentence(tmp_path):
    """The refusal of a .npy was raised inside the try that wraps numpy's errors, and was
    wrapped again: "not an attnclust model file (...: not an attnclust model file (...".
    """
    path = tmp_path / "rows.npy"
    np.save(path, np.ones(3))
    with pytest.raises(ValueError, match="one array, not an archive") as info:
        ac.load_model(path)
    assert str(info.value).count("not an attnclust model file") == 1


def test_settings_are_saved_as_the_record_of_their_fields(rows, tmp_path):
    """A FitSettings (and a MergeSettings) is kept in meta.json as a plain record, not
    dropped, and comes back equal, so that a loaded estimator refits as the one saved."""
    settings = ac.FitSettings(warm_sample=100, per_head=64)
    est = ac.AttentionClustering(3, random_state=0, settings=settings).fit(rows)
    path = tmp_path / "m.npz"
    ac.save_model(est, path)
    with np.load(path) as archive:
        meta = json.loads(str(archive["meta.json"]))
    assert meta["params"]["settings"]["warm_sample"] == 100
    assert meta["params"]["settings"]["looks"] == [4, 10]
    assert "settings" not in meta["not_saved"]
    loaded = ac.load_model(path)
    assert loaded.settings == settings
    np.testing.assert_array_equal(loaded.fit(rows).cluster_centers_, est.cluster_centers_)


def test_partial_fit_goes_on_from_a_loaded_model_as_from_the_fit(rows, tmp_path):
    path = tmp_path / "m.npz"
    est = ac.AttentionClustering(3, covariance_type="spherical", random_state=0).fit(rows)
    ac.save_model(est, path)
    loaded = ac.load_model(path)
    batch = rows[:40]
    np.testing.assert_array_equal(loaded.partial_fit(batch).cluster_centers_,
                                  est.partial_fit(batch).cluster_centers_)


def test_the_choice_of_k_is_not_saved_and_says_so(tmp_path):
    X = np.concatenate([np.random.default_rng(0).normal(c, 0.3, (100, 2)) for c in (0, 5)])
    est = ac.AttentionClustering("auto", random_state=0).fit(X)
    path = tmp_path / "m.npz"
    ac.save_model(est, path)
    loaded = ac.load_model(path)
    assert not hasattr(loaded, "k_choice_")        # not a list in its place
    with np.load(path) as archive:
        meta = json.loads(archive["meta.json"].item())
    assert "k_choice_" in meta["not_saved"]
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


def test_an_archive_of_object_arrays_is_named_as_such(tmp_path):
    path = tmp_path / "o.npz"
    np.savez(path, a=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="it holds object arrays, which only pickle reads"):
        ac.load_model(path)


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update({"attr.cluster_centers_": np.zeros((3, 5))}),
     r"its fitted attributes disagree: cluster_centers_ of shape \(3, 5\), not \(K >= 1, "
     r"n_features_in_ = 3\)"),
    (lambda a: a.update({"attr.cluster_centers_": np.zeros((0, 3))}),   # a predict IndexError
     r"cluster_centers_ of shape \(0, 3\)"),
    (lambda a: a.update({"attr.cluster_centers_": np.full((3, 3), np.nan)}), "finite numbers"),
    (lambda a: a.pop("attr.cluster_centers_"), "no cluster_centers_ or n_features_in_"),
    (lambda a: a.update({"attr.inverse_temperature_": np.float64(-1.0)}),
     r"inverse_temperature_ = .*-1\..*, not a finite number > 0"),
    (lambda a: a.update({"attr.inverse_temperature_": np.float64(np.inf)}),
     "not a finite number > 0"),
    # a name that shadows a method ("'int' object is not callable" at predict)
    (lambda a: a.update({"attr.predict": np.int64(1)}), "'predict' is no fitted attribute"),
])
def test_a_file_edited_by_hand_with_its_digest_written_again_is_refused(rows, tmp_path, edit,
                                                                          message):
    """The digest guards against changes, not against a file rewritten with one: centres
    of another width, or none, are one line (they were a torch error or an
    AttributeError at predict)."""
    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(3, covariance_type="spherical", random_state=0)
                  .fit(rows), path)
    _redigest(path, lambda arrays, attributes: edit(arrays))
    with pytest.raises(ValueError, match=message):
        ac.load_model(path)


def _redigest(path, edit):
    """``edit(arrays, attributes)`` the saved model at ``path``, its digest written again."""
    from attnclust.cluster import model_file

    with np.load(path) as f:
        arrays = {name: f[name] for name in f.files}
    meta = json.loads(str(arrays.pop(model_file._META)))
    edit(arrays, meta["attributes"])
    meta["sha256"] = model_file._digest(meta, arrays)
    with open(path, "wb") as f:
        np.savez(f, **{model_file._META: np.array(json.dumps(meta))}, **arrays)


def _two_rings():
    rng = np.random.default_rng(0)
    t, r = rng.uniform(0, 2 * np.pi, 600), np.repeat([1.0, 3.0], 300)
    return np.c_[r * np.cos(t), r * np.sin(t)] + rng.normal(0, 0.08, (600, 2))


def _set(name, value):
    return lambda arrays, attributes: arrays.update({f"attr.{name}": value})


@pytest.mark.parametrize("edit, message", [
    (_set("head_labels_", np.full(120, 7)), r"head_labels_ of shape \(120,\) and dtype int"),
    (_set("head_labels_", np.zeros(115, np.int64)), r"shape \(115,\).*each of the 120 heads_"),
    (_set("head_labels_", np.r_[np.zeros(60), np.ones(60)]), "dtype float64"),
    (_set("head_labels_", np.r_[-np.ones(60), np.ones(60)].astype(np.int64)), "0..1, each"),
    (lambda arrays, attributes: arrays.pop("attr.heads_"), "without heads_ and head_labels_"),
    (lambda arrays, attributes: attributes.update(n_clusters_=5),
     "n_clusters_ = 5 for 2 cluster_centers_"),
])
def test_a_merged_fit_edited_by_hand_is_refused(tmp_path, edit, message):
    """A merged fit's heads, edited with the digest written again: label 7 of 2 clusters
    came out of predict, other edits gave an IndexError, a TypeError or an AttributeError
    at predict (they were not checked)."""
    path = tmp_path / "m.npz"
    est = ac.AttentionClustering(2, random_state=0).fit(_two_rings())
    assert est.merge_heads_ and len(est.heads_) == 120
    ac.save_model(est, path)
    _redigest(path, edit)
    with pytest.raises(ValueError, match="its fitted attributes disagree: .*" + message):
        ac.load_model(path)


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.pop("attr.precisions_cholesky_"),
     r"a full fit's precisions_cholesky_ of shape None, not \(3, 3, 3\) finite numbers"),
    (lambda a: a.pop("attr.weights_"), r"weights_ of shape None, not \(3,\)"),
    (lambda a: a.update({"attr.weights_": np.full(2, 0.5)}), r"weights_ of shape \(2,\)"),
    (lambda a: a.update({"attr.precisions_cholesky_": np.ones((3, 2, 2))}),
     r"precisions_cholesky_ of shape \(3, 2, 2\), not \(3, 3, 3\)"),
    (lambda a: a.update({"attr.covariance_floor_": np.ones(1)}),
     r"covariance_floor_ of shape \(1,\), not \(3,\)"),
    (lambda a: a.update({"attr.precisions_cholesky_": np.full((3, 3, 3), np.nan)}),
     "precisions_cholesky_ of shape .* finite numbers"),
    (lambda a: a.update({"attr.weights_": np.array([0.5, 0.6, -0.1])}),
     "weights_ not all > 0"),
])
def test_a_shaped_fit_whose_arrays_disagree_is_refused(rows, tmp_path, edit, message):
    """A full fit's arrays edited with the digest written again: they loaded, and predict
    raised a size mismatch or called a row too far from the heads."""
    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(3, covariance_type="full", random_state=0).fit(rows),
                  path)
    _redigest(path, lambda arrays, attributes: edit(arrays))
    with pytest.raises(ValueError, match="its fitted attributes disagree: .*" + message):
        ac.load_model(path)


def test_a_member_that_is_not_an_array_is_refused(rows, tmp_path):
    """A file added to the archive (a README) gave an AttributeError of the digest's."""
    import zipfile

    path = tmp_path / "m.npz"
    ac.save_model(ac.AttentionClustering(3, random_state=0).fit(rows), path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("README.txt", "notes")
    with pytest.raises(ValueError, match="a member that is not an array"):
        ac.load_model(path)

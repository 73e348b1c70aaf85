"""``attnclust fit`` writes a model file and a JSON summary; ``attnclust predict MODEL
DATA`` labels rows with it as the estimator would; a rerun into the same prefix leaves
nothing of the earlier run that it did not write again."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnclust as ac
from _cli import fails
from attnclust.cli import main


@pytest.fixture()
def blobs(tmp_path):
    mix = ac.GaussianMixture.random(d=3, k=3, sigma=0.1, rng=2)
    X, z = mix.sample(300, rng=0, return_labels=True)
    return X, z, tmp_path




def _iris_like(X, z, path) -> None:
    """A CSV with a header, the features named and a label column last (as iris)."""
    with open(path, "w") as f:
        f.write("a,b,c,species\n")
        for row, label in zip(X, z, strict=True):
            f.write(",".join(repr(float(v)) for v in row) + f",{label}\n")


def test_predict_labels_new_rows_as_the_fitted_estimator(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "r"),
                 "--quiet"]) == 0
    new = X[::4] + 0.01
    np.save(tmp / "new.npy", new)
    assert main(["predict", str(tmp / "r.model.npz"), str(tmp / "new.npy"), "--proba",
                 "--out", str(tmp / "p")]) == 0
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    # the model file holds the fit's arrays: the same operations as the estimator's
    np.testing.assert_array_equal(np.load(tmp / "p.labels.npy"), est.predict(new))
    np.testing.assert_array_equal(np.load(tmp / "p.proba.npy"), est.predict_proba(new))
    assert (tmp / "p.labels.csv").read_text().splitlines()[0] == "label"
    out = capsys.readouterr().out
    assert "K=3" in out and "p.labels.csv" in out


def test_predict_reads_the_columns_the_model_was_fitted_on(blobs, capsys):
    X, z, tmp = blobs
    _iris_like(X, z, tmp / "train.csv")
    assert main(["fit", str(tmp / "train.csv"), "-k", "3", "--drop-columns", "species",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    fitted = np.load(tmp / "r.labels.npy")
    # the CSV holds each double's shortest repr: the features read back exactly
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    np.testing.assert_array_equal(fitted, est.labels_)
    # the same table, label column included: predict picks a, b, c by name
    assert main(["predict", str(tmp / "r.model.npz"), str(tmp / "train.csv"), "--out",
                 str(tmp / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp / "p.labels.npy"), fitted)
    # rows with other columns than the model's: one line naming both counts
    np.save(tmp / "wide.npy", np.hstack([X, X]))
    err = fails(capsys, ["predict", str(tmp / "r.model.npz"), str(tmp / "wide.npy")])
    assert "6 columns" in err and "fitted on 3 (a, b, c)" in err


def test_other_column_names_are_read_by_position_with_a_warning(blobs, capsys):
    """A table whose header names other columns than the model's, as many: read by
    position, as before, but no longer silently."""
    X, z, tmp = blobs
    _iris_like(X, z, tmp / "train.csv")
    assert main(["fit", str(tmp / "train.csv"), "-k", "3", "--drop-columns", "species",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    (tmp / "other.csv").write_text("u,v,w\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) for row in X) + "\n")
    assert main(["predict", str(tmp / "r.model.npz"), str(tmp / "other.csv"), "--out",
                 str(tmp / "p")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"attnclust predict: warning: {tmp / 'other.csv'}'s columns (u, v, w) are not those "
        "the model was fitted on (a, b, c): read by position; choose them with --columns"]
    np.testing.assert_array_equal(np.load(tmp / "p.labels.npy"), np.load(tmp / "r.labels.npy"))


@pytest.mark.parametrize("option", [["--drop-columns", "species"],
                                    ["--columns", "c,a,b"]])
def test_chosen_columns_named_as_the_model_s_are_read_in_its_order(blobs, capsys, option):
    """The model's columns, chosen by an option from a table that holds them in another
    order: read by name in the model's order (they were read by position, every label
    wrong and no word said); other names chosen so: by position, with the warning."""
    X, z, tmp = blobs
    _iris_like(X, z, tmp / "train.csv")
    assert main(["fit", str(tmp / "train.csv"), "-k", "3", "--drop-columns", "species",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    (tmp / "turned.csv").write_text("species,c,a,b\n" + "\n".join(
        f"{label}," + ",".join(repr(float(v)) for v in row[[2, 0, 1]])
        for row, label in zip(X, z, strict=True)) + "\n")
    assert main(["predict", str(tmp / "r.model.npz"), str(tmp / "turned.csv"), *option,
                 "--out", str(tmp / "p")]) == 0
    assert "warning" not in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp / "p.labels.npy"), np.load(tmp / "r.labels.npy"))
    (tmp / "other.csv").write_text("species,u,v,w\n" + "\n".join(
        f"{label}," + ",".join(repr(float(v)) for v in row)
        for row, label in zip(X, z, strict=True)) + "\n")
    assert main(["predict", str(tmp / "r.model.npz"), str(tmp / "other.csv"),
                 "--drop-columns", "species", "--out", str(tmp / "q")]) == 0
    assert "read by position" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp / "q.labels.npy"), np.load(tmp / "r.labels.npy"))


def test_predict_refuses_a_file_that_is_not_a_model(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    err = fails(capsys, ["predict", str(tmp / "x.npy"), str(tmp / "x.npy")])
    assert "not an attnclust model file" in err


def test_summary_json_says_what_the_fit_chose(blobs):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "auto", "--max-clusters", "6",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    record = json.loads((tmp / "r.summary.json").read_text())
    labels = np.load(tmp / "r.labels.npy")
    assert record["n_clusters"] == len(np.load(tmp / "r.centers.npy")) == 3
    assert record["n_clusters_asked"] == "auto" and record["n_clusters_reason"]
    assert record["parameters"]["max_clusters"] == 6
    assert [c["size"] for c in record["clusters"]] == np.bincount(labels).tolist()
    assert record["n_rows"] == 300 and record["covariance_type"] in {"spherical", "diag",
                                                                      "full"}
    assert set(record["files"]) == {p.name for p in tmp.iterdir() if p.name.startswith("r.")}
    # the criteria on every row, as the estimator computes them
    est = ac.AttentionClustering("auto", max_clusters=6, random_state=0).fit(X)
    assert record["bic"] == pytest.approx(est.bic(X), rel=1e-12)


def test_max_clusters_below_two_is_refused(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    err = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "auto", "--max-clusters", "1"])
    assert "--max-clusters must be an integer of at least 2" in err


def test_a_rerun_leaves_nothing_stale(blobs):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--proba", "--plot",
                 "--covariance-type", "full", "--out", str(tmp / "r"), "--quiet"]) == 0
    first = {p.name for p in tmp.iterdir()}
    assert {"r.proba.npy", "r.png", "r.covariances.npy"} <= first
    (tmp / "r.mine.txt").write_text("not written by attnclust")
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--covariance-type", "spherical",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    left = {p.name for p in tmp.iterdir()}
    record = json.loads((tmp / "r.summary.json").read_text())
    # the second run's files and what attnclust never wrote: no proba, picture or
    # covariances of the first run beside the new centres
    assert left == set(record["files"]) | {"x.npy", "r.mine.txt"}
    assert not {"r.proba.npy", "r.proba.csv", "r.png", "r.covariances.npy"} & left


def test_a_rerun_that_cannot_remove_a_stale_file_writes_nothing(blobs, monkeypatch, capsys,
                                                                  refuse_rename):
    """An earlier fit's picture that cannot be removed (a file the user may not delete):
    the rerun fails in one line and leaves the earlier fit's files as they were, where it
    renamed its own into place and left the picture stale beside them; a folder in the
    place of an earlier output is not the command's, and stays."""
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    fit = ["fit", str(tmp / "x.npy"), "--out", str(tmp / "r"), "--quiet"]
    assert main([*fit, "-k", "3", "--proba", "--plot"]) == 0
    before = {p.name: p.read_bytes() for p in tmp.iterdir()}
    refuse_rename(lambda src, dst: src == "r.png")      # may not be moved (nor removed)
    err = fails(capsys, [*fit, "-k", "2"])
    assert "r.png: cannot remove (Operation not permitted); nothing was written" in err
    assert {p.name: p.read_bytes() for p in tmp.iterdir()} == before
    monkeypatch.undo()
    (tmp / "r.proba.npy").unlink()
    (tmp / "r.proba.npy").mkdir()
    assert main([*fit, "-k", "2"]) == 0
    assert (tmp / "r.proba.npy").is_dir() and not (tmp / "r.png").exists()


def test_noise_column_makes_the_argmax_the_label(tmp_path):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(200, 2)) * 0.2 + c for c in ([0, 0], [4, 0])]
                       + [rng.uniform(-6, 10, size=(80, 2))])
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "--noise-head", "--proba",
                 "--out", str(tmp_path / "r"), "--quiet"]) == 0
    P = np.load(tmp_path / "r.proba.npy")
    labels = np.load(tmp_path / "r.labels.npy")
    header = (tmp_path / "r.proba.csv").read_text().splitlines()[0]
    assert header == "cluster_0,cluster_1,noise" and P.shape == (len(X), 3)
    assert (labels == -1).sum() > 20
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=8 * np.finfo(float).eps)
    np.testing.assert_array_equal(np.where(P.argmax(1) == 2, -1, P.argmax(1)), labels)


def test_summary_json_says_when_heads_merged(tmp_path):
    from sklearn.datasets import make_moons

    X, _ = make_moons(600, noise=0.05, random_state=0)
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    record = json.loads((tmp_path / "r.summary.json").read_text())
    est = ac.AttentionClustering(2, random_state=0).fit(X)
    assert record["merge_heads"] is bool(est.merge_heads_) is True
    assert record["n_heads"] == len(est.heads_) > 2
    assert record["merge_heads_reason"] == est.merge_heads_reason_
    # predict on the model file merges as the estimator does
    assert main(["predict", str(tmp_path / "r.model.npz"), str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"), est.labels_)


def test_data_and_model_swapped_says_which_comes_first(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "r"), "--quiet"]) == 0
    (tmp / "x.csv").write_text("a,b\n1,2\n")
    line = fails(capsys, ["predict", str(tmp / "x.csv"), str(tmp / "r.model.npz")])
    assert "not a NumPy .npz archive" in line and "takes MODEL first, then DATA" in line


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_the_columns_fit_chose_in_a_file_without_header_are_chosen_again_by_position(
        tmp_path, capsys, suffix):
    """fit on column 1 of a file without header (its name: x1): predict on the same file,
    2 columns for a model of 1, is refused (a file without header is read whole, by
    position), and the error gives the --columns that reads column 1 again, which gives
    fit's labels."""
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=200), np.r_[rng.normal(0, 1, 100), rng.normal(9, 1, 100)]]
    data = tmp_path / f"x{suffix}"
    if suffix == ".npy":
        np.save(data, X)
    else:
        np.savetxt(data, X, delimiter=",")
    assert main(["fit", str(data), "-k", "2", "--columns", "1", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    predict = ["predict", str(tmp_path / "r.model.npz"), str(data), "--out",
               str(tmp_path / "p"), "--quiet"]
    err = fails(capsys, predict)
    assert f"{data} has no header and 2 columns, the model was fitted on 1 (x1)" in err
    assert "(--columns 1 reads the positions the model was fitted on)" in err
    assert main([*predict, "--columns", "1"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"),
                                  np.load(tmp_path / "r.labels.npy"))


def _three_blobs(d: int, rng) -> np.ndarray:
    centers = np.eye(d) * 3
    return np.concatenate([rng.normal(c, 0.3, (100, d)) for c in centers])


@pytest.mark.parametrize("header", ["0,1,2", "x1,x2,x3", None])
def test_a_wider_file_without_header_is_refused_whatever_the_model_columns_are_named(
        tmp_path, capsys, header):
    """A model fitted on pandas' header 0,1,2 or on a header x1,x2,x3 read a wider file
    without a header in part, without a word (its columns 0..2 or 1..3 of 4): the names
    matched the reader's x0, x1, ... or the 0-based positions. Now, as for a model fitted
    on a .npy, the width must be the model's; --columns chooses by position."""
    rng = np.random.default_rng(0)
    Y = _three_blobs(3, rng)
    if header is None:
        np.save(tmp_path / "train.npy", Y)
        train = tmp_path / "train.npy"
    else:
        train = tmp_path / "train.csv"
        np.savetxt(train, Y, delimiter=",", header=header, comments="")
    wide = tmp_path / "wide.csv"
    np.savetxt(wide, np.c_[rng.normal(size=(300, 1)) * 100, Y], delimiter=",")
    assert main(["fit", str(train), "-k", "3", "--out", str(tmp_path / "m"), "--quiet"]) == 0
    err = fails(capsys, ["predict", str(tmp_path / "m.model.npz"), str(wide), "--out",
                         str(tmp_path / "p")])
    names = header.replace(",", ", ") if header else "x0, x1, x2"
    assert f"{wide} has no header and 4 columns, the model was fitted on 3 ({names})" in err
    assert not (tmp_path / "p.labels.npy").exists()
    assert main(["predict", str(tmp_path / "m.model.npz"), str(wide), "--columns", "1,2,3",
                 "--out", str(tmp_path / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"),
                                  np.load(tmp_path / "m.labels.npy"))


def test_a_header_naming_the_model_columns_is_still_read_by_name(tmp_path):
    """pandas' header 0,1,2 in the training file and a header 2,0,1,label in the new one
    (--header yes: a line of numbers and a name reads as data): read by name (the names of
    a header match a header's), not by position."""
    rng = np.random.default_rng(1)
    Y = _three_blobs(3, rng)
    np.savetxt(tmp_path / "train.csv", Y, delimiter=",", header="0,1,2", comments="")
    np.savetxt(tmp_path / "new.csv", np.c_[Y[:, [2, 0, 1]], np.arange(300) % 3],
               delimiter=",", header="2,0,1,label", comments="")
    assert main(["fit", str(tmp_path / "train.csv"), "-k", "3", "--out", str(tmp_path / "m"),
                 "--quiet"]) == 0
    assert main(["predict", str(tmp_path / "m.model.npz"), str(tmp_path / "new.csv"),
                 "--header", "yes", "--out", str(tmp_path / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"),
                                  np.load(tmp_path / "m.labels.npy"))


def test_a_header_lacking_a_model_column_is_one_error_and_no_warning(blobs, capsys):
    """Fewer named columns than the model's: a warning "read by position" came before the
    error that refused the file; now one line, naming the column missing."""
    X, z, tmp = blobs
    _iris_like(X, z, tmp / "train.csv")
    assert main(["fit", str(tmp / "train.csv"), "-k", "3", "--drop-columns", "species",
                 "--out", str(tmp / "r"), "--quiet"]) == 0
    (tmp / "fewer.csv").write_text("a,b\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) for row in X[:, :2]) + "\n")
    err = fails(capsys, ["predict", str(tmp / "r.model.npz"), str(tmp / "fewer.csv")])
    assert err == (f"attnclust predict: error: {tmp / 'fewer.csv'} has 2 columns (a, b) and "
                   "none named c; the model was fitted on 3 (a, b, c): choose them with "
                   "--columns or --drop-columns")
    assert "warning" not in err


def test_columns_named_like_generated_ones_are_read_by_name(blobs, capsys):
    """A header x0,x1,x2 (a user's, not the names of a file without one) in another order
    was read by position, with no warning."""
    X, z, tmp = blobs
    np.savetxt(tmp / "a.csv", X, delimiter=",", header="x0,x1,x2", comments="")
    np.savetxt(tmp / "b.csv", X[:, ::-1], delimiter=",", header="x2,x1,x0", comments="")
    assert main(["fit", str(tmp / "a.csv"), "-k", "3", "--out", str(tmp / "m"),
                 "--quiet"]) == 0
    for name in ("a", "b"):
        assert main(["predict", str(tmp / "m.model.npz"), str(tmp / f"{name}.csv"), "--out",
                     str(tmp / f"p{name}"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp / "pa.labels.npy"), np.load(tmp / "pb.labels.npy"))


def test_a_model_fitted_on_a_missing_device_predicts_on_the_cpu(blobs, capsys):
    """A model saved with device="cuda" gave a traceback of torch's on a machine without
    CUDA; info that is no list of names (save_model takes any) gave one too."""
    X, z, tmp = blobs
    np.save(tmp / "x.npy", X)
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    ac.save_model(est.set_params(device="meta"), tmp / "gpu.model.npz")
    ac.save_model(est.set_params(device="cpu"), tmp / "odd.model.npz", info={"columns": [0, 1]})
    for model in ("gpu", "odd"):
        assert main(["predict", str(tmp / f"{model}.model.npz"), str(tmp / "x.npy"), "--out",
                     str(tmp / model)]) == 0
        np.testing.assert_array_equal(np.load(tmp / f"{model}.labels.npy"), est.labels_)
    assert "device='meta'" in capsys.readouterr().err

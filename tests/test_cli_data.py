"""Tests of ``attnclust fit`` and ``attnclust quantize`` on data files, and of bad input."""

from __future__ import annotations

import numpy as np
import pytest

import attnclust as ac
from attnclust.cli import main


@pytest.fixture()
def blobs(tmp_path):
    mix = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.05)
    X, z = mix.sample(300, rng=0, return_labels=True)
    return X, z, tmp_path


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("suffix, header", [(".npy", False), (".csv", False), (".csv", True)])
def test_fit_writes_centers_and_labels(blobs, suffix, header, capsys):
    X, z, tmp = blobs
    data = tmp / f"x{suffix}"
    if suffix == ".npy":
        np.save(data, X)
    else:
        np.savetxt(data, X, delimiter=",", header="a,b,c,d,e,f" if header else "",
                   comments="")
    assert main(["fit", str(data), "--n-clusters", "3", "--out", str(tmp / "res"),
                 "--quiet"]) == 0
    centers = np.load(tmp / "res.centers.npy")
    labels = np.load(tmp / "res.labels.npy")
    np.testing.assert_allclose(np.loadtxt(tmp / "res.centers.csv", delimiter=","), centers)
    np.testing.assert_array_equal(np.loadtxt(tmp / "res.labels.csv", dtype=int), labels)
    assert centers.shape == (3, 6) and labels.shape == (300,)
    assert ac.adjusted_rand_index(z, labels) == 1.0
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    np.testing.assert_allclose(centers, est.cluster_centers_, atol=1e-12)
    out = capsys.readouterr().out
    assert "lambda=" in out and "cluster" in out and "res.labels.csv" in out
    assert not [f for f in _files(tmp) if f.startswith(".")]  # no temporary left


def test_fit_default_prefix_is_next_to_the_data(blobs):
    X, _, tmp = blobs
    np.save(tmp / "pts.npy", X)
    assert main(["fit", str(tmp / "pts.npy"), "-k", "3", "--quiet"]) == 0
    assert (tmp / "pts.centers.npy").exists() and (tmp / "pts.labels.csv").exists()


def _error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("name, content, match", [
    ("missing.npy", None, "no such file"),
    ("words.csv", "a,b\n1,x\n", "non-numeric value 'x'"),
    ("nan.csv", "1,2\nnan,3\n", "NaN or inf at row 2"),
    ("inf.csv", "1,2\n3,inf\n", "NaN or inf"),
    ("col.csv", "1\n2\n3\n", "1 column"),
    ("empty.csv", "", "empty"),
    ("ragged.csv", "1,2\n3\n", "line 2 has 1 fields"),
    ("binary.csv", b"\xff\xfe\x00\x81", "not a text CSV"),
    ("bad.npy", b"not an array", "not a readable .npy"),
    ("x.txt", "1,2\n", "unsupported file type"),
])
def test_fit_bad_files(tmp_path, capsys, name, content, match):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    line = _error(capsys, ["fit", str(path), "--n-clusters", "2", "--out",
                           str(tmp_path / "res")])
    assert line.startswith("attnclust fit: error:") and match in line
    assert not list(tmp_path.glob("res*"))


def test_fit_bad_values(tmp_path, capsys):
    np.save(tmp_path / "one_d.npy", np.arange(5.0))
    assert "2-D" in _error(capsys, ["fit", str(tmp_path / "one_d.npy"), "-k", "2"])
    np.save(tmp_path / "small.npy", np.ones((3, 2)))
    assert "larger than the number of rows (3)" in _error(
        capsys, ["fit", str(tmp_path / "small.npy"), "-k", "4"])
    X = np.ones((5, 2))
    X[2] = 0
    np.save(tmp_path / "zero.npy", X)
    line = _error(capsys, ["fit", str(tmp_path / "zero.npy"), "-k", "2",
                           "--out", str(tmp_path / "res")])
    assert "row 2" in line and "all zeros" in line
    assert _files(tmp_path) == ["one_d.npy", "small.npy", "zero.npy"]
    assert "--temperature" in _error(capsys, ["fit", str(tmp_path / "small.npy"), "-k", "2",
                                              "--temperature", "warm"])


def test_predict_wrong_number_of_features():
    est = ac.AttentionClustering(2, random_state=0).fit(np.eye(4) + 0.1)
    with pytest.raises(ValueError, match="features"):
        est.predict(np.ones((2, 3)))


def test_quantize_writes_identity_attention(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    for out in ("q.npy", "q.csv"):
        assert main(["quantize", str(tmp / "x.npy"), "--temperature", "2.5",
                     "--out", str(tmp / out)]) == 0
    ref = ac.identity_attention(X, 2.5)
    np.testing.assert_allclose(np.load(tmp / "q.npy"), ref)
    np.testing.assert_allclose(np.loadtxt(tmp / "q.csv", delimiter=","), ref)
    assert "wrote" in capsys.readouterr().out


def test_quantize_bad_input(tmp_path, capsys):
    (tmp_path / "nan.csv").write_text("1,2\n3,nan\n")
    line = _error(capsys, ["quantize", str(tmp_path / "nan.csv"), "--temperature", "1",
                           "--out", str(tmp_path / "q.npy")])
    assert line.startswith("attnclust quantize: error:") and "NaN" in line
    np.save(tmp_path / "x.npy", np.ones((4, 2)))
    assert "--out" in _error(capsys, ["quantize", str(tmp_path / "x.npy"), "--temperature",
                                      "1", "--out", str(tmp_path / "q.txt")])
    assert "positive" in _error(capsys, ["quantize", str(tmp_path / "x.npy"),
                                         "--temperature", "-1", "--out",
                                         str(tmp_path / "q.npy")])
    assert _files(tmp_path) == ["nan.csv", "x.npy"]

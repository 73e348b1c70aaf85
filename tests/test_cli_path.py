"""``attnclust path``: its outputs, and bad input refused in one line with nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnclust as ac
from attnclust.cli import main


@pytest.fixture()
def two_blobs(tmp_path):
    np.save(tmp_path / "x.npy", ac.GaussianMixture.antipodal(d=3, sigma=0.3).sample(300, rng=0))
    return tmp_path / "x.npy"


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_path_writes_the_picture_and_the_json(two_blobs, capsys):
    assert main(["path", str(two_blobs), "--max-clusters", "4", "--out",
                 str(two_blobs.parent / "p")]) == 0
    out = capsys.readouterr().out
    assert "chose K=2" in out and "wrote" in out
    assert _files(two_blobs.parent) == ["p.json", "p.png", "x.npy"]
    summary = json.loads((two_blobs.parent / "p.json").read_text())
    assert summary["chosen_n_clusters"] == 2 and summary["n"] == 300
    assert summary["n_clusters"][0] == 1 and max(summary["n_clusters"]) <= 4
    assert (two_blobs.parent / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_prefix_is_next_to_the_data(two_blobs):
    assert main(["path", str(two_blobs), "--max-clusters", "2", "--quiet"]) == 0
    assert _files(two_blobs.parent) == ["x.npy", "x.path.json", "x.path.png"]


@pytest.mark.parametrize(("content", "args", "match"), [
    ("1,2\n3,nan\n", [], "missing value 'nan' at line 2"),
    ("a,b\n1,x\n", [], "x"),
    ("", [], "no rows"),
    ("1,2\n3,4\n", ["--max-clusters", "3"], "--max-clusters"),
    ("1,2\n3,4\n", ["--max-clusters", "0"], "--max-clusters"),
    ("1,2\n3,4\n", ["--max-clusters", "1"], "between 2 and the number of rows"),  # as fit's
    ("1,2\n3,4\n", ["--min-cluster-size", "0"], "--min-cluster-size"),
    # the option's name, not the library's min_cluster_size=
    ("1,2\n3,4\n", ["--min-cluster-size", "3"], "--min-cluster-size must be between 1 and "
                                                 "the number of rows (2)"),
    ("1,2\n0,0\n", ["--geometry", "sphere"], "zero"),
])
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, content, args, match):
    data = tmp_path / "d.csv"
    data.write_text(content)
    argv = ["path", str(data), "--max-clusters", "2", *args, "--out", str(tmp_path / "p")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnclust path: error:") and match in err[0]
    assert _files(tmp_path) == ["d.csv"]


@pytest.mark.parametrize("huge", ["rows at 1e155", "one at the largest"])
def test_a_covariance_that_overflows_is_one_line(tmp_path, capsys, huge):
    """Three blobs in 3-D at 1e155, or one entry at float64's largest: the covariance of
    the first split overflows; read in units of the largest entry, the path's inverse
    temperatures are out of float64's range and say so (it was eigh's traceback)."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, (100, 3)) for c in ([0, 0, 0], [3, 3, 0], [0, 3, 3])])
    if huge == "one at the largest":
        X[10, 0] = np.finfo(np.float64).max
    else:
        X = X * 1e155
    np.save(tmp_path / "x.npy", X)
    assert main(["path", str(tmp_path / "x.npy"), "--max-clusters", "3", "--out",
                 str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of float64's range; rescale the data" in err[0]
    assert _files(tmp_path) == ["x.npy"]


def test_missing_or_unsupported_file(tmp_path, capsys):
    assert main(["path", str(tmp_path / "none.npy"), "--max-clusters", "2"]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "y.json").write_text("{}")
    assert main(["path", str(tmp_path / "y.json"), "--max-clusters", "2"]) == 2
    assert "unsupported file type" in capsys.readouterr().err
    assert _files(tmp_path) == ["y.json"]


def test_path_says_what_fit_k_auto_chooses_and_why_they_differ(two_blobs, tmp_path, capsys):
    folder = two_blobs.parent
    assert main(["path", str(two_blobs), "--max-clusters", "4", "--out",
                 str(folder / "p")]) == 0
    assert "fit -k auto chooses the same K=2" in capsys.readouterr().out
    assert main(["fit", str(two_blobs), "-k", "auto", "--max-clusters", "4", "--out",
                 str(folder / "f"), "--quiet"]) == 0
    path_json = json.loads((folder / "p.json").read_text())
    fit_json = json.loads((folder / "f.summary.json").read_text())
    assert path_json["fit_auto_n_clusters"] == fit_json["n_clusters"] == 2
    # a uniform square: no plateau of the path, several Gaussians by the BIC; both said
    np.save(tmp_path / "u.npy", np.random.default_rng(0).uniform(0, 1, (500, 2)))
    assert main(["path", str(tmp_path / "u.npy"), "--max-clusters", "6", "--out",
                 str(tmp_path / "u")]) == 0
    record = json.loads((tmp_path / "u.json").read_text())
    out = capsys.readouterr().out
    assert record["chosen_n_clusters"] != record["fit_auto_n_clusters"]
    assert f"fit -k auto chooses K={record['fit_auto_n_clusters']} instead" in out
    assert main(["fit", str(tmp_path / "u.npy"), "-k", "auto", "--max-clusters", "6",
                 "--out", str(tmp_path / "uf"), "--quiet"]) == 0
    fitted = json.loads((tmp_path / "uf.summary.json").read_text())["n_clusters"]
    assert fitted == record["fit_auto_n_clusters"]


def test_path_and_quantize_read_tables_as_fit_does(tmp_path, capsys):
    X = ac.GaussianMixture.antipodal(d=2, sigma=0.3).sample(200, rng=0)
    rows = [f"{float(a)!r},{float(b)!r},s{i % 2}" for i, (a, b) in enumerate(X)]
    (tmp_path / "t.csv").write_text("a,b,species\n" + "\n".join(rows) + "\n")
    (tmp_path / "out").mkdir()
    assert main(["path", str(tmp_path / "t.csv"), "--max-clusters", "3", "--drop-columns",
                 "species", "--out", f"{tmp_path / 'out'}/", "--quiet"]) == 0
    assert _files(tmp_path / "out") == ["t.path.json", "t.path.png"]
    assert json.loads((tmp_path / "out" / "t.path.json").read_text())["d"] == 2
    assert main(["quantize", str(tmp_path / "t.csv"), "--inverse-temperature", "1",
                 "--columns", "a,b", "--out", str(tmp_path / "q.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"),
                               ac.identity_attention(X, 1.0), rtol=1e-12, atol=1e-12)


def test_a_path_that_ends_on_its_last_count_says_to_follow_more_heads(tmp_path, capsys):
    X = np.concatenate([np.random.default_rng(0).normal(c, 0.3, (100, 2))
                        for c in ((0, 0), (6, 0), (0, 6))])
    np.save(tmp_path / "x.npy", X)
    assert main(["path", str(tmp_path / "x.npy"), "--max-clusters", "3", "--quiet"]) == 0
    out = capsys.readouterr().out       # the three-cluster plateau never closed
    assert "chose K=1" in out and "follow more heads (--max-clusters)" in out
    assert main(["path", str(tmp_path / "x.npy"), "--max-clusters", "4", "--quiet"]) == 0
    assert "chose K=3" in capsys.readouterr().out


def test_path_says_when_the_fit_it_agrees_with_is_weak_and_names_its_objective(tmp_path,
                                                                               capsys):
    """Eight rows in two groups far apart: path and fit -k auto both answer 2, and fit's
    choice is weak (clusters of 4 rows), which path now says; with --objective risk the
    path is the layer's risk minimizer, not soft k-means."""
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(2, 2)) * 100
    np.save(tmp_path / "e.npy", np.concatenate([c + rng.normal(size=(4, 2)) for c in centres]))
    assert main(["path", str(tmp_path / "e.npy"), "--max-clusters", "4", "--out",
                 str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "fit -k auto chooses the same K=2" in out and "; weak: a cluster of 4 rows" in out
    assert main(["path", str(tmp_path / "e.npy"), "--max-clusters", "4", "--objective",
                 "risk", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "instead" in out and "plateau of the layer's risk minimizer" in out
    assert "soft k-means" not in out

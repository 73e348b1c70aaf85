"""Tests of ``attnclust fit`` and ``attnclust quantize`` on data files, and of bad input."""

from __future__ import annotations

import numpy as np
import pytest

import attnclust as ac
from _cli import fails
from _tolerance import attention_risk_tol, eps
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
    # the CSVs carry a header: the feature names (DATA's, else x0, x1, ...), then label
    names = "a,b,c,d,e,f" if header else ",".join(f"x{j}" for j in range(6))
    assert (tmp / "res.centers.csv").read_text().splitlines()[0] == names
    assert (tmp / "res.labels.csv").read_text().splitlines()[0] == "label"
    np.testing.assert_allclose(np.loadtxt(tmp / "res.centers.csv", delimiter=",",
                                          skiprows=1), centers)
    np.testing.assert_array_equal(np.loadtxt(tmp / "res.labels.csv", dtype=int, skiprows=1),
                                  labels)
    assert centers.shape == (3, 6) and labels.shape == (300,)
    assert ac.adjusted_rand_index(z, labels) == 1.0
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    # the command line fits the same estimator on the same doubles (a .npy, or a CSV
    # written with 18 digits): the same operations
    np.testing.assert_array_equal(centers, est.cluster_centers_)
    out = capsys.readouterr().out
    assert "lambda=" in out and "cluster" in out and "res.labels.csv" in out
    assert not [f for f in _files(tmp) if f.startswith(".")]  # no temporary left


def test_fit_default_prefix_is_next_to_the_data(blobs):
    X, _, tmp = blobs
    np.save(tmp / "pts.npy", X)
    assert main(["fit", str(tmp / "pts.npy"), "-k", "3", "--quiet"]) == 0
    assert (tmp / "pts.centers.npy").exists() and (tmp / "pts.labels.csv").exists()




@pytest.mark.parametrize("name, content, match", [
    ("missing.npy", None, "no such file"),
    ("words.csv", "a,b\n1,x\n", "non-numeric value 'x'"),
    ("nan.csv", "1,2\nnan,3\n", "missing value 'nan' at line 2, column 1"),
    ("inf.csv", "1,2\n3,inf\n", "infinite value 'inf' at line 2, column 2"),
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
    line = fails(capsys, ["fit", str(path), "--n-clusters", "2", "--out",
                           str(tmp_path / "res")])
    assert line.startswith("attnclust fit: error:") and match in line
    assert not list(tmp_path.glob("res*"))


def test_fit_clusters_one_feature_and_refuses_to_plot_it(tmp_path, capsys):
    """One column is data (a list of numbers), as for the estimator; its plot is refused
    before anything is written."""
    path = tmp_path / "col.csv"
    path.write_text("1.1\n1.2\n0.9\n7\n7.3\n")
    assert main(["fit", str(path), "-k", "2", "--quiet", "--out", str(tmp_path / "res")]) == 0
    labels = np.load(tmp_path / "res.labels.npy")
    assert len(set(labels[:3])) == 1 and len(set(labels[3:])) == 1 and labels[0] != labels[3]
    line = fails(capsys, ["fit", str(path), "-k", "2", "--plot", "--out",
                           str(tmp_path / "plotted")])
    assert "--plot draws two columns or more" in line and not list(tmp_path.glob("plotted*"))


def test_fit_bad_values(tmp_path, capsys):
    np.save(tmp_path / "one_d.npy", np.arange(5.0))
    assert "2-D" in fails(capsys, ["fit", str(tmp_path / "one_d.npy"), "-k", "2"])
    np.save(tmp_path / "small.npy", np.ones((3, 2)))
    assert "larger than the number of rows (3)" in fails(
        capsys, ["fit", str(tmp_path / "small.npy"), "-k", "4"])
    X = np.ones((5, 2))
    X[2] = 0
    np.save(tmp_path / "zero.npy", X)
    line = fails(capsys, ["fit", str(tmp_path / "zero.npy"), "-k", "2", "--geometry", "sphere",
                           "--out", str(tmp_path / "res")])
    assert "zero.npy: row 3 is all zeros" in line   # counted from 1, as in every message
    assert _files(tmp_path) == ["one_d.npy", "small.npy", "zero.npy"]
    assert "--inverse-temperature" in fails(capsys, ["fit", str(tmp_path / "small.npy"), "-k", "2",
                                              "--inverse-temperature", "warm"])


def test_predict_wrong_number_of_features():
    est = ac.AttentionClustering(2, random_state=0).fit(np.eye(4) + 0.1)
    with pytest.raises(ValueError, match="features"):
        est.predict(np.ones((2, 3)))


def test_quantize_writes_identity_attention(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    for out in ("q.npy", "q.csv"):
        assert main(["quantize", str(tmp / "x.npy"), "--inverse-temperature", "2.5",
                     "--out", str(tmp / out)]) == 0
    ref = ac.identity_attention(X, 2.5)
    np.testing.assert_allclose(np.load(tmp / "q.npy"), ref)
    # the CSV has a header, as fit's: the names of a .npy's columns, x0, x1, ...
    header = ",".join(f"x{j}" for j in range(X.shape[1]))
    assert (tmp / "q.csv").read_text().splitlines()[0] == header
    np.testing.assert_allclose(np.loadtxt(tmp / "q.csv", delimiter=",", skiprows=1), ref)
    assert "wrote" in capsys.readouterr().out


def test_quantize_bad_input(tmp_path, capsys):
    (tmp_path / "nan.csv").write_text("1,2\n3,nan\n")
    line = fails(capsys, ["quantize", str(tmp_path / "nan.csv"), "--inverse-temperature", "1",
                           "--out", str(tmp_path / "q.npy")])
    assert line.startswith("attnclust quantize: error:") and "missing value 'nan'" in line
    np.save(tmp_path / "x.npy", np.ones((4, 2)))
    assert "--out" in fails(capsys, ["quantize", str(tmp_path / "x.npy"), "--inverse-temperature",
                                      "1", "--out", str(tmp_path / "q.txt")])
    assert "positive" in fails(capsys, ["quantize", str(tmp_path / "x.npy"),
                                         "--inverse-temperature", "-1", "--out",
                                         str(tmp_path / "q.npy")])
    assert _files(tmp_path) == ["nan.csv", "x.npy"]


# -- review findings: output files, bad values, messages -------------------------------------
@pytest.mark.parametrize("name", ["q.NPY", "q.CSV"])
def test_quantize_upper_case_suffix_writes_the_data(blobs, name):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["quantize", str(tmp / "x.npy"), "--inverse-temperature", "2.5",
                 "--out", str(tmp / name)]) == 0
    assert _files(tmp) == sorted([name, "x.npy"])        # no hidden file left behind
    out = tmp / name
    Y = np.load(out) if name.endswith("NPY") else np.loadtxt(out, delimiter=",", skiprows=1)
    np.testing.assert_allclose(Y, ac.identity_attention(X, 2.5))


def test_outputs_have_ordinary_permissions(blobs):
    import os
    import stat
    import sys

    if sys.platform == "win32":
        pytest.skip("POSIX permission bits")
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    old = os.umask(0o022)
    try:
        assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "res"),
                     "--quiet"]) == 0
        assert main(["quantize", str(tmp / "x.npy"), "--inverse-temperature", "2",
                     "--out", str(tmp / "q.csv")]) == 0
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp.iterdir() if p.name != "x.npy"}
    # centers and labels (.npy, .csv), the model file, the summary; q.csv
    assert len(modes) == 7 and set(modes.values()) == {0o644}


def test_fit_rejects_complex_npy(tmp_path, capsys):
    path = tmp_path / "c.npy"
    np.save(path, np.ones((6, 3)) * (1 + 1j))
    line = fails(capsys, ["fit", str(path), "-k", "2", "--out", str(tmp_path / "res")])
    assert str(path) in line and "complex" in line
    assert _files(tmp_path) == ["c.npy"]


def test_csv_first_row_with_one_bad_cell_is_not_a_header(tmp_path, capsys):
    path = tmp_path / "d.csv"
    path.write_text("1,x,3\n" + "".join(f"{i},{i + 1},{2 - i}\n" for i in range(6)))
    line = fails(capsys, ["fit", str(path), "-k", "2", "--out", str(tmp_path / "res")])
    assert "non-numeric value 'x' at line 1, column 2" in line
    assert _files(tmp_path) == ["d.csv"]


@pytest.mark.parametrize("scale, lam", [(1e200, "1"), (2.0, "1e308")])
def test_quantize_overflow_is_an_error_not_nan_output(tmp_path, capsys, scale, lam):
    X = np.random.default_rng(0).normal(size=(20, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.save(tmp_path / "x.npy", X * scale)
    line = fails(capsys, ["quantize", str(tmp_path / "x.npy"), "--inverse-temperature", lam,
                           "--out", str(tmp_path / "q.npy")])
    assert "non-finite values (overflow)" in line
    assert line.endswith("rescale the data or lower --inverse-temperature")
    assert _files(tmp_path) == ["x.npy"]


@pytest.mark.parametrize("bad", [np.nan, np.inf, 2.0])
def test_fit_never_writes_bad_centers(blobs, capsys, monkeypatch, bad):
    """The CLI's own check, whatever the estimator returns: finite centers, of unit norm on
    the sphere."""
    from attnclust.cluster.clustering import AttentionClustering

    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    real_fit = AttentionClustering.fit

    def fit(self, X, y=None, sample_weight=None):
        real_fit(self, X, sample_weight=sample_weight)
        self.cluster_centers_ = self.cluster_centers_ * bad
        return self

    monkeypatch.setattr(AttentionClustering, "fit", fit)
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "res"),
                           "--quiet", "--geometry", "sphere"])
    assert ("non-finite" in line) if not np.isfinite(bad) else ("norm 2" in line)
    assert _files(tmp) == ["x.npy"]


def test_fit_failing_rename_leaves_no_partial_output(blobs, capsys, third_rename_fails):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    calls = third_rename_fails
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "res"),
                           "--quiet"])
    assert "no space left on the device" in line and len(calls) == 3
    assert _files(tmp) == ["x.npy"]


@pytest.mark.parametrize("anneal", [True, False])
def test_progress_total_counts_every_step(tmp_path, monkeypatch, capsys, anneal):
    """A fit that runs to max_iter fills its progress bar exactly, annealing included."""
    from attnclust.cli import fit as fit_command

    seen = {}

    class Bar:
        def close(self):
            pass

    def progress(total, quiet):
        seen["total"], seen["steps"] = total, 0

        def callback(info):
            seen["steps"] += 1
        return Bar(), callback

    monkeypatch.setattr(fit_command, "progress_callback", progress)
    X = np.random.default_rng(1).normal(size=(200, 5))       # no clusters: slow to converge
    np.save(tmp_path / "x.npy", X)
    # the soft solver at a given lambda (the default's bar may end early: its hard stage
    # on a sample of every row runs in scikit-learn, without steps to show)
    argv = ["fit", str(tmp_path / "x.npy"), "-k", "4", "--max-iter", "3",
            "--out", str(tmp_path / "res")] + (["--geometry", "sphere"] if anneal
                                               else ["--no-anneal", "--inverse-temperature",
                                                     "1.0"])
    assert main(argv) == 0
    assert "converged=no" in capsys.readouterr().out
    assert seen["steps"] == seen["total"]
    assert (seen["total"] > 3) == anneal


@pytest.mark.parametrize("argv, match", [
    (["fit", "x.npy", "-k", "abc"], "invalid value 'abc': give an integer or 'auto'"),
    (["reproduce"], "required: FIG"),
    (["fit", "x.npy"], "--n-clusters"),
    ([], "COMMAND"),
    (["nosuch"], "invalid choice"),
])
def test_usage_errors_are_one_line(capsys, argv, match):
    line = fails(capsys, argv)
    assert line.startswith("attnclust") and ": error: " in line and match in line
    assert "--help)" in line and not capsys.readouterr().out


def test_help_exits_zero(capsys):
    assert main(["fit", "--help"]) == 0
    assert "--n-clusters" in capsys.readouterr().out


def test_option_errors_name_the_option(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.eye(4) + 0.1)
    assert "--seed must be a non-negative integer, got -1" in fails(
        capsys, ["reproduce", "fig1", "--seed", "-1", "--out", str(tmp_path / "o")])
    assert "--seed must be a non-negative integer" in fails(
        capsys, ["fit", str(tmp_path / "x.npy"), "-k", "2", "--seed", "-1"])
    assert "--max-iter" in fails(capsys, ["fit", str(tmp_path / "x.npy"), "-k", "2",
                                           "--max-iter", "0"])
    assert "'all' cannot be combined with figure names" in fails(
        capsys, ["reproduce", "all", "fig4", "--out", str(tmp_path / "o")])
    assert _files(tmp_path) == ["x.npy"]


def test_bench_only_matching_nothing(capsys):
    from attnclust._bench import find_benchmarks

    line = fails(capsys, ["bench", "--only", "nomatch"])
    assert "--only 'nomatch'" in line
    for path in find_benchmarks():
        assert path.stem.removeprefix("bench_") in line


def test_failing_benchmark_is_one_line_not_a_traceback(tmp_path, capsys):
    (tmp_path / "bench_a_ok.py").write_text(
        "def run(quick):\n    return [{'case': 'x', 'ratio': 1.5}]\n")
    (tmp_path / "bench_b_fail.py").write_text(
        "import subprocess\n"
        "def run(quick):\n"
        "    raise subprocess.CalledProcessError(3, ['python', 'w.py'],\n"
        "                                        stderr='Traceback ...\\nMemoryError: boom\\n')\n")
    assert main(["bench", "--dir", str(tmp_path), "--quick"]) == 1
    out, err = capsys.readouterr()
    assert "== a_ok" in out and "1.5" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "benchmark 'b_fail'" in lines[0]
    assert f"({tmp_path / 'bench_b_fail.py'}) failed" in lines[0]
    assert "status 3" in lines[0] and "MemoryError: boom" in lines[0]


@pytest.mark.parametrize("device, match", [("foo", "not a torch device"),
                                           ("cuda", "CUDA is not available"),
                                           ("cuda:1", "CUDA is not available"),
                                           ("mps", "not supported")])
def test_bad_device_is_one_line(tmp_path, capsys, monkeypatch, device, match):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    np.save(tmp_path / "x.npy", np.eye(4) + 0.1)
    for cmd in (["fit", str(tmp_path / "x.npy"), "-k", "2"],
                ["fit", str(tmp_path / "x.npy"), "-k", "2", "--distributed"]):
        line = fails(capsys, cmd + ["--device", device])
        assert f"--device {device!r}" in line and match in line
    assert _files(tmp_path) == ["x.npy"]


# -- hostile files and sizes (issue 10) ---------------------------------------------------------
def test_npy_header_declaring_terabytes_is_one_line(tmp_path, capsys):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 8)})
        f.write(b"\0" * 64)
    for argv in (["fit", str(path), "-k", "2"],
                 ["quantize", str(path), "--inverse-temperature", "1", "--out",
                  str(tmp_path / "q.npy")]):
        line = fails(capsys, argv)
        assert "truncated or inconsistent .npy file" in line and "58.2 TiB" in line
    assert _files(tmp_path) == ["huge.npy"]


def test_spreadsheet_csv_with_byte_order_mark_fits(blobs, capsys):
    X, z, tmp = blobs
    lines = ["a,b,c,d,e,f"] + [",".join(f"{v:.17g}" for v in row) for row in X]
    (tmp / "excel.csv").write_bytes("\ufeff".encode() + "\r\n".join(lines).encode())
    assert main(["fit", str(tmp / "excel.csv"), "-k", "3", "--quiet",
                 "--out", str(tmp / "res")]) == 0
    assert ac.adjusted_rand_index(z, np.load(tmp / "res.labels.npy")) == 1.0


def test_dense_backend_too_large_is_refused_at_once(tmp_path, capsys):
    """L = 200,000: the dense L x L matrices would need 596 GiB; refused before allocating."""
    import time

    np.save(tmp_path / "long.npy", np.ones((200_000, 2)))
    start = time.perf_counter()
    line = fails(capsys, ["quantize", str(tmp_path / "long.npy"), "--inverse-temperature", "1",
                           "--backend", "dense", "--out", str(tmp_path / "q.npy")])
    assert time.perf_counter() - start < 10
    assert "--backend dense needs 596.0 GiB" in line and "L=200000" in line
    assert "use --backend fused or chunked" in line
    assert _files(tmp_path) == ["long.npy"]


def test_summary_sums_in_blocks_equal_the_whole_matrix(blobs):
    from attnclust.cli._summary import summary_sums

    X, _, _ = blobs
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    conf_sum, sq_err = summary_sums(est, X, 3, chunk=7)            # 300 rows in 43 blocks
    proba = est.predict_proba(X)
    expected = [proba[est.labels_ == k].max(1).sum() for k in range(3)]
    # blocks of 7 rows against whole chunks: sums of n positive terms and rows' logits
    # from other kernels (inner products of length d, the softmax's condition lambda s^2)
    lam, (n, d), K = est.inverse_temperature_, X.shape, 3
    s = float(np.linalg.norm(X, axis=1).max() + np.linalg.norm(est.cluster_centers_, axis=1).max())
    np.testing.assert_allclose(conf_sum, expected, atol=0,
                               rtol=(n + d + K + lam * s * s) * eps())
    # the risk: the layer's mean squared error, against its outputs on the whole matrix
    risk = float(((X - est.layer_output(X)) ** 2).sum(1).mean())
    assert abs(sq_err / len(X) - risk) < attention_risk_tol(n, s, lam, K, d)[0]


def test_a_header_naming_two_columns_alike_is_refused(tmp_path, capsys):
    """A model names its columns, and predict finds them by name: a header 'a,a,b' is one
    line at fit, saying how to keep one; with one left out, predict reads the training
    file back and gives fit's labels."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (40, 3)), rng.normal(8, 1, (40, 3))]
    data = tmp_path / "d.csv"
    np.savetxt(data, X, delimiter=",", header="a,a,b", comments="")
    line = fails(capsys, ["fit", str(data), "-k", "2", "--out", str(tmp_path / "r")])
    assert "the header names two kept columns 'a'" in line and "--drop-columns" in line
    assert main(["fit", str(data), "-k", "2", "--drop-columns", "1", "--out",
                 str(tmp_path / "r"), "--quiet"]) == 0
    assert main(["predict", str(tmp_path / "r.model.npz"), str(data), "--drop-columns", "1",
                 "--out", str(tmp_path / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"),
                                  np.load(tmp_path / "r.labels.npy"))


def test_a_csv_of_get_dummies_reads_true_and_false_as_one_and_zero(tmp_path):
    """``pd.get_dummies(df).to_csv()`` writes its columns as True and False: the command
    line refused them as text, where the library takes the DataFrame itself (NumPy reads
    booleans as 1 and 0)."""
    from attnclust._io import load_matrix

    path = tmp_path / "dummies.csv"
    path.write_text("x,c_a,c_b\n0.5,True,False\n1.5,false,TRUE\n2.5,True,False\n")
    np.testing.assert_array_equal(load_matrix(path),
                                  [[0.5, 1.0, 0.0], [1.5, 0.0, 1.0], [2.5, 1.0, 0.0]])

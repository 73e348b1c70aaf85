"""``attnclust --version``, ``fit --proba``, ``fit --plot`` and ``--header`` for CSV files."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnclust as ac
from _cli import fails
from _tolerance import eps
from attnclust.cli import main


@pytest.fixture()
def blobs(tmp_path):
    mix = ac.GaussianMixture.random(d=4, k=3, sigma=0.1, rng=0)
    X, z = mix.sample(300, rng=0, return_labels=True)
    return X, z, tmp_path




def _no_temporaries(folder) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"attnclust {ac.__version__}"


def test_proba_rows_are_predict_proba_and_sum_to_one(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--proba", "--out", str(tmp / "r"),
                 "--quiet"]) == 0
    P = np.load(tmp / "r.proba.npy")
    assert (tmp / "r.proba.csv").read_text().splitlines()[0] == "cluster_0,cluster_1,cluster_2"
    np.testing.assert_array_equal(np.loadtxt(tmp / "r.proba.csv", delimiter=",", skiprows=1), P)
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    # the command line fits the same estimator on the same doubles: the same operations
    np.testing.assert_array_equal(P, est.predict_proba(X))
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=(3 + 1) * eps())  # K terms, 1 quotient
    np.testing.assert_array_equal(P.argmax(1), np.load(tmp / "r.labels.npy"))  # separated
    assert "r.proba.csv" in capsys.readouterr().out and _no_temporaries(tmp)


def _sticks(rng, n=300):
    """Three elongated Gaussian clusters: full heads win (:mod:`test_shape_choice`)."""
    def stick(t, c):
        turn = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
        return rng.normal(size=(n, 2)) * [3.0, 0.3] @ turn + c
    return np.concatenate([stick(0.0, [0, 0]), stick(np.pi / 3, [5, 0]),
                           stick(2 * np.pi / 3, [2.5, 4.3])])


def test_the_chosen_shape_is_the_estimators_and_its_covariances_are_written(tmp_path, capsys):
    X = _sticks(np.random.default_rng(0))
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    assert est.covariance_type_ == "full"
    out = capsys.readouterr().out
    assert f"chose covariance_type={est.covariance_type_reason_}" in out
    # the same estimator on the same doubles: the same operations
    np.testing.assert_array_equal(np.load(tmp_path / "r.covariances.npy"), est.covariances_)
    np.testing.assert_array_equal(np.load(tmp_path / "r.labels.npy"), est.labels_)
    # a spherical fit writes no covariances
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--covariance-type", "spherical",
                 "--out", str(tmp_path / "s"), "--quiet"]) == 0
    assert not (tmp_path / "s.covariances.npy").exists()


def test_shaped_heads_are_not_streamed(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    err = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--covariance-type", "full",
                          "--batch-rows", "100", "--out", str(tmp / "r")])
    assert "--covariance-type full is fitted on all the rows at once" in err
    assert sorted(p.name for p in tmp.iterdir()) == ["x.npy"]


def test_the_noise_head_labels_noise_rows_minus_one_and_counts_them_apart(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.5, (200, 2)) for c in ((0, 0), (4, 0), (0, 4))]
                       + [rng.uniform(-6, 10, (100, 2))])
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--noise-head", "--plot",
                 "--out", str(tmp_path / "r"), "--quiet"]) == 0
    est = ac.AttentionClustering(3, noise_head=True, random_state=0).fit(X)
    labels = np.load(tmp_path / "r.labels.npy")
    np.testing.assert_array_equal(labels, est.labels_)     # the same fit, the same doubles
    n_noise = int((labels == -1).sum())
    out = capsys.readouterr().out
    assert n_noise > 50 and f"{n_noise:,} rows labelled -1" in out
    sizes = [int(m.group(1)) for m in re.finditer(r"^\s+\d+\s+(\d+)\s+0\.\d+", out, re.M)]
    assert sizes == np.bincount(labels[labels >= 0], minlength=3).tolist()
    assert (tmp_path / "r.png").exists()


@pytest.mark.parametrize("extra, message", [
    (["--batch-rows", "100"], "--noise-head fits all the rows in one process"),
    (["--covariance-type", "full"], "leave --covariance-type at auto"),
])
def test_the_noise_head_refuses_what_it_cannot_fit(blobs, capsys, extra, message):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    err = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--noise-head", *extra,
                          "--out", str(tmp / "r")])
    assert message in err
    assert sorted(p.name for p in tmp.iterdir()) == ["x.npy"]


def test_no_proba_no_plot_without_the_flags(blobs):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--out", str(tmp / "r"), "--quiet"]) == 0
    assert not (tmp / "r.proba.npy").exists() and not (tmp / "r.png").exists()


@pytest.mark.parametrize("d", [2, 5])
def test_plot_writes_a_png(tmp_path, d, capsys):
    X = ac.GaussianMixture.random(d=d, k=3, sigma=0.1, rng=0).sample(400, rng=0)
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--plot", "--out",
                 str(tmp_path / "r"), "--quiet"]) == 0
    png = (tmp_path / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "r.png" in capsys.readouterr().out and _no_temporaries(tmp_path)


def test_plot_failure_leaves_no_file(blobs, capsys, monkeypatch):
    """A picture that cannot be drawn is one line, and none of the outputs is written."""
    from attnclust.cluster import picture

    def broken(*args, **kwargs):
        raise ValueError("cannot draw")
    monkeypatch.setattr(picture, "plot_clusters", broken)
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert "cannot draw" in fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--plot",
                                             "--proba", "--out", str(tmp / "r"), "--quiet"])
    assert sorted(p.name for p in tmp.iterdir()) == ["x.npy"]


def test_outputs_may_not_overwrite_the_input(tmp_path, capsys):
    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.1, rng=0).sample(50, rng=0)
    np.save(tmp_path / "r.proba.npy", X)
    line = fails(capsys, ["fit", str(tmp_path / "r.proba.npy"), "-k", "2", "--proba",
                           "--out", str(tmp_path / "r")])
    assert "is the input file" in line



def test_outputs_may_not_overwrite_the_weight_file(tmp_path, capsys):
    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.1, rng=0).sample(50, rng=0)
    np.save(tmp_path / "d.npy", X)
    np.savetxt(tmp_path / "d.weights.csv", np.ones(50), header="w", comments="")
    before = (tmp_path / "d.weights.csv").read_bytes()
    line = fails(capsys, ["fit", str(tmp_path / "d.npy"), "-k", "2", "--covariance-type",
                          "diag", "--sample-weight", str(tmp_path / "d.weights.csv")])
    assert "d.weights.csv is the input file" in line
    assert (tmp_path / "d.weights.csv").read_bytes() == before


def test_an_earlier_output_read_as_data_is_not_removed_as_stale(tmp_path):
    X = ac.GaussianMixture.random(d=2, k=3, sigma=0.1, rng=0).sample(90, rng=0)
    np.save(tmp_path / "x.npy", X)
    out = str(tmp_path / "r")
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "3", "--proba", "--out", out,
                 "--quiet"]) == 0
    proba = (tmp_path / "r.proba.npy").read_bytes()
    assert main(["fit", str(tmp_path / "r.proba.npy"), "-k", "2", "--out", out,
                 "--quiet"]) == 0
    assert (tmp_path / "r.proba.npy").read_bytes() == proba     # the data read stays
    assert not (tmp_path / "r.proba.csv").exists()              # the other stale file goes

def test_distributed_plot_is_refused_before_any_work(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert "--plot needs all rows" in fails(
        capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--plot", "--distributed"])
    assert "cannot be combined with --distributed" in fails(
        capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--batch-rows", "100", "--distributed"])


# -- --header ---------------------------------------------------------------------------------
def _write_csv(path, X, header: str | None, *, integers: bool = False) -> None:
    """As pandas' ``to_csv(index=False)`` does: ``repr`` of each float, or integers."""
    lines = [] if header is None else [header]
    lines += [",".join(str(int(v)) if integers else repr(float(v)) for v in row) for row in X]
    path.write_text("\n".join(lines) + "\n")


def _labels(tmp, argv) -> np.ndarray:
    assert main(["fit", *argv, "-k", "3", "--out", str(tmp / "r"), "--quiet"]) == 0
    return np.load(tmp / "r.labels.npy")


def test_pandas_numeric_header_is_detected(blobs):
    """``DataFrame(X).to_csv(index=False)`` writes the header ``0,1,2,3``: 300 rows give 300
    labels (it used to be read as a row: 301 labels, every join off by one)."""
    X, z, tmp = blobs
    _write_csv(tmp / "x.csv", X, "0,1,2,3")
    labels = _labels(tmp, [str(tmp / "x.csv")])
    assert labels.shape == (300,) and ac.adjusted_rand_index(z, labels) == 1.0
    np.testing.assert_array_equal(_labels(tmp, [str(tmp / "x.csv"), "--header", "yes"]),
                                  labels)


@pytest.mark.parametrize("header, integers", [("2019,2020,2021,2022", False),   # years
                                              ("1,2,3,4", False),               # from 1
                                              ("0,1,2,3", True)])      # above integer rows
def test_ambiguous_numeric_first_line_is_refused(blobs, capsys, header, integers):
    X, _, tmp = blobs
    _write_csv(tmp / "x.csv", np.round(X * 100) if integers else X, header, integers=integers)
    line = fails(capsys, ["fit", str(tmp / "x.csv"), "-k", "3", "--out", str(tmp / "r")])
    assert "pass --header yes or --header no" in line and "first line" in line
    assert sorted(p.name for p in tmp.iterdir()) == ["x.csv"]
    assert _labels(tmp, [str(tmp / "x.csv"), "--header", "yes"]).shape == (300,)
    assert _labels(tmp, [str(tmp / "x.csv"), "--header", "no"]).shape == (301,)


def test_numeric_rows_without_header_are_all_data(blobs):
    X, _, tmp = blobs
    _write_csv(tmp / "f.csv", X, None)                                    # floats
    assert _labels(tmp, [str(tmp / "f.csv")]).shape == (300,)
    _write_csv(tmp / "d.csv", X, "3,1,4,1")        # integers, not increasing: not names
    assert _labels(tmp, [str(tmp / "d.csv")]).shape == (301,)
    _write_csv(tmp / "i.csv", np.round(X * 100), None, integers=True)    # integers
    assert _labels(tmp, [str(tmp / "i.csv")]).shape == (300,)


def test_header_no_makes_a_named_header_an_error(blobs, capsys):
    X, _, tmp = blobs
    _write_csv(tmp / "x.csv", X, "a,b,c,d")
    assert _labels(tmp, [str(tmp / "x.csv")]).shape == (300,)
    line = fails(capsys, ["fit", str(tmp / "x.csv"), "-k", "3", "--header", "no"])
    assert "non-numeric value 'a' at line 1" in line


def test_quantize_reads_the_header_as_fit_does(blobs):
    X, _, tmp = blobs
    _write_csv(tmp / "x.csv", X, "0,1,2,3")
    assert main(["quantize", str(tmp / "x.csv"), "--inverse-temperature", "2", "--out",
                 str(tmp / "q.npy"), "--quiet"]) == 0
    assert np.load(tmp / "q.npy").shape == (300, 4)


# -- bench --device ------------------------------------------------------------------------
def test_bench_device_runs_only_the_benchmarks_that_take_it(tmp_path, capsys):
    (tmp_path / "bench_dev.py").write_text(
        "def run(quick, device='cpu'):\n    return [{'device': device, 'quick': quick}]\n")
    (tmp_path / "bench_cpu.py").write_text("def run(quick):\n    return [{'ran': 1}]\n")
    assert main(["bench", "--dir", str(tmp_path), "--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "skipped: it measures the CPU only" in out and "ran" not in out
    assert "cpu     True" in out
    assert main(["bench", "--dir", str(tmp_path)]) == 0       # without --device: both run
    out = capsys.readouterr().out
    assert "ran" in out and "skipped" not in out
    (tmp_path / "bench_none.py").write_text("def run(quick):\n    return None\n")
    assert main(["bench", "--dir", str(tmp_path), "--only", "none"]) == 0
    out = capsys.readouterr().out           # no --device to blame: 'not --device None'
    assert "(no rows: its run() returned None)" in out and "--device" not in out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is here")
def test_bench_on_a_missing_device_is_one_line(capsys):
    line = fails(capsys, ["bench", "--only", "devices", "--device", "cuda"])
    assert "CUDA is not available" in line


# -- --sample-weight / --weight-column -----------------------------------------------------
def _fit_files(tmp, argv) -> tuple[np.ndarray, np.ndarray]:
    assert main(["fit", *argv, "-k", "3", "--out", str(tmp / "r"), "--quiet"]) == 0
    return np.load(tmp / "r.centers.npy"), np.load(tmp / "r.labels.npy")


def test_sample_weight_file_and_column_give_the_weighted_fit(blobs, capsys):
    X, _, tmp = blobs
    w = np.random.default_rng(0).integers(0, 4, size=len(X)).astype(float)
    est = ac.AttentionClustering(3, random_state=0).fit(X, sample_weight=w)
    np.save(tmp / "x.npy", X)
    np.save(tmp / "w.npy", w)
    np.save(tmp / "xw.npy", np.column_stack([X[:, :2], w, X[:, 2:]]))
    (tmp / "w.csv").write_text("weight\n" + "\n".join(repr(float(v)) for v in w) + "\n")
    for argv in ([str(tmp / "x.npy"), "--sample-weight", str(tmp / "w.npy")],
                 [str(tmp / "x.npy"), "--sample-weight", str(tmp / "w.csv")],
                 [str(tmp / "xw.npy"), "--weight-column", "3"]):
        centers, labels = _fit_files(tmp, argv)
        # weights read from a file or column reach the fit by other operations (a last
        # bit apart): each of the fit's steps is a weighted mean of n rows of size s, with
        # logits of condition lambda s^2; the steps' errors add
        lam, s = est.inverse_temperature_, float(np.linalg.norm(X, axis=1).max() + np.linalg.norm(
            est.cluster_centers_, axis=1).max())
        tol = est.n_iter_ * (len(X) + 9 + X.shape[1] + lam * s * s) * eps() * s
        np.testing.assert_allclose(centers, est.cluster_centers_, rtol=0, atol=tol)
        np.testing.assert_array_equal(labels, est.labels_)  # well separated blobs (sigma 0.1)
    out = capsys.readouterr().out
    assert f"weights={w.sum():.6g}" in out and "d=4" in out


def test_integer_weights_of_a_first_zero_are_read_with_or_without_pandas_header(blobs):
    """A one-column file whose first line is 0 above integer weights: the first weight, or
    pandas' header of a Series (to_csv(index=False) writes "0"); it could not be used at
    all. The line count tells: n lines are the weights, n + 1 a header and the weights."""
    X, _, tmp = blobs
    w = np.random.default_rng(0).integers(1, 4, size=len(X))
    w[0] = 0
    np.save(tmp / "x.npy", X)
    (tmp / "plain.csv").write_text("".join(f"{v}\n" for v in w))
    (tmp / "pandas.csv").write_text("0\n" + "".join(f"{v}\n" for v in w))
    ref = ac.AttentionClustering(3, random_state=0).fit(X, sample_weight=w.astype(float))
    for name in ("plain", "pandas"):
        _, labels = _fit_files(tmp, [str(tmp / "x.npy"), "--sample-weight",
                                     str(tmp / f"{name}.csv")])
        np.testing.assert_array_equal(labels, ref.labels_)


def test_a_fortran_ordered_npy_streams_as_it_fits(blobs):
    """--batch-rows refused a Fortran-ordered .npy, which fit reads."""
    X, _, tmp = blobs
    np.save(tmp / "c.npy", X)
    np.save(tmp / "f.npy", np.asfortranarray(X))
    got = [_fit_files(tmp, [str(tmp / f"{name}.npy"), "--batch-rows", "100"])
           for name in ("c", "f")]
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])


@pytest.mark.parametrize("weight_args", [["--sample-weight", "w.npy"], ["--weight-column", "3"]])
def test_the_streamed_fit_names_the_total_weight_too(blobs, capsys, weight_args):
    """The summary of a fit streamed by --batch-rows, with weights from a file or a column
    (read chunk by chunk), says their total as the plain fit's does."""
    X, _, tmp = blobs
    w = np.random.default_rng(0).integers(1, 4, size=len(X)).astype(float)
    np.save(tmp / "w.npy", w)
    data = tmp / ("x.npy" if weight_args[0] == "--sample-weight" else "xw.npy")
    np.save(tmp / "x.npy", X)
    np.save(tmp / "xw.npy", np.column_stack([X[:, :2], w, X[:, 2:]]))
    if weight_args[0] == "--sample-weight":
        weight_args = [weight_args[0], str(tmp / "w.npy")]
    assert main(["fit", str(data), "-k", "3", "--batch-rows", "100", *weight_args,
                 "--out", str(tmp / "s")]) == 0
    out = capsys.readouterr()
    head = out.out.splitlines()[0]
    assert f"weights={w.sum():.6g}" in head and "batches=" in head
    assert "warning" not in out.err     # torch's, on the mapped file's read-only weights


def test_leading_chunks_of_weight_zero_are_skipped(blobs, capsys):
    """A streamed fit whose first chunk weighs nothing: that chunk cannot seed the heads,
    and it was refused with 'no row has a positive weight' though the file's weights sum
    to 200; it is skipped, and weights that are all zero are still refused."""
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    w = np.r_[np.zeros(100), np.ones(len(X) - 100)]
    np.save(tmp / "w.npy", w)
    assert main(["fit", str(tmp / "x.npy"), "-k", "3", "--batch-rows", "100",
                 "--sample-weight", str(tmp / "w.npy"), "--out", str(tmp / "s")]) == 0
    assert f"weights={w.sum():.6g}" in capsys.readouterr().out
    np.save(tmp / "w.npy", np.zeros(len(X)))
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--batch-rows", "100",
                          "--sample-weight", str(tmp / "w.npy"), "--out", str(tmp / "z")])
    assert "no row has a positive weight" in line


@pytest.mark.parametrize("weights, match", [
    # rows counted from 1, as the data's own messages count them
    (np.r_[-1.0, np.ones(299)], "must be non-negative, got -1.0 at row 1"),
    (np.r_[np.ones(299), np.nan], "must be finite, got nan at row 300"),
    (np.ones(299), "299 weights for the 300 rows of"),
    (np.zeros(300), r"--sample-weight \S*w\.npy: the weights sum to zero"),   # the file named
    (np.ones((300, 2)), r"one weight per row, shape \(n,\) or \(n, 1\), got shape \(300, 2\)"),
])
def test_bad_weights_are_one_line_and_no_file(blobs, capsys, weights, match):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    np.save(tmp / "w.npy", weights)
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--sample-weight",
                           str(tmp / "w.npy"), "--out", str(tmp / "r")])
    assert re.search(match, line), line
    assert sorted(p.name for p in tmp.iterdir()) == ["w.npy", "x.npy"]


def test_text_in_a_weights_file_gives_no_advice_meant_for_data(blobs, capsys):
    """A weights CSV with a word in it: one line naming the cell and --sample-weight, not
    DATA's advice (--columns, --drop-columns: options that do not apply to the weights)."""
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    (tmp / "w.csv").write_text("w\n" + "1\n" * 150 + "heavy\n" + "1\n" * 149)
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--sample-weight",
                           str(tmp / "w.csv"), "--out", str(tmp / "r")])
    assert "non-numeric value 'heavy' at line 152" in line and "--sample-weight" in line
    assert "--drop-columns" not in line and "--columns" not in line


def test_a_bad_weight_column_entry_is_named_by_its_row_in_the_file(tmp_path, capsys):
    """Also when the file is read in blocks (--batch-rows): the row of the file, not of
    the block."""
    data = np.column_stack([np.arange(12.0), np.arange(12.0) ** 2, np.ones(12)])
    data[9, 2] = -3.0
    np.save(tmp_path / "x.npy", data)
    for extra in ([], ["--batch-rows", "4"]):
        line = fails(capsys, ["fit", str(tmp_path / "x.npy"), "-k", "2", "--weight-column",
                               "3", "--out", str(tmp_path / "r"), *extra])
        assert "got -3.0 at row 10" in line, line


def test_weight_options_errors(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert "is not a column of" in fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3",
                                                   "--weight-column", "5"])
    assert "nope.npy: no such file" in fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3",
                                                       "--sample-weight", str(tmp / "nope.npy")])
    line = fails(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--weight-column", "1",
                           "--sample-weight", str(tmp / "x.npy")])
    assert "not allowed with argument" in line
    bad = X.copy()
    bad[7, 1] = -2.0
    np.save(tmp / "neg.npy", bad)
    assert "--weight-column 2 of" in fails(capsys, ["fit", str(tmp / "neg.npy"), "-k", "3",
                                                     "--weight-column", "2"])


@pytest.mark.slow
def test_distributed_fit_with_weights_is_the_weighted_fit(blobs):
    """Two gloo ranks, each reading its rows' weights: the one-process weighted fit."""
    import subprocess
    import sys

    from test_distributed import _env, _free_port

    X, _, tmp = blobs
    w = np.random.default_rng(3).integers(0, 4, size=len(X)).astype(float)
    np.save(tmp / "x.npy", X)
    np.save(tmp / "w.npy", w)
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "attnclust", "fit", str(tmp / "x.npy"),
                               "-k", "3", "--distributed", "--timeout", "30", "--sample-weight",
                               str(tmp / "w.npy"), "--proba", "--out", str(tmp / "dp"),
                               "--quiet"], env=_env(r, 2, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outs]
    est = ac.AttentionClustering(3, random_state=0).fit(X, sample_weight=w)
    np.testing.assert_allclose(np.load(tmp / "dp.centers.npy"), est.cluster_centers_,
                               atol=1e-8)
    np.testing.assert_array_equal(np.load(tmp / "dp.labels.npy"), est.labels_)  # separated
    np.testing.assert_allclose(np.load(tmp / "dp.proba.npy"), est.predict_proba(X), atol=1e-8)
    assert f"weights={w.sum():.6g}" in outs[0][0]


def test_usage_shows_required_options_as_required_and_every_option_has_help(capsys):
    """quantize's usage line showed the required --inverse-temperature in brackets, and
    fit --max-iter had no help text."""
    for command in ("fit", "quantize", "bench"):
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        usage, options = out.split("\n\n", 1)[0], out.split("options:", 1)[1]
        if command == "quantize":
            assert "--inverse-temperature LAMBDA" in usage
            assert "[--inverse-temperature" not in usage
        # every option line is followed by its help (on the same line or the next)
        lines = [ln for ln in options.splitlines() if ln.strip()]
        for i, line in enumerate(lines):
            if line.lstrip().startswith("-") and len(line.strip().split("  ")) == 1:
                assert not lines[i + 1].lstrip().startswith("-"), f"{command}: {line}"
    assert main(["fit", "--help"]) == 0
    assert "most fixed-point steps at the final inverse" in capsys.readouterr().out


def test_bench_tables_show_every_rows_columns():
    """Rows of two kinds in one table (the auto-K rows, then the anneal rows): every
    column of any row is shown, blank where a row has none."""
    from attnclust._bench import format_table

    text = format_table([{"d": 2, "right": "30/30"}, {"data": "iris", "ARI": 0.7302}])
    header, _, first, second = text.splitlines()
    assert header.split() == ["d", "right", "data", "ARI"]
    assert first.split() == ["2", "30/30"] and second.split() == ["iris", "0.7302"]


def test_a_folder_as_data_is_one_clear_line(tmp_path, capsys):
    for argv in (["fit", str(tmp_path), "-k", "3"],
                 ["predict", str(tmp_path / "m.model.npz"), str(tmp_path)]):
        assert "is a folder: give a data file" in fails(capsys, argv)


def test_a_weak_choice_of_k_is_said_on_the_terminal(tmp_path, capsys):
    # five separated blobs and at most three clusters scored: K = max_clusters is weak
    mix = ac.GaussianMixture.random(d=2, k=5, sigma=0.05, rng=3)
    np.save(tmp_path / "x.npy", mix.sample(500, rng=0))
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "auto", "--max-clusters", "3",
                 "--out", str(tmp_path / "r")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "weak evidence" in line]
    # in the command's words: its flags, not the estimator's parameters
    assert len(lines) == 1 and lines[0].startswith("attnclust fit: warning: --n-clusters auto "
                                                   "chose K = 3 on weak evidence")
    assert lines[0].endswith("raise --max-clusters")
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "auto", "--max-clusters", "3",
                 "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_figure_is_its_png_and_pdf_or_neither(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from attnclust.study.experiments._style import save

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    save(fig, tmp_path / "f")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]
    # the pdf fails after the png was rendered: neither file is left, nor a temporary
    calls = []
    real = Figure.savefig

    def failing(self, path, format=None, **kw):
        calls.append(format)
        if format == "pdf":
            raise KeyboardInterrupt
        return real(self, path, format=format, **kw)

    monkeypatch.setattr(Figure, "savefig", failing)
    with pytest.raises(KeyboardInterrupt):
        save(fig, tmp_path / "g")
    assert calls == ["png", "pdf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]


@pytest.mark.slow
def test_help_and_version_do_not_import_torch():
    """``attnclust --help`` and ``--version`` answer without importing torch (its import
    is most of a command's start-up), in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys; from attnclust.cli import main\n"
            "for argv in (['--help'], ['--version'], ['fit', '--help']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()
    assert out[-1] == "False"


def test_the_weight_column_counts_the_columns_kept_and_is_named(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [f"s{i % 3},2,{5 + 3 * rng.random()},{rng.random()}" for i in range(60)]
    (tmp_path / "sw.csv").write_text("species,w,a,b\n" + "\n".join(rows) + "\n")
    assert main(["fit", str(tmp_path / "sw.csv"), "-k", "2", "--drop-columns", "species",
                 "--weight-column", "1", "--out", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    assert "--weight-column 1 is 'w', counted among the columns" in err
    assert "weights=120" in out            # sixty rows of weight 2
    record = json.loads((tmp_path / "r.summary.json").read_text())
    assert record["input"]["columns"] == ["a", "b"]


def test_a_streamed_fit_keeps_the_column_names(tmp_path, capsys):
    X = ac.GaussianMixture.random(d=2, k=3, sigma=0.1, rng=0).sample(300, rng=0)
    np.savetxt(tmp_path / "s.csv", X, delimiter=",", header="a,b", comments="")
    np.savetxt(tmp_path / "r.csv", X[:, ::-1], delimiter=",", header="b,a", comments="")
    out = str(tmp_path / "m")
    assert main(["fit", str(tmp_path / "s.csv"), "-k", "3", "--batch-rows", "50",
                 "--max-iter", "1", "--out", out]) == 0
    assert "warning: --max-iter is not read with --batch-rows" in capsys.readouterr().err
    assert (tmp_path / "m.centers.csv").read_text().splitlines()[0] == "a,b"
    # predict reads the model's columns by name, whatever their order in the table
    assert main(["predict", f"{out}.model.npz", str(tmp_path / "r.csv"), "--out",
                 str(tmp_path / "p"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.labels.npy"),
                                  np.load(tmp_path / "m.labels.npy"))


def test_centers_and_covariances_are_written_in_the_data_units(tmp_path):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, (0.3, 30.0), (80, 2)) for c in ((0, 0), (5, 500))])
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "--normalize", "center-scale",
                 "--covariance-type", "diag", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    labels = np.load(tmp_path / "r.labels.npy")
    centers = np.load(tmp_path / "r.centers.npy")
    covariances = np.load(tmp_path / "r.covariances.npy")
    # two blobs far apart: posteriors of 0 or 1 to rounding, so each head's mean and
    # variance are its rows' (to the EM's stopping rule and the floor, 1e-6 of a variance)
    for k in range(2):
        rows = X[labels == k]
        np.testing.assert_allclose(centers[k], rows.mean(0), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(covariances[k], rows.var(0), rtol=1e-3)


def test_a_gzipped_table_names_its_outputs_without_its_suffixes(tmp_path):
    import gzip

    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.1, rng=0).sample(60, rng=0)
    text = "a,b\n" + "\n".join(f"{float(u)!r},{float(v)!r}" for u, v in X) + "\n"
    with gzip.open(tmp_path / "blobs.csv.gz", "wt") as f:
        f.write(text)
    assert main(["fit", str(tmp_path / "blobs.csv.gz"), "-k", "2", "--quiet"]) == 0
    assert (tmp_path / "blobs.centers.csv").exists()
    assert not list(tmp_path.glob("blobs.csv.*.csv"))


def test_a_data_file_named_by_its_suffix_alone_keeps_its_outputs_beside_it(tmp_path):
    from attnclust._io import data_stem

    assert data_stem("runs/blobs.csv.gz") == "blobs" and data_stem("dd/.csv") == ".csv"


def test_header_no_is_the_data_s_not_the_weight_file_s(tmp_path, capsys):
    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.1, rng=0).sample(40, rng=0)
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    np.savetxt(tmp_path / "w.csv", np.full(40, 2.0), header="w", comments="")
    assert main(["fit", str(tmp_path / "x.csv"), "-k", "2", "--header", "no",
                 "--sample-weight", str(tmp_path / "w.csv"), "--out", str(tmp_path / "r")]) == 0
    assert "weights=80" in capsys.readouterr().out

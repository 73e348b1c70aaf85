"""``attnclust --version``, ``fit --proba``, ``fit --plot`` and ``--header`` for CSV files."""

from __future__ import annotations

import numpy as np
import pytest

import attnclust as ac
from attnclust.cli import main


@pytest.fixture()
def blobs(tmp_path):
    mix = ac.GaussianMixture.random(d=4, k=3, sigma=0.1, rng=0)
    X, z = mix.sample(300, rng=0, return_labels=True)
    return X, z, tmp_path


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


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
    np.testing.assert_array_equal(np.loadtxt(tmp / "r.proba.csv", delimiter=","), P)
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    np.testing.assert_allclose(P, est.predict_proba(X), rtol=0, atol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(P.argmax(1), np.load(tmp / "r.labels.npy"))
    assert "r.proba.csv" in capsys.readouterr().out and _no_temporaries(tmp)


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
    from attnclust import picture

    def broken(*args, **kwargs):
        raise ValueError("cannot draw")
    monkeypatch.setattr(picture, "plot_clusters", broken)
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert "cannot draw" in _error(capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--plot",
                                             "--proba", "--out", str(tmp / "r"), "--quiet"])
    assert sorted(p.name for p in tmp.iterdir()) == ["x.npy"]


def test_outputs_may_not_overwrite_the_input(tmp_path, capsys):
    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.1, rng=0).sample(50, rng=0)
    np.save(tmp_path / "r.proba.npy", X)
    line = _error(capsys, ["fit", str(tmp_path / "r.proba.npy"), "-k", "2", "--proba",
                           "--out", str(tmp_path / "r")])
    assert "is the input file" in line


def test_distributed_plot_is_refused_before_any_work(blobs, capsys):
    X, _, tmp = blobs
    np.save(tmp / "x.npy", X)
    assert "--plot needs all rows" in _error(
        capsys, ["fit", str(tmp / "x.npy"), "-k", "3", "--plot", "--distributed"])


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
    line = _error(capsys, ["fit", str(tmp / "x.csv"), "-k", "3", "--out", str(tmp / "r")])
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
    line = _error(capsys, ["fit", str(tmp / "x.csv"), "-k", "3", "--header", "no"])
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


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is here")
def test_bench_on_a_missing_device_is_one_line(capsys):
    line = _error(capsys, ["bench", "--only", "devices", "--device", "cuda"])
    assert "CUDA is not available" in line

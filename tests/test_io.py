"""Tests of the file helpers: atomic writes, their permissions, all-or-nothing multi-file
writes, and the data loader's handling of dtypes and CSV headers."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np
import pytest

from attnclust import _io
from attnclust._io import atomic_path, load_matrix, save_matrices, save_matrix

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")


@pytest.fixture()
def umask():
    """Set a umask for the test; restore the previous one afterwards."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("name", ["q.NPY", "q.Npy", "q.CSV", "q.npy", "q.csv"])
def test_save_matrix_any_case_suffix(tmp_path, name):
    X = np.arange(6.0).reshape(3, 2) / 7
    save_matrix(X, tmp_path / name)
    assert os.listdir(tmp_path) == [name]
    if name.lower().endswith(".npy"):
        np.testing.assert_array_equal(np.load(tmp_path / name), X)
    else:
        np.testing.assert_array_equal(np.loadtxt(tmp_path / name, delimiter=","), X)


def test_atomic_path_upper_case_suffix_with_a_path_based_writer(tmp_path):
    # numpy.save given a *name* appends ".npy" unless the name ends in exactly ".npy"
    X = np.eye(3)
    with atomic_path(tmp_path / "q.NPY") as tmp:
        np.save(tmp, X)
    assert os.listdir(tmp_path) == ["q.NPY"]
    np.testing.assert_array_equal(np.load(tmp_path / "q.NPY"), X)


@posix_only
@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_get_ordinary_permissions(tmp_path, umask, mask, expected):
    umask(mask)
    with atomic_path(tmp_path / "a.txt") as tmp:
        tmp.write_text("x")
    save_matrices({tmp_path / "b.npy": np.eye(2), tmp_path / "b.csv": np.eye(2)})
    assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {
        "a.txt": expected, "b.npy": expected, "b.csv": expected}
    assert os.umask(mask) == mask            # the umask was read, not changed


@posix_only
def test_replacing_a_file_keeps_its_permissions(tmp_path, umask):
    target = tmp_path / "c.npy"
    target.write_bytes(b"old")
    target.chmod(0o640)
    save_matrices({target: np.ones(3)})
    assert _mode(target) == 0o640
    np.testing.assert_array_equal(np.load(target), np.ones(3))


def test_save_matrices_failing_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="unsupported output type"):
        save_matrices({tmp_path / "a.npy": np.eye(2), tmp_path / "a.txt": np.eye(2)})
    assert os.listdir(tmp_path) == []


def test_save_matrices_failing_rename_leaves_nothing(tmp_path, third_rename_fails):
    """A rename that fails after others succeeded: the files already renamed are removed."""
    calls = third_rename_fails
    outputs = {tmp_path / f"r.{n}": np.eye(2) for n in ("a.npy", "a.csv", "b.npy", "b.csv")}
    with pytest.raises(OSError, match="No space"):
        save_matrices(outputs)
    assert len(calls) == 3
    assert os.listdir(tmp_path) == []


def test_save_matrices_writes_every_file_before_renaming_any(tmp_path, monkeypatch):
    real_save, real_replace, events = _io.save_matrix, os.replace, []
    monkeypatch.setattr(_io, "save_matrix", lambda X, p: (events.append("w"), real_save(X, p)))
    monkeypatch.setattr(_io.os, "replace", lambda s, d: (events.append("r"), real_replace(s, d)))
    save_matrices({tmp_path / "x.npy": np.eye(2), tmp_path / "x.csv": np.eye(2),
                   tmp_path / "y.npy": np.zeros(2)})
    assert events == ["w", "w", "w", "r", "r", "r"]
    assert sorted(os.listdir(tmp_path)) == ["x.csv", "x.npy", "y.npy"]


def test_a_folder_in_the_way_is_reported_before_writing(tmp_path):
    (tmp_path / "r.csv").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        save_matrices({tmp_path / "r.npy": np.eye(2), tmp_path / "r.csv": np.eye(2)})
    assert os.listdir(tmp_path) == ["r.csv"]


@pytest.mark.parametrize("array, match", [
    (np.array([[1 + 2j, 3], [4, 5]]), "complex array"),
    (np.ones((2, 2), dtype=np.complex64), "complex array"),
    (np.array([["a", "b"]]), "non-numeric array"),
    (np.array([[1, 2]], dtype="datetime64[s]"), "non-numeric array"),
    (np.array([[1, 2]], dtype="timedelta64[s]"), "non-numeric array"),
])
def test_load_rejects_non_real_npy(tmp_path, array, match):
    path = tmp_path / "z.npy"
    np.save(path, array)
    with pytest.raises(ValueError, match=match) as info:
        load_matrix(path)
    assert str(path) in str(info.value)


def test_load_accepts_real_npy_dtypes(tmp_path):
    for dtype in (np.int32, np.float32, np.float16, bool):
        np.save(tmp_path / "r.npy", np.ones((2, 3), dtype=dtype))
        X = load_matrix(tmp_path / "r.npy")
        assert X.dtype == np.float64 and (X == 1).all()


@pytest.mark.parametrize("text, match", [
    ("1,x,3\n4,5,6\n7,8,9\n", "non-numeric value 'x' at line 1, column 2"),
    ("1,,3\n4,5,6\n", "non-numeric value '' at line 1, column 2"),
    ("# comment\n\na,b\n1,2\n3,y\n", "non-numeric value 'y' at line 5, column 2"),
    ("# comment\n1,2\n\n3,4,5\n", "line 4 has 3 fields, expected 2"),
])
def test_csv_bad_values_name_their_line(tmp_path, text, match):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(ValueError, match=match):
        load_matrix(tmp_path / "d.csv")


@pytest.mark.parametrize("text", ["a,b,c\n1,2,3\n4,5,6\n", ",x,y\n1,2,3\n4,5,6\n",
                                  "1,2,3\n4,5,6\n", "# note\nx;y;z\n1;2;3\n4;5;6\n"])
def test_csv_header_only_when_no_cell_is_a_number(tmp_path, text):
    (tmp_path / "h.csv").write_text(text)
    np.testing.assert_array_equal(load_matrix(tmp_path / "h.csv"),
                                  [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])

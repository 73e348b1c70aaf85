"""Tests of the file helpers: atomic writes, their permissions, all-or-nothing multi-file
writes, and the data loader's handling of dtypes and CSV headers."""

from __future__ import annotations

import errno
import os
import stat
import sys

import numpy as np
import pytest

from attnclust import _atomic, _io
from attnclust._atomic import atomic_path, save_matrices, save_matrix
from attnclust._io import load_matrix

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


def test_atomic_path_names_its_target_for_its_own_write_errors_only(tmp_path):
    """A full disk while the block writes the temporary file: one line naming the target
    (not the hidden temporary); an error about another file (an input the block reads)
    passes through as it is; nothing is left either way."""
    with pytest.raises(ValueError, match=r"a\.npz: no space left on the device"):
        with atomic_path(tmp_path / "a.npz") as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        with atomic_path(tmp_path / "a.npz"):
            (tmp_path / "missing.csv").read_text()
    (tmp_path / "data.csv").write_text("")
    with pytest.raises(ValueError, match=r"x\.npy: cannot write there \(a file is in the way"):
        save_matrices({tmp_path / "data.csv" / "x.npy": np.eye(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


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
    with pytest.raises(ValueError, match="no space left on the device"):
        save_matrices(outputs)
    assert len(calls) == 3
    assert os.listdir(tmp_path) == []


def test_save_matrices_writes_every_file_before_renaming_any(tmp_path, monkeypatch):
    real_save, real_replace, events = _atomic.save_matrix, os.replace, []
    monkeypatch.setattr(_atomic, "save_matrix",
                        lambda X, p: (events.append("w"), real_save(X, p)))
    monkeypatch.setattr(_atomic.os, "replace",
                        lambda s, d: (events.append("r"), real_replace(s, d)))
    save_matrices({tmp_path / "x.npy": np.eye(2), tmp_path / "x.csv": np.eye(2),
                   tmp_path / "y.npy": np.zeros(2)})
    assert events == ["w", "w", "w", "r", "r", "r"]
    assert sorted(os.listdir(tmp_path)) == ["x.csv", "x.npy", "y.npy"]



def test_files_removed_with_the_renames_all_or_nothing(tmp_path, refuse_rename):
    """remove=: an earlier run's file goes with the renames; where it cannot be removed
    (a file the user may not delete), nothing is written, the file removed before it
    and the one replaced are back, and the error says which file in one line."""
    np.save(tmp_path / "x.npy", np.ones(2))
    for name in ("old.png", "old.csv"):
        (tmp_path / name).write_text(name)
    save_matrices({tmp_path / "x.npy": np.zeros(2)}, remove=[tmp_path / "old.png"])
    assert sorted(os.listdir(tmp_path)) == ["old.csv", "x.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.zeros(2))
    (tmp_path / "old.png").write_text("old.png")
    refuse_rename(lambda src, dst: src == "old.png")    # may not be moved (nor removed)
    with pytest.raises(ValueError, match=r"old\.png: cannot remove \(Operation not "
                                         r"permitted\); nothing was written"):
        save_matrices({tmp_path / "x.npy": np.full(2, 5.0), tmp_path / "y.npy": np.eye(2)},
                      remove=[tmp_path / "old.csv", tmp_path / "old.png"])
    assert sorted(os.listdir(tmp_path)) == ["old.csv", "old.png", "x.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.zeros(2))
    assert (tmp_path / "old.csv").read_text() == "old.csv"


def test_a_file_removed_with_the_renames_comes_back_without_hard_links(tmp_path,
                                                                      refuse_rename,
                                                                      no_hard_links):
    """A file system that refuses hard links, and a rename that fails after an earlier
    run's file was removed: the file is back (it was set aside by a rename, not linked),
    and nothing new is written."""
    (tmp_path / "old.csv").write_text("old")
    refuse_rename(lambda src, dst: dst == "y.npy", "Permission denied")
    with pytest.raises(ValueError, match=r"y\.npy: cannot write \(Permission denied\); "
                                         "nothing was written"):
        save_matrices({tmp_path / "x.npy": np.eye(2), tmp_path / "y.npy": np.eye(2)},
                      remove=[tmp_path / "old.csv"])
    assert sorted(os.listdir(tmp_path)) == ["old.csv"]
    assert (tmp_path / "old.csv").read_text() == "old"


def test_a_failed_rename_puts_back_the_files_it_replaced(tmp_path, refuse_rename):
    """Old outputs x.npy, y.npy; the new y.npy cannot be renamed into place (a file the
    user may not replace): the new x.npy, renamed first, is undone, and the error names
    y.npy in one line. A file of their own beside them stays."""
    np.save(tmp_path / "x.npy", np.ones(2))
    np.save(tmp_path / "y.npy", np.ones(3))
    (tmp_path / "mine.txt").write_text("mine")
    refuse_rename(lambda src, dst: dst == "y.npy" and ".tmp" in src)
    with pytest.raises(ValueError, match=r"y\.npy: cannot write \(Operation not permitted\); "
                                         "nothing was written"):
        save_matrices({tmp_path / "x.npy": np.zeros(2), tmp_path / "y.npy": np.zeros(3),
                       tmp_path / "z.npy": np.zeros(4)})
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.ones(2))
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["mine.txt", "x.npy", "y.npy"]


def test_a_rename_that_cannot_be_undone_is_said(tmp_path, refuse_rename, no_hard_links):
    """Without hard links (a file system that refuses them) a replaced file cannot be put
    back: the error names it rather than saying that nothing was written."""
    for name in ("x.npy", "y.npy"):
        np.save(tmp_path / name, np.ones(2))
    refuse_rename(lambda src, dst: dst == "y.npy")
    with pytest.raises(ValueError, match=r"y\.npy: cannot write .* written anyway, not put "
                                         r"back: .*x\.npy \(no hard link to restore it"):
        save_matrices({tmp_path / "x.npy": np.zeros(2), tmp_path / "y.npy": np.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == ["x.npy", "y.npy"]      # no temporary left

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
    ("1,,3\n4,5,6\n", "missing value '' at line 1, column 2"),
    ("1,2,3\n4,1e400,6\n", "infinite value '1e400' at line 2, column 2"),
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


# -- hostile and unusual files -------------------------------------------------------------------
def _crafted_npy(path, shape, data: bytes = b"\0" * 64, dtype="<f8"):
    """A .npy whose header declares ``shape`` but which holds only ``data``."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": dtype, "fortran_order": False, "shape": shape})
        f.write(data)


@pytest.mark.parametrize("shape", [(10**12, 8), (2**40, 2**20), (9, 9)])
def test_npy_header_larger_than_the_file_is_refused_before_allocating(tmp_path, shape):
    path = tmp_path / "huge.npy"
    _crafted_npy(path, shape)
    with pytest.raises(ValueError, match="truncated or inconsistent .npy file") as info:
        load_matrix(path)
    message = str(info.value)
    assert str(path) in message and str(shape) in message and "64 bytes" in message
    assert "\n" not in message
    with pytest.raises(ValueError, match="truncated or inconsistent"):
        _io.open_npy(path)


def test_huge_header_message_gives_the_declared_size(tmp_path):
    _crafted_npy(tmp_path / "h.npy", (10**12, 8))
    with pytest.raises(ValueError, match=r"\(58\.2 TiB of data\), but the file holds 64 bytes"):
        load_matrix(tmp_path / "h.npy")


def test_truncated_npy_is_one_line(tmp_path):
    np.save(tmp_path / "t.npy", np.ones((100, 4)))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"truncated .* \(3\.1 KiB of data\), but the file "
                                         r"holds 1\.5 KiB"):
        load_matrix(tmp_path / "t.npy")
    (tmp_path / "t.npy").write_bytes(data[:20])          # cut inside the header
    with pytest.raises(ValueError, match="not a readable .npy array"):
        load_matrix(tmp_path / "t.npy")


def test_trailing_bytes_after_the_data_are_ignored_like_numpy(tmp_path):
    _crafted_npy(tmp_path / "x.npy", (2, 2), data=np.arange(4.0).tobytes() + b"extra")
    np.testing.assert_array_equal(load_matrix(tmp_path / "x.npy"), [[0, 1], [2, 3]])


def test_object_npy_is_refused_without_unpickling(tmp_path):
    np.save(tmp_path / "o.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="array of Python objects"):
        load_matrix(tmp_path / "o.npy")


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_npy_fortran_order_and_format_versions(tmp_path, version):
    X = np.asfortranarray(np.arange(12.0).reshape(4, 3))
    with open(tmp_path / "f.npy", "wb") as f:
        np.lib.format.write_array(f, X, version=version)
    np.testing.assert_array_equal(load_matrix(tmp_path / "f.npy"), X)


def test_folder_and_special_files_are_named(tmp_path):
    (tmp_path / "d.npy").mkdir()
    with pytest.raises(ValueError, match="is a folder, not a data file"):
        load_matrix(tmp_path / "d.npy")
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError, match="not a regular file"):
            load_matrix("/dev/null")


@pytest.mark.parametrize("text", ["\ufeff1,2\n3,4\n", "\ufeffa,b\n1,2\n3,4\n",
                                  "\ufeff# note\n1;2\n3;4\n"])
def test_csv_with_a_utf8_byte_order_mark(tmp_path, text):
    (tmp_path / "bom.csv").write_bytes(text.encode("utf-8"))
    np.testing.assert_array_equal(load_matrix(tmp_path / "bom.csv"), [[1, 2], [3, 4]])


def test_mmap_keeps_a_float32_file_mapped_and_checks_it_in_blocks(tmp_path):
    X = np.ones((_io.BLOCK_ROWS + 10, 3), dtype=np.float32)
    np.save(tmp_path / "m.npy", X)
    Y = load_matrix(tmp_path / "m.npy", mmap=True)
    assert isinstance(Y, np.memmap) and Y.dtype == np.float32 and not Y.flags.writeable
    assert load_matrix(tmp_path / "m.npy").dtype == np.float64       # the default: a copy
    X[_io.BLOCK_ROWS + 4, 2] = np.inf                                # in the second block
    np.save(tmp_path / "m.npy", X)
    with pytest.raises(ValueError, match=f"NaN or inf at row {_io.BLOCK_ROWS + 5}, column 3"):
        load_matrix(tmp_path / "m.npy", mmap=True)


def test_writable_folder_removes_the_folders_it_made_on_failure(tmp_path):
    with pytest.raises(RuntimeError):
        with _atomic.writable_folder(tmp_path / "a" / "b"):
            raise RuntimeError("the command failed")
    assert os.listdir(tmp_path) == []
    (tmp_path / "keep").mkdir()
    with pytest.raises(RuntimeError):
        with _atomic.writable_folder(tmp_path / "keep" / "new"):
            (tmp_path / "keep" / "new" / "someone.txt").write_text("not ours to remove")
            raise RuntimeError
    assert os.listdir(tmp_path / "keep" / "new") == ["someone.txt"]


def test_writable_folder_removes_its_folders_with_a_temporary_staged_in_them(tmp_path):
    """An interrupt can unwind through ``writable_folder`` while an output is staged in
    the folder it made (the command removes the temporaries only after): the folder was
    not empty, stayed, and was left empty (a CI run of the write-phase signal test). The
    temporaries in it go first; someone else's file keeps its folder."""
    with pytest.raises(KeyboardInterrupt):
        with _atomic.writable_folder(tmp_path / "new" / "deeper"):
            staged = _atomic._temp_next_to(tmp_path / "new" / "deeper" / "labels.csv")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == [] and staged not in _atomic._LIVE_TEMPS
    (tmp_path / "keep").mkdir()
    with pytest.raises(KeyboardInterrupt):
        with _atomic.writable_folder(tmp_path / "keep" / "new"):
            _atomic._temp_next_to(tmp_path / "keep" / "new" / "labels.csv")
            (tmp_path / "keep" / "new" / "someone.txt").write_text("not ours to remove")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path / "keep" / "new") == ["someone.txt"]


def test_remove_temporaries_removes_what_an_interrupt_left(tmp_path):
    tmp = _atomic._temp_next_to(tmp_path / "out.npy")
    assert tmp.exists() and tmp in _atomic._LIVE_TEMPS
    assert _atomic.remove_temporaries() == [tmp]
    assert os.listdir(tmp_path) == [] and _atomic._LIVE_TEMPS == set()


def _raw_npy(header_text: str, data: bytes = b"\0" * 64, version: bytes = b"\x01\x00") -> bytes:
    """A .npy with a literal header text (padded as the format wants): crafted headers."""
    text = header_text.encode("latin1")
    text += b" " * (64 - (10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY" + version + len(text).to_bytes(2, "little") + text + data


@pytest.mark.parametrize("content, match", [
    (_raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 2), }"),
     "negative dimensions"),
    (_raw_npy("__import__('os').system('echo pwned')"), "not a readable .npy array"),
    (_raw_npy("{'descr': '<f8', 'shape': (2, 2), }"), "correct keys"),
    (_raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2.5, 2), }"),
     "shape is not valid"),
    (_raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }",
              version=b"\x09\x00"), "unsupported .npy format version 9.0"),
    (_raw_npy("{'descr': '|V8', 'fortran_order': False, 'shape': (2, 2), }"),
     "non-numeric array of dtype |V8"),
    (_raw_npy("{'descr': '<U5', 'fortran_order': False, 'shape': (2, 2), }", b"\0" * 80),
     "non-numeric array of dtype <U5"),
    (b"\x93NUMPY", "not a readable .npy array"),
    (bytes(range(256)), "not a readable .npy array"),
])
def test_crafted_npy_headers_are_one_line_value_errors(tmp_path, content, match):
    (tmp_path / "c.npy").write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        load_matrix(tmp_path / "c.npy")
    assert "\n" not in str(info.value) and str(tmp_path / "c.npy") in str(info.value)


@pytest.mark.parametrize("name, text, match", [
    # a spreadsheet's #N/A first in its line was a comment: the row dropped, every later
    # label shifted against the file's rows
    ("d.csv", "a,b\n1.5,2.5\n#N/A,2.0\n3.5,4.5\n", "missing value '#N/A' at line 3, column 1"),
    # tabs at the ends of a line are fields of a .tsv, not whitespace to strip
    ("d.tsv", "a\tb\tc\n1.0\t2.0\t\n1.5\t2.5\t3.0\n", "missing value '' at line 2, column 3"),
    ("d.csv", "a,b\n1,2\n1_000,3\n", "non-numeric value '1_000' at line 3"),   # Python's syntax
    # a header as wide as no row: its names were dropped without a word
    ("d.csv", "a,b\n1,2,3\n4,5,6\n", r"the header \(line 1\) has 2 fields, the rows 3; pass"),
    ("d.csv", "sepal length\tpetal length\n1.0\t2.0\n1.5\t2.5\n", "has 4 fields, the rows 2 "
     r"\(split on whitespace: separate the fields by commas, or name the file .tsv\)"),
])
def test_csv_cells_that_were_read_wrong_are_named(tmp_path, name, text, match):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=match):
        load_matrix(tmp_path / name)


def test_comments_blank_lines_and_titles(tmp_path):
    """A line starting with # is a comment (numpy.savetxt's header, a tool's banner),
    but for a spreadsheet's error values (above); a line of tabs in a .tsv is a row of
    empty cells, not a blank line to skip; with header=True a first line of any width
    is skipped (a title), and a first line of 1_000s is data, refused, not a header."""
    (tmp_path / "c.csv").write_text("# a,b\n#generated by v2\n1,2\n#-- batch 2\n3,4\n")
    np.testing.assert_array_equal(load_matrix(tmp_path / "c.csv"), [[1, 2], [3, 4]])
    (tmp_path / "e.tsv").write_text("a\tb\n1\t2\n\t\n3\t4\n")
    with pytest.raises(ValueError, match="missing value '' at line 3, column 1"):
        load_matrix(tmp_path / "e.tsv")
    (tmp_path / "t.csv").write_text("run 3, 2024-01-01\n1,2,3\n4,5,6\n")
    np.testing.assert_array_equal(load_matrix(tmp_path / "t.csv", header=True),
                                  [[1, 2, 3], [4, 5, 6]])
    (tmp_path / "u.csv").write_text("1_000,2_000\n2,3\n")
    with pytest.raises(ValueError, match="non-numeric value '1_000' at line 1"):
        load_matrix(tmp_path / "u.csv")


def test_fortran_ordered_rows_are_read_as_the_c_ordered(tmp_path):
    """NpyRows reads a Fortran-ordered file column by column, block by block (it refused
    one; a memory map would keep every page of a pass resident)."""
    from attnclust._io import NpyRows

    X = np.random.default_rng(0).normal(size=(1000, 7)).astype(np.float32)
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    rows = NpyRows(tmp_path / "f.npy")
    for key in (slice(0, 10), slice(990, 1200), slice(500, 500), np.array([3, 999, 0]), 7):
        np.testing.assert_array_equal(rows[key], X[key])

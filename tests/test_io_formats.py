"""The table reader of the command line (:func:`attnclust._io.load_table`): .tsv, gzip,
parquet, pandas' index, column selection, a header it cannot decide; and a full disk
named as such. Each is checked against the same rows written by numpy or pandas."""

from __future__ import annotations

import errno
import gzip

import numpy as np
import pytest

from attnclust._io import ColumnError, load_table


@pytest.fixture()
def rows():
    return np.random.default_rng(0).normal(size=(40, 3))


def _text(X, sep=",", header=("a", "b", "c")) -> str:
    lines = [sep.join(header)] if header else []
    lines += [sep.join(repr(float(v)) for v in row) for row in X]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("suffix, sep, packed", [(".tsv", "\t", False), (".csv.gz", ",", True),
                                                 (".tsv.gz", "\t", True)])
def test_tsv_and_gzip_read_as_csv(tmp_path, rows, suffix, sep, packed):
    path = tmp_path / f"x{suffix}"
    text = _text(rows, sep)
    if packed:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    table = load_table(path)
    np.testing.assert_array_equal(table.X, rows)          # shortest reprs: exact
    assert table.columns == ["a", "b", "c"]


def test_parquet_reads_its_numeric_columns(tmp_path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    columns = {name: rows[:, j] for j, name in enumerate("abc")}
    pq.write_table(pa.table({**columns, "species": ["x"] * len(rows)}),
                   tmp_path / "x.parquet")
    table = load_table(tmp_path / "x.parquet", drop_columns=["species"])
    np.testing.assert_array_equal(table.X, rows)
    assert table.columns == ["a", "b", "c"]


@pytest.mark.parametrize("kind", ["timestamp", "date", "duration"])
def test_parquet_dates_and_durations_are_no_features(tmp_path, kind):
    """pyarrow hands them over as integers (nanoseconds since 1970, ~1e18): refused, as the
    same column in a CSV is, and named."""
    pa = pytest.importorskip("pyarrow")
    import datetime

    import pyarrow.parquet as pq

    values = {"timestamp": [datetime.datetime(2020, 1, i + 1) for i in range(4)],
              "date": [datetime.date(2020, 1, i + 1) for i in range(4)],
              "duration": [datetime.timedelta(seconds=i) for i in range(4)]}[kind]
    pq.write_table(pa.table({"a": np.arange(4.0), "t": pa.array(values)}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"column 't' is not numeric .* --drop-columns t"):
        load_table(tmp_path / "x.parquet")
    assert load_table(tmp_path / "x.parquet", drop_columns=["t"]).columns == ["a"]


def test_a_missing_value_in_parquet_is_named_as_in_a_csv(tmp_path):
    """A null (None) in a parquet column is a missing value, named with its row and
    column, as a CSV's empty cell is (it was 'NaN or inf at row 3, column 2')."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": np.arange(4.0), "b": pa.array([1.0, 2.0, None, 4.0])}),
                   tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"missing value at row 3, column 'b'; fill in or "
                                         "leave out the rows with missing values"):
        load_table(tmp_path / "x.parquet")
    assert load_table(tmp_path / "x.parquet", drop_columns=["b"]).columns == ["a"]


def test_pandas_index_is_left_out_with_a_note(tmp_path, rows):
    # pandas' DataFrame.to_csv(): an unnamed first column holding the index 0..n-1
    lines = _text(rows).splitlines()
    (tmp_path / "x.csv").write_text("\n".join([","+ lines[0]] + [f"{i}," + line for i, line
                                                                 in enumerate(lines[1:])]))
    table = load_table(tmp_path / "x.csv")
    np.testing.assert_array_equal(table.X, rows)
    assert table.columns == ["a", "b", "c"] and table.notes


def test_columns_are_selected_by_name_or_index_before_they_are_read(tmp_path, rows):
    path = tmp_path / "iris.csv"
    lines = _text(rows).splitlines()
    path.write_text("\n".join([lines[0] + ",species"]
                              + [line + ",setosa" for line in lines[1:]]) + "\n")
    by_name = load_table(path, columns=["a", "c"])
    by_index = load_table(path, columns=["0", "2"])
    dropped = load_table(path, drop_columns=["species", "b"])
    for table in (by_name, by_index, dropped):
        np.testing.assert_array_equal(table.X, rows[:, [0, 2]])
        assert table.columns == ["a", "c"]
    with pytest.raises(ColumnError, match="'d' is neither a column name nor"):
        load_table(path, columns=["d"])
    with pytest.raises(ValueError, match="non-numeric value 'setosa'.*species"):
        load_table(path)


def test_a_first_line_that_may_be_a_header_asks_for_header(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,1,2\n" + "".join(f"{i},{2 * i},{3 * i}\n" for i in range(10)))
    with pytest.raises(ValueError, match="--header yes"):
        load_table(path)
    assert load_table(path, header=True).X.shape == (10, 3)


def test_a_full_disk_is_named_with_the_path(tmp_path, monkeypatch):
    from attnclust import _atomic

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_atomic, "_write_npy", full)
    target = tmp_path / "out.npy"
    with pytest.raises(ValueError) as exc:                # one line for the command line
        _atomic.save_matrices({target: np.ones((3, 2))})
    message = str(exc.value)
    assert "no space left" in message and str(target) in message and "\n" not in message
    assert not list(tmp_path.iterdir())                    # no partial file


def test_quoted_fields_are_read_without_their_quotes(tmp_path):
    """R's write.csv and spreadsheets quote names (and values): the quotes were kept in
    the names (--columns b did not find '"b"'), quoted numbers were non-numeric, and a
    quoted name holding a comma split the header."""
    path = tmp_path / "quoted.csv"
    path.write_text('"a","b","c, mm"\n"1",2,3\n4,"5",6\n')
    table = load_table(path)
    assert table.columns == ["a", "b", "c, mm"]
    assert table.X.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert load_table(path, columns=["b"]).X.ravel().tolist() == [2.0, 5.0]
    (tmp_path / "data.csv").write_text('"x";"y"\n1;2\n')
    assert load_table(tmp_path / "data.csv").columns == ["x", "y"]


def test_r_row_names_are_left_out_with_a_note(tmp_path, rows):
    # R's write.csv(): quoted names, an unnamed first column of row names 1..n
    lines = ['"","a","b","c"'] + [f'"{i + 1}",' + ",".join(repr(float(v)) for v in row)
                                  for i, row in enumerate(rows)]
    (tmp_path / "x.csv").write_text("\n".join(lines) + "\n")
    table = load_table(tmp_path / "x.csv")
    np.testing.assert_array_equal(table.X, rows)
    assert table.columns == ["a", "b", "c"] and "write.csv" in table.notes[0]
    # a first column of other integers is data, not an index
    lines[1] = '"7",' + lines[1].split(",", 1)[1]
    (tmp_path / "y.csv").write_text("\n".join(lines) + "\n")
    assert load_table(tmp_path / "y.csv").X.shape == (len(rows), 4)


def test_a_named_pandas_index_is_left_out_of_parquet(tmp_path, rows):
    """pandas stores a named index as a column its metadata names ("sample_id"): it was
    clustered as a feature."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame(rows, columns=list("abc"), index=pd.Index(np.arange(40) * 3 + 100,
                                                                 name="sample_id"))
    df.to_parquet(tmp_path / "x.parquet")
    table = load_table(tmp_path / "x.parquet")
    np.testing.assert_array_equal(table.X, rows)
    assert table.columns == ["a", "b", "c"] and "sample_id" in table.notes[0]

"""What the commands say: the printed choices agree with PREFIX.summary.json, every message
names the command line's options (not the library's parameters, nor options the command
line does not have), and the notes, errors and outputs of a few corner cases."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from _cli import fails
from attnclust.cli import main


@pytest.fixture()
def data(tmp_path):
    """Three blobs in 2-D (.npy and .csv with a header), 50 equal rows, three rings."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, (100, 2)) for c in [(0, 0), (3, 0), (0, 3)]])
    np.save(tmp_path / "blobs.npy", X)
    np.savetxt(tmp_path / "blobs.csv", X, delimiter=",", header="a,b", comments="")
    np.save(tmp_path / "const.npy", np.ones((50, 2)))
    return tmp_path


def test_the_printed_shape_is_summary_json_s_where_heads_merged(tmp_path, capsys):
    """Heads merged into clusters: the summary printed "chose covariance_type=heads merged
    (...)", a reason where the shape goes, while summary.json said spherical."""
    from sklearn.datasets import make_moons

    X, _ = make_moons(600, noise=0.05, random_state=0)
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "--out", str(tmp_path / "r")]) == 0
    record = json.loads((tmp_path / "r.summary.json").read_text())
    assert record["merge_heads"] and record["covariance_type"] == "spherical"
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if ln.startswith("chose covariance_type="))
    assert line.startswith("chose covariance_type=spherical: heads merged (")


def test_the_printed_shape_does_not_repeat_itself(data, capsys):
    assert main(["fit", str(data / "blobs.npy"), "-k", "3", "--out", str(data / "r")]) == 0
    record = json.loads((data / "r.summary.json").read_text())
    shape = record["covariance_type"]
    assert record["covariance_type_reason"].startswith(f"{shape}: ")
    assert (f"chose covariance_type={shape}: {record['covariance_type_reason'][len(shape) + 2:]}"
            in capsys.readouterr().out)


# the library's names that a message of the command line must not show
_LIBRARY = re.compile(r"\b(max_clusters|random_state|max_iter|noise_head|normalize=|"
                      r"covariance_type=|geometry=|backend=|exclude_self|tol|init|solver|"
                      r"penalty|header=True)\b")


@pytest.mark.parametrize("argv, stream, expected", [
    (["fit", "blobs.npy", "-k", "3", "--max-iter", "1"], "err",
     "did not converge in --max-iter 1 steps; increase --max-iter"),
    (["fit", "const.npy", "-k", "3"], "err", "try another --seed, or fewer clusters"),
    (["fit", "blobs.npy", "-k", "3", "--geometry", "sphere", "--covariance-type", "full"],
     "err", "error: --covariance-type full needs --geometry euclidean"),
    (["fit", "blobs.npy", "-k", "3", "--geometry", "sphere", "--noise-head"], "err",
     "it needs --geometry euclidean and --inverse-temperature auto"),
    (["fit", "blobs.npy", "-k", "2", "--noise-head"], "out",
     "each beside a uniform background head (--noise-head)"),
    (["fit", "blobs.npy", "-k", "3", "--geometry", "sphere", "--normalize", "none"], "err",
     "pass --normalize rows or center-scale"),
    (["fit", "blobs.npy", "-k", "3", "--geometry", "sphere"], "out",
     "shapes are chosen for the default fit only (Euclidean heads, --inverse-temperature "
     "auto)"),
    (["fit", "blobs.npy", "-k", "auto", "--max-clusters", "2"], "out",
     "raise --max-clusters"),
    (["fit", "years.csv", "-k", "3"], "err", "pass --header yes or --header no"),
    (["path", "blobs.csv", "--max-clusters", "2"], "out", "raise --max-clusters"),
    (["quantize", "blobs.csv", "--inverse-temperature", "1e308", "--out", "q.npy"], "err",
     "rescale the data or lower --inverse-temperature"),
    (["quantize", "blobs.csv", "--inverse-temperature", "2", "--backend", "bogus", "--out",
      "q.npy"], "err", "argument --backend: invalid choice: 'bogus'"),
    (["quantize", "one.csv", "--inverse-temperature", "2", "--exclude-self", "--out", "q.npy"],
     "err", "--exclude-self needs at least 2 rows (each attends to the others), one.csv has 1"),
    (["path", "const.npy", "--max-clusters", "3"], "err",
     "error: const.npy: the rows have no spread"),
])
def test_messages_name_the_command_line_s_options(data, capsys, monkeypatch, argv, stream,
                                                   expected):
    """Messages (errors, warnings, the reasons printed) spoke of max_clusters, max_iter or
    random_state, of tol, init, solver or penalty that the command line cannot set, and of
    X where it meant DATA's rows."""
    monkeypatch.chdir(data)
    (data / "years.csv").write_text("2019,2020\n" + "".join(
        f"{0.1 * i},{0.2 * i}\n" for i in range(1, 30)))
    (data / "one.csv").write_text("a,b\n1,2\n")
    main(argv)
    text = getattr(capsys.readouterr(), stream)
    assert expected in text
    # the choices printed are named as summary.json's keys; "K = max_clusters" is a value
    words = re.sub(r"chose covariance_type=|K = max_clusters", "", text)
    assert not _LIBRARY.findall(words), text


def test_reasons_written_name_the_command_line_s_options(data, capsys):
    """summary.json's reasons and the path's record said "raise max_clusters"."""
    assert main(["fit", str(data / "blobs.npy"), "-k", "auto", "--max-clusters", "2",
                 "--out", str(data / "r"), "--quiet"]) == 0
    assert main(["path", str(data / "blobs.csv"), "--max-clusters", "2", "--out",
                 str(data / "p"), "--quiet"]) == 0
    fit = json.loads((data / "r.summary.json").read_text())
    path = json.loads((data / "p.json").read_text())
    for reason in (fit["n_clusters_reason"], path["fit_auto_reason"]):
        assert "raise --max-clusters" in reason and "max_clusters" not in reason.replace(
            "K = max_clusters", "")


def test_the_weight_column_note_is_said_by_every_flow(tmp_path, capsys):
    """The note naming the column --weight-column takes was said by the fit of every row
    in one process only, not with --batch-rows or --distributed."""
    from attnclust.cli.fit_distributed import load_shard

    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=(200, 3)), rng.random(200) + 0.1]
    np.save(tmp_path / "x.npy", X)
    note = "note: --weight-column 3 is 'x3', counted among the columns --columns"
    common = ["fit", str(tmp_path / "x.npy"), "-k", "2", "--columns", "0,1,3",
              "--weight-column", "3", "--out", str(tmp_path / "r")]
    for extra in ([], ["--batch-rows", "50"]):
        assert main([*common, *extra]) == 0
        assert note in capsys.readouterr().err
    args = SimpleNamespace(data=str(tmp_path / "x.npy"), normalize="auto", geometry="euclidean",
                           header="auto", columns="0,1,3", drop_columns=None, weight_column=3,
                           sample_weight=None, quiet=False, command="fit")
    block, weights, rows = load_shard(args, 0, 2)         # what each rank of --distributed reads
    assert note in capsys.readouterr().err
    assert rows.columns == ["x0", "x1"] and block.shape == (100, 2) and weights.shape == (100,)


def test_empty_data_and_a_missing_benchmark_folder_say_so(tmp_path, capsys):
    """fit "" said " is a folder" (Path("") is the current folder); bench --dir on a folder
    that does not exist said it held no bench_*.py files."""
    assert fails(capsys, ["fit", "", "-k", "3"]) == (
        "attnclust fit: error: DATA must not be empty: give a data file")
    missing = tmp_path / "nowhere"
    assert fails(capsys, ["bench", "--quick", "--dir", str(missing)]) == (
        f"attnclust bench: error: --dir {missing}: no such folder; give the benchmarks/ "
        "folder of an attnclust checkout")


def test_a_column_listed_twice_is_named(data, capsys):
    line = fails(capsys, ["fit", str(data / "blobs.csv"), "-k", "3", "--columns", "a,1,0"])
    assert line.endswith("--columns names the column 'a' (0-based index 0) twice; list each "
                         "column once")


def test_path_out_ending_in_json_is_not_doubled(data, capsys):
    """--out p/x.json wrote p/x.json.json and p/x.json.png."""
    assert main(["path", str(data / "blobs.csv"), "--max-clusters", "2", "--out",
                 str(data / "p" / "x.json"), "--quiet"]) == 0
    assert sorted(p.name for p in (data / "p").iterdir()) == ["x.json", "x.png"]


def test_quantize_csv_has_the_data_s_header(data, capsys):
    """A .csv written by quantize started with the numbers; the input's names were lost."""
    assert main(["quantize", str(data / "blobs.csv"), "--inverse-temperature", "2", "--out",
                 str(data / "q.csv")]) == 0
    lines = (data / "q.csv").read_text().splitlines()
    assert lines[0] == "a,b" and len(lines) == 301
    Y = np.loadtxt(data / "q.csv", delimiter=",", skiprows=1)
    assert main(["quantize", str(data / "blobs.csv"), "--inverse-temperature", "2", "--out",
                 str(data / "q.npy")]) == 0
    np.testing.assert_allclose(Y, np.load(data / "q.npy"), rtol=1e-15)

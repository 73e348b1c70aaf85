"""The command line under hostile conditions: signals, warnings, output paths that could
clobber or hide files, a summary that cannot be printed, unwritable folders, damaged
caches and failing benchmarks. Each case: one line on stderr (or none), the documented
exit status, and the output folder left as it was."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

import attnclust as ac
from _cli import fails
from attnclust.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))




@pytest.fixture()
def blobs(tmp_path):
    X = ac.GaussianMixture.orthogonal(d=5, k=3, sigma=0.05).sample(240, rng=0)
    np.save(tmp_path / "x.npy", X)
    return tmp_path / "x.npy"


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


# -- SIGINT and SIGTERM --------------------------------------------------------------------
def _signal_when(proc, seen, sig, timeout: float = 60.0) -> float:
    """Send ``sig`` to ``proc`` as soon as ``seen()`` holds; return the time it took."""
    start = time.monotonic()
    while not seen():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - start < timeout, "the awaited phase never came"
        time.sleep(0.002)
    proc.send_signal(sig)
    return time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_the_write_phase_of_fit_leaves_nothing(tmp_path, sig, status):
    X = np.random.default_rng(0).normal(size=(400_000, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "new" / "res"                 # a folder the command has to create
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnclust", "fit", str(tmp_path / "x.npy"), "-k", "2",
         "--max-iter", "1", "--no-anneal", "--inverse-temperature", "5", "--quiet",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    # the labels CSV is staged last: its temporary file means every output is being written
    _signal_when(proc, lambda: any(tmp_path.rglob(".res.labels.*.tmp.csv")), sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status
    assert stderr == "attnclust: interrupted\n" and stdout == ""
    assert _files(tmp_path) == ["x.npy"]           # no temporary, no output, no folder


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_reproduce_leaves_nothing(tmp_path, sig, status):
    out = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "attnclust", "reproduce", "fig1", "--quick",
                             "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    # the output folder is made (and probed) just before the figure starts computing
    _signal_when(proc, out.exists, sig)
    time.sleep(0.3)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status
    assert stderr == "attnclust: interrupted\n" and stdout == ""
    assert _files(tmp_path) == []


def _fake_figure(calls: list, *, arrays=None):
    """A figure module that computes instantly and plots through the real atomic writer."""
    from attnclust.study.experiments import _style

    def run(config, rng):
        calls.append("run")
        return ac.study.experiments.FigureResult(
            config, dict(arrays or {"x": np.arange(3.0), "y": np.ones(3)}), {"best": 1.0})

    def plot(result, out):
        fig, axes = _style.new_figure(1)
        axes[0].plot(result.arrays["x"], result.arrays["y"])
        _style.save(fig, out)

    return types.SimpleNamespace(NAME="fake", DESCRIPTION="a test figure", CONFIG={"n": 3},
                                 QUICK={"n": 2}, run=run, plot=plot)


@pytest.fixture()
def fake_figure(monkeypatch):
    from attnclust.study.experiments import FIGURES

    calls: list = []
    module = _fake_figure(calls)
    monkeypatch.setitem(FIGURES, "fake", module)
    return module, calls


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_while_a_figure_is_being_written(tmp_path, monkeypatch, capsys, fake_figure,
                                                sig, status):
    """In the write phase: the file being written is removed; complete cache files stay."""
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        real(self, fname, *args, **kwargs)        # half of the figure's files are written
        os.kill(os.getpid(), sig)
        time.sleep(0.5)                           # the handler raises before this ends

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    assert main(["reproduce", "fake", "--out", str(tmp_path / "r")]) == status
    assert capsys.readouterr().err == "attnclust: interrupted\n"
    assert _files(tmp_path) == ["r", "r/fake.json", "r/fake.npz"]   # a complete cache entry


# -- warnings ---------------------------------------------------------------------------------
def test_non_convergence_is_a_warning_line(tmp_path, capsys):
    X = np.random.default_rng(1).normal(size=(200, 5))          # no clusters: slow to converge
    np.save(tmp_path / "x.npy", X)
    argv = ["fit", str(tmp_path / "x.npy"), "-k", "4", "--max-iter", "2", "--out",
            str(tmp_path / "res")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnclust fit: warning: ")
    assert "did not converge" in lines[0] and "converged=no" in captured.out
    assert main(argv + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_any_warning_is_one_line(blobs, capsys, monkeypatch):
    from sklearn.exceptions import ConvergenceWarning

    from attnclust.cluster.clustering import AttentionClustering

    real_fit = AttentionClustering.fit

    def fit(self, X, y=None, sample_weight=None):
        warnings.warn("first line\n  second line", ConvergenceWarning, stacklevel=2)
        warnings.warn("a user warning", UserWarning, stacklevel=2)
        return real_fit(self, X, sample_weight=sample_weight)

    monkeypatch.setattr(AttentionClustering, "fit", fit)
    assert main(["fit", str(blobs), "-k", "3", "--out", str(blobs.parent / "r")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "attnclust fit: warning: first line second line",
        "attnclust fit: warning: a user warning"]


def test_options_read_only_with_others_warn_when_given_alone(blobs, capsys):
    """--max-clusters with a given K and --timeout without --distributed were silently
    ignored: each says so in a warning line, and the fit runs as without them."""
    out = str(blobs.parent / "r")
    assert main(["fit", str(blobs), "-k", "3", "--max-clusters", "20", "--timeout", "5",
                 "--out", out]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "attnclust fit: warning: --max-clusters is read only with -k auto; -k 3 fits that "
        "many clusters",
        "attnclust fit: warning: --timeout is read only with --distributed"]


def test_the_estimators_advice_is_given_in_flags(tmp_path, capsys):
    """An error whose advice names an estimator parameter reads as the command's flag."""
    X = ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.1).sample(100, rng=0) * 1e160
    np.save(tmp_path / "big.npy", X)
    line = fails(capsys, ["fit", str(tmp_path / "big.npy"), "-k", "2", "--out",
                          str(tmp_path / "r")])
    assert "pass --normalize center-scale" in line and "normalize=" not in line


# -- output paths ---------------------------------------------------------------------------
def test_out_equal_to_the_input_is_refused(blobs, capsys):
    before = blobs.read_bytes()
    line = fails(capsys, ["quantize", str(blobs), "--inverse-temperature", "1", "--out",
                           str(blobs)])
    assert "is the input file" in line
    named = blobs.parent / "p.centers.npy"
    shutil.copy(blobs, named)
    line = fails(capsys, ["fit", str(named), "-k", "3", "--out", str(blobs.parent / "p")])
    assert "is the input file" in line
    link = blobs.parent / "link.npy"               # another name of the same file
    link.symlink_to(blobs)
    assert "is the input file" in fails(capsys, ["quantize", str(blobs), "--inverse-temperature",
                                                  "1",
                                                  "--out", str(link)])
    assert blobs.read_bytes() == before and named.read_bytes() == before
    assert _files(blobs.parent) == ["link.npy", "p.centers.npy", "x.npy"]


def test_empty_out_is_refused_and_a_folder_out_gets_named_files(blobs, capsys):
    folder = blobs.parent
    assert "--out must not be empty" in fails(capsys, ["fit", str(blobs), "-k", "3",
                                                        "--out", ""])
    assert "--out must be a file name" in fails(
        capsys, ["quantize", str(blobs), "--inverse-temperature", "1", "--out", ""])
    for out in ("res/", f"{folder}/.npy"):
        fails(capsys, ["quantize", str(blobs), "--inverse-temperature", "1", "--out", out])
    assert _files(folder) == ["x.npy"]
    assert main(["fit", str(blobs), "-k", "3", "--quiet", "--out", f"{folder}/res/"]) == 0
    (folder / "old").mkdir()
    assert main(["fit", str(blobs), "-k", "3", "--quiet", "--out", str(folder / "old")]) == 0
    names = ["x.centers.csv", "x.centers.npy", "x.labels.csv", "x.labels.npy", "x.model.npz",
             "x.summary.json"]
    assert _files(folder) == sorted(["x.npy", "res", "old"] + [f"res/{n}" for n in names]
                                    + [f"old/{n}" for n in names])


class _FullStdout:
    """A stdout whose writes fail like a full disk."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass


@pytest.mark.parametrize("cmd", [["fit", "-k", "3"], ["quantize", "--inverse-temperature", "1"]])
def test_summary_that_cannot_be_printed_leaves_no_output(blobs, capsys, monkeypatch, cmd):
    out = str(blobs.parent / ("res" if cmd[0] == "fit" else "q.npy"))
    monkeypatch.setattr(sys, "stdout", _FullStdout())
    line = fails(capsys, [cmd[0], str(blobs), *cmd[1:], "--out", out, "--quiet"])
    assert "could not print the summary (No space left on device); nothing was written" in line
    assert _files(blobs.parent) == ["x.npy"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["full", "closed pipe"])
def test_summary_failure_in_a_real_process(blobs, how):
    argv = [sys.executable, "-m", "attnclust", "fit", str(blobs), "-k", "3", "--quiet",
            "--out", str(blobs.parent / "res")]
    if how == "full":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full")
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                  env=_env(), timeout=120)
        stderr = proc.stderr
    else:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env())
        proc.stdout.close()                        # like `attnclust fit ... | head -0`
        with proc.stderr:
            stderr = proc.stderr.read()
        proc.wait(timeout=120)
    assert proc.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "could not print the summary" in lines[0], stderr
    assert _files(blobs.parent) == ["x.npy"]


# -- unwritable output folders fail before the work ---------------------------------------------
def _blocked(tmp_path: Path) -> Path:
    """An output folder that cannot be created: a regular file is in its way."""
    (tmp_path / "blocker").write_text("a file, not a folder")
    return tmp_path / "blocker" / "out"


def test_unwritable_out_fails_before_fitting(blobs, capsys, monkeypatch):
    from attnclust.cluster.clustering import AttentionClustering

    def fit(self, X, y=None, sample_weight=None):
        raise AssertionError("fitted although the output cannot be written")

    monkeypatch.setattr(AttentionClustering, "fit", fit)
    target = _blocked(blobs.parent)
    line = fails(capsys, ["fit", str(blobs), "-k", "3", "--out", str(target / "res")])
    assert f"{target}: cannot write there (a file is in the way)" in line
    line = fails(capsys, ["quantize", str(blobs), "--inverse-temperature", "1",
                           "--out", str(target / "q.npy")])
    assert "cannot write there" in line
    assert _files(blobs.parent) == ["blocker", "x.npy"]


def test_unwritable_reproduce_fails_at_once(tmp_path, capsys, fake_figure):
    _, calls = fake_figure
    target = _blocked(tmp_path)
    start = time.perf_counter()
    line = fails(capsys, ["reproduce", "fake", "--out", str(target)])
    assert "cannot write there" in line and calls == []
    assert time.perf_counter() - start < 5
    assert _files(tmp_path) == ["blocker"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permission bits do not stop root")
def test_read_only_folder_fails_before_computing(tmp_path, capsys, fake_figure):
    _, calls = fake_figure
    (tmp_path / "ro").mkdir(mode=0o555)
    line = fails(capsys, ["reproduce", "fake", "--out", str(tmp_path / "ro")])
    assert "cannot write there (Permission denied)" in line and calls == []


# -- reproduce: a damaged cache is recomputed ---------------------------------------------------
def _rewrite_npz_without(path: Path, key: str) -> None:
    with np.load(path) as data:
        kept = {k: data[k] for k in data.files if k != key}
    np.savez_compressed(path, **kept)


@pytest.mark.parametrize("damage", ["truncated npz", "missing array", "bad json", "empty npz",
                                    "array the plot cannot use"])
def test_damaged_cache_is_recomputed(tmp_path, capsys, fake_figure, damage):
    _, calls = fake_figure
    out = tmp_path / "r"
    assert main(["reproduce", "fake", "--out", str(out)]) == 0
    assert main(["reproduce", "fake", "--out", str(out)]) == 0
    assert calls == ["run"]                         # the intact cache was reused
    npz, meta = out / "fake.npz", out / "fake.json"
    if damage == "truncated npz":
        npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    elif damage == "missing array":
        _rewrite_npz_without(npz, "y")
    elif damage == "bad json":
        meta.write_text(meta.read_text()[:40])
    elif damage == "empty npz":
        npz.write_bytes(b"")
    else:
        np.savez_compressed(npz, x=np.arange(3.0), y=np.ones(5))     # shapes do not match
    assert main(["reproduce", "fake", "--out", str(out)]) == 0
    assert calls == ["run", "run"]
    assert capsys.readouterr().err == ""
    with np.load(npz) as data:
        np.testing.assert_array_equal(data["y"], np.ones(3))
    assert json.loads(meta.read_text())["summary"] == {"best": 1.0}


# -- bench ----------------------------------------------------------------------------------------
def test_each_failing_benchmark_is_one_line_and_the_others_run(tmp_path, capsys):
    (tmp_path / "bench_a_ok.py").write_text(
        "def run(quick):\n    return [{'case': 'x', 'ratio': 1.5}]\n")
    (tmp_path / "bench_b_raises.py").write_text(
        "import math\n\ndef run(quick):\n    return [{'r': 1 / 0}]\n")
    (tmp_path / "bench_c_syntax.py").write_text("def run(quick):\n    return [\n")
    (tmp_path / "bench_d_norun.py").write_text("X = 1\n")
    (tmp_path / "bench_e_exits.py").write_text("import sys\nsys.exit(4)\n")
    (tmp_path / "bench_f_ok.py").write_text(
        "def run(quick):\n    return [{'case': 'y', 'ratio': 2.5}]\n")
    assert main(["bench", "--dir", str(tmp_path), "--quick"]) == 1
    out, err = capsys.readouterr()
    assert "== a_ok" in out and "1.5" in out and "== f_ok" in out and "2.5" in out
    lines = err.strip().splitlines()
    assert len(lines) == 4 and all(ln.startswith("attnclust bench: error: benchmark '")
                                   for ln in lines)
    b, c, d, e = lines
    assert str(tmp_path / "bench_b_raises.py") in b
    assert "ZeroDivisionError: division by zero (line 4)" in b
    assert "SyntaxError:" in c and "(line 2)" in c
    assert "AttributeError" in d and "'run'" in d
    assert "sys.exit(4)" in e


def _installed_copy(tmp_path: Path) -> Path:
    """The package as a non-editable install has it: the package folder alone, no checkout."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "src" / "attnclust", site / "attnclust",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


@pytest.mark.slow
def test_bench_from_an_installed_package_says_where_it_looks(tmp_path):
    site = _installed_copy(tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    # one process (torch is imported once): bench alone, then bench --dir the checkout's
    code = ("import sys, attnclust.cli as c; print(c.__file__, file=sys.stderr); "
            "a = c.main(['bench', '--quick']); print('--', file=sys.stderr); "
            f"b = c.main(['bench', '--dir', {str(ROOT / 'benchmarks')!r}, '--only', 'nomatch']); "
            "sys.exit(10 * a + b)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True,
                          text=True, timeout=120, env=dict(_env(), PYTHONPATH=str(site)))
    where, alone, separator, with_dir = proc.stderr.strip().splitlines()
    assert where.startswith(str(site))            # the copy ran, not the source checkout
    assert proc.returncode == 22 and separator == "--", proc.stderr
    assert f"no bench_*.py files in {work / 'benchmarks'}" in alone
    assert "not with the installed package" in alone and "--dir" in alone
    # with --dir, the installed package finds the checkout's benchmarks
    names = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert f"matches no benchmark; available: {', '.join(names)}" in with_dir


def test_bench_finds_the_checkout_from_anywhere(tmp_path, monkeypatch):
    from attnclust._bench import find_benchmarks

    monkeypatch.chdir(tmp_path)
    files = find_benchmarks()
    assert files and all(f.parent == ROOT / "benchmarks" for f in files)
    with pytest.raises(ValueError, match=f"no bench_\\*.py files in {tmp_path}"):
        find_benchmarks(tmp_path)


# -- interrupts inside the library's writers --------------------------------------------------
def test_interrupt_during_renames_waits_for_all_of_them(tmp_path, monkeypatch):
    """A signal that arrives between two renames takes effect after the last one."""
    from attnclust import _atomic

    real, stopped = os.replace, []

    def replace(src, dst):
        real(src, dst)
        if not stopped:                       # the first rename done: the signal arrives
            stopped.append(True)
            _atomic.interrupt(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))

    monkeypatch.setattr(_atomic.os, "replace", replace)
    outputs = {tmp_path / f"r.{s}": np.eye(2) for s in ("a.npy", "b.npy", "c.csv")}
    with pytest.raises(KeyboardInterrupt):
        _atomic.save_matrices(outputs)
    assert _files(tmp_path) == ["r.a.npy", "r.b.npy", "r.c.csv"]       # all, not one
    assert _atomic._LIVE_TEMPS == set()


def test_out_of_memory_is_one_line_and_writes_nothing(blobs, capsys, monkeypatch):
    from attnclust.cluster.clustering import AttentionClustering

    def fit(self, X, y=None, sample_weight=None):
        raise MemoryError("Unable to allocate 58.2 TiB for an array with shape (10**12, 8)")

    monkeypatch.setattr(AttentionClustering, "fit", fit)
    line = fails(capsys, ["fit", str(blobs), "-k", "3", "--out", str(blobs.parent / "n" / "r")],
                  status=1)
    assert line == ("attnclust fit: error: out of memory (Unable to allocate 58.2 TiB for an "
                    "array with shape (10**12, 8))")
    assert _files(blobs.parent) == ["x.npy"]


def test_torch_failing_to_allocate_is_out_of_memory(blobs, capsys, monkeypatch):
    """torch raises a RuntimeError, not a MemoryError, when an allocation fails (a full
    covariance of 200,000 features): it was a traceback; its other errors still are."""
    from attnclust.cluster.clustering import AttentionClustering

    def fit(self, X, y=None, sample_weight=None):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                           "allocate 320000000000 bytes")

    monkeypatch.setattr(AttentionClustering, "fit", fit)
    line = fails(capsys, ["fit", str(blobs), "-k", "3", "--out", str(blobs.parent / "r")],
                 status=1)
    assert line.startswith("attnclust fit: error: out of memory (DefaultCPUAllocator")

    def bug(self, X, y=None, sample_weight=None):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(AttentionClustering, "fit", bug)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["fit", str(blobs), "-k", "3", "--out", str(blobs.parent / "r")])


class _FullOnFlush:
    """A buffered stdout: writes are accepted, flushing them finds the disk full."""

    def __init__(self):
        self.pending = 0

    def write(self, text):
        self.pending += len(text)
        return len(text)

    def flush(self):
        if self.pending:
            raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("stdout", [_FullStdout, _FullOnFlush])
@pytest.mark.parametrize("argv, prefix", [(["list"], "attnclust list: "),
                                          (["--help"], "attnclust: "),
                                          (["fit", "--help"], "attnclust: ")])
def test_stdout_that_cannot_be_written_is_one_line(capsys, monkeypatch, stdout, argv, prefix):
    monkeypatch.setattr(sys, "stdout", stdout())
    line = fails(capsys, argv)
    assert line == f"{prefix}error: could not write to stdout (No space left on device)"


def test_reproduce_into_a_full_stdout_keeps_the_complete_figure(tmp_path, capsys, monkeypatch,
                                                                fake_figure):
    monkeypatch.setattr(sys, "stdout", _FullStdout())
    line = fails(capsys, ["reproduce", "fake", "--out", str(tmp_path)])
    assert line == "attnclust reproduce: error: could not write to stdout (No space left on device)"
    assert _files(tmp_path) == ["fake.json", "fake.npz", "fake.pdf", "fake.png"]


def test_a_mistyped_option_is_named_by_its_command(blobs, capsys):
    line = fails(capsys, ["fit", str(blobs), "-k", "3", "--outt", "x"])
    assert line == ("attnclust fit: error: unrecognized arguments: --outt x (see attnclust "
                    "fit --help)")
    assert not list(blobs.parent.glob("x.*.npy"))


class _Finalized:
    """An object whose weakref callback runs Python code when it is collected."""


def test_an_interrupt_handled_inside_a_weakref_callback_is_not_lost(capsys):
    """A signal handled while a weakref callback or finalizer runs raises there, where
    Python prints the exception ("Exception ignored in ...") and carries on; later signals
    were ignored, so the command ran to its end and exited 0. The interrupt is raised
    again where the command runs."""
    import weakref

    from attnclust.cli._runtime import Interrupted, signals_raise_interrupted

    ran_on = []
    with pytest.raises(Interrupted):
        with signals_raise_interrupted():
            thing = _Finalized()
            ref = weakref.ref(thing, lambda _: signal.getsignal(signal.SIGINT)(
                signal.SIGINT, None))                       # the handler runs in the callback
            del thing                                       # the callback runs here
            start = time.monotonic()
            while time.monotonic() < start + 5.0:           # the command going on
                ran_on.append(time.monotonic() - start)
    assert ref() is None and ran_on[-1] < 1.0
    assert "Exception ignored" not in capsys.readouterr().err


def test_an_interrupt_that_never_came_through_stops_the_command_at_its_end():
    from attnclust.cli._runtime import Interrupted, signals_raise_interrupted

    with pytest.raises(Interrupted) as raised:
        with signals_raise_interrupted():
            handler = signal.getsignal(signal.SIGTERM)
            try:
                handler(signal.SIGTERM, None)
            except Interrupted:
                pass                            # swallowed by code the command ran
    assert raised.value.signum == signal.SIGTERM

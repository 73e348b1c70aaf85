"""The ``attnclust`` command line: ``main(argv=None) -> int``.

Every subcommand turns bad input into one line on stderr and exit status 2, with no
traceback and no partial output file: outputs are written under temporary names and
renamed only when all of them are complete (and, for ``fit`` and ``quantize``, only once
the summary has been printed). SIGINT and SIGTERM remove every temporary file and exit
with status 130 or 143 and the one line ``attnclust: interrupted``. Python warnings raised
during a command are shown as one line each, ``attnclust CMD: warning: ...`` (none with
``--quiet``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings

__all__ = ["main"]

EXIT_USAGE = 2
# the exit status of a command stopped by a signal: 128 + its number, as shells report it
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
# torch's gloo and TCPStore fail on timeouts of 1e10 s and more; a day-long job is 1e5 s
_MAX_TIMEOUT = 1e7


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwinds like ``KeyboardInterrupt`` (``finally`` blocks run)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _say(line: str) -> None:
    """Write one line to stderr in a single write.

    ``print`` writes the text and the newline separately, and with unbuffered stderr
    (``python -u``, ``PYTHONUNBUFFERED``) the lines of ranks sharing a terminal or a
    torchrun log could interleave mid-line.
    """
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@contextlib.contextmanager
def _signals_raise_interrupted():
    """While the command runs, SIGINT and SIGTERM raise :class:`Interrupted`.

    The exception unwinds through the ``finally`` blocks that remove temporary files
    (a signal that arrives while outputs are being renamed takes effect once they all
    are, see :func:`attnclust._io.deferred_interrupts`). Later signals are ignored, so a
    second Ctrl-C cannot cut that cleanup short. Outside the main thread (an embedding
    program), handlers cannot be installed and nothing changes.
    """
    from .. import _io

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum, frame):
        if fired:
            return
        fired.append(signum)

        def stop():
            raise Interrupted(signum)
        _io.interrupt(stop)

    previous = {sig: signal.signal(sig, handler) for sig in EXIT_SIGNAL}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _warnings_as_lines(command: str, quiet: bool):
    """Show each Python warning of the command as one line on stderr (none when quiet)."""
    def show(message, category, filename, lineno, file=None, line=None):
        if quiet:
            return
        text = " ".join(str(message).split())       # one line, whatever the message
        _say(f"attnclust {command}: warning: {text}")

    with warnings.catch_warnings():
        warnings.simplefilter("default")   # each distinct warning once per place
        warnings.showwarning = show
        yield


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2).

    Its subcommand parsers are of the same class, so ``attnclust fit -k abc`` reads
    ``attnclust fit: error: argument --n-clusters/-k: invalid value 'abc': give an integer
    or 'auto' (see attnclust fit --help)``.
    """

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="attnclust",
        description="Attention layers as clustering and quantization operators.",
    )
    _version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the reproducible figures")
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("reproduce", help="reproduce figures (fig1 .. fig9, or all)")
    p.add_argument("figures", nargs="+", metavar="FIG", help="figure names, or 'all'")
    p.add_argument("--quick", action="store_true", help="small configs (minutes, not hours)")
    p.add_argument("--out", default="results", help="output folder (default: results)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default: 0)")
    p.add_argument("--recompute", action="store_true", help="ignore cached results")
    p.add_argument("--quiet", action="store_true", help="no progress bars, no warnings")
    p.set_defaults(handler=_cmd_reproduce)

    p = sub.add_parser("fit", help="cluster the rows of a .npy/.csv file with AttentionClustering")
    p.add_argument("data", metavar="DATA", help="data file (.npy, or .csv with or without header)")
    p.add_argument("--n-clusters", "-k", type=_n_clusters_arg, required=True, metavar="K",
                   help="number of clusters (heads), or 'auto' (read off the temperature path)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.centers.{npy,csv}, PREFIX.labels.{npy,csv} "
                        "(default: DATA without its suffix; a folder, written DIR/, gets "
                        "the files named after DATA)")
    _inverse_temperature_option(p, required=False,
                                help="inverse temperature lambda (it multiplies the logits: "
                                     "larger is sharper), or 'auto' (default)")
    p.add_argument("--geometry", default="euclidean", choices=["euclidean", "sphere"],
                   help="euclidean: free heads, soft k-means cells (default); sphere: unit "
                        "heads, cones from the origin (directions, e.g. embeddings)")
    p.add_argument("--normalize", default="auto", choices=["auto", "rows", "center-scale", "none"],
                   help="preprocessing of the rows (default auto: onto the unit sphere with "
                        "--geometry sphere, as given otherwise)")
    p.add_argument("--no-anneal", action="store_true",
                   help="fit at the target inverse temperature only")
    p.add_argument("--max-iter", type=int, default=300, metavar="N",
                   help="most fixed-point steps at the final inverse temperature (default: "
                        "300); the fit stops earlier when it converges")
    p.add_argument("--seed", type=int, default=0, help="random_state (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no warnings")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel fit, one process per rank, launched by torchrun "
                        "(gloo on CPU, NCCL on CUDA); each rank memory-maps only its rows "
                        "of a .npy (a .csv is read whole, then sliced); rank 0 alone prints "
                        "and writes")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="with --distributed: how long a rank waits for the others before "
                        "failing (rendezvous and each collective; default: 300, at most "
                        "1e7)")
    _fit_output_options(p)
    _fit_weight_options(p)
    _batch_rows_option(p)
    _header_option(p)
    p.set_defaults(handler=_cmd_fit)

    _add_path_parser(sub)

    p = sub.add_parser("quantize", help="apply identity attention (in-context quantization)")
    p.add_argument("data", metavar="DATA", help="data file (.npy, or .csv with or without header)")
    _inverse_temperature_option(p, required=True,
                                help="inverse temperature lambda (it multiplies the logits: "
                                     "larger is sharper)")
    p.add_argument("--out", required=True, metavar="FILE", help="output file (.npy or .csv)")
    p.add_argument("--n-steps", type=int, default=1, help="repeated applications (default: 1)")
    p.add_argument("--exclude-self", action="store_true", help="a token does not attend to itself")
    p.add_argument("--renormalize", action="store_true",
                   help="project tokens back to the sphere after each step")
    p.add_argument("--backend", default="auto", help="auto, dense, fused or chunked")
    p.add_argument("--quiet", action="store_true", help="no warnings")
    _header_option(p)
    p.set_defaults(handler=_cmd_quantize)

    p = sub.add_parser("bench", help="run the benchmarks of a source checkout and print tables")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--only", default=None, help="run only benchmarks whose name contains this")
    p.add_argument("--dir", default=None,
                   help="folder of bench_*.py files (default: ./benchmarks, else the "
                        "benchmarks/ folder of the source checkout attnclust runs from)")
    p.add_argument("--quiet", action="store_true", help="no warnings")
    _bench_device_option(p)
    p.set_defaults(handler=_cmd_bench)

    return parser


def _cmd_bench(args) -> int:
    """Run each benchmark file; a failing one is one line on stderr, the others still run."""
    from .._bench import describe_failure, find_benchmarks, format_table, run_benchmarks

    files = find_benchmarks(args.dir)
    names = [path.stem.removeprefix("bench_") for path in files]
    chosen = [path for path, name in zip(files, names, strict=True)
              if not args.only or args.only in name]
    if not chosen:
        raise CommandError(f"--only {args.only!r} matches no benchmark; available: "
                           f"{', '.join(names)}")
    device = _bench_device(args)
    status = 0
    for path in chosen:
        name = path.stem.removeprefix("bench_")
        try:
            for name, rows in run_benchmarks([path], quick=args.quick, device=device):
                table = format_table(rows) if rows is not None else \
                    f"(skipped: it measures the CPU only, not --device {device})"
                print(f"\n== {name}")
                print(table, flush=True)
        except (Exception, SystemExit) as exc:   # a benchmark's bug is not ours to re-raise
            _say(f"attnclust bench: error: benchmark {name!r} ({path}) failed: "
                 f"{describe_failure(path, exc)}")
            status = 1
    return status


def _bench_device_option(parser) -> None:
    parser.add_argument("--device", default=None,
                        help="run the benchmarks of device paths (bench_devices.py) on this "
                             "torch device, e.g. cuda, against the CPU; the others are "
                             "skipped (default: every benchmark, each on its own devices)")


def _bench_device(args) -> str | None:
    """``--device``, checked (one line, status 2, for a device this machine lacks)."""
    if args.device is not None:
        _check_device(args.device)
    return args.device


def _progress_total(est) -> int:
    """Most callback steps of a fit: the steps of its annealing plan, ``max_iter`` last."""
    return sum(est.max_iter if steps is None else steps for _, steps in est.anneal_plan())


def _progress_callback(total: int, quiet: bool):
    """A tqdm bar fed by the estimator's callback; None when quiet or stderr is no terminal.

    ``total`` is the most steps the fit can take; it may stop earlier, having converged.
    """
    if quiet or not sys.stderr.isatty():
        return None, None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="fit", unit="step", leave=False, file=sys.stderr)

    def callback(info) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{info.loss:.4g}", lam=f"{info.inverse_temperature:.3g}",
                        refresh=False)
    return bar, callback


def _write_all(outputs: dict, summary: str) -> None:
    """Stage every ``path -> array``, print ``summary``, then rename all: all or nothing.

    The summary is printed (and flushed) before the renames, so a failure to print it (a
    full disk behind stdout, a closed pipe) leaves no output file, like any other failure.
    """
    from .._io import save_matrices

    save_matrices(outputs, before_rename=lambda: _print_summary(summary))


def _print_summary(summary: str) -> None:
    try:
        print(summary, flush=True)
    except StdoutError as exc:
        raise CommandError(f"could not print the summary ({exc.reason}); nothing was "
                           "written") from None


class StdoutError(CommandError):
    """Writing to stdout failed (a full disk, a closed pipe): one line, status 2."""

    def __init__(self, exc: OSError):
        self.reason = exc.strerror or str(exc)
        super().__init__(f"could not write to stdout ({self.reason})")


class _NamedStdout:
    """A stdout whose write failures say they are stdout's (not a data file's).

    On the first failure stdout is pointed at /dev/null: otherwise the interpreter's
    own flush at exit fails again and prints a multi-line "Exception ignored" report.
    """

    def __init__(self, stream):
        self._stream = stream
        self.failure: StdoutError | None = None

    def _guard(self, method, *args):
        try:
            return getattr(self._stream, method)(*args)
        except OSError as exc:
            _drop_stdout(self._stream)
            self.failure = StdoutError(exc)
            raise self.failure from None

    def write(self, text):
        return self._guard("write", text)

    def flush(self):
        return self._guard("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_named():
    real = sys.stdout
    guarded = sys.stdout = _NamedStdout(real)
    finished = False
    try:
        yield guarded
        finished = True
    finally:
        sys.stdout = real
        try:                     # a failure to write the last of the output is one too
            guarded.flush()
        except StdoutError:
            if finished:         # else another error (or --help's exit) is on its way
                raise


def _drop_stdout(stream) -> None:
    """Point the file descriptor of a stdout that failed at /dev/null.

    Otherwise the interpreter's own flush at exit fails again and prints a second,
    multi-line error ("Exception ignored in ... BrokenPipeError").
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no real fd: skip
        target = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, target)
        os.close(devnull)


def _output_prefix(args) -> str:
    """The ``fit`` output prefix: ``--out`` (a folder when it ends in /), else DATA's stem."""
    from pathlib import Path

    if args.out is None:
        return str(Path(args.data).with_suffix(""))
    if not args.out.strip():
        raise CommandError("--out must not be empty: give a prefix such as results/run1, or a "
                           "folder ending in /")
    if args.out.endswith(("/", os.sep)) or Path(args.out).is_dir():
        return str(Path(args.out) / Path(args.data).stem)
    return args.out


def _refuse_overwriting_input(data: str, outputs) -> None:
    """An output that is the input file itself (same path or same file) is refused."""
    from pathlib import Path

    source = Path(data)
    for out in outputs:
        out = Path(out)
        same = (out.resolve() == source.resolve()
                or (out.exists() and source.exists() and os.path.samefile(out, source)))
        if same:
            raise CommandError(f"the output {out} is the input file {data}; choose another "
                               "--out")


def _summary_sums(est, X, n_clusters: int, *, chunk: int = 1 << 16, weights=None):
    """Per cluster, the summed max attention of its rows; and the summed squared error
    (weighted by the sample weights, when given).

    In blocks of rows, so a memory-mapped ``X`` is never copied whole for the summary
    (``predict_proba`` and ``score`` act row by row, so the sums are exact).
    """
    import numpy as np

    conf_sum, sq_err = np.zeros(n_clusters), 0.0
    for start in range(0, X.shape[0], chunk):
        block, labels = X[start:start + chunk], est.labels_[start:start + chunk]
        conf_sum += np.bincount(labels, weights=est.predict_proba(block).max(1),
                                minlength=n_clusters)
        if weights is None:
            sq_err += -est.score(block) * block.shape[0]
        elif weights[start:start + chunk].sum() > 0:
            w = weights[start:start + chunk]
            sq_err += -est.score(block, sample_weight=w) * float(w.sum())
    return conf_sum, sq_err


def _summary(head: list[str], sizes, conf_sum, outputs) -> str:
    """The printed summary of a fit: ``head`` lines, one row per cluster, the files."""
    n = sum(sizes)
    lines = [*head, f"{'cluster':>7s} {'size':>8s} {'share':>7s} {'mean max attention':>19s}"]
    for k, (size, conf) in enumerate(zip(sizes, conf_sum, strict=True)):
        mean = f"{conf / size:19.3f}" if size else f"{'- (no row)':>19s}"
        lines.append(f"{k:7d} {int(size):8d} {size / n:7.3f} {mean}")
    lines.append("wrote " + ", ".join(str(p) for p in outputs))
    return "\n".join(lines)


def _fit_outputs(prefix: str, centers, labels) -> dict:
    from pathlib import Path

    return {Path(f"{prefix}.centers.npy"): centers, Path(f"{prefix}.centers.csv"): centers,
            Path(f"{prefix}.labels.npy"): labels, Path(f"{prefix}.labels.csv"): labels}


def _version_option(parser) -> None:
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"attnclust {__version__}")


def _header_option(parser) -> None:
    parser.add_argument("--header", default="auto", choices=["auto", "yes", "no"],
                        help="whether a CSV's first line is a header (default auto: a "
                             "line with a non-number, or pandas' 0,1,...,d-1 above "
                             "non-integer rows; a line that could be either is refused)")


def _header(args) -> bool | None:
    return {"auto": None, "yes": True, "no": False}[args.header]


def _fit_output_options(parser) -> None:
    parser.add_argument("--proba", action="store_true",
                        help="also write PREFIX.proba.{npy,csv}: each row's attention on "
                             "every head (soft memberships; rows sum to 1)")
    parser.add_argument("--plot", action="store_true",
                        help="also write PREFIX.png: the rows in 2-D (the data for d = 2, "
                             "else a PCA) coloured by cluster, the heads marked, at most "
                             "20,000 rows drawn")


def _extra_outputs(args, prefix: str, est=None, X=None) -> dict:
    """``--proba`` and ``--plot``: ``path -> array or writer`` (``None`` values without
    ``est``, for the check that no output is the input)."""
    from pathlib import Path

    outputs = {}
    if args.proba:
        outputs.update(_proba_outputs(prefix, None if est is None else _predict_proba(est, X)))
    if args.plot:
        outputs[Path(f"{prefix}.png")] = None if est is None else _plot_writer(args, est, X,
                                                                               est.labels_)
    return outputs


def _predict_proba(est, X, *, chunk: int = 1 << 16):
    """``est.predict_proba`` of every row, in blocks (a memory map is read, not copied)."""
    import numpy as np

    return np.concatenate([est.predict_proba(X[s:s + chunk])
                           for s in range(0, X.shape[0], chunk)])


def _proba_outputs(prefix: str, proba) -> dict:
    from pathlib import Path

    return {Path(f"{prefix}.proba.npy"): proba, Path(f"{prefix}.proba.csv"): proba}


def _plot_writer(args, est, X, labels, sizes=None):
    """Draw the picture now (``labels``: of every row, or None to predict those drawn;
    ``sizes``: the clusters' sizes, when known without them); return the function that
    writes it (as a PNG) when the outputs are staged."""
    import matplotlib

    from ..experiments._style import RC
    from ..picture import plot_clusters

    with matplotlib.rc_context(RC):
        fig = plot_clusters(est, X, labels=labels, sizes=sizes, random_state=args.seed,
                            title=f"attnclust fit {os.path.basename(args.data)}: "
                                  f"K={est.n_clusters}, lambda={est.inverse_temperature_:.3g}, "
                                  f"{X.shape[0]:,} rows")

    def write(path) -> None:
        with matplotlib.rc_context(RC):
            fig.savefig(path, format="png", dpi=150)
    return write


def _fit_weight_options(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample-weight", default=None, metavar="FILE",
                       help="a weight per row of DATA (.npy of shape (n,) or (n, 1), or a "
                            "one-column .csv; non-negative, not all zero): a row of weight "
                            "w counts as w copies of it")
    group.add_argument("--weight-column", type=int, default=None, metavar="J",
                       help="take the weights from column J of DATA (counted from 1), "
                            "which is then left out of the features")


def _weights_note(weights) -> str:
    return "" if weights is None else f"weights={float(weights.sum()):.6g}  "


def _split_weights(args, X, *, rows: slice | None = None, n_rows: int | None = None):
    """``(features, weights)``: DATA without ``--weight-column``, and the weights of its
    rows (a rank's shard: ``X`` holds ``rows`` of the file's ``n_rows``); weights ``None``
    without either option. Bad weights are one line naming their source."""
    import numpy as np

    if args.weight_column is None and args.sample_weight is None:
        return X, None
    if args.weight_column is not None:
        j, d = args.weight_column, X.shape[1]
        if not 1 <= j <= d:
            raise CommandError(f"--weight-column {j} is not a column of {args.data} (columns "
                               f"1 to {d})")
        where = f"--weight-column {j} of {args.data}"
        weights = np.asarray(X[:, j - 1], dtype=np.float64)
        X = X[:, [c for c in range(d) if c != j - 1]]
    else:
        weights = _file_weights(args, X.shape[0] if n_rows is None else n_rows)
        return X, (weights if rows is None else weights[rows])
    return X, _checked_weights(weights, X.shape[0], where, 1 if rows is None else rows.start + 1)


def _checked_weights(weights, n: int, where: str, first_row: int = 1):
    """:func:`attnclust._validation.check_sample_weight`, its error one line naming
    ``where`` the weights come from and the bad weight's row (``first_row``: the row
    number of ``weights[0]``, counted from 1 as in the data's messages)."""
    from .._validation import check_sample_weight

    try:
        return check_sample_weight(weights, n, rows_from=first_row)
    except ValueError as exc:
        raise CommandError(f"{where}: {str(exc).removeprefix('sample_weight ')}") from None


def _file_weights(args, n: int):
    """The ``n`` checked weights of the ``--sample-weight`` file."""
    where = f"--sample-weight {args.sample_weight}"
    weights = _weight_file(args, where)
    if weights.shape[0] != n:
        raise CommandError(f"{where}: {weights.shape[0]} weights for the {n} rows of "
                           f"{args.data}")
    return _checked_weights(weights, n, where)


def _weight_file(args, where: str):
    """The weights of ``--sample-weight``: a .npy of shape (n,) or (n, 1), or a one-column
    .csv (read with DATA's --header rule), as float64."""
    import numpy as np

    from .._io import load_matrix, open_npy

    path = args.sample_weight
    if path.lower().endswith(".npy") and os.path.isfile(path):
        weights = np.asarray(open_npy(path))    # (n,) allowed: load_matrix wants 2-D
    else:
        weights = load_matrix(path, header=_header(args))
    if weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    if weights.ndim != 1 or weights.shape[0] == 0:
        raise CommandError(f"{where}: expected one weight per row, shape (n,) or (n, 1), "
                           f"got shape {weights.shape}")
    return np.asarray(weights, dtype=np.float64)


def _batch_rows_option(parser) -> None:
    parser.add_argument("--batch-rows", type=int, default=None, metavar="N",
                        help="stream DATA through partial_fit in chunks of N rows (one pass; a "
                             ".npy is memory-mapped and read chunk by chunk, a .csv is parsed "
                             "whole), then write the outputs chunk by chunk: memory bounded by "
                             "the chunk, not the file; the rows should come in random order "
                             "(a file sorted by cluster seeds every head from its first "
                             "chunk: shuffle it first)")


def _open_rows(args):
    """DATA for a streamed fit: a .npy read block by block with plain reads (its values
    checked as they are read; a memory map would keep every page it touched resident),
    anything else read whole by :func:`attnclust._io.load_matrix`."""
    from pathlib import Path

    from .._io import NpyRows, check_matrix_shape, load_matrix

    path = Path(args.data)
    min_columns = 1 + (args.weight_column is not None)
    if path.suffix.lower() == ".npy" and path.is_file():
        X = NpyRows(path)
        check_matrix_shape(X, path, min_columns=min_columns)
        return X
    return load_matrix(path, min_columns=min_columns, header=_header(args))


def _chunks(args, X, weights):
    """``(start, rows, weights)`` of each chunk of ``--batch-rows``: rows checked (finite,
    non-zero where rows are normalized) and split from their weight column."""
    import numpy as np

    from .._io import check_finite_rows, check_nonzero_rows

    normalized = _normalizes_rows(args)
    for start in range(0, X.shape[0], args.batch_rows):
        block = np.asarray(X[start:start + args.batch_rows])
        check_finite_rows(block, args.data, row_offset=start)
        block, w = _split_weights(args, block, rows=slice(start, start + block.shape[0]),
                                  n_rows=X.shape[0]) if args.weight_column is not None \
            else (block, None if weights is None else weights[start:start + block.shape[0]])
        if normalized:
            check_nonzero_rows(block, args.data, row_offset=start)
        yield start, block, w


def _cmd_fit_streamed(args) -> int:
    """``fit --batch-rows N``: ``partial_fit`` over the chunks of DATA, then the summary and
    every output computed chunk by chunk (labels and attention by ``predict``)."""
    import time
    from pathlib import Path

    from .._io import writable_folder
    from ..clustering import AttentionClustering

    if args.batch_rows < 1:
        raise CommandError(f"--batch-rows must be a positive integer, got {args.batch_rows}")
    params = _fit_params(args)
    prefix = _output_prefix(args)
    _refuse_overwriting_input(args.data, {**_fit_outputs(prefix, None, None),
                                          **_extra_outputs(args, prefix)})
    X = _open_rows(args)
    # a weight file is read whole (n numbers); a weight column chunk by chunk
    weights = None if args.sample_weight is None else _file_weights(args, X.shape[0])
    if args.n_clusters > min(args.batch_rows, X.shape[0]):
        raise CommandError(f"--n-clusters {args.n_clusters} is larger than the rows of the "
                           f"first chunk ({min(args.batch_rows, X.shape[0])}); use a larger "
                           "--batch-rows")
    with writable_folder(Path(prefix).parent):
        est = AttentionClustering(args.n_clusters, **params)
        bar = _rows_bar(X.shape[0], args.quiet)
        start = time.perf_counter()
        try:
            for _, block, w in _chunks(args, X, weights):
                est.partial_fit(block, sample_weight=w)
                if bar is not None:
                    bar.update(block.shape[0])
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - start
        _check_centers(est)
        _write_all(*_streamed_outputs(args, prefix, est, X, weights, seconds))
    return 0


def _rows_bar(total: int, quiet: bool):
    """A tqdm bar counting rows; None when quiet or stderr is no terminal."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="partial_fit", unit="row", unit_scale=True, leave=False,
                file=sys.stderr)


def _streamed_outputs(args, prefix, est, X, weights, seconds):
    """The outputs of a streamed fit (labels and attention written chunk by chunk) and the
    summary, from one more pass over the chunks."""
    from pathlib import Path

    import numpy as np

    K = args.n_clusters
    sizes, conf_sum, sq_err, total = np.zeros(K), np.zeros(K), 0.0, 0.0
    for _, block, w in _chunks(args, X, weights):
        proba = est.predict_proba(block)
        labels = proba.argmax(1)
        sizes += np.bincount(labels, minlength=K)
        conf_sum += np.bincount(labels, weights=proba.max(1), minlength=K)
        ww = np.ones(block.shape[0]) if w is None else w
        if ww.sum() > 0:
            sq_err += -est.score(block, sample_weight=ww) * float(ww.sum())
        total += float(ww.sum())
    n = X.shape[0]
    outputs = {Path(f"{prefix}.centers.npy"): est.cluster_centers_,
               Path(f"{prefix}.centers.csv"): est.cluster_centers_}
    for suffix in ("npy", "csv"):
        outputs[Path(f"{prefix}.labels.{suffix}")] = _chunked_writer(
            args, X, weights, lambda b: est.predict(b), (n,), np.int64)
    if args.proba:
        for suffix in ("npy", "csv"):
            outputs[Path(f"{prefix}.proba.{suffix}")] = _chunked_writer(
                args, X, weights, est.predict_proba, (n, K), np.float64)
    if args.plot:
        outputs[Path(f"{prefix}.png")] = _plot_writer(args, est, _Features(args, X), None,
                                                      sizes)
    head = (f"n={n}  d={est.n_features_in_}  K={K}  {_weights_note(weights)}"
            f"lambda={est.inverse_temperature_:.4g}  batches={est.n_steps_} of at most "
            f"{args.batch_rows} rows  risk={sq_err / total:.4g}  time={seconds:.2f}s")
    return outputs, _summary([head], sizes, conf_sum, outputs)


def _chunked_writer(args, X, weights, fn, shape, dtype):
    """A writer (see :func:`attnclust._io.save_matrices`) that fills its file chunk by chunk
    with ``fn(rows)``: a ``.npy`` header then the rows' bytes, or ``.csv`` lines."""
    import numpy as np

    def write(path) -> None:
        if str(path).lower().endswith(".npy"):
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                      "fortran_order": False, "shape": shape}
            with open(path, "wb") as f:
                np.lib.format.write_array_header_1_0(f, header)
                for _, block, _ in _chunks(args, X, weights):
                    f.write(np.ascontiguousarray(fn(block), dtype=dtype).tobytes())
            return
        fmt = "%d" if np.issubdtype(dtype, np.integer) else "%.17g"
        with open(path, "w", encoding="utf-8", newline="") as f:
            for _, block, _ in _chunks(args, X, weights):
                values = fn(block)
                np.savetxt(f, values if values.ndim == 2 else values[:, None], delimiter=",",
                           fmt=fmt)
    return write


class _Features:
    """DATA's rows without ``--weight-column``, read by blocks (for the picture)."""

    def __init__(self, args, X):
        self._args, self._X = args, X
        d = X.shape[1] - (args.weight_column is not None)
        self.shape = (X.shape[0], d)

    def __getitem__(self, key):
        import numpy as np

        block = np.asarray(self._X[key])
        j = self._args.weight_column
        return block if j is None else np.delete(block, j - 1, axis=-1)


def _check_centers(est) -> None:
    """The CLI's last check before writing: finite centers (of unit norm on the sphere)."""
    import numpy as np

    centers = np.asarray(est.cluster_centers_, dtype=np.float64)
    if not np.isfinite(centers).all():
        raise CommandError("fit produced non-finite cluster centers (overflow); rescale the "
                           "data or lower --inverse-temperature")
    from ..geometry import as_geometry

    if not as_geometry(est.geometry).unit_heads:
        return
    norms = np.linalg.norm(centers, axis=1)
    if not np.allclose(norms, 1.0, rtol=0.0, atol=1e-6):
        worst = int(np.argmax(np.abs(norms - 1.0)))
        raise CommandError(f"fit produced a cluster center of norm {norms[worst]:.6g} "
                           f"(center {worst}), not on the unit sphere; rescale the data or "
                           "lower --inverse-temperature")


def _cmd_fit(args) -> int:
    if args.distributed:
        return _cmd_fit_distributed(args)
    if args.batch_rows is not None:
        return _cmd_fit_streamed(args)
    import time
    from pathlib import Path

    import numpy as np

    from .._io import load_matrix, writable_folder
    from ..clustering import AttentionClustering

    params = _fit_params(args)
    prefix = _output_prefix(args)
    _refuse_overwriting_input(args.data, {**_fit_outputs(prefix, None, None),
                                          **_extra_outputs(args, prefix)})
    # a float32/float64 .npy stays memory-mapped: no float64 copy made here
    X = load_matrix(args.data, min_columns=1 + (args.weight_column is not None), mmap=True,
                    header=_header(args))
    X, weights = _split_weights(args, X)
    if args.n_clusters != "auto" and args.n_clusters > X.shape[0]:
        raise CommandError(f"--n-clusters {args.n_clusters} is larger than the number of rows "
                           f"({X.shape[0]}) of {args.data}")
    with writable_folder(Path(prefix).parent):     # fails now, not after the fit
        est = AttentionClustering(args.n_clusters, **params)
        bar, callback = _progress_callback(_progress_total(est), args.quiet)
        est.set_params(callback=callback)
        start = time.perf_counter()
        try:
            est.fit(X, sample_weight=weights)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - start
        _check_centers(est)
        outputs = {**_fit_outputs(prefix, est.cluster_centers_, est.labels_),
                   **_extra_outputs(args, prefix, est, X)}

        sizes = np.bincount(est.labels_, minlength=est.n_clusters_)
        conf_sum, sq_err = _summary_sums(est, X, est.n_clusters_, weights=weights)
        total = X.shape[0] if weights is None else float(weights.sum())
        head = (_auto_k_line(est) + f"n={X.shape[0]}  d={X.shape[1]}  K={est.n_clusters_}  "
                f"{_weights_note(weights)}"
                f"lambda={est.inverse_temperature_:.4g}  steps={est.n_iter_}  "
                f"converged={'yes' if est.converged_ else 'no'}  "
                f"risk={sq_err / total:.4g}  time={seconds:.2f}s")
        _write_all(outputs, _summary([head], sizes, conf_sum, outputs))
    return 0


def _n_clusters_arg(value: str):
    """``--n-clusters``: a positive integer, or ``auto``."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: give an integer or "
                                         "'auto'") from None


def _auto_k_line(est) -> str:
    """With ``-k auto``: the chosen K and why, on a line of its own."""
    if getattr(est, "n_clusters_reason_", None) is None or est.n_clusters != "auto":
        return ""
    return f"chose K={est.n_clusters_}: {est.n_clusters_reason_}\n"


def _add_path_parser(sub) -> None:
    p = sub.add_parser("path", help="the temperature path of a .npy/.csv file: clusters and "
                                    "risk against lambda (picture + JSON)")
    p.add_argument("data", metavar="DATA", help="data file (.npy, or .csv with or without header)")
    p.add_argument("--max-clusters", type=int, required=True, metavar="N",
                   help="number of heads followed (the path stops once they are all apart)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.png and PREFIX.json (default: DATA without its "
                        "suffix, plus .path)")
    p.add_argument("--geometry", default="euclidean", choices=["euclidean", "sphere"],
                   help="euclidean (default), or sphere (rows scaled onto the unit sphere)")
    p.add_argument("--objective", default="free_energy", choices=["free_energy", "risk"],
                   help="free_energy: deterministic annealing (default); risk: the layer's "
                        "risk minimizer, which never merges its heads")
    p.add_argument("--min-cluster-size", type=int, default=None, metavar="M",
                   help="rows a cluster needs to be counted (default: max(5, n/100))")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no warnings")
    p.set_defaults(handler=_cmd_path)


def _path_prefix(args) -> str:
    from pathlib import Path

    if args.out is None:
        return str(Path(args.data).with_suffix("")) + ".path"
    if not args.out.strip():
        raise CommandError("--out must not be empty: give a prefix such as results/path1")
    return args.out


def _cmd_path(args) -> int:
    import json
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .._io import check_nonzero_rows, load_matrix, writable_folder
    from ..annealing import path_grid, temperature_path
    from ..geometry import as_geometry

    prefix = _path_prefix(args)
    outputs = [Path(f"{prefix}.png"), Path(f"{prefix}.json")]
    _refuse_overwriting_input(args.data, outputs)
    X = load_matrix(args.data, min_columns=2)
    if not 1 <= args.max_clusters <= X.shape[0]:
        raise CommandError(f"--max-clusters must be between 1 and the number of rows "
                           f"({X.shape[0]}) of {args.data}, got {args.max_clusters}")
    if args.min_cluster_size is not None and args.min_cluster_size < 1:
        raise CommandError(f"--min-cluster-size must be a positive integer, got "
                           f"{args.min_cluster_size}")
    if as_geometry(args.geometry).unit_heads:       # rows onto the sphere, as fit does
        check_nonzero_rows(X, args.data)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    with writable_folder(Path(prefix).parent):     # fails now, not after the path
        grid = path_grid(X, geometry=args.geometry)
        bar = None
        if not args.quiet and sys.stderr.isatty():
            from tqdm.auto import tqdm
            bar = tqdm(total=len(grid), desc="path", unit="lambda", leave=False,
                       file=sys.stderr)
        def callback(i, lam, k):
            if bar is not None:
                bar.update(1)
                bar.set_postfix(lam=f"{lam:.3g}", clusters=k, refresh=False)
        try:
            path = temperature_path(X, args.max_clusters, geometry=args.geometry,
                                    objective=args.objective, inverse_temperatures=grid,
                                    min_cluster_size=args.min_cluster_size, callback=callback)
        finally:
            if bar is not None:
                bar.close()
        choice = path.choose_n_clusters()
        summary = {"data": str(args.data), "n": int(X.shape[0]), "d": int(X.shape[1]),
                   "max_clusters": args.max_clusters, "chosen_n_clusters": choice.n_clusters,
                   "reason": choice.reason, **path.to_dict()}
        fig = path.plot()
        splits = ", ".join(f"{s:.3g}" for s in path.split_inverse_temperatures) or "none"
        line = (f"n={X.shape[0]}  d={X.shape[1]}  splits at lambda = {splits}\n"
                f"chose K={choice.n_clusters}: {choice.reason}\n"
                f"wrote {outputs[0]}, {outputs[1]}")
        try:
            _write_all({outputs[0]: lambda p: fig.savefig(p, dpi=120),
                        outputs[1]: lambda p: p.write_text(json.dumps(summary, indent=1))},
                       line)
        finally:
            plt.close(fig)
    return 0


def _inverse_temperature_option(parser, *, required: bool, help: str) -> None:
    """``--inverse-temperature``, and ``--temperature``, its old name hidden from the help.

    The two form one mutually exclusive group, so that the usage line shows a required
    ``--inverse-temperature`` as required and giving both is a usage error.
    """
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--inverse-temperature", default=None, metavar="LAMBDA", help=help)
    group.add_argument("--temperature", dest="deprecated_temperature", default=None,
                       help=argparse.SUPPRESS)


def _inverse_temperature_arg(args, default):
    """The value of ``--inverse-temperature``, or of the deprecated ``--temperature`` (with a
    warning); ``default`` when neither is given."""
    from .._deprecation import REMOVED_IN

    old, new = args.deprecated_temperature, args.inverse_temperature
    if old is not None:
        warnings.warn(f"--temperature is deprecated and will be removed in {REMOVED_IN}; "
                      "use --inverse-temperature (same value: lambda multiplies the logits)",
                      FutureWarning, stacklevel=2)
        return old
    return default if new is None else new


def _fit_params(args) -> dict:
    """Estimator parameters from the ``fit`` arguments (checked here, before any work)."""
    if args.n_clusters != "auto" and args.n_clusters < 1:
        raise CommandError(f"--n-clusters must be a positive integer, got {args.n_clusters}")
    if args.n_clusters == "auto" and (args.distributed or args.batch_rows is not None):
        raise CommandError("-k auto reads K off the temperature path of all the rows on one "
                           "process: give K with --distributed or --batch-rows")
    if args.max_iter < 1:
        raise CommandError(f"--max-iter must be a positive integer, got {args.max_iter}")
    _check_seed(args.seed)
    _check_device(args.device)
    if not 0 < args.timeout <= _MAX_TIMEOUT:       # also false for nan
        raise CommandError(f"--timeout must be a positive number of seconds, at most "
                           f"{_MAX_TIMEOUT:g}, got {args.timeout}")
    given = _inverse_temperature_arg(args, default="auto")
    inverse_temperature = given
    if given != "auto":
        try:
            inverse_temperature = float(given)
        except ValueError:
            raise CommandError(f"--inverse-temperature must be a positive number or 'auto', "
                               f"got {given!r}") from None
    return dict(geometry=args.geometry, inverse_temperature=inverse_temperature,
                normalize=None if args.normalize == "none" else args.normalize,
                anneal=False if args.no_anneal else "auto", max_iter=args.max_iter,
                random_state=args.seed, device=args.device)


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise CommandError(f"--seed must be a non-negative integer, got {seed}")


def _check_device(device: str) -> None:
    """``--device`` is cpu, or a CUDA device that exists on this machine."""
    from .._validation import check_device

    try:
        check_device(device, name="--device")
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _load_shard(args, rank: int, world_size: int):
    """This rank's rows and their sample weights (or None), checked like one process
    checks the whole file.

    A ``.npy`` is memory-mapped (only this rank's block is read); a ``.csv`` is read whole,
    then sliced. Errors name rows by their index in the file. Every rank sees the row
    count, so "fewer rows than ranks" is reported identically by all.
    """
    from pathlib import Path

    from .._io import (
        check_finite_rows,
        check_matrix_shape,
        check_nonzero_rows,
        load_matrix,
        open_npy,
    )
    from ..distributed import shard_bounds

    path = Path(args.data)
    min_columns = 1 + (args.weight_column is not None)
    if path.suffix.lower() == ".npy" and path.is_file():
        X = open_npy(path)
        check_matrix_shape(X, path, min_columns=min_columns)
    else:
        X = load_matrix(path, min_columns=min_columns, header=_header(args))
    n = X.shape[0]
    if n < world_size:
        raise ValueError(f"{path}: {n} rows, fewer rows than ranks ({world_size}); run at most "
                         f"{n} processes")
    start, stop = shard_bounds(n, rank, world_size)
    shard = X[start:stop]
    check_finite_rows(shard, path, row_offset=start)
    shard, weights = _split_weights(args, shard, rows=slice(start, stop), n_rows=n)
    if _normalizes_rows(args):
        check_nonzero_rows(shard, path, row_offset=start)
    return shard, weights


def _normalizes_rows(args) -> bool:
    """Whether the fit projects rows on the sphere (then an all-zero row is an error)."""
    from ..geometry import as_geometry

    return args.normalize == "rows" or (args.normalize == "auto"
                                        and as_geometry(args.geometry).normalize == "rows")


def _agree_on_errors(error: str | None, ddp) -> None:
    """Every rank raises the same one-line error when any rank failed (exit status 2)."""
    failures = ddp.gather_errors(error)
    if not failures:
        return
    messages = {msg for _, msg in failures}
    rank, msg = failures[0]
    if len(messages) == 1 and len(failures) > 1:   # the same problem everywhere (a bad path)
        raise CommandError(msg)
    others = [r for r, _ in failures[1:]]
    more = f" (ranks {others} failed too)" if others else ""
    raise CommandError(f"rank {rank}: {msg}{more}")


def _cmd_fit_distributed(args) -> int:
    """``fit --distributed``: every rank fits its shard; rank 0 prints and writes."""
    import torch.distributed as dist

    from .. import distributed as ddp

    if args.plot:
        raise CommandError("--plot needs all rows in one process: fit without --distributed, "
                           "or draw a sample of the rows with the centers written")
    if args.batch_rows is not None:
        raise CommandError("--batch-rows streams the rows through one process; it cannot be "
                           "combined with --distributed")
    params = _fit_params(args)
    prefix = _output_prefix(args)
    _refuse_overwriting_input(args.data, {**_fit_outputs(prefix, None, None),
                                          **_extra_outputs(args, prefix)})
    backend = "nccl" if str(args.device).startswith("cuda") else "gloo"
    try:
        rank, world = ddp.init_from_env(backend=backend, timeout=args.timeout)
    except ddp.DistributedError as exc:
        _say(f"attnclust fit: error: {exc}")
        return 1
    try:
        with contextlib.ExitStack() as rank0_folder:
            X, weights = _checked_shard(args, rank, world, prefix, rank0_folder, ddp)
            _fit_shard(args, X, rank, world, prefix, params, ddp, weights)
        return 0
    except ddp.DistributedError as exc:
        _say(f"attnclust fit: error: {exc}")
        return 1
    finally:
        dist.destroy_process_group()


def _checked_shard(args, rank: int, world: int, prefix: str, rank0_folder, ddp):
    """This rank's rows and weights, once every rank has read and checked its own (and
    rank 0 its output folder, kept for the rest of the command by ``rank0_folder``); any
    failure stops every rank with the same line."""
    from pathlib import Path

    from .._io import writable_folder

    try:
        X, error = _load_shard(args, rank, world), None
    except (ValueError, OSError, CommandError) as exc:
        X, error = (None, None), str(exc)
    if rank == 0 and error is None:            # rank 0 writes: its folder is checked now
        try:
            rank0_folder.enter_context(writable_folder(Path(prefix).parent))
        except ValueError as exc:
            error = str(exc)
    _agree_on_errors(error, ddp)
    return X


def _fit_shard(args, X, rank: int, world: int, prefix: str, params: dict, ddp,
               weights=None) -> None:
    """Fit on every rank; sum the summary's statistics; rank 0 prints and writes."""
    import time

    import numpy as np
    import torch
    import torch.distributed as dist

    from ..clustering import AttentionClustering

    plan = AttentionClustering(args.n_clusters, **params)
    bar, callback = _progress_callback(_progress_total(plan), args.quiet or rank != 0)
    stats = ddp.CommStats()
    start = time.perf_counter()
    try:
        est = ddp.fit_distributed(X, args.n_clusters, stats=stats, callback=callback,
                                  sample_weight=weights, **params)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    _check_centers(est)   # the same centers on every rank
    labels = ddp.gather_rows(est.labels_)
    proba = {}
    if args.proba:       # every rank takes part in the gather
        proba = _proba_outputs(prefix, ddp.gather_rows(_predict_proba(est, X)))
    # summary statistics of all rows: sizes, summed max attention, summed squared error
    K = args.n_clusters
    conf_sum, sq_err = _summary_sums(est, X, K, weights=weights)
    weight = X.shape[0] if weights is None else float(weights.sum())
    local = np.concatenate([np.bincount(est.labels_, minlength=K), conf_sum, [sq_err, weight]])
    total = ddp.make_reduce()(torch.from_numpy(local)).numpy()
    if rank != 0:
        return
    sizes, conf_sum, risk = total[:K], total[K:2 * K], total[-2] / total[-1]
    per_pass = ddp.pass_bytes(K, X.shape[1], dtype=torch.float64)
    head = [f"n={est.n_samples_total_}  d={X.shape[1]}  K={K}  ranks={world} "
            f"({dist.get_backend()})  {_weights_note(None if weights is None else total[-1:])}"
            f"lambda={est.inverse_temperature_:.4g}  "
            f"steps={est.n_iter_}  "
            f"converged={'yes' if est.converged_ else 'no'}  risk={risk:.4g}  "
            f"time={seconds:.2f}s",
            f"communicated per rank: {stats.bytes} bytes in {stats.calls} all-reduces, of "
            f"which {stats.by_size.get(per_pass, 0)} passes of {per_pass} bytes"]
    outputs = {**_fit_outputs(prefix, est.cluster_centers_, labels), **proba}
    _write_all(outputs, _summary(head, sizes, conf_sum, outputs))


def _cmd_quantize(args) -> int:
    from pathlib import Path

    from .._io import load_matrix, writable_folder
    from ..in_context import identity_attention

    out = Path(args.out)
    if out.suffix.lower() not in (".npy", ".csv") or out.name.startswith("."):
        raise CommandError(f"--out must be a file name ending in .npy or .csv, got {args.out!r}")
    given = _inverse_temperature_arg(args, default=None)   # required by the parser
    try:
        lam = float(given)
    except ValueError:
        lam = float("nan")
    if not 0 < lam < float("inf"):      # also false for nan
        raise CommandError(f"--inverse-temperature must be a positive number, got {given!r}")
    if args.n_steps < 1:
        raise CommandError(f"--n-steps must be a positive integer, got {args.n_steps}")
    _refuse_overwriting_input(args.data, [out])
    X = load_matrix(args.data, min_columns=2, header=_header(args))
    with writable_folder(out.parent):
        # the library refuses overflow (NaN or inf) and a dense L x L that cannot fit
        Y = identity_attention(X, lam, n_steps=args.n_steps,
                               exclude_self=args.exclude_self, renormalize=args.renormalize,
                               backend=args.backend)
        _write_all({out: Y}, f"n={X.shape[0]}  d={X.shape[1]}  lambda={lam:g}  "
                             f"steps={args.n_steps}  wrote {out}")
    return 0


def _cmd_list(args) -> int:
    from ..experiments import FIGURES

    for name, module in FIGURES.items():
        print(f"{name:6s} {module.DESCRIPTION}")
    return 0


def _cmd_reproduce(args) -> int:
    from .._io import writable_folder
    from ..experiments import FIGURES, reproduce

    if "all" in args.figures and len(args.figures) > 1:
        raise CommandError("'all' cannot be combined with figure names")
    if not args.out.strip():
        raise CommandError("--out must not be empty: give a folder, such as results")
    _check_seed(args.seed)
    names = list(FIGURES) if args.figures == ["all"] else args.figures
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise CommandError(f"unknown figure {unknown[0]!r}; choose from {', '.join(FIGURES)} "
                           "or 'all'")
    # an unwritable --out fails now, not after minutes of computing; figures completed
    # before a later failure stay (they are complete, and the cache of the next run)
    with writable_folder(args.out):
        for name in names:
            paths = reproduce(name, out=args.out, quick=args.quick, seed=args.seed,
                              recompute=args.recompute,
                              progress=not args.quiet and sys.stderr.isatty())
            print(f"{name}: {paths.png}", flush=True)
    return 0


def _run(args) -> int:
    """The command's handler, with every expected failure turned into one line."""
    try:
        with _stdout_named():
            return args.handler(args)
    except (CommandError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        _say(f"attnclust {args.command}: error: {message}")
        return EXIT_USAGE
    except MemoryError as exc:      # not the input's fault: status 1, like other failures
        detail = " ".join(str(exc).split())
        _say(f"attnclust {args.command}: error: out of memory"
             + (f" ({detail})" if detail else ""))
        return 1


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    from .. import _io

    parser = _build_parser()
    try:
        with _stdout_named() as stdout:
            args = parser.parse_args(argv)
    except SystemExit as exc:          # --help (0) or a usage error, already printed (2)
        if stdout.failure is not None:     # --help into a full disk or a closed pipe
            _say(f"attnclust: error: {stdout.failure}")
            return EXIT_USAGE
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except StdoutError as exc:
        _say(f"attnclust: error: {exc}")
        return EXIT_USAGE
    # under torchrun every rank runs this: one copy of each warning (rank 0's) is enough
    quiet = getattr(args, "quiet", False) or (
        getattr(args, "distributed", False) and os.environ.get("RANK", "0") != "0")
    try:
        with _signals_raise_interrupted(), _warnings_as_lines(args.command, quiet):
            return _run(args)
    except (Interrupted, KeyboardInterrupt) as exc:
        _io.remove_temporaries()      # whatever the unwinding did not reach
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        with contextlib.suppress(OSError, ValueError):
            _say("attnclust: interrupted")
        return EXIT_SIGNAL[signum]

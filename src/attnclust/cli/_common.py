"""What every command shares: its one-line errors, common arguments, progress, outputs.

A :class:`CommandError` (or a ``ValueError``/``OSError``) raised by a command becomes one
line on stderr and exit status 2 in :func:`attnclust.cli.main`; :func:`write_all` writes a
command's outputs all or nothing, after its summary is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

EXIT_USAGE = 2


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class StdoutError(CommandError):
    """Writing to stdout failed (a full disk, a closed pipe): one line, status 2."""

    def __init__(self, exc: OSError):
        self.reason = exc.strerror or str(exc)
        super().__init__(f"could not write to stdout ({self.reason})")


# the estimator's parameters that attnclust fit sets from flags, and those flags
_FIT_FLAGS = {"n_clusters": "--n-clusters", "max_clusters": "--max-clusters",
              "inverse_temperature": "--inverse-temperature", "geometry": "--geometry",
              "covariance_type": "--covariance-type", "noise_head": "--noise-head",
              "normalize": "--normalize", "max_iter": "--max-iter", "random_state": "--seed",
              "device": "--device"}


def as_fit_flags(message: str) -> str:
    """The estimator's ``name='value'`` in a message, and a name after "raise", "lower" or
    "pass" or in parentheses, written as ``attnclust fit``'s flags.

    Examples
    --------
    >>> as_fit_flags("rescale the data or pass normalize='center-scale'")
    'rescale the data or pass --normalize center-scale'
    >>> as_fit_flags("it needs geometry='euclidean' and noise_head=False, not normalize=None.")
    'it needs --geometry euclidean and no --noise-head, not --normalize none.'
    >>> as_fit_flags("/data/geometry=sphere/x.csv: no such file; lambda=1e-3")
    '/data/geometry=sphere/x.csv: no such file; lambda=1e-3'
    >>> as_fit_flags("K = max_clusters = 3: raise max_clusters (n_clusters_reason_)")
    'K = max_clusters = 3: raise --max-clusters (n_clusters_reason_)'
    >>> as_fit_flags("inverse_temperature must be a positive number, got 'x'")
    "--inverse-temperature must be a positive number, got 'x'"
    >>> as_fit_flags("follow more heads (max_clusters) to measure it")
    'follow more heads (--max-clusters) to measure it'
    """
    def flag(match) -> str:
        name, value = match.group(1), match.group(2).strip("'")
        if name == "noise_head" and value in ("True", "False"):
            return _FIT_FLAGS[name] if value == "True" else f"no {_FIT_FLAGS[name]}"
        return f"{_FIT_FLAGS[name]} {'none' if value == 'None' else value}"
    # a name not inside a path or a word, and a value without a sentence's closing period;
    # then a name alone after the advice's verb ("raise max_clusters")
    names = "(" + "|".join(_FIT_FLAGS) + ")"
    message = re.sub(r"(?<![\w/.=-])" + names + r"=('[^']*'|[\w+-]+(?:\.[\w+-]+)*)", flag,
                     message)
    message = re.sub(r"^" + names + r" must be", lambda m: f"{_FIT_FLAGS[m.group(1)]} must be",
                     message)
    return re.sub(r"(\b(?:raise|lower|pass) |\()" + names + r"(?![\w=])",
                  lambda m: f"{m.group(1)}{_FIT_FLAGS[m.group(2)]}", message)


def say(line: str) -> None:
    """Write one line to stderr in a single write.

    ``print`` writes the text and the newline separately, and with unbuffered stderr
    (``python -u``, ``PYTHONUNBUFFERED``) the lines of ranks sharing a terminal or a
    torchrun log could interleave mid-line.
    """
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def shows_progress(quiet: bool) -> bool:
    """Whether to draw progress bars: not ``--quiet``, and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


def progress_bar(total: int, quiet: bool, **options):
    """A tqdm bar on stderr that disappears when done (``options``: its ``desc``,
    ``unit``, ...); None when quiet or stderr is no terminal."""
    if not shows_progress(quiet):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, leave=False, file=sys.stderr, **options)


def header_option(parser) -> None:
    parser.add_argument("--header", default="auto", choices=["auto", "yes", "no"],
                        help="whether a CSV's first line is a header (default auto: a "
                             "line with a non-number, or pandas' 0,1,...,d-1 above "
                             "non-integer rows; a line that could be either is refused)")


def header(args) -> bool | None:
    """``--header`` as :func:`attnclust._io.load_matrix` takes it."""
    return {"auto": None, "yes": True, "no": False}[args.header]


def reading_options(parser) -> None:
    """How DATA is read: ``--header``, ``--columns``, ``--drop-columns``."""
    header_option(parser)
    parser.add_argument("--columns", default=None, metavar="LIST",
                        help="the columns to cluster, by name or 0-based index, separated "
                             "by commas (e.g. sepal_length,petal_length or 0,2); default: "
                             "all")
    parser.add_argument("--drop-columns", default=None, metavar="LIST",
                        help="columns to leave out, by name or 0-based index (e.g. a label "
                             "column: --drop-columns species)")


def column_lists(args) -> tuple[list[str] | None, list[str] | None]:
    """``(--columns, --drop-columns)`` as lists of names or indices (None when not given)."""
    def items(value):
        if value is None:
            return None
        listed = [item.strip() for item in value.split(",") if item.strip()]
        if not listed:
            raise CommandError(f"--columns/--drop-columns must list columns, got {value!r}")
        return listed
    return (items(getattr(args, "columns", None)),
            items(getattr(args, "drop_columns", None)))


def inverse_temperature_option(parser, *, required: bool, help: str) -> None:
    """``--inverse-temperature``, and ``--temperature``, its old name hidden from the help.

    The two form one mutually exclusive group, so that the usage line shows a required
    ``--inverse-temperature`` as required and giving both is a usage error.
    """
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--inverse-temperature", default=None, metavar="LAMBDA", help=help)
    group.add_argument("--temperature", dest="deprecated_temperature", default=None,
                       help=argparse.SUPPRESS)


def inverse_temperature_arg(args, default):
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


def check_seed(seed: int) -> None:
    if seed < 0:
        raise CommandError(f"--seed must be a non-negative integer, got {seed}")


def check_device(device: str) -> None:
    """``--device`` is cpu, or a CUDA device that exists on this machine."""
    from .._validation import check_device

    try:
        check_device(device, name="--device")
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def same_file(a, b) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (the same path, or a link to it)."""
    from pathlib import Path

    a, b = Path(a), Path(b)
    return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))


def refuse_overwriting_input(data: str, outputs) -> None:
    """An output that is the input file itself (same path or same file) is refused."""
    for out in outputs:
        if same_file(out, data):
            raise CommandError(f"the output {out} is the input file {data}; choose another "
                               "--out")


def write_all(outputs: dict, summary: str, remove=()) -> None:
    """Stage every ``path -> array``, print ``summary``, then rename all and remove the
    files ``remove`` (an earlier run's): all or nothing.

    The summary is printed (and flushed) before the renames, so a failure to print it (a
    full disk behind stdout, a closed pipe) leaves no output file, like any other failure.
    """
    from .._io import save_matrices

    save_matrices(outputs, before_rename=lambda: _print_summary(summary), remove=remove)


def _print_summary(summary: str) -> None:
    try:
        print(summary, flush=True)
    except StdoutError as exc:
        raise CommandError(f"could not print the summary ({exc.reason}); nothing was "
                           "written") from None

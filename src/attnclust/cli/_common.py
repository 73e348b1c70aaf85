"""What every command shares: its one-line errors, common arguments, progress, outputs.

A :class:`CommandError` (or a ``ValueError``/``OSError``) raised by a command becomes one
line on stderr and exit status 2 in :func:`attnclust.cli.main`, in the command line's words
(:func:`as_options`: ``--max-clusters``, not the library's ``max_clusters``);
:func:`write_all` writes a command's outputs all or nothing, after its summary is printed.

==========================  =================================================
library's words             command line's (:func:`as_options`)
==========================  =================================================
``name='value'``            ``--option value`` (``'a' or 'b'``: ``a or b``)
``noise_head=True/False``   ``--noise-head`` / ``no --noise-head``
raise/lower/pass ``name``   raise/lower/pass ``--option``
``(name)``                  ``(--option)``
``name must be``            ``--option must be``
``'auto' name``             ``--option auto``
==========================  =================================================
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


# -- the library's words in a command's messages, written as the command line's --------------
# The estimator and the functions behind a command speak of their parameters (max_clusters,
# random_state, normalize='rows'); a user of the command line sets them with options
# (--max-clusters, --seed, --normalize rows). Every line a command shows (errors, warnings,
# the reasons it prints or writes to its JSON) goes through as_options: a parameter that
# the command sets from an option is written as that option, and advice about parameters
# the command line does not offer (tol, init, solver, penalty: always at the values it
# needs) is dropped.

# per command, the library's parameters it sets from options, and those options
_FIT = {"n_clusters": "--n-clusters", "max_clusters": "--max-clusters",
        "inverse_temperature": "--inverse-temperature", "geometry": "--geometry",
        "covariance_type": "--covariance-type", "noise_head": "--noise-head",
        "normalize": "--normalize", "max_iter": "--max-iter", "random_state": "--seed",
        "device": "--device"}
OPTIONS = {
    "fit": _FIT,
    "path": {"max_clusters": "--max-clusters", "geometry": "--geometry",
             "objective": "--objective", "min_cluster_size": "--min-cluster-size"},
    "quantize": {"inverse_temperature": "--inverse-temperature", "n_steps": "--n-steps",
                 "exclude_self": "--exclude-self", "renormalize": "--renormalize",
                 "backend": "--backend"},
    "predict": {},
}
# names that stand for an option only as the object of advice ("lower lambda"), not in
# "lambda=1e+12", the value a fit reached
_ADVICE_ONLY = {"fit": {"lambda": "--inverse-temperature"},
                "quantize": {"lambda": "--inverse-temperature"}}

# parameters no command sets (always at the values the library's advice asks for): the
# advice to change them is dropped, an item of a list of requirements ("needs
# geometry='euclidean', solver='fixed-point' and penalty=None") left out
_FIXED = ("solver", "init", "penalty", "tol")
_VALUE = r"(?:'[^']*'(?: or '[^']*')*|[\w+-]+(?:\.[\w+-]+)*)"
_ITEM = r"[a-z_]+=" + _VALUE
_REQUIREMENTS = re.compile(r"(\bneeds )(" + _ITEM + r"(?:(?:, |,? and )" + _ITEM + r")*)")
_DROPPED = [
    (re.compile(r"\b(max_iter|random_state) or (?:tol|init)\b"), r"\1"),  # "increase max_iter"
    # the default fit's description: what no option changes
    (re.compile(r",? (?:the fixed-point solver|a k-means\+\+ or 'anneal' init|no penalty)\b"),
     ""),
    (re.compile(r"\brescale X\b"), "rescale the data"),
]


def as_options(message: str, command: str) -> str:
    """``message`` (of the library, shown by ``attnclust COMMAND``) in the command line's
    words: the parameters the command sets from options written as those options, advice
    about parameters it does not offer left out. Commands that set no parameter
    (``reproduce``, ``bench``) keep the message as it is.

    Examples
    --------
    >>> as_options("rescale the data or pass normalize='center-scale'", "fit")
    'rescale the data or pass --normalize center-scale'
    >>> as_options("it needs geometry='euclidean' and noise_head=False, not normalize=None.",
    ...            "fit")
    'it needs --geometry euclidean and no --noise-head, not --normalize none.'
    >>> as_options("/data/geometry=sphere/x.csv: no such file; lambda=1e-3", "fit")
    '/data/geometry=sphere/x.csv: no such file; lambda=1e-3'
    >>> as_options("K = max_clusters = 3: raise max_clusters (n_clusters_reason_)", "path")
    'K = max_clusters = 3: raise --max-clusters (n_clusters_reason_)'
    >>> as_options("follow more heads (max_clusters) to measure it", "path")
    'follow more heads (--max-clusters) to measure it'
    >>> as_options("inverse_temperature must be a positive number, got 'x'", "fit")
    "--inverse-temperature must be a positive number, got 'x'"
    >>> as_options("did not converge in max_iter=1 steps; increase max_iter or tol", "fit")
    'did not converge in --max-iter 1 steps; increase --max-iter'
    >>> as_options("no row: try another random_state or init, or fewer clusters", "fit")
    'no row: try another --seed, or fewer clusters'
    >>> as_options("covariance_type='full' needs geometry='euclidean', solver='fixed-point' "
    ...            "and penalty=None", "fit")
    '--covariance-type full needs --geometry euclidean'
    >>> as_options("pass normalize='rows' or 'center-scale'", "fit")
    'pass --normalize rows or center-scale'
    >>> as_options("rows read as noise to it: fit without noise_head", "fit")
    'rows read as noise to it: fit without --noise-head'
    >>> as_options("overflow (lambda = 1e+308); rescale X or lower lambda", "quantize")
    'overflow (lambda = 1e+308); rescale the data or lower --inverse-temperature'
    """
    options = OPTIONS.get(command)
    if options is None:
        return message
    message = _REQUIREMENTS.sub(_settable, message)
    for pattern, replacement in _DROPPED:
        message = pattern.sub(replacement, message)
    if options:
        names = "(" + "|".join(options) + ")"
        message = _assignments(message, options, names)
        message = re.sub(r"\(" + names + r"\)", lambda m: f"({options[m.group(1)]})", message)
    advice = {**options, **_ADVICE_ONLY.get(command, {})}
    if advice:
        verbs = "(" + "|".join(advice) + ")"
        message = re.sub(r"(\b(?:raise|lower|pass|increase|another|without) )" + verbs +
                         r"(?![\w=])",
                         lambda m: f"{m.group(1)}{advice[m.group(2)]}", message)
    return message


def _settable(match) -> str:
    """A list of requirements without the parameters no command sets."""
    items = [item for item in re.findall(_ITEM, match.group(2))
             if item.split("=")[0] not in _FIXED]
    if not items:
        return match.group(0)
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return match.group(1) + listed


def _assignments(message: str, options: dict, names: str) -> str:
    """``name='value'``, ``'value' name`` and ``name must be`` written as options."""
    def flag(match) -> str:
        name, value = match.group(1), match.group(2)
        if name == "noise_head" and value in ("True", "False"):
            return options[name] if value == "True" else f"no {options[name]}"
        values = [v.strip("'") for v in value.split(" or ")]
        return f"{options[name]} " + " or ".join("none" if v == "None" else v for v in values)
    # a name not inside a path or a word, and a value without a sentence's closing period
    message = re.sub(r"(?<![\w/.=-])" + names + "=(" + _VALUE + ")", flag, message)
    message = re.sub(r"'(\w+)' " + names + r"\b",
                     lambda m: f"{options[m.group(2)]} {m.group(1)}", message)
    return re.sub(r"^" + names + r" must be", lambda m: f"{options[m.group(1)]} must be",
                  message)


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
                        help="the columns to read, by name or 0-based index, separated "
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

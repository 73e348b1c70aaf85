"""The ``attnclust`` command line: ``main(argv=None) -> int``.

Every subcommand turns bad input into one line on stderr and exit status 2, with no
traceback and no partial output file: outputs are written under temporary names and
renamed only when all of them are complete (and, for ``fit`` and ``quantize``, only once
the summary has been printed). SIGINT and SIGTERM remove every temporary file and exit
with status 130 or 143 and the one line ``attnclust: interrupted``. Python warnings raised
during a command are shown as one line each, ``attnclust CMD: warning: ...`` (none with
``--quiet``).

This module assembles the parser and runs a command; each command is a module of this
package (``list`` and ``reproduce`` in :mod:`~attnclust.cli.reproduce`, ``fit`` in
:mod:`~attnclust.cli.fit` with its streamed and distributed flows, ``predict``, ``path``,
``quantize``, ``bench``), and :mod:`~attnclust.cli._common` holds what they share.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal

from . import bench, fit, path, predict, quantize, reproduce
from ._common import EXIT_USAGE, CommandError, StdoutError, as_options, say
from ._runtime import (
    EXIT_SIGNAL,
    Interrupted,
    signals_raise_interrupted,
    stdout_named,
    warnings_as_lines,
)

__all__ = ["main"]

# the subcommands, in the order of the help
_COMMANDS = (reproduce, fit, predict, path, quantize, bench)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2).

    Its subcommand parsers are of the same class, so ``attnclust fit -k abc`` reads
    ``attnclust fit: error: argument --n-clusters/-k: invalid value 'abc': give an integer
    or 'auto' (see attnclust fit --help)``.
    """

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(
        prog="attnclust",
        description="Attention layers as clustering and quantization operators.",
    )
    parser.add_argument("--version", action="version", version=f"attnclust {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
        command.add_parser(sub)
    parser.set_defaults(commands=sub.choices)   # a command's parser names its own errors
    return parser


def _run(args) -> int:
    """The command's handler, with every expected failure turned into one line."""
    try:
        for name in ("model", "data"):      # "" would be the current folder
            if name in vars(args) and not str(getattr(args, name)).strip():
                raise CommandError(f"{name.upper()} must not be empty: give a "
                                   f"{'model' if name == 'model' else 'data'} file")
        with stdout_named():
            return args.handler(args)
    except (CommandError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        message = as_options(message, args.command)    # the library's words, as options
        say(f"attnclust {args.command}: error: {message}")
        return EXIT_USAGE
    except (MemoryError, RuntimeError) as exc:   # not the input's fault: status 1
        detail = " ".join(str(exc).split())
        if isinstance(exc, RuntimeError) and not _allocation(detail):
            raise                   # torch's other errors are bugs: their traceback
        say(f"attnclust {args.command}: error: out of memory"
            + (f" ({detail[:300]})" if detail else ""))
        return 1


def _allocation(message: str) -> bool:
    """Whether torch's ``RuntimeError`` is a failed allocation (it raises no MemoryError)."""
    return any(s in message for s in ("can't allocate memory", "out of memory",
                                      "not enough memory"))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    from .. import _io

    parser = _build_parser()
    try:
        with stdout_named() as stdout:
            args, unknown = parser.parse_known_args(argv)
            if unknown:        # "attnclust fit: error: ...", not "attnclust: error: ..."
                args.commands[args.command].error(
                    f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:          # --help (0) or a usage error, already printed (2)
        if stdout.failure is not None:     # --help into a full disk or a closed pipe
            say(f"attnclust: error: {stdout.failure}")
            return EXIT_USAGE
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except StdoutError as exc:
        say(f"attnclust: error: {exc}")
        return EXIT_USAGE
    # under torchrun every rank runs this: one copy of each warning (rank 0's) is enough
    quiet = getattr(args, "quiet", False) or (
        getattr(args, "distributed", False) and os.environ.get("RANK", "0") != "0")
    if quiet and hasattr(args, "quiet"):
        args.quiet = True               # the notes too (a pandas index, --weight-column)
    try:
        with signals_raise_interrupted(), warnings_as_lines(args.command, quiet):
            return _run(args)
    except (Interrupted, KeyboardInterrupt) as exc:
        _io.remove_temporaries()      # whatever the unwinding did not reach
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        with contextlib.suppress(OSError, ValueError):
            say("attnclust: interrupted")
        return EXIT_SIGNAL[signum]

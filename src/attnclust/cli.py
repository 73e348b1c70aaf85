"""The ``attnclust`` command line: ``main(argv=None) -> int``.

Every subcommand turns bad input into one line on stderr and exit status 2, with no
traceback and no partial output file.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]

EXIT_USAGE = 2


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnclust",
        description="Attention layers as clustering and quantization operators.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the reproducible figures")
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("reproduce", help="reproduce figures (fig1 .. fig9, or all)")
    p.add_argument("figures", nargs="+", metavar="FIG", help="figure names, or 'all'")
    p.add_argument("--quick", action="store_true", help="small configs (minutes, not hours)")
    p.add_argument("--out", default="results", help="output folder (default: results)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default: 0)")
    p.add_argument("--recompute", action="store_true", help="ignore cached results")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=_cmd_reproduce)

    p = sub.add_parser("bench", help="run the benchmarks under benchmarks/ and print tables")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--only", default=None, help="run only benchmarks whose name contains this")
    p.add_argument("--dir", default=None, help="benchmarks folder (default: ./benchmarks)")
    p.set_defaults(handler=_cmd_bench)

    return parser


def _cmd_bench(args) -> int:
    from ._bench import find_benchmarks, format_table, run_benchmarks

    for name, rows in run_benchmarks(find_benchmarks(args.dir), quick=args.quick,
                                     only=args.only):
        print(f"\n== {name}")
        print(format_table(rows), flush=True)
    return 0


def _cmd_list(args) -> int:
    from .experiments import FIGURES

    for name, module in FIGURES.items():
        print(f"{name:6s} {module.DESCRIPTION}")
    return 0


def _cmd_reproduce(args) -> int:
    from .experiments import FIGURES, reproduce

    names = list(FIGURES) if args.figures == ["all"] else args.figures
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise CommandError(f"unknown figure {unknown[0]!r}; choose from {', '.join(FIGURES)} "
                           "or 'all'")
    for name in names:
        paths = reproduce(name, out=args.out, quick=args.quick, seed=args.seed,
                          recompute=args.recompute, progress=not args.quiet)
        print(f"{name}: {paths.png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (CommandError, ValueError, OSError) as exc:
        print(f"attnclust {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

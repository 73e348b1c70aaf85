"""``attnclust list`` and ``attnclust reproduce``: the reproducible figures, listed and
recomputed (each into its folder of outputs, cached for the next run)."""

from __future__ import annotations

from ._common import CommandError, check_seed, shows_progress


def add_parser(sub) -> None:
    """The two commands of the figures: ``list``, then ``reproduce``."""
    p = sub.add_parser("list", help="list the reproducible figures")
    p.set_defaults(handler=run_list)

    p = sub.add_parser("reproduce",
                       help="reproduce the paper's figures (names: attnclust list; or all)")
    p.add_argument("figures", nargs="+", metavar="FIG", help="figure names, or 'all'")
    p.add_argument("--quick", action="store_true", help="small configs (under a minute)")
    p.add_argument("--out", default="results", help="output folder (default: results)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default: 0)")
    p.add_argument("--recompute", action="store_true", help="ignore cached results")
    p.add_argument("--quiet", action="store_true", help="no progress bars, no warnings")
    p.set_defaults(handler=run)


def run_list(args) -> int:
    from ..study.experiments import FIGURES

    for name, module in FIGURES.items():
        print(f"{name:6s} {module.DESCRIPTION}")
    return 0


def run(args) -> int:
    from .._io import writable_folder
    from ..study.experiments import FIGURES, reproduce

    if "all" in args.figures and len(args.figures) > 1:
        raise CommandError("'all' cannot be combined with figure names")
    if not args.out.strip():
        raise CommandError("--out must not be empty: give a folder, such as results")
    check_seed(args.seed)
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
                              recompute=args.recompute, progress=shows_progress(args.quiet))
            print(f"{name}: {paths.png}", flush=True)
    return 0

"""``attnclust quantize``: identity attention applied to the rows of a file
(in-context quantization), written to one output file."""

from __future__ import annotations

from ._common import (
    CommandError,
    inverse_temperature_arg,
    inverse_temperature_option,
    reading_options,
    refuse_overwriting_input,
    write_all,
)


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="apply identity attention (in-context quantization)")
    p.add_argument("data", metavar="DATA",
                   help="data file, read as attnclust fit reads it (.npy, .csv, .tsv, "
                        ".gz, .parquet)")
    inverse_temperature_option(p, required=True,
                               help="inverse temperature lambda (it multiplies the logits: "
                                    "larger is sharper)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="output file (.npy, or .csv with DATA's column names as its header)")
    p.add_argument("--n-steps", type=int, default=1, help="repeated applications (default: 1)")
    p.add_argument("--exclude-self", action="store_true", help="a token does not attend to itself")
    p.add_argument("--renormalize", action="store_true",
                   help="project tokens back to the sphere after each step")
    p.add_argument("--backend", default="auto", choices=["auto", "dense", "fused", "chunked"],
                   help="how the attention is computed (default auto: fused where it runs "
                        "without an L x L matrix, else dense for small problems and chunked "
                        "otherwise)")
    p.add_argument("--quiet", action="store_true", help="no warnings")
    reading_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from pathlib import Path

    from .._atomic import WithHeader
    from .._io import writable_folder
    from ..study.in_context import identity_attention
    from ._data import read_table

    out = Path(args.out)
    if out.suffix.lower() not in (".npy", ".csv") or out.name.startswith("."):
        raise CommandError(f"--out must be a file name ending in .npy or .csv, got {args.out!r}")
    given = inverse_temperature_arg(args, default=None)   # required by the parser
    try:
        lam = float(given)
    except ValueError:
        lam = float("nan")
    if not 0 < lam < float("inf"):      # also false for nan
        raise CommandError(f"--inverse-temperature must be a positive number, got {given!r}")
    if args.n_steps < 1:
        raise CommandError(f"--n-steps must be a positive integer, got {args.n_steps}")
    refuse_overwriting_input(args.data, [out])
    table = read_table(args, min_columns=2)
    X = table.X
    if args.exclude_self and X.shape[0] < 2:
        raise CommandError(f"--exclude-self needs at least 2 rows (each attends to the "
                           f"others), {args.data} has {X.shape[0]}")
    with writable_folder(out.parent):
        # the library refuses overflow (NaN or inf) and a dense L x L that cannot fit
        Y = identity_attention(X, lam, n_steps=args.n_steps,
                               exclude_self=args.exclude_self, renormalize=args.renormalize,
                               backend=args.backend)
        # the columns' names head a .csv, as every CSV fit and predict write
        write_all({out: WithHeader(Y, table.columns)},
                  f"n={X.shape[0]}  d={X.shape[1]}  lambda={lam:g}  steps={args.n_steps}  "
                  f"wrote {out}")
    return 0

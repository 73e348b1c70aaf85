"""``attnclust bench``: run the benchmarks of a source checkout and print their tables.

A benchmark that fails is one line on stderr (exit status 1); the others still run.
"""

from __future__ import annotations

from ._common import CommandError, check_device, say


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="run the benchmarks of a source checkout and print tables")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--only", default=None, help="run only benchmarks whose name contains this")
    p.add_argument("--dir", default=None,
                   help="folder of bench_*.py files (default: ./benchmarks, else the "
                        "benchmarks/ folder of the source checkout attnclust runs from)")
    p.add_argument("--quiet", action="store_true", help="no warnings")
    p.add_argument("--device", default=None,
                   help="run the benchmarks of device paths (bench_devices.py) on this "
                        "torch device, e.g. cuda, against the CPU; the others are "
                        "skipped (default: every benchmark, each on its own devices)")
    p.set_defaults(handler=run)


def run(args) -> int:
    """Run each benchmark file; a failing one is one line on stderr, the others still run."""
    from pathlib import Path

    from .._bench import describe_failure, find_benchmarks, format_table, run_benchmarks

    if args.dir is not None and not Path(args.dir).is_dir():
        raise CommandError(f"--dir {args.dir}: " + ("not a folder" if Path(args.dir).exists()
                                                    else "no such folder")
                           + "; give the benchmarks/ folder of an attnclust checkout")
    files = find_benchmarks(args.dir)
    names = [path.stem.removeprefix("bench_") for path in files]
    chosen = [path for path, name in zip(files, names, strict=True)
              if not args.only or args.only in name]
    if not chosen:
        raise CommandError(f"--only {args.only!r} matches no benchmark; available: "
                           f"{', '.join(names)}")
    device = _device(args)
    status = 0
    for path in chosen:
        name = path.stem.removeprefix("bench_")
        try:
            for name, rows in run_benchmarks([path], quick=args.quick, device=device):
                table = format_table(rows) if rows is not None else \
                    f"(skipped: it measures the CPU only, not --device {device})" \
                    if device is not None else "(no rows: its run() returned None)"
                print(f"\n== {name}")
                print(table, flush=True)
        except (Exception, SystemExit) as exc:   # a benchmark's bug is not ours to re-raise
            say(f"attnclust bench: error: benchmark {name!r} ({path}) failed: "
                f"{describe_failure(path, exc)}")
            status = 1
    return status


def _device(args) -> str | None:
    """``--device``, checked (one line, status 2, for a device this machine lacks)."""
    if args.device is not None:
        check_device(args.device)
    return args.device

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


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2).

    Its subcommand parsers are of the same class, so ``attnclust fit -k abc`` reads
    ``attnclust fit: error: argument --n-clusters/-k: invalid int value: 'abc' (see
    attnclust fit --help)``.
    """

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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

    p = sub.add_parser("fit", help="cluster the rows of a .npy/.csv file with AttentionClustering")
    p.add_argument("data", metavar="DATA", help="data file (.npy, or .csv with or without header)")
    p.add_argument("--n-clusters", "-k", type=int, required=True, metavar="K",
                   help="number of clusters (heads)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="output prefix: PREFIX.centers.{npy,csv}, PREFIX.labels.{npy,csv} "
                        "(default: DATA without its suffix)")
    p.add_argument("--temperature", default="auto",
                   help="inverse temperature lambda, or 'auto' (default)")
    p.add_argument("--geometry", default="euclidean", choices=["euclidean", "sphere"],
                   help="euclidean: free heads, soft k-means cells (default); sphere: unit "
                        "heads, cones from the origin (directions, e.g. embeddings)")
    p.add_argument("--normalize", default="auto", choices=["auto", "rows", "center-scale", "none"],
                   help="preprocessing of the rows (default auto: onto the unit sphere with "
                        "--geometry sphere, as given otherwise)")
    p.add_argument("--no-anneal", action="store_true", help="fit at the target temperature only")
    p.add_argument("--max-iter", type=int, default=300)
    p.add_argument("--seed", type=int, default=0, help="random_state (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel fit, one process per rank, launched by torchrun "
                        "(gloo on CPU, NCCL on CUDA); each rank memory-maps only its rows "
                        "of a .npy (a .csv is read whole, then sliced); rank 0 alone prints "
                        "and writes")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="with --distributed: how long a rank waits for the others before "
                        "failing (rendezvous and each collective; default: 300)")
    p.set_defaults(handler=_cmd_fit)

    p = sub.add_parser("quantize", help="apply identity attention (in-context quantization)")
    p.add_argument("data", metavar="DATA", help="data file (.npy, or .csv with or without header)")
    p.add_argument("--temperature", type=float, required=True, metavar="T",
                   help="inverse temperature lambda")
    p.add_argument("--out", required=True, metavar="FILE", help="output file (.npy or .csv)")
    p.add_argument("--n-steps", type=int, default=1, help="repeated applications (default: 1)")
    p.add_argument("--exclude-self", action="store_true", help="a token does not attend to itself")
    p.add_argument("--renormalize", action="store_true",
                   help="project tokens back to the sphere after each step")
    p.add_argument("--backend", default="auto", help="auto, dense, fused or chunked")
    p.set_defaults(handler=_cmd_quantize)

    p = sub.add_parser("bench", help="run the benchmarks under benchmarks/ and print tables")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--only", default=None, help="run only benchmarks whose name contains this")
    p.add_argument("--dir", default=None, help="benchmarks folder (default: ./benchmarks)")
    p.set_defaults(handler=_cmd_bench)

    return parser


def _cmd_bench(args) -> int:
    import subprocess

    from ._bench import find_benchmarks, format_table, run_benchmarks

    files = find_benchmarks(args.dir)
    names = [path.stem.removeprefix("bench_") for path in files]
    chosen = [path for path, name in zip(files, names, strict=True)
              if not args.only or args.only in name]
    if not chosen:
        raise CommandError(f"--only {args.only!r} matches no benchmark; available: "
                           f"{', '.join(names)}")
    status = 0
    for path in chosen:
        name = path.stem.removeprefix("bench_")
        try:
            for name, rows in run_benchmarks([path], quick=args.quick):
                print(f"\n== {name}")
                print(format_table(rows), flush=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            what = (f"a subprocess timed out after {exc.timeout:g} s"
                    if isinstance(exc, subprocess.TimeoutExpired)
                    else f"a subprocess exited with status {exc.returncode}")
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
                else (exc.stderr or "")
            last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
            print(f"attnclust bench: error: benchmark {name!r} failed: {what}"
                  + (f": {last}" if last else ""), file=sys.stderr, flush=True)
            status = 1
    return status


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
        bar.set_postfix(loss=f"{info.loss:.4g}", lam=f"{info.temperature:.3g}", refresh=False)
    return bar, callback


def _write_all(outputs: dict) -> None:
    """Write every ``path -> array`` under a temporary name; rename all only if all succeed."""
    from ._io import save_matrices

    save_matrices(outputs)


def _check_centers(est) -> None:
    """The CLI's last check before writing: finite centers (of unit norm on the sphere)."""
    import numpy as np

    centers = np.asarray(est.cluster_centers_, dtype=np.float64)
    if not np.isfinite(centers).all():
        raise CommandError("fit produced non-finite cluster centers (overflow); rescale the "
                           "data or lower --temperature")
    if est.geometry != "sphere":
        return
    norms = np.linalg.norm(centers, axis=1)
    if not np.allclose(norms, 1.0, rtol=0.0, atol=1e-6):
        worst = int(np.argmax(np.abs(norms - 1.0)))
        raise CommandError(f"fit produced a cluster center of norm {norms[worst]:.6g} "
                           f"(center {worst}), not on the unit sphere; rescale the data or "
                           "lower --temperature")


def _cmd_fit(args) -> int:
    if args.distributed:
        return _cmd_fit_distributed(args)
    import time
    from pathlib import Path

    import numpy as np

    from ._io import load_matrix
    from .clustering import AttentionClustering

    _fit_params(args)
    X = load_matrix(args.data, min_columns=2)
    if args.n_clusters > X.shape[0]:
        raise CommandError(f"--n-clusters {args.n_clusters} is larger than the number of rows "
                           f"({X.shape[0]}) of {args.data}")
    prefix = args.out if args.out is not None else str(Path(args.data).with_suffix(""))
    est = AttentionClustering(args.n_clusters, **_fit_params(args))
    bar, callback = _progress_callback(_progress_total(est), args.quiet)
    est.set_params(callback=callback)
    start = time.perf_counter()
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)   # reported in the summary instead
            est.fit(X)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    _check_centers(est)
    outputs = {Path(f"{prefix}.centers.npy"): est.cluster_centers_,
               Path(f"{prefix}.centers.csv"): est.cluster_centers_,
               Path(f"{prefix}.labels.npy"): est.labels_,
               Path(f"{prefix}.labels.csv"): est.labels_}
    _write_all(outputs)

    confidence = est.predict_proba(X).max(1)
    sizes = np.bincount(est.labels_, minlength=args.n_clusters)
    print(f"n={X.shape[0]}  d={X.shape[1]}  K={args.n_clusters}  "
          f"lambda={est.temperature_:.4g}  steps={est.n_iter_}  "
          f"converged={'yes' if est.converged_ else 'no'}  risk={-est.score(X):.4g}  "
          f"time={seconds:.2f}s")
    print(f"{'cluster':>7s} {'size':>8s} {'share':>7s} {'mean max attention':>19s}")
    for k in range(args.n_clusters):
        mask = est.labels_ == k
        conf = float(confidence[mask].mean()) if mask.any() else float("nan")
        print(f"{k:7d} {sizes[k]:8d} {sizes[k] / X.shape[0]:7.3f} {conf:19.3f}")
    print("wrote " + ", ".join(str(p) for p in outputs))
    return 0


def _fit_params(args) -> dict:
    """Estimator parameters from the ``fit`` arguments (checked here, before any work)."""
    if args.n_clusters < 1:
        raise CommandError(f"--n-clusters must be a positive integer, got {args.n_clusters}")
    if args.max_iter < 1:
        raise CommandError(f"--max-iter must be a positive integer, got {args.max_iter}")
    _check_seed(args.seed)
    _check_device(args.device)
    temperature = args.temperature
    if temperature != "auto":
        try:
            temperature = float(temperature)
        except ValueError:
            raise CommandError(f"--temperature must be a positive number or 'auto', got "
                               f"{args.temperature!r}") from None
    return dict(geometry=args.geometry, temperature=temperature,
                normalize=None if args.normalize == "none" else args.normalize,
                anneal=False if args.no_anneal else "auto", max_iter=args.max_iter,
                random_state=args.seed, device=args.device)


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise CommandError(f"--seed must be a non-negative integer, got {seed}")


def _check_device(device: str) -> None:
    """``--device`` is cpu, or a CUDA device that exists on this machine."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise CommandError(f"--device {device!r} is not a torch device; use cpu, cuda or "
                           "cuda:N") from None
    if dev.type == "cpu":
        return
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CommandError(f"--device {device!r}: CUDA is not available on this machine; "
                               "use --device cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise CommandError(f"--device {device!r}: no such CUDA device, this machine has "
                               f"{count} (cuda:0 .. cuda:{count - 1})")
        return
    raise CommandError(f"--device {device!r} is not supported; use cpu, cuda or cuda:N")


def _load_shard(path: str, rank: int, world_size: int):
    """This rank's rows: a memory-mapped block of a .npy, or a slice of a whole .csv."""
    from pathlib import Path

    from ._io import load_matrix
    from .distributed import shard_bounds, shard_rows

    if Path(path).suffix.lower() == ".npy":
        X = shard_rows(path, rank, world_size)
        if X.shape[1] < 2:
            raise ValueError(f"{path}: {X.shape[1]} column(s), need at least 2 (one point per "
                             "row, one feature per column)")
        return X
    X = load_matrix(path, min_columns=2)
    start, stop = shard_bounds(X.shape[0], rank, world_size)
    return X[start:stop]


def _cmd_fit_distributed(args) -> int:
    """``fit --distributed``: every rank fits its shard; rank 0 prints and writes."""
    import time
    import warnings
    from pathlib import Path

    import numpy as np
    import torch
    import torch.distributed as dist

    from . import distributed as ddp

    params = _fit_params(args)
    if not args.timeout > 0:
        raise CommandError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    backend = "nccl" if str(args.device).startswith("cuda") else "gloo"
    try:
        rank, world = ddp.init_from_env(backend=backend, timeout=args.timeout)
    except ddp.DistributedError as exc:
        print(f"attnclust fit: error: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            X, error = _load_shard(args.data, rank, world), None
        except (ValueError, OSError) as exc:
            X, error = None, exc
        bad = ddp.failed_ranks(error is None)
        if error is not None:
            raise CommandError(f"rank {rank}: {error}")
        if bad:
            raise CommandError(f"rank {rank}: rank(s) {bad} could not read {args.data}")
        prefix = args.out if args.out is not None else str(Path(args.data).with_suffix(""))
        from .clustering import AttentionClustering

        plan = AttentionClustering(args.n_clusters, **params)
        bar, callback = _progress_callback(_progress_total(plan), args.quiet or rank != 0)
        stats = ddp.CommStats()
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)   # reported in the summary
                est = ddp.fit_distributed(X, args.n_clusters, stats=stats, callback=callback,
                                          **params)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - start
        _check_centers(est)   # the same centers on every rank
        n_calls, n_bytes = stats.calls, stats.bytes
        labels = ddp.gather_rows(est.labels_)
        # summary statistics of all rows: sizes, summed max attention, summed risk
        Xn = np.asarray(X, dtype=np.float64)
        proba = est.predict_proba(Xn)
        K = args.n_clusters
        conf_sum = np.bincount(est.labels_, weights=proba.max(1), minlength=K)
        local = np.concatenate([np.bincount(est.labels_, minlength=K), conf_sum,
                                [-est.score(Xn) * Xn.shape[0]]])
        total = ddp.make_reduce()(torch.from_numpy(local)).numpy()
        sizes, conf_sum, risk = total[:K], total[K:2 * K], total[-1] / est.n_samples_total_
        if rank == 0:
            outputs = {Path(f"{prefix}.centers.npy"): est.cluster_centers_,
                       Path(f"{prefix}.centers.csv"): est.cluster_centers_,
                       Path(f"{prefix}.labels.npy"): labels,
                       Path(f"{prefix}.labels.csv"): labels}
            _write_all(outputs)
            n = est.n_samples_total_
            print(f"n={n}  d={Xn.shape[1]}  K={K}  ranks={world} ({dist.get_backend()})  "
                  f"lambda={est.temperature_:.4g}  steps={est.n_iter_}  "
                  f"converged={'yes' if est.converged_ else 'no'}  risk={risk:.4g}  "
                  f"time={seconds:.2f}s")
            per_pass = ddp.pass_bytes(K, Xn.shape[1], dtype=torch.float64)
            print(f"communicated per rank: {n_bytes} bytes in {n_calls} all-reduces, of which "
                  f"{stats.by_size.get(per_pass, 0)} passes of {per_pass} bytes")
            print(f"{'cluster':>7s} {'size':>8s} {'share':>7s} {'mean max attention':>19s}")
            for k in range(K):
                conf = conf_sum[k] / sizes[k] if sizes[k] else float("nan")
                print(f"{k:7d} {int(sizes[k]):8d} {sizes[k] / n:7.3f} {conf:19.3f}")
            print("wrote " + ", ".join(str(p) for p in outputs))
        return 0
    except ddp.DistributedError as exc:
        print(f"attnclust fit: error: {exc}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()


def _cmd_quantize(args) -> int:
    from pathlib import Path

    import numpy as np

    from ._io import load_matrix
    from .quantize import identity_attention

    out = Path(args.out)
    if out.suffix.lower() not in (".npy", ".csv"):
        raise CommandError(f"--out must end in .npy or .csv, got {args.out!r}")
    if not (args.temperature > 0 and args.temperature < float("inf")):
        raise CommandError(f"--temperature must be a positive number, got {args.temperature}")
    if args.n_steps < 1:
        raise CommandError(f"--n-steps must be a positive integer, got {args.n_steps}")
    X = load_matrix(args.data, min_columns=2)
    Y = identity_attention(X, args.temperature, n_steps=args.n_steps,
                           exclude_self=args.exclude_self, renormalize=args.renormalize,
                           backend=args.backend)
    if not np.isfinite(Y).all():
        raise CommandError("identity attention produced non-finite values (overflow); "
                           "rescale the data or lower --temperature")
    _write_all({out: Y})
    print(f"n={X.shape[0]}  d={X.shape[1]}  lambda={args.temperature:g}  "
          f"steps={args.n_steps}  wrote {out}")
    return 0


def _cmd_list(args) -> int:
    from .experiments import FIGURES

    for name, module in FIGURES.items():
        print(f"{name:6s} {module.DESCRIPTION}")
    return 0


def _cmd_reproduce(args) -> int:
    from .experiments import FIGURES, reproduce

    if "all" in args.figures and len(args.figures) > 1:
        raise CommandError("'all' cannot be combined with figure names")
    _check_seed(args.seed)
    names = list(FIGURES) if args.figures == ["all"] else args.figures
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise CommandError(f"unknown figure {unknown[0]!r}; choose from {', '.join(FIGURES)} "
                           "or 'all'")
    for name in names:
        paths = reproduce(name, out=args.out, quick=args.quick, seed=args.seed,
                          recompute=args.recompute,
                          progress=not args.quiet and sys.stderr.isatty())
        print(f"{name}: {paths.png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # --help (0) or a usage error, already printed (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return args.handler(args)
    except (CommandError, ValueError, OSError) as exc:
        print(f"attnclust {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

"""``attnclust fit --distributed``: a data-parallel fit under torchrun, one process per rank.

Each rank reads and checks only its own rows (a .npy is memory-mapped) and fits them;
the ranks sum the statistics of the summary, and rank 0 alone prints and writes. A
failure on any rank before the fit stops every rank with the same line (exit status 2);
a lost rank or a timeout is one line and exit status 1.
"""

from __future__ import annotations

import contextlib

from ._common import CommandError, say
from ._data import checked_block, open_rows
from ._fit_common import (
    data_units,
    output_files,
    predict_proba,
    prepare,
    progress_callback,
    progress_total,
    run_fit,
)
from ._summary import choice_lines, fit_record, head_line, steps_note, summary_sums, write_fit


def run(args) -> int:
    """``fit --distributed``: every rank fits its shard; rank 0 prints and writes."""
    import torch.distributed as dist

    from ..cluster import distributed as ddp

    if args.plot:
        raise CommandError("--plot needs all rows in one process: fit without --distributed, "
                           "or draw a sample of the rows with the centers written")
    if args.batch_rows is not None:
        raise CommandError("--batch-rows streams the rows through one process; it cannot be "
                           "combined with --distributed")
    params, prefix = prepare(args)
    backend = "nccl" if str(args.device).startswith("cuda") else "gloo"
    try:
        rank, world = ddp.init_from_env(backend=backend, timeout=args.timeout)
    except ddp.DistributedError as exc:
        say(f"attnclust fit: error: {exc}")
        return 1
    try:
        with contextlib.ExitStack() as rank0_folder:
            X, weights, rows = _checked_shard(args, rank, world, prefix, rank0_folder, ddp)
            _fit_shard(args, X, rank, world, prefix, params, ddp, weights, rows)
        return 0
    except ddp.DistributedError as exc:
        say(f"attnclust fit: error: {exc}")
        return 1
    finally:
        dist.destroy_process_group()


def load_shard(args, rank: int, world_size: int):
    """This rank's rows, their sample weights (or None), and DATA as
    :func:`~attnclust.cli._data.open_rows` opened it (the features' names), checked like
    one process checks the whole file.

    A ``.npy`` is memory-mapped (only this rank's block is read); a ``.csv`` is read whole,
    then sliced. Errors name rows by their index in the file. Every rank sees the row
    count, so "fewer rows than ranks" is reported identically by all.
    """
    from pathlib import Path

    from .._io import open_npy
    from ..cluster.distributed import shard_bounds

    path = Path(args.data)
    rows = open_rows(args, open_npy)
    X = rows.X
    n = X.shape[0]
    if n < world_size:
        raise ValueError(f"{path}: {n} rows, fewer rows than ranks ({world_size}); run at most "
                         f"{n} processes")
    start, stop = shard_bounds(n, rank, world_size)
    return *checked_block(args, X[start:stop], path, start, n), rows


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


def _checked_shard(args, rank: int, world: int, prefix: str, rank0_folder, ddp):
    """This rank's rows and weights, once every rank has read and checked its own (and
    rank 0 its output folder, kept for the rest of the command by ``rank0_folder``); any
    failure stops every rank with the same line."""
    from pathlib import Path

    from .._io import writable_folder

    try:
        X, error = load_shard(args, rank, world), None
    except (ValueError, OSError, CommandError) as exc:
        X, error = (None, None, None), str(exc)
    if rank == 0 and error is None:            # rank 0 writes: its folder is checked now
        try:
            rank0_folder.enter_context(writable_folder(Path(prefix).parent))
        except ValueError as exc:
            error = str(exc)
    _agree_on_errors(error, ddp)
    return X


def _fit_shard(args, X, rank: int, world: int, prefix: str, params: dict, ddp,
               weights=None, rows=None) -> None:
    """Fit on every rank; sum the summary's statistics; rank 0 prints and writes
    (``rows``: DATA as :func:`load_shard` opened it, its features' names)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from ..cluster.clustering import AttentionClustering

    plan = AttentionClustering(args.n_clusters, **params)
    bar, callback = progress_callback(progress_total(plan), args.quiet or rank != 0)
    stats = ddp.CommStats()
    est, seconds = run_fit(lambda: ddp.fit_distributed(
        X, args.n_clusters, stats=stats, callback=callback, sample_weight=weights, **params),
        bar)                                       # the same centers on every rank
    labels = ddp.gather_rows(est.labels_)
    # every rank takes part in the gather
    proba = ddp.gather_rows(predict_proba(est, X)) if args.proba else None
    # summary statistics of all rows: sizes, summed max attention, summed squared error
    K = args.n_clusters
    conf_sum, sq_err = summary_sums(est, X, K, weights=weights)
    weight = X.shape[0] if weights is None else float(weights.sum())
    local = np.concatenate([np.bincount(est.labels_, minlength=K), conf_sum, [sq_err, weight]])
    total = ddp.make_reduce()(torch.from_numpy(local)).numpy()
    if rank != 0:
        return
    sizes, conf_sum, risk = total[:K], total[K:2 * K], total[-2] / total[-1]
    est.labels_ = labels        # every row's, for the model file
    per_pass = ddp.pass_bytes(K, X.shape[1], dtype=torch.float64)
    head = [choice_lines(est) + head_line(est.n_samples_total_, X.shape[1], K,
                      weights=None if weights is None else total[-1:],
                      inverse_temperature=est.inverse_temperature_, progress=steps_note(est),
                      risk=risk, seconds=seconds, ranks=f"ranks={world} ({dist.get_backend()})  "),
            f"communicated per rank: {stats.bytes} bytes in {stats.calls} all-reduces, of "
            f"which {stats.by_size.get(per_pass, 0)} passes of {per_pass} bytes"]
    outputs = output_files(args, prefix, data_units(est)[0], labels, proba=lambda: proba,
                           features=rows.columns)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_mean = conf_sum / sizes
    record = fit_record(args, est, n=est.n_samples_total_, d=X.shape[1],
                        features=rows.columns, notes=rows.notes, header=rows.header,
                        sizes=sizes, conf_mean=conf_mean, risk=risk, seconds=seconds,
                        rows_read=est.n_samples_total_)
    write_fit(args, prefix, outputs, head, sizes, conf_mean, est=est, record=record)

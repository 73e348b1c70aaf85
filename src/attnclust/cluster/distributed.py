"""Data-parallel fitting with ``torch.distributed``: clustering and PGD.

:class:`~attnclust.AttentionClustering` and :func:`~attnclust.pgd` on an empirical risk.

Each of the ``W`` ranks of a process group holds a shard ``X_r`` of the rows (the shards,
in rank order, concatenate to the data ``X``). The fixed-point solver needs the data only
through row sums (see :mod:`attnclust.cluster.fixed_point`), so one pass over the data is

    S_r   = sum_{i in shard r} s(x_i; mu)          (local sums, one flat buffer)
    S     = sum_r S_r                              (one all-reduce, the same S on every rank)

with ``s(x; mu)`` the per-row statistics: loss, ``w(x) x`` (``K x d``), ``a a^T``
(``K x K``), ``a_h <x, mu_h>`` and ``w(x)`` (``K`` each). Every rank then takes the same
step, so every rank ends with the same heads, and they are those of one process on
``X`` up to the order of the floating-point additions. The k-means++ seeding sees the
same rows as one process (the sampled rows are assembled by a sum over ranks in which
each row is non-zero on exactly one rank), and the ``"auto"`` inverse temperature is
computed from summed statistics.

The same holds for :func:`pgd_distributed`, projected gradient descent on the
empirical risk: ``R = sum_r (n_r / n) R_r`` and its gradient are all-reduced each step
(``1 + K d`` numbers; ``K`` more with the ``"balance"`` penalty).

Per pass of the fixed-point solver, the all-reduce carries ``1 + K d + K^2 + 2 K``
numbers (plus ``K^2 d`` with the ``"balance"`` penalty; :func:`pass_bytes`): 2,696 bytes
in float64 for ``K = 8, d = 32``, whatever ``n``.

Notation
--------
=============  ==================  ===============================================
symbol         code                meaning
=============  ==================  ===============================================
``W``          ``world_size``      number of ranks (processes)
``r``          ``rank``            index of this process in the group
``X_r``        ``X_shard``         rows held by rank ``r``, ``(n_r, d)``
``S``          ``reduce(t)``       sum over ranks (all-reduce)
=============  ==================  ===============================================

Examples
--------
What every rank runs, here in one process: a group of one rank (gloo, meeting through a
file in a temporary folder) stands for the group that :func:`init_from_env` joins under
torchrun, where each rank reads its own rows and every sum runs over all ranks.

>>> import tempfile, numpy as np, torch, torch.distributed as dist
>>> import attnclust as ac
>>> from attnclust.cluster import distributed as ddp
>>> tmp = tempfile.TemporaryDirectory()
>>> data = f"{tmp.name}/data.npy"
>>> np.save(data, ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.2).sample(300, rng=0))
>>> dist.init_process_group("gloo", init_method=f"file://{tmp.name}/store", rank=0,
...                         world_size=1)           # torchrun: ddp.init_from_env()
>>> rank, world = dist.get_rank(), dist.get_world_size()
>>> X = ddp.shard_rows(data, rank, world)             # this rank's rows
>>> ddp.make_reduce()(torch.ones(3))                  # the sum over ranks: W on W ranks
tensor([1., 1., 1.])
>>> est = ddp.fit_distributed(X, 2, random_state=0)
>>> labels = ddp.gather_rows(est.labels_)             # every rank's labels, in order
>>> labels.shape, est.shard_offset_, est.n_samples_total_
((300,), 0, 300)
>>> one = ac.AttentionClustering(2, random_state=0).fit(np.load(data))
>>> np.allclose(est.cluster_centers_, one.cluster_centers_)
True
>>> heads0 = ac.init_on_sphere(2, X.shape[1], rng=0)  # rank 0's is used everywhere
>>> res = ddp.pgd_distributed(X, heads0, inverse_temperature=10.0, n_steps=50)
>>> one = ac.pgd(np.load(data), heads0, inverse_temperature=10.0, n_steps=50)
>>> np.allclose(res.heads, one.heads)
True
>>> dist.destroy_process_group(); tmp.cleanup()
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from .._validation import as_generator, as_tensor
from ..study.descent import PGDResult, pgd
from .clustering import AttentionClustering
from .communicator import Communicator

__all__ = ["CommStats", "DistributedError", "fit_distributed", "gather_errors",
           "gather_rows",
           "init_from_env", "make_reduce", "pass_bytes", "pgd_distributed", "shard_bounds",
           "shard_rows"]


class DistributedError(RuntimeError):
    """A collective failed: another rank exited, failed, or did not answer in time."""


@dataclass
class CommStats:
    """Counts of the all-reduces made through :func:`make_reduce`."""

    calls: int = 0
    """Number of all-reduce calls."""
    bytes: int = 0
    """Payload bytes all-reduced (each rank's buffer size, summed over calls)."""
    by_size: dict[int, int] = field(default_factory=dict)
    """Number of calls of each buffer size in bytes (the passes share one size)."""

    def add(self, t: torch.Tensor) -> None:
        size = t.numel() * t.element_size()
        self.calls += 1
        self.bytes += size
        self.by_size[size] = self.by_size.get(size, 0) + 1


def pass_bytes(n_clusters: int, n_features: int, *, dtype=torch.float64,
               penalty: str | None = None) -> int:
    """Bytes each rank all-reduces in one pass of the fixed-point solver.

    ``(1 + K d + K^2 + 2 K)`` numbers, plus ``K^2 d`` with ``penalty="balance"``.

    Examples
    --------
    >>> pass_bytes(8, 32)
    2696
    """
    K, d = int(n_clusters), int(n_features)
    numel = 1 + K * d + K * K + 2 * K + (K * K * d if penalty == "balance" else 0)
    return numel * torch.empty((), dtype=dtype).element_size()


# -- sharding ----------------------------------------------------------------------------
def shard_bounds(n_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of rank ``rank``: contiguous blocks whose sizes differ by <= 1.

    Examples
    --------
    >>> [shard_bounds(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, "
                         f"world_size={world_size}")
    return n_rows * rank // world_size, n_rows * (rank + 1) // world_size


def shard_rows(path, rank: int, world_size: int) -> np.memmap:
    """Rows of rank ``rank`` of a 2-D ``.npy`` file, memory-mapped (only they are read).

    Parameters
    ----------
    path : path of a ``.npy`` file holding an ``(n, d)`` numeric array
    rank, world_size : int
        This rank and the number of ranks; the blocks are those of :func:`shard_bounds`.

    Returns
    -------
    numpy.memmap of shape ``(stop - start, d)``
        A read-only view: pages outside the block are never read from disk.

    Examples
    --------
    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.npy"
    >>> np.save(path, np.arange(20.0).reshape(10, 2))
    >>> shard_rows(path, 1, 3)[:, 0]
    memmap([ 6.,  8., 10.])
    """
    from .._io import open_npy

    path = Path(path)
    if path.suffix.lower() != ".npy":
        raise ValueError(f"{path}: shard_rows reads .npy files, got {path.suffix or '(none)'!r}")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    # header checked against the file size, and the same dtypes as one process (no
    # complex, no timedelta) before anything is mapped
    data = open_npy(path)
    if data.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array (one point per row), got shape "
                         f"{data.shape}")
    start, stop = shard_bounds(data.shape[0], rank, world_size)
    return data[start:stop]


# -- the process group ---------------------------------------------------------------------
def init_from_env(*, backend: str | None = None, timeout: float = 300.0) -> tuple[int, int]:
    """Join the process group described by the ``torchrun`` environment variables.

    Reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (and ``LOCAL_RANK``
    for the GPU of an NCCL rank). ``backend`` defaults to ``"nccl"`` when CUDA is
    available and ``"gloo"`` otherwise. ``timeout`` (seconds) bounds the rendezvous and
    every collective: a rank that waits longer on a stuck peer raises instead of hanging.
    Returns ``(rank, world_size)``; does nothing but return them if already initialized.
    """
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if v not in os.environ]
    if missing:
        raise ValueError(f"--distributed needs the environment set by torchrun; missing "
                         f"{', '.join(missing)} (launch with: torchrun --nproc_per_node N "
                         "-m attnclust fit ...)")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    _wait_for_rendezvous(float(timeout))
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=float(timeout)))
    except Exception as exc:  # rendezvous timeout, refused connection, ...
        raise DistributedError(f"could not join the process group of rank "
                               f"{os.environ['RANK']}/{os.environ['WORLD_SIZE']} at "
                               f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
                               f"within {timeout:g} s: {_first_line(exc)}") from exc
    return dist.get_rank(), dist.get_world_size()


def _wait_for_rendezvous(timeout: float) -> None:
    """On a rank other than 0, wait until the rendezvous address accepts connections.

    Without it, torch's TCP store client retries for about twice ``timeout`` and prints
    a C++ stack trace for each try; here a rank whose rank 0 never appears stops after
    ``timeout`` seconds with one line. (Rank 0 hosts the store, or torchrun does.)
    """
    if os.environ["RANK"] == "0":
        return
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(min(left, 1.0), 0.01)):
                return
        except OSError as exc:
            if left <= 0:
                raise DistributedError(
                    f"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']}: no rendezvous at "
                    f"{host}:{port} within {timeout:g} s (rank 0 has not started, or "
                    f"MASTER_ADDR/MASTER_PORT are wrong: {exc.strerror or exc})") from None
        time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _comm_device(group) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _collective(fn, what: str, group):
    try:
        return fn()
    except Exception as exc:
        raise DistributedError(
            f"rank {dist.get_rank()}: {what} failed; another rank has exited, failed or not "
            f"answered within the process group's timeout ({_first_line(exc)})") from exc


def make_reduce(group=None, *, stats: CommStats | None = None):
    """The hook of the fixed-point solver: ``t -> sum of t over the ranks of group``.

    Returns a new tensor on ``t``'s device (``t`` is not modified). With an NCCL group
    the buffer goes through the current CUDA device (no copy when ``t`` is already
    there); with gloo through the CPU. ``stats`` counts calls and bytes. The module's
    example calls it in a group of one rank.
    """
    device = _comm_device(group)

    def reduce(t: torch.Tensor) -> torch.Tensor:
        buf = t.detach().to(device, copy=True)
        _collective(lambda: dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group),
                    "all-reduce", group)
        if stats is not None:
            stats.add(buf)
        return buf.to(t.device)
    return reduce


def _make_broadcast(group=None):
    device = _comm_device(group)
    src = 0 if group is None else dist.get_global_rank(group, 0)

    def broadcast(t: torch.Tensor) -> torch.Tensor:
        buf = t.detach().to(device, copy=True)
        _collective(lambda: dist.broadcast(buf, src=src, group=group), "broadcast", group)
        return buf.to(t.device)
    return broadcast


def _all_gather(t: torch.Tensor, group) -> list[torch.Tensor]:
    device = _comm_device(group)
    buf = t.to(device)
    out = [torch.empty_like(buf) for _ in range(dist.get_world_size(group))]
    _collective(lambda: dist.all_gather(out, buf, group=group), "all-gather", group)
    return [o.to(t.device) for o in out]


def gather_rows(a, *, group=None) -> np.ndarray:
    """Concatenate every rank's rows of ``a`` in rank order (the result on every rank).

    For the labels of a fit (``n`` integers), not for the data: on 2 ranks each passing
    ``np.arange(3)``, every rank gets ``[0, 1, 2, 0, 1, 2]`` (the module's example gathers
    a fit's labels).
    """
    t = torch.as_tensor(np.ascontiguousarray(a))
    sizes = _all_gather(torch.tensor([t.shape[0]], dtype=torch.int64), group)
    sizes = [int(s) for s in sizes]
    padded = t.new_zeros((max(sizes), *t.shape[1:]))
    padded[:t.shape[0]] = t
    parts = _all_gather(padded, group)
    return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)]).numpy()


# -- fitting -------------------------------------------------------------------------------
def gather_errors(error: str | None, *, group=None) -> list[tuple[int, str]]:
    """``(rank, message)`` of every rank of ``group`` that passed an error (all must call).

    Lets every rank stop together, with the same message, after a local failure.
    """
    out: list = [None] * dist.get_world_size(group)
    _collective(lambda: dist.all_gather_object(out, error, group=group), "all-gather", group)
    return [(r, msg) for r, msg in enumerate(out) if msg is not None]


def _require_group(caller: str) -> None:
    if not dist.is_initialized():
        raise ValueError(f"{caller} needs an initialized process group "
                         "(torch.distributed.init_process_group, or init_from_env)")


def _check_in(X_shard, group, *, keep_tensor: bool = False):
    """Validate the local shard and agree with the other ranks before any real work.

    Every rank shares ``(n_r, d_r, ok_r)``; a rank with bad data raises its own
    ``ValueError`` and the others raise :class:`DistributedError` naming it, instead of
    waiting for it in the first all-reduce. Returns ``(X, offset, n_total)``, ``X`` a
    float64 NumPy array, or with ``keep_tensor`` a tensor left on its device.
    """
    error = None
    try:
        kind = (("c" if X_shard.is_complex() else "f") if isinstance(X_shard, torch.Tensor)
                else np.asarray(X_shard).dtype.kind)
        if kind not in "biuf":     # complex would lose its imaginary part, timedelta its unit
            raise ValueError(f"X_shard must hold real numbers, got dtype "
                             f"{getattr(X_shard, 'dtype', type(X_shard).__name__)}")
        if keep_tensor:
            X = as_tensor(X_shard, name="X_shard", dtype=torch.float64)
            finite = bool(torch.isfinite(X).all())
        else:
            X = np.asarray(X_shard, dtype=np.float64)
            finite = bool(np.all(np.isfinite(X)))
        if X.ndim != 2 or X.shape[1] == 0:
            raise ValueError(f"X_shard must be a 2-D array (one point per row, at least one "
                             f"column), got shape {tuple(X.shape)}")
        if not finite:
            raise ValueError("X_shard contains NaN or inf")
    except (ValueError, TypeError) as exc:
        X, error = None, exc
    shape = (0, 0) if X is None else X.shape
    info = torch.tensor([shape[0], shape[1], error is None], dtype=torch.int64)
    infos = torch.stack(_all_gather(info, group))           # (W, 3)
    if error is not None:
        raise ValueError(f"rank {dist.get_rank()}: {error}")
    bad = torch.nonzero(infos[:, 2] == 0).flatten().tolist()
    if bad:
        raise DistributedError(f"rank {dist.get_rank()}: rank(s) {bad} of the group have "
                               "invalid data (see their error messages)")
    widths = sorted(set(infos[:, 1].tolist()))
    if len(widths) > 1:
        raise ValueError(f"the shards have different numbers of columns {widths}")
    empty = torch.nonzero(infos[:, 0] == 0).flatten().tolist()
    if empty:   # the same error on every rank: each sees every rank's row count
        raise ValueError(f"rank(s) {empty} have no rows: fewer rows ({int(infos[:, 0].sum())}) "
                         f"than ranks ({infos.shape[0]}), or an empty shard")
    me = dist.get_rank(group)
    offset = int(infos[:me, 0].sum())
    return X, offset, int(infos[:, 0].sum())


def fit_distributed(X_shard, n_clusters: int = 8, *, group=None,
                    stats: CommStats | None = None, sample_weight=None,
                    **params) -> AttentionClustering:
    """Fit :class:`~attnclust.AttentionClustering` on rows spread over a process group.

    Call it on every rank of ``group`` (default: the whole initialized group), each with
    its own rows; the rows of all ranks, in rank order, are the data. Every rank returns
    an estimator with the same ``cluster_centers_``, ``inverse_temperature_``, ``loss_curve_``
    and ``n_iter_``, equal (up to floating-point summation order) to those of
    ``AttentionClustering(n_clusters, **params).fit(X)`` on all the rows (the module's
    example compares them, in a group of one rank).

    Parameters
    ----------
    X_shard : array-like of shape (n_r, n_features)
        This rank's rows (a :func:`shard_rows` memmap is read here, once).
    n_clusters : int, default=8
    group : ProcessGroup, optional
        The ranks that share the fit (gloo on CPU, NCCL with ``device="cuda"``).
    stats : CommStats, optional
        Counts the all-reduces and their bytes.
    sample_weight : array-like of shape (n_r,), optional
        The weights of this rank's rows (see ``AttentionClustering.fit``); every rank
        passes its own, or every rank passes none.
    **params :
        Any other parameter of :class:`~attnclust.AttentionClustering`
        (``solver`` must be ``"fixed-point"``).

    Returns
    -------
    AttentionClustering
        Fitted; ``labels_`` holds the labels of this rank's rows only (see
        :func:`gather_rows`); ``shard_offset_`` is the global index of its first row and
        ``n_samples_total_`` the number of rows of all ranks.

    Raises
    ------
    DistributedError
        A collective failed or timed out (another rank exited or failed).
    """
    _require_group("fit_distributed")
    X, offset, n_total = _check_in(X_shard, group)
    comm = Communicator(make_reduce(group, stats=stats), _make_broadcast(group), offset,
                        n_total, dist.get_rank(group), dist.get_world_size(group))
    est = AttentionClustering(n_clusters, **params).fit(X, sample_weight=sample_weight,
                                                         comm=comm)
    est.shard_offset_ = offset
    est.n_samples_total_ = n_total
    return est


def pgd_distributed(X_shard, heads0, *, group=None, stats: CommStats | None = None,
                    rng=None, **kwargs) -> PGDResult:
    """:func:`~attnclust.pgd` on the empirical risk of rows spread over a process group.

    Call it on every rank of ``group``, each with its own rows (in rank order they are
    the data ``X``). Each step all-reduces the global risk and its gradient, so every
    rank returns the same heads and the same history (the global risk); in full batch
    they are those of ``pgd(X, heads0, **kwargs)`` up to the order of floating-point
    additions (the module's example compares them). ``heads0`` of rank 0 is used on every
    rank.

    Parameters
    ----------
    X_shard : array-like or tensor of shape (n_r, d)
        This rank's rows; a tensor stays on its device (CUDA with NCCL).
    heads0 : array-like of shape (K, d)
        Initial heads (taken from rank 0).
    group : ProcessGroup, optional
        The ranks that share the descent (default: the whole initialized group).
    stats : CommStats, optional
        Counts the all-reduces and their bytes.
    rng : int or numpy Generator, optional
        Mini-batch sampling: rank ``r`` uses child ``r`` of ``rng``'s spawned streams, so
        the ranks draw independent rows of their shards (``batch_size`` is the global
        batch; each rank draws its share ``batch_size n_r / n``).
    **kwargs :
        Any other parameter of :func:`~attnclust.pgd` but ``reduce``.

    Returns
    -------
    PGDResult
        The same on every rank.

    Raises
    ------
    DistributedError
        A collective failed or timed out (another rank exited or failed).
    """
    _require_group("pgd_distributed")
    if "reduce" in kwargs:
        raise ValueError("pgd_distributed makes its own reduce hook; do not pass reduce")
    X, _, _ = _check_in(X_shard, group, keep_tensor=True)
    heads0 = _make_broadcast(group)(as_tensor(heads0, name="heads0", dtype=torch.float64))
    stream = as_generator(rng).spawn(dist.get_world_size(group))[dist.get_rank(group)]
    return pgd(X, heads0.to(X.device), reduce=make_reduce(group, stats=stats), rng=stream,
               **kwargs)

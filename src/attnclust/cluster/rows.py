"""The rows of a fit: preprocessing, chunked reads, worker threads, sums over ranks, and
the working space the solver sees.

A fit of :class:`~attnclust.AttentionClustering` reads its rows in chunks (a memory-mapped
``X`` is never copied whole), hands the chunks of each pass to worker threads
(:mod:`attnclust._threads`) and sums every statistic over the ranks that share the rows
(:class:`~attnclust.cluster.communicator.Communicator`). :class:`WorkingRows` owns all of that, so
the estimator reads as its algorithm.

Working space
-------------
When the geometry is equivariant under translations and scalings (Euclidean heads: the
logits ``-lambda ||x - mu_h||^2 / 2`` only see differences, and scaling ``x`` by ``s``
scales ``lambda`` by ``1 / s^2``), the fit runs on the rows

    y_i = (x_i - m) / s,      m = (1/n) sum_i x_i,      s^2 = (1/n) sum_i ||x_i - m||^2,

which have zero mean and unit root-mean-square norm (for conditioning), and maps back

    mu_h = s nu_h + m,        lambda = lambda_y / s^2,        R = s^2 R_y.

On the CPU the map is applied to each chunk as it is read; on another device the mapped
rows are made there once. The sphere's fit runs on the rows as preprocessed
(``m = 0, s = 1``).

Sample weights
--------------
The rows may carry weights ``w_i >= 0`` (the estimator's ``sample_weight``): then ``m``
and ``s^2`` are weighted means, the warm-start sample carries the weights of the rows it
draws (uniformly), the solver's sums are weighted, and the cluster sizes of
:meth:`WorkingRows.assign` are sums of weights.

Notation
--------
=============  ==================  =============================================
paper          code                meaning
=============  ==================  =============================================
``x_i``        ``rows[i]``         a preprocessed row (this rank's), shape ``(n, d)``
``m``, ``s``   ``shift, scale``    the working space's centre and unit
``n``          ``n_total``         rows of all ranks
``lambda``     ``lam``             inverse temperature (data units)
=============  ==================  =============================================
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch

from .._threads import map_chunks, torch_threads
from .._validation import as_torch_dtype
from ..layer.geometry import Geometry
from ..layer.heads import softmax_heads
from ..layer.results import IterationInfo
from .communicator import Communicator
from .degenerate import user_stacklevel

__all__ = ["WorkingRows", "WorkingSpace", "center_scale", "chunk_rows", "computation_dtype",
           "fit_threads", "normalize_rows", "preprocess", "residual_copies", "squared_norms"]

_CHUNK = 16_384           # rows per chunk of a pass by default, at most ...
_CHUNK_NUMBERS = 1 << 19  # ... and at most this many numbers per (rows, d or K) block
_PROVISIONAL_ROWS = 4096  # rows of center_scale's provisional centre (per rank)
_RECENTRE = 1e-2          # squares about it lost to ||m - p||^2 beyond which it sums again


def computation_dtype(dtype, data_dtype) -> torch.dtype:
    """The computation's dtype: ``"auto"`` keeps float32 data in float32, else float64.

    Examples
    --------
    >>> computation_dtype("auto", np.float32), computation_dtype("float64", np.float32)
    (torch.float32, torch.float64)
    """
    if isinstance(dtype, str) and dtype == "auto":
        return torch.float32 if data_dtype == np.float32 else torch.float64
    return as_torch_dtype(dtype)


def chunk_rows(chunk_size: int | None, n_features: int, n_clusters: int) -> int:
    """Rows per chunk of a pass: ``chunk_size``, or blocks of about 2 MB (float32).

    Wide blocks are not only memory: the allocator keeps freed blocks of several MB per
    worker thread (1,000,000 x 128 float32 rows: +950 MB peak with 16,384-row chunks,
    +600 MB with 4,096).

    Examples
    --------
    >>> chunk_rows(None, 8, 3), chunk_rows(None, 1000, 3), chunk_rows(500, 8, 3)
    (16384, 524, 500)
    """
    if chunk_size is not None:
        return int(chunk_size)
    return max(256, min(_CHUNK, _CHUNK_NUMBERS // max(n_features, n_clusters)))


@contextmanager
def fit_threads(device) -> Iterator[int]:
    """Run the block with one torch thread on the CPU and yield the number of workers
    that share the chunks of each pass instead (the threads torch would have used; see
    :mod:`attnclust._threads`); elsewhere torch's threads and one worker.

    Examples
    --------
    >>> with fit_threads("cpu") as workers:
    ...     torch.get_num_threads(), workers >= 1
    (1, True)
    """
    cpu = torch.device(device).type == "cpu"
    workers = torch.get_num_threads() if cpu else 1
    with torch_threads(1 if cpu else None):
        yield workers


# -- preprocessing ------------------------------------------------------------------------
def normalize_rows(X: np.ndarray, offset: int = 0) -> np.ndarray:
    """Rows divided by their norm; an all-zero row is an error naming it.

    Rows are first divided by their largest absolute entry, so that no square overflows
    (entries ~1e200) or underflows (~1e-200): the result is a unit vector for every
    non-zero finite row (``offset``: the index of the first row, for the message).

    Examples
    --------
    >>> normalize_rows(np.array([[3e200, 4e200]]))
    array([[0.6, 0.8]])
    """
    big = np.abs(X).max(axis=1, initial=0.0)                 # (n,)
    zero = np.flatnonzero(big == 0)
    if zero.size:
        raise ValueError(f"row {offset + zero[0]} (0-based) of X is all zeros and has no "
                         "direction; normalize='rows' needs non-zero rows")
    Y = X / big[:, None]                                     # entries in [-1, 1], one is +-1
    return Y / np.linalg.norm(Y, axis=1)[:, None]


def squared_norms(X: np.ndarray, how: str, offset: int = 0) -> np.ndarray:
    """Squared row norms ``(n,)``; ``ValueError`` when one overflows float64 (``how``: what
    the message blames).

    Examples
    --------
    >>> squared_norms(np.array([[3.0, 4.0]]), "normalize=None")
    array([25.])
    """
    with np.errstate(over="ignore"):
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)   # (n,)
    bad = np.flatnonzero(~np.isfinite(sq))
    if bad.size:
        raise ValueError(f"{how}: the squared norm of row {offset + bad[0]} (0-based) of X "
                         f"overflows float64 (largest entry {np.abs(X[bad[0]]).max():.3g}); "
                         "rescale the data or use normalize='rows'")
    return sq


def residual_copies(weights: np.ndarray, n: int) -> np.ndarray:
    """Copies of each row ``(len(weights),)``, ``n`` in all, in proportion to non-negative
    ``weights``: ``floor(n p_i)`` (``p_i = w_i / sum w``), then one more for the rows of
    largest remainders (ties: the first rows) until there are ``n`` (the largest-remainder
    rule). With ``n`` the rows, weights whose range is less than their mean give each row
    once (``n p_i`` all within one of each other): not repeated rows, which read as
    clusters.

    Examples
    --------
    >>> residual_copies(np.array([1.0, 1.0, 1.01]), 3).tolist()
    [1, 1, 1]
    >>> residual_copies(np.array([8.0, 1.0, 1.0]), 10).tolist()
    [8, 1, 1]
    """
    weights = np.asarray(weights, dtype=np.float64)
    if not (np.all(weights >= 0) and weights.sum() > 0):
        raise ValueError("residual_copies needs non-negative weights with a positive sum")
    expected = n * (weights / weights.sum())
    copies = np.floor(expected).astype(np.int64)
    rest = n - int(copies.sum())
    copies[np.argsort(copies - expected, kind="stable")[:max(rest, 0)]] += 1
    return copies


def _total(values, w):
    """Sum of the rows, weighted when ``w`` is given, in float64."""
    return values.sum(0, dtype=np.float64) if w is None else w @ values


def _counted(c, w):
    """The rows that count (positive weight), and their weights."""
    return (c, w) if w is None else (c[w > 0], w[w > 0])


def _centred_sums(c, w, mean, unit):
    """The column sums of the rows ``c`` minus ``mean``, in units of ``unit``, then the sum
    of their squares, ``(d + 1,)``; a row of weight 0 takes no part, even an inf square."""
    c, w = _counted(c, w)
    if unit == 1.0:            # in the data's dtype
        q = c - mean.astype(c.dtype)
    else:                      # float64: float32's X - mean, or unit, may overflow
        q = (c - mean) / unit
    return np.append(_total(q, w), np.vdot(q, q) if w is None else
                     w @ np.einsum("ij,ij->i", q, q))


def _provisional_centre(X: np.ndarray, weights, comm: Communicator) -> np.ndarray:
    """The (weighted) mean of evenly spaced rows, ``_PROVISIONAL_ROWS`` to twice as many of
    each rank's (all of them when it has fewer), over all ranks; the origin where none of
    them has weight."""
    every = max(1, X.shape[0] // _PROVISIONAL_ROWS)
    rows, w = _counted(np.asarray(X[::every], dtype=np.float64),
                       None if weights is None else np.asarray(weights[::every], np.float64))
    sums = comm.sum_array(np.append(_total(rows, w), rows.shape[0] if w is None else w.sum()))
    return sums[:-1] / sums[-1] if sums[-1] > 0 else np.zeros(X.shape[1])


def center_scale(X: np.ndarray, comm: Communicator, what: str,
                 weights: np.ndarray | None = None, workers: int = 1
                 ) -> tuple[np.ndarray, float]:
    """Column means ``m`` and root-mean-square norm ``s`` of the centred rows, overflow-safe.

    One pass over the rows, most of the time: it sums the rows centred on a provisional
    centre ``p``, the mean of a few thousand rows spread evenly over each rank's (the
    same ``p`` on every rank), and their squares; then ``m = p + sum (x_i - p) / n``
    and ``n s^2 = sum ||x_i - p||^2 - n ||m - p||^2``. Where ``p`` is so far from
    ``m`` that the subtraction would cost more than a hundredth of the squares (rows
    sorted so that the sample misses a far cluster; a column's offset dwarfs its spread:
    a constant column of 1e50, whose rounded ``p`` counts as spread) the squares are
    summed again about ``m``.

    The squares are summed as they are (in float32 for float32 data: half the reads, for
    an ``s`` good to about ``1e-6``), and again on rows divided by their largest centred
    entry when that sum is out of ``(1e-200, inf)`` (``(1e-30, inf)`` in float32: squares
    that overflow or underflow; the pass for the largest entry is made only then); rows
    are read in blocks of about 2 MB (a memory-mapped ``X`` is never copied whole, and no
    block's float64 temporaries grow with the width); every sum is taken
    over the ranks' rows (``what``: the message's subject), the blocks shared by
    ``workers`` threads (the sums in block order, so the same with any number). With
    ``weights`` (n,) both are weighted means (rows of weight zero take no part).

    Examples
    --------
    >>> m, s = center_scale(np.array([[1.0, 0.0], [3.0, 0.0]]), Communicator.local(2), "X")
    >>> m.tolist(), s
    ([2.0, 0.0], 1.0)
    """
    step = chunk_rows(None, X.shape[1], 1)
    n = comm.n_total if weights is None else float(comm.sum_array(weights.sum()))

    def each(fn) -> list:          # fn(rows, weights) of each block, on the workers, in order
        def block(start):
            with np.errstate(over="ignore", invalid="ignore"):   # checked below
                return fn(X[start:start + step],
                          None if weights is None else weights[start:start + step])
        return map_chunks(block, X.shape[0], step, workers)

    def deviation(mean, unit):     # sums over all ranks' rows: (column sums, squares)
        sums = comm.sum_array(sum(each(lambda c, w: _centred_sums(c, w, mean, unit)),
                                  np.zeros(X.shape[1] + 1)))
        return sums[:-1], float(sums[-1])

    def spread(mean):              # deviation in units of 1, or of the largest centred
        off, dev = deviation(mean, 1.0)          # entry when the squares over- or
        unit = 1.0                                # underflow (or no row differs from
        floor = 1e-30 if X.dtype == np.float32 else 1e-200      # the mean)
        if not floor < dev < np.inf:
            big = max(each(lambda c, w: float(np.abs(_counted(c, w)[0] - mean).max(
                initial=0.0))), default=0.0)
            # a unit common to all ranks, between the largest entry and R times it
            big = float(comm.sum_array(big))
            if not np.isfinite(big):
                raise ValueError(f"{what}: X - mean overflows (entries near the largest "
                                 "float); rescale the data")
            if big > 0:
                unit = big
                off, dev = deviation(mean, big)
            else:                                         # every row is the mean
                off, dev = np.zeros_like(off), 0.0
        return off, dev, unit
    with np.errstate(over="ignore", invalid="ignore"):       # checked just below
        mean = _provisional_centre(X, weights, comm)
        if not np.all(np.isfinite(mean)):
            raise ValueError(f"{what}: the column sums overflow (entries near the largest "
                             "float); rescale the data")
        off, dev, unit = spread(mean)

        def offset(off):           # n ||off / n||^2: the squares' part due to p - m
            return float(np.sum(np.square(off / np.sqrt(n))))

        def centre(mean, off, unit):    # m from the centre the pass subtracted (float32
            subtracted = mean.astype(X.dtype).astype(np.float64) if unit == 1.0 else mean
            return subtracted + off * (unit / n)          # data's: rounded to float32)
        if offset(off) > _RECENTRE * dev:
            mean = centre(mean, off, unit)
            off, dev, unit = spread(mean)
        mean = centre(mean, off, unit)
        # about the rows' own mean, not the one subtracted
        dev = max(dev - offset(off), 0.0)
    scale = unit * float(np.sqrt(dev / n))
    return mean, (scale if scale > 0 else 1.0)


def preprocess(X: np.ndarray, how: str | None, *, unit_heads: bool, comm=None,
               center=(None, None), offset: int = 0) -> np.ndarray:
    """The estimator's ``normalize``: ``"rows"`` (unit rows), ``"center-scale"`` (``(X -
    mean) / scale`` with ``center = (mean, scale)``) or ``None`` (as given; for
    ``unit_heads`` the squared norms must be finite, and with ``comm``, in a fit, a mean
    squared norm outside ``[1/4, 4]`` warns: unit heads cannot follow the data's scale).

    Examples
    --------
    >>> preprocess(np.array([[3.0, 4.0]]), "center-scale", unit_heads=True,
    ...            center=(np.array([1.0, 0.0]), 2.0))
    array([[1., 2.]])
    """
    if how == "rows":
        return normalize_rows(X, offset)
    if how == "center-scale":
        mean, scale = center
        return (X - mean.astype(X.dtype)) / X.dtype.type(scale)
    if unit_heads:
        sq = squared_norms(X, "normalize=None", offset)
        if comm is not None:
            msq = float(comm.sum_array(np.sum(sq))) / comm.n_total
            if not 0.25 <= msq <= 4.0:
                warnings.warn(
                    f"normalize=None but the rows' mean squared norm is {msq:.3g}, far from "
                    "1: the heads have unit norm; pass normalize='rows' or 'center-scale' "
                    "to bring the data to the sphere's scale", UserWarning,
                    stacklevel=user_stacklevel())
    return X


# -- the rows of a fit --------------------------------------------------------------------
def _spread_error(scale: float, lam: float | None, weights) -> ValueError:
    """The error of a spread ``scale`` that puts the inverse temperature (``lam``, when
    known) out of float64's range; it names the sample weights when they differ (one
    row weighing 1e300 times the others leaves the rest no spread)."""
    shown = "" if lam is None or math.isnan(lam) else f" {lam:.3g}"
    unequal = weights is not None and len(weights) and float(weights.max()) > float(
        weights.min())
    return ValueError(f"the data's spread{' under its sample_weight' if unequal else ''} "
                      f"({scale:.3g}) puts the inverse temperature{shown} out of float64's "
                      "range; rescale the data"
                      + (" or make the weights less unequal" if unequal else
                         " or pass normalize='center-scale' (which fits it in units of its "
                         "spread)"))


class WorkingSpace(NamedTuple):
    """The map between the preprocessed space and the working space, ``x -> (x - m) / s``
    (``shift=None``: the identity): the one conversion of the fit's rows, heads and
    ``lambda`` there and back, which ``fit`` (:class:`WorkingRows`) and ``partial_fit``
    (:mod:`attnclust.cluster.streaming`) share.

    Examples
    --------
    >>> space = WorkingSpace(np.array([3.0, 0.0]), 2.0)
    >>> space.rows_in(torch.tensor([[5.0, 2.0]]), torch.float64).tolist()
    [[1.0, 1.0]]
    >>> space.heads_out(torch.tensor([[1.0, 1.0]])).tolist(), space.inverse_temperature_in(1.0)
    ([[5.0, 2.0]], 4.0)
    """

    shift: np.ndarray | None = None
    scale: float = 1.0

    def rows_in(self, chunk: torch.Tensor, dtype) -> torch.Tensor:
        """Preprocessed rows in the working space's ``dtype``: centred in their own dtype
        (the centre is stored as that dtype holds it), then scaled."""
        if self.shift is None:
            return chunk.to(dtype)
        shift = torch.as_tensor(self.shift, dtype=chunk.dtype, device=chunk.device)
        return (chunk - shift).to(dtype).div_(self.scale)

    def heads_in(self, centers: np.ndarray) -> np.ndarray:
        """Heads given in the preprocessed space, in the working space."""
        return centers if self.shift is None else (centers - self.shift) / self.scale

    def heads_out(self, heads: torch.Tensor) -> np.ndarray:
        """Working heads in the preprocessed space, float64 NumPy ``(K, d)``."""
        centers = heads.detach().cpu().double().numpy()
        return centers if self.shift is None else centers * self.scale + self.shift

    def inverse_temperature_in(self, lam: float) -> float:
        """``lambda`` given in the preprocessed space's units, in the working space's."""
        return lam * self.scale**2

    def inverse_temperature_out(self, lam: float, weights=None) -> float:
        """The working ``lambda`` in the preprocessed space's units; ``ValueError`` when
        that leaves float64's range (the rows' sample ``weights`` named when unequal)."""
        out = float(lam) / self.scale / self.scale
        if not np.finfo(np.float64).tiny <= out < np.inf:
            raise _spread_error(self.scale, out, weights)
        return out


class WorkingRows:
    """This rank's preprocessed rows as the solver sees them, and the way back.

    Build it with :meth:`prepare`. ``rows`` are the stored rows ``(n, d)`` (this rank's),
    ``row_map`` maps a chunk of them to the working space (``None``: already there),
    ``shift`` and ``scale`` are ``m`` and ``s`` of the module docstring (``shift=None``: no
    centring), ``chunk`` the rows per chunk of a pass, ``workers`` the threads that
    share them and ``weights`` the rows' sample weights (``None``: all 1).

    Examples
    --------
    >>> import attnclust as ac
    >>> X = np.array([[1.0, 0.0], [5.0, 0.0]])
    >>> rows = WorkingRows.prepare(X, geometry=ac.layer.geometry.Euclidean(), comm=None)
    >>> rows.read(0, 2)[:, 0].tolist(), rows.scale
    ([-1.0, 1.0], 2.0)
    >>> rows.heads_out(torch.tensor([[0.5, 0.0]], dtype=torch.float64)).tolist()
    [[4.0, 0.0]]
    """

    def __init__(self, rows: torch.Tensor, *, comm: Communicator, row_map=None,
                 scale: float = 1.0, shift: np.ndarray | None = None,
                 chunk: int = _CHUNK, workers: int = 1,
                 weights: torch.Tensor | None = None):
        self.rows, self.comm, self.row_map = rows, comm, row_map
        self.space, self.chunk, self.workers = WorkingSpace(shift, scale), chunk, workers
        self.weights = weights

    @property
    def scale(self) -> float:
        """``s``: the working space's scale (:class:`WorkingSpace`)."""
        return self.space.scale

    @property
    def shift(self) -> np.ndarray | None:
        """``m``: the working space's centre, ``None`` where the rows are not centred."""
        return self.space.shift

    @classmethod
    def prepare(cls, Xp: np.ndarray, *, geometry: Geometry, comm: Communicator | None,
                device="cpu", dtype="auto", chunk_size: int | None = None,
                n_clusters: int = 1, workers: int = 1,
                weights: np.ndarray | None = None) -> WorkingRows:
        """The rows of the fit of the preprocessed rows ``Xp`` (this rank's), with their
        sample ``weights`` (n,) when given.

        A geometry that is ``equivariant`` is fitted on the rows centred and scaled to
        unit root-mean-square norm (see the module docstring).
        """
        comm = Communicator.local(Xp.shape[0]) if comm is None else comm
        dtype = computation_dtype(dtype, Xp.dtype)
        chunk = chunk_rows(chunk_size, Xp.shape[1], n_clusters)
        with warnings.catch_warnings():   # a read-only memmap is only ever read
            warnings.simplefilter("ignore", UserWarning)
            # any positive strides (Fortran order too) are read chunk by chunk, not copied
            rows = torch.from_numpy(Xp if min(Xp.strides, default=0) >= 0
                                    else np.ascontiguousarray(Xp))
        w = None if weights is None else torch.as_tensor(weights, dtype=dtype, device=device)
        if not geometry.equivariant:
            return cls(rows.to(device, dtype), comm=comm, chunk=chunk, workers=workers,
                       weights=w)
        shift, scale = center_scale(Xp, comm, f"geometry={geometry.name!r}", weights, workers)
        if not np.finfo(np.float64).tiny < scale * scale < np.inf:
            raise _spread_error(scale, None, weights)
        # the centre in the data's dtype, which the rows are mapped with, is also the one
        # heads are mapped back with (float32 data 1e6 from 0: they differ by up to 0.03)
        shift = torch.as_tensor(shift, dtype=rows.dtype).double().numpy()
        space = WorkingSpace(shift, scale)

        def row_map(chunk: torch.Tensor) -> torch.Tensor:   # centred in the data's dtype
            return space.rows_in(chunk, dtype)
        if torch.device(device).type != "cpu":
            return cls(row_map(rows).to(device), comm=comm, scale=scale, shift=shift,
                       chunk=chunk, workers=workers, weights=w)
        return cls(rows, comm=comm, row_map=row_map, scale=scale, shift=shift, chunk=chunk,
                   workers=workers, weights=w)

    # -- reading ----------------------------------------------------------------------------
    @property
    def n_total(self) -> int:
        """Rows of all ranks."""
        return self.comm.n_total

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Working rows ``start:stop`` of this rank."""
        chunk = self.rows[start:stop]
        return chunk if self.row_map is None else self.row_map(chunk)

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        """Working rows of this rank at the indices ``idx``."""
        picked = self.rows[idx]
        return picked if self.row_map is None else self.row_map(picked)

    def map_chunks(self, fn: Callable[[int, torch.Tensor], object]) -> list:
        """``[fn(start, working rows of the chunk) for each chunk]`` on the workers, in
        chunk order."""
        return map_chunks(lambda start: fn(start, self.read(start, start + self.chunk)),
                          self.rows.shape[0], self.chunk, self.workers)

    def sample(self, gen: np.random.Generator, size: int) -> torch.Tensor:
        """At most ``size`` working rows of all ranks, drawn with ``gen``, on every rank.

        The sample is drawn from the global row indices and each rank fills in the sampled
        rows it holds, so a sum over ranks assembles exactly the rows one process would
        draw, on every rank.
        """
        return self.weighted_sample(gen, size)[0]

    def weighted_sample(self, gen: np.random.Generator, size: int
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`sample` and the sampled rows' weights (``None`` without weights): the
        rows are drawn uniformly and keep their weights (one more column of the sum)."""
        n, X, comm = self.n_total, self.rows, self.comm
        idx = np.arange(n) if n <= size else np.sort(gen.choice(n, size, replace=False))
        if X.shape[0] == n:   # one process: the rows as they are, no float64 buffer
            if idx.size == n:
                return self.read(0, n), self.weights
            local = torch.from_numpy(idx).to(X.device)
            return self.take(local), None if self.weights is None else self.weights[local]
        mine = (idx >= comm.offset) & (idx < comm.offset + X.shape[0])
        local = torch.from_numpy(idx[mine] - comm.offset).to(X.device)
        picked = self.take(local)
        dtype = picked.dtype
        picked = picked.double()
        if self.weights is not None:
            picked = torch.cat([picked, self.weights[local].double()[:, None]], 1)
        rows = picked.new_zeros(idx.size, picked.shape[1])   # 0 where not ours
        rows[torch.from_numpy(mine).to(X.device)] = picked
        rows = comm.reduce(rows)                              # x + 0 = x exactly
        if self.weights is None:
            return rows.to(dtype), None
        return rows[:, :-1].to(dtype), rows[:, -1].to(dtype)

    def assign(self, logits: Callable[[torch.Tensor], torch.Tensor], n_clusters: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """This rank's labels ``argmax_h logits(rows)_h``, ``(n,)`` (of the logits, as
        ``predict``: at a small ``lambda`` the attention weights of near heads are equal to
        rounding, their logits not), and, summed over the ranks, the cluster sizes and the
        sum of the largest attention weights, ``(K + 1,)`` (with sample weights: their
        sums; a head winning only rows of weight zero wins nothing)."""
        labels = np.empty(self.rows.shape[0], dtype=np.int64)
        w = self.weights

        def winners(start, chunk):   # labels (written in place) and sum_i max_h a_ih
            scores = logits(chunk)
            labels[start:start + chunk.shape[0]] = scores.argmax(1).cpu().numpy()
            best = softmax_heads(scores).max(1).values
            if w is not None:
                best = best * w[start:start + chunk.shape[0]]
            return float(best.double().sum())
        sharp = sum(self.map_chunks(winners))
        sizes = np.bincount(labels, minlength=n_clusters,
                            weights=None if w is None else w.cpu().double().numpy()
                            ).astype(np.float64)
        return labels, self.comm.sum_array(np.append(sizes, sharp))

    def solver_args(self) -> dict:
        """The keywords of :func:`~attnclust.cluster.fixed_point.fixed_point_fit` that read these
        rows: the chunk map, the sum over ranks, chunk size and workers."""
        return dict(reduce=self.comm.reduce, row_map=self.row_map, chunk_size=self.chunk,
                    workers=self.workers, weights=self.weights)

    # -- the working space and back -------------------------------------------------------
    def heads_in(self, centers: np.ndarray) -> np.ndarray:
        """:meth:`WorkingSpace.heads_in`."""
        return self.space.heads_in(centers)

    def heads_out(self, heads: torch.Tensor) -> np.ndarray:
        """:meth:`WorkingSpace.heads_out`."""
        return self.space.heads_out(heads)

    def inverse_temperature_in(self, lam: float) -> float:
        """:meth:`WorkingSpace.inverse_temperature_in`."""
        return self.space.inverse_temperature_in(lam)

    def inverse_temperature_out(self, lam: float) -> float:
        """:meth:`WorkingSpace.inverse_temperature_out`, naming these rows' weights."""
        return self.space.inverse_temperature_out(lam, self.weights)

    def info_out(self, offset: int = 0) -> Callable[[IterationInfo], IterationInfo]:
        """A solver's :class:`~attnclust.layer.results.IterationInfo` in the preprocessed space's
        units, its iteration counted from ``offset``."""
        scale = self.scale
        shift = None if self.shift is None else torch.from_numpy(self.shift)

        def out(info: IterationInfo) -> IterationInfo:
            heads = info.heads * scale
            if shift is not None:
                heads = heads + shift.to(dtype=heads.dtype, device=heads.device)
            return IterationInfo(offset + info.iteration, info.loss * scale * scale,
                                 info.inverse_temperature / scale / scale, info.shift * scale,
                                 heads)
        return out

"""Threads for passes over rows: one torch thread per worker, workers over row chunks.

Torch splits each operation over its threads and synchronizes them after each one. The
operations of a pass over ``(rows, K)`` blocks are short, so that synchronization costs
more than it gives, and on a busy machine (more runnable threads than cores) many times
more (measurements in ``docs/solver.md``). The solvers therefore run torch
single-threaded and hand whole chunks of rows to a pool of workers (:func:`map_chunks`),
which meet once per pass, like scikit-learn's k-means; passes that only sum their
chunks' results add them as they come (:func:`add_chunks`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

__all__ = ["add_chunks", "map_chunks", "torch_threads"]

T = TypeVar("T")


@contextmanager
def torch_threads(n_threads: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n_threads)`` (``None``: unchanged).

    Examples
    --------
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    if n_threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def map_chunks(fn: Callable[[int], T], n_rows: int, chunk: int, workers: int = 1) -> list[T]:
    """``[fn(start) for start in range(0, n_rows, chunk)]``, on up to ``workers`` threads.

    The results come in the order of the chunks whatever thread computed them, so sums
    over them are the same on every run.

    Examples
    --------
    >>> map_chunks(lambda start: start, 10, 4, workers=2)
    [0, 4, 8]
    """
    starts = range(0, n_rows, chunk)
    if workers <= 1 or len(starts) <= 1:
        return [fn(start) for start in starts]
    with ThreadPoolExecutor(min(workers, len(starts))) as pool:
        return list(pool.map(fn, starts))


def add_chunks(total: T, fn: Callable[[int], T], n_rows: int, chunk: int, workers: int = 1) -> T:
    """``total += fn(start)`` for each chunk, in chunk order, on up to ``workers`` threads.

    The sum is the same whatever the number of threads, and at most ``2 workers``
    results are held at a time (a list of every chunk's result, as :func:`map_chunks`
    returns, would hold ``n_rows / chunk`` of them: 3 GB of a pass's sums for 1,024 heads
    over 70,000 x 784 rows).

    Examples
    --------
    >>> import numpy as np
    >>> add_chunks(np.zeros(1), lambda start: np.array([start]), 10, 4, workers=2)
    array([12.])
    """
    starts = range(0, n_rows, chunk)
    if workers <= 1 or len(starts) <= 1:
        for start in starts:
            total += fn(start)
        return total
    with ThreadPoolExecutor(min(workers, len(starts))) as pool:
        pending: deque = deque()
        for start in starts:
            pending.append(pool.submit(fn, start))
            if len(pending) >= 2 * workers:
                total += pending.popleft().result()
        while pending:
            total += pending.popleft().result()
    return total

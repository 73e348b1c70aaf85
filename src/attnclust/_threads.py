"""Torch's intra-op thread count, limited for the duration of a block of work."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["SMALL_WORK", "torch_threads"]

# Below this many elements per operand, kernels are too short for threads to pay: their
# synchronization costs more than the work, and on a busy machine (more runnable threads
# than cores) tens of times more (a fit on wine: 200 ms with 2 threads, 33 ms with 1).
SMALL_WORK = 1 << 22


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

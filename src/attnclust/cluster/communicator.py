"""How a fit sees the rows of every process: the seam of data-parallel fitting.

Every statistic a fit of :class:`~attnclust.AttentionClustering` needs is a sum over rows.
When the rows are split between processes (ranks), each rank computes the sums of its
own rows and a :class:`Communicator` adds them up; one process is the case where the
sum is the identity (:meth:`Communicator.local`). :mod:`attnclust.cluster.distributed` builds
one from a ``torch.distributed`` process group; a test can build one from threads.

Notation
--------
=============  ==============  =============================================
symbol         code            meaning
=============  ==============  =============================================
``R``          (ranks)         processes sharing the rows, in rank order
``sum_r``      ``reduce``      sum over ranks, the same result on every rank
``n``          ``n_total``     rows of all ranks together
``W``, ``r``   ``world``,      ranks, and this rank's place among them
               ``rank``
=============  ==============  =============================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Communicator"]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


@dataclass(frozen=True)
class Communicator:
    """Sums over ranks and the place of this rank's rows among all of them.

    The local rows are rows ``offset .. offset + n_local - 1`` of the concatenation of
    all ranks' rows in rank order.

    Parameters
    ----------
    reduce : callable
        ``t -> sum of t over the ranks`` (the same tensor on every rank, on ``t``'s
        device; ``t`` itself is not modified).
    broadcast : callable
        ``t -> rank 0's t`` on every rank.
    offset : int
        Global index of this rank's first row.
    n_total : int
        Rows of all ranks.
    rank, world : int, default=0 and 1
        This rank's index and the number of ranks: what :meth:`gather` needs (a
        communicator that leaves them at their defaults while holding a share of the
        rows cannot gather, and the fits that would gather warn and skip that step).

    Examples
    --------
    >>> comm = Communicator.local(5)
    >>> comm.reduce(torch.ones(2)), comm.offset, comm.n_total
    (tensor([1., 1.]), 0, 5)
    >>> comm.sum_array(np.array([1.5, 2.0]))
    array([1.5, 2. ])
    """

    reduce: Callable[[torch.Tensor], torch.Tensor]
    broadcast: Callable[[torch.Tensor], torch.Tensor]
    offset: int
    n_total: int
    rank: int = 0
    world: int = 1

    @classmethod
    def local(cls, n_rows: int) -> Communicator:
        """One process holding all ``n_rows`` rows: sums are the identity."""
        return cls(_identity, _identity, 0, int(n_rows))

    def checked(self, n_local: int) -> Communicator:
        """This communicator, after checking that its ranks' ``n_local`` rows add up to
        ``n_total`` and that this rank's lie within them (one sum over the ranks); else a
        ``ValueError`` (the fit would divide its sums by a wrong count, or index past
        the rows).

        Examples
        --------
        >>> Communicator.local(5).checked(4)
        Traceback (most recent call last):
        ...
        ValueError: comm: the ranks hold 4 rows, but n_total=5 (offset 0)
        """
        held = int(round(float(self.sum_array(float(n_local)))))
        if held != self.n_total or not 0 <= self.offset <= self.n_total - n_local:
            raise ValueError(f"comm: the ranks hold {held} rows, but n_total={self.n_total} "
                             f"(offset {self.offset})")
        return self

    def sum_array(self, a) -> np.ndarray:
        """A NumPy array (or number) summed over the ranks, as float64."""
        t = torch.from_numpy(np.array(a, dtype=np.float64))
        return self.reduce(t).cpu().numpy()

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's ``t`` (of one shape on every rank), stacked in rank order on
        every rank: ``(world, *t.shape)``.

        Built from :attr:`reduce`: each rank writes ``t`` into its own slot of a zero
        tensor and the slots are summed over the ranks, which is exact (every entry is
        one rank's value plus zeros). Meant for a few rows (the far rows of
        :mod:`attnclust.cluster.kmeans.ending`): it moves ``world`` times ``t``'s size.

        Examples
        --------
        >>> Communicator.local(3).gather(torch.tensor([1.0, 2.0]))
        tensor([[1., 2.]])
        """
        slots = t.new_zeros((self.world, *t.shape))
        slots[self.rank] = t
        return self.reduce(slots) if self.world > 1 else slots

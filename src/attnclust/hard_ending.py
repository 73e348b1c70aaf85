"""The end of a Euclidean fit: the layer's fixed-point steps in the hard limit (Lloyd passes).

For Euclidean heads the attention is ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)``.
As ``lambda -> infinity`` it becomes the indicator of the nearest head, the layer's
output ``T_mu(x)`` becomes that head, and the empirical risk becomes the k-means
objective

    R_inf(mu) = (1/n) sum_i min_h ||x_i - mu_h||^2 .

The fixed-point step of :mod:`attnclust.fixed_point` is then exactly Lloyd's step,
``mu_h <- mean of the rows nearest to mu_h``, and it never increases ``R_inf``: the new
means are the best heads for the old cells, and the new cells the best cells for the new
heads. So ``R_inf`` is non-increasing along the passes, and a pass that moves no head is
a fixed point of the step (a stable k-means partition).

Why a fit ends this way: at the ``"auto"`` inverse temperature the soft fixed point
moves the boundaries between overlapping clusters away from the nearest-head partition
(heads of equal weight and equal spread pull each other's cells towards the smaller
cluster), while the labels are the nearest heads. The passes from the soft heads to the
hard limit recover those boundaries; the measurements are in
``docs/guide/default-estimator.md``.

Each pass reads the rows once in chunks (one ``n x d x K`` product, per-cell sums) and,
with ``reduce`` (a sum over data-parallel ranks), sums ``K (d + 1) + 1`` numbers over the
ranks, so every rank takes the same steps.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads, shape ``(K, d)``
``R_inf``      ``objective``   k-means objective per row after each pass
=============  ==============  =============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ._threads import map_chunks

__all__ = ["HardEnding", "lloyd_passes"]


class HardEnding(NamedTuple):
    """Result of :func:`lloyd_passes`."""

    heads: torch.Tensor
    """Heads after the last pass, ``(K, d)``."""
    objective: np.ndarray
    """``R_inf`` of the heads each pass started from (non-increasing), ``(n_passes,)``."""
    n_passes: int
    """Passes over the rows."""
    converged: bool
    """A stopping rule (``tol`` or ``rtol``) was met before ``max_passes``."""


def _cell_sums(Xc: torch.Tensor, heads: torch.Tensor, half_sq: torch.Tensor) -> torch.Tensor:
    """Flat ``[counts (K), sums (K d), sum_i min_h ||x_i - mu_h||^2]`` of one chunk."""
    K = heads.shape[0]
    best, z = (Xc @ heads.T - half_sq).max(1)                 # (m,) <x, mu> - ||mu||^2 / 2
    counts = torch.bincount(z, minlength=K).to(heads.dtype)
    sums = heads.new_zeros(heads.shape).index_add_(0, z, Xc)  # (K, d)
    dist = (Xc * Xc).sum() - 2.0 * best.sum()                 # sum_i ||x_i - mu_z(i)||^2
    return torch.cat([counts, sums.reshape(-1), dist.reshape(1)])


def lloyd_passes(read: Callable[[int, int], torch.Tensor], n_rows: int, heads: torch.Tensor,
                 *, max_passes: int, tol: float, chunk: int, rtol: float = 0.0, workers: int = 1,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 n_total: int | None = None) -> HardEnding:
    """Lloyd passes from ``heads`` until the heads' squared moves sum to at most ``tol``,
    or a move lowered ``R_inf`` by at most ``rtol`` of its value.

    The stopping rule is scikit-learn's ``KMeans`` rule (``sum_h ||mu_h' - mu_h||^2 <=
    tol``, which scikit-learn takes as ``1e-4`` times the data's mean variance per
    feature), so that both stop at the same point of the same iteration.

    Parameters
    ----------
    read : callable
        ``read(start, stop)`` returns rows ``start:stop`` of the fit, ``(m, d)``, in the
        dtype and on the device of ``heads``.
    n_rows : int
        Rows that ``read`` serves (this rank's).
    heads : Tensor of shape (K, d)
        Initial heads.
    max_passes : int
        At most this many passes.
    tol : float
        Stop after a pass whose squared head moves sum to at most ``tol``.
    rtol : float, default=0
        Stop after a pass that finds that the previous move lowered ``R_inf`` by at most
        ``rtol`` times its value (the heads still take that pass's move): on many rows
        Lloyd's heads creep long after the partition has settled.
    chunk, workers :
        Rows per chunk, and threads sharing the chunks (:func:`attnclust._threads.map_chunks`).
    reduce : callable, optional
        Sum over data-parallel ranks of a tensor (the same on every rank).
    n_total : int, optional
        Rows of all ranks (default ``n_rows``).

    Returns
    -------
    HardEnding
        A head whose cell is empty keeps its position.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = lloyd_passes(lambda a, b: X[a:b], 4, X[[0, 2]], max_passes=10, tol=0.0, chunk=2)
    >>> res.heads.tolist(), res.converged, res.objective.round(3).tolist()
    ([[0.1, 0.0], [3.2, 0.0]], True, [0.05, 0.025])
    """
    K, d = heads.shape
    n = n_rows if n_total is None else n_total
    objective: list[float] = []
    converged = False
    for _ in range(int(max_passes)):
        half_sq = 0.5 * (heads * heads).sum(1)
        flat = heads.new_zeros(K * (d + 1) + 1)
        for part in map_chunks(lambda s, h=heads, q=half_sq: _cell_sums(read(s, s + chunk), h, q),
                               n_rows, chunk, workers):
            flat += part
        if reduce is not None:
            flat = reduce(flat)
        counts, sums = flat[:K], flat[K:K + K * d].reshape(K, d)
        objective.append(float(flat[-1]) / n)
        settled = len(objective) > 1 and objective[-2] - objective[-1] <= rtol * objective[-2]
        new = torch.where((counts > 0)[:, None], sums / counts.clamp_min(1)[:, None], heads)
        shift = float(((new - heads) ** 2).sum())
        heads = new
        if shift <= tol or settled:
            converged = True
            break
    return HardEnding(heads, np.asarray(objective, dtype=np.float64), len(objective), converged)

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


def _cell_sums(Xc: torch.Tensor, heads: torch.Tensor, half_sq: torch.Tensor):
    """Flat ``[counts (K), sums (K d), sum_i min_h ||x_i - mu_h||^2]`` of one chunk, and its
    labels ``(m,)``."""
    K = heads.shape[0]
    best, z = (Xc @ heads.T - half_sq).max(1)                 # (m,) <x, mu> - ||mu||^2 / 2
    counts = torch.bincount(z, minlength=K).to(heads.dtype)
    sums = heads.new_zeros(heads.shape).index_add_(0, z, Xc)  # (K, d)
    dist = (Xc * Xc).sum() - 2.0 * best.sum()                 # sum_i ||x_i - mu_z(i)||^2
    return torch.cat([counts, sums.reshape(-1), dist.reshape(1)]), z


def lloyd_passes(read: Callable[[int, int], torch.Tensor], n_rows: int, heads: torch.Tensor,
                 *, max_passes: int, tol: float, chunk: int, rtol: float = 0.0, workers: int = 1,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 n_total: int | None = None, labels: np.ndarray | None = None) -> HardEnding:
    """Lloyd passes from ``heads`` until the step would move the heads by a sum of squares
    of at most ``tol``, or the last move lowered ``R_inf`` by at most ``rtol`` of its value.

    The ``tol`` rule is scikit-learn's ``KMeans`` rule (``sum_h ||mu_h' - mu_h||^2 <=
    tol``, which scikit-learn takes as ``1e-4`` times the data's mean variance per
    feature). The heads returned are those of the last pass, whose cells it computed: so
    ``labels``, when given, holds their nearest heads without another pass over the rows
    (the last step, of at most ``tol``, is not taken).

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
        Stop at a pass whose step would move the heads by a sum of squares of at most ``tol``.
    rtol : float, default=0
        Stop at a pass that finds that the previous step lowered ``R_inf`` by at most
        ``rtol`` times its value: on many rows Lloyd's heads creep long after the
        partition has settled.
    chunk, workers :
        Rows per chunk, and threads sharing the chunks (:func:`attnclust._threads.map_chunks`).
    reduce : callable, optional
        Sum over data-parallel ranks of a tensor (the same on every rank).
    n_total : int, optional
        Rows of all ranks (default ``n_rows``).
    labels : ndarray of shape (n_rows,), optional
        Filled with the index of each row's nearest returned head.

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

    def cells(start, h, q):
        part, z = _cell_sums(read(start, start + chunk), h, q)
        if labels is not None:
            labels[start:start + z.shape[0]] = z.cpu().numpy()
        return part
    for _ in range(int(max_passes)):
        half_sq = 0.5 * (heads * heads).sum(1)
        flat = sum(map_chunks(lambda s, h=heads, q=half_sq: cells(s, h, q), n_rows, chunk,
                              workers), heads.new_zeros(K * (d + 1) + 1))
        if reduce is not None:
            flat = reduce(flat)
        counts, sums = flat[:K], flat[K:K + K * d].reshape(K, d)
        objective.append(float(flat[-1]) / n)
        new = torch.where((counts > 0)[:, None], sums / counts.clamp_min(1)[:, None], heads)
        settled = len(objective) > 1 and objective[-2] - objective[-1] <= rtol * objective[-2]
        if float(((new - heads) ** 2).sum()) <= tol or settled:
            converged = True
            break
        if len(objective) < max_passes:
            heads = new
    return HardEnding(heads, np.asarray(objective, dtype=np.float64), len(objective), converged)

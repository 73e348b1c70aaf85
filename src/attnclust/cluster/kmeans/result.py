"""The record of one k-means run, and its objective recomputed from heads and labels.

Every k-means of the engine (a batch of runs on the warm-start sample, Lloyd steps of one
geometry, steps over all rows, a swap's rerun, the fit's end) returns a
:class:`KMeansResult`. Its ``objective`` is

    R_inf(mu, z) = sum_i w_i ||x_i - mu_{z_i}||^2 / sum_i w_i

of its final heads ``mu`` and labels ``z``. The runs on rows in memory *recompute* it
once they have ended, in one pass over the rows (:func:`objective`, :func:`objective_sums`),
rather than carry it along the steps: sums that a run keeps up to date (per-cell sums of
squared distances moved with the heads, scores ``<x, mu> - ||mu||^2 / 2``) agree with it
only up to their rounding, which grows with the steps. The recomputed value is within
``(d + 2) eps`` (relative) of the exact ``R_inf`` of the rows as stored, ``eps`` their
dtype's machine epsilon: each term ``||x_i - mu_{z_i}||^2`` is (``d`` subtractions, ``d``
products, a sum of ``d``), and the float64 sum of the ``n`` terms adds ``n eps_64``.
scikit-learn recomputes its ``inertia_`` after its loop for the same reason. The steps
over all rows (:func:`attnclust.cluster.kmeans.passes.lloyd_passes`) are the exception
where their sums' rounding is bounded within 1% of the objective: one more read of every
row would cost as much as a step, so they report their sums there. :func:`inertia` is a
fitted estimator's ``inertia_``: the same sum, unnormalized, over all ranks' working rows
in the preprocessed rows' units, the noise head's rows left out.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``R_inf``      ``objective``   k-means objective per unit weight
``mu_h``       ``heads``       heads, shape ``(K, d)``
``z_i``        ``labels``      each row's head, shape ``(n,)``
``w_i``        ``weights``     the rows' sample weights (default 1)
``eps``        (dtype)         the rows' machine epsilon
=============  ==============  =============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..rows import WorkingRows

__all__ = ["KMeansHistory", "KMeansResult", "chunk_objective", "inertia", "objective",
           "objective_sums"]


class KMeansHistory(NamedTuple):
    """The steps of a run, where a caller reads them (the estimator's ``loss_curve_``)."""

    objective: np.ndarray
    """``R_inf`` of the heads each step started from, ``(T,)``; the last entry is the
    :attr:`KMeansResult.objective` of the final heads."""
    heads: torch.Tensor
    """The heads of each entry of ``objective``, ``(T, K, d)``."""
    step: np.ndarray
    """Lloyd steps made before each entry of ``objective``, ``(T,)``."""
    full_passes: int = 0
    """Steps that read every row (steps over all rows with bounds; 0 elsewhere)."""


class KMeansResult(NamedTuple):
    """One k-means run (or, from the batched runs of :mod:`attnclust.cluster.kmeans.batch`, every
    run of a batch: each field then has a leading axis of runs).

    Examples
    --------
    >>> X = np.array([[0.0], [2.0], [10.0]])
    >>> res = KMeansResult(np.array([[1.0], [10.0]]), np.array([0, 0, 1]), 2 / 3, 1, True)
    >>> res.objective == objective(X, res.heads, res.labels)
    True
    """

    heads: Any
    """Final heads, ``(K, d)`` (a tensor, or an array from NumPy runs)."""
    labels: np.ndarray
    """Each row's head among the final heads, ``(n,)``."""
    objective: float
    """``R_inf`` of the final heads and labels, recomputed in one pass when the run ended
    (the steps over all rows: their sums where accurate enough; for a geometry other
    than Euclidean, the geometry's own objective: see
    :func:`attnclust.cluster.kmeans.lloyd.hard_lloyd`)."""
    n_iter: int
    """Lloyd steps."""
    converged: bool
    """A stopping rule was met within the steps allowed."""
    history: KMeansHistory | None = None
    """The per-step record, for the runs whose caller reads it (else ``None``)."""


def objective(X: np.ndarray, heads: np.ndarray, labels: np.ndarray,
              weights: np.ndarray | None = None) -> float:
    """``R_inf`` of NumPy rows ``X`` ``(n, d)`` given their heads and labels, in one pass
    (float64 sums; weights ``(n,)`` when given).

    Examples
    --------
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 1.0]])
    >>> objective(X, np.array([[1.0, 0.0], [10.0, 0.0]]), np.array([0, 0, 1]))
    1.0
    """
    diff = X - heads[labels]
    dist = np.einsum("nd,nd->n", diff, diff).astype(np.float64)
    if weights is None:
        return float(dist.sum()) / max(X.shape[0], 1)
    w = np.asarray(weights, dtype=np.float64)
    return float(dist @ w) / max(float(w.sum()), 1e-300)


def objective_sums(read: Callable[[int, int], torch.Tensor], n_rows: int,
                   heads: torch.Tensor, labels: np.ndarray, *, chunk: int,
                   weights: torch.Tensor | None = None) -> float:
    """``sum_i w_i ||x_i - mu_{z_i}||^2`` over the rows ``read(start, stop)`` (this rank's
    ``n_rows``), read once in chunks, summed in float64: the numerator of ``R_inf``, which
    a caller sums over ranks and divides by the total weight.

    Examples
    --------
    >>> X = torch.tensor([[0.0], [2.0], [10.0]], dtype=torch.float64)
    >>> objective_sums(lambda a, b: X[a:b], 3, X.new_tensor([[1.0], [10.0]]),
    ...                np.array([0, 0, 1]), chunk=2)
    2.0
    """
    total = 0.0
    for start in range(0, n_rows, chunk):
        Xc = read(start, start + chunk)
        stop = start + Xc.shape[0]
        total += chunk_objective(Xc, heads, labels[start:stop],
                                 None if weights is None else weights[start:stop])
    return total


def chunk_objective(Xc: torch.Tensor, heads: torch.Tensor, labels: np.ndarray,
                    weights: torch.Tensor | None = None) -> float:
    """``sum_i w_i ||x_i - mu_{z_i}||^2`` over one chunk of rows (float64 sum).

    Examples
    --------
    >>> chunk_objective(torch.tensor([[0.0], [3.0]]), torch.tensor([[1.0]]), np.array([0, 0]))
    5.0
    """
    z = torch.from_numpy(np.asarray(labels)).to(heads.device)
    diff = Xc - torch.index_select(heads, 0, z)             # squares summed in float64
    if weights is None:
        return float(torch.linalg.vector_norm(diff, dtype=torch.float64) ** 2)
    return float(torch.linalg.vector_norm(diff, dim=1, dtype=torch.float64).square_()
                 @ weights.double())


def inertia(rows: WorkingRows, centers: np.ndarray, labels: np.ndarray) -> float:
    """``sum_i w_i ||x_i - mu_{z_i}||^2`` over all ranks' rows (``KMeans.inertia_``), in the
    space of the preprocessed rows (the working rows are those over ``rows.scale``):
    ``centers`` ``(K, d)`` there, ``labels`` ``(n,)`` this rank's, ``-1`` (noise) left
    out.

    Examples
    --------
    >>> from attnclust.layer.geometry import as_geometry
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0]])
    >>> rows = WorkingRows.prepare(X, geometry=as_geometry("euclidean"), comm=None)
    >>> inertia(rows, np.array([[1.0, 0.0], [10.0, 0.0]]), np.array([0, 0, 1]))
    2.0
    """
    heads = torch.as_tensor(rows.heads_in(np.asarray(centers, dtype=np.float64)),
                            dtype=torch.float64, device=rows.rows.device)
    labels_t = torch.as_tensor(labels, device=rows.rows.device)
    w = rows.weights

    def part(start: int, chunk: torch.Tensor) -> float:
        z = labels_t[start:start + chunk.shape[0]]
        kept = z >= 0
        diff = chunk.double()[kept] - heads[z[kept]]                      # (m, d)
        sq = (diff * diff).sum(1)
        if w is not None:
            sq = sq * w[start:start + chunk.shape[0]][kept].double()
        return float(sq.sum())
    return float(rows.comm.sum_array(sum(rows.map_chunks(part)))) * rows.scale * rows.scale

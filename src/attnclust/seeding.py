"""Several k-means++ seedings and their Lloyd runs at once: the Euclidean warm start.

The default fit starts from the best of ``R`` seedings, each followed by hard Lloyd
steps (Euclidean heads in the limit ``lambda -> infinity``, see
:mod:`attnclust.hard_ending`), the best being the one of lowest k-means objective

    J(mu) = sum_i min_h ||x_i - mu_h||^2 .

On small data the cost of ``R`` separate runs is the interpreter's, not the arithmetic's:
each step is a handful of tensor operations on small blocks. The ``R`` runs are
therefore carried together: their heads are stacked into one ``(R K, d)`` block, so that
one product ``X mu^T`` serves every run and each step costs about what one run's does.

Seeding is greedy k-means++ (Arthur and Vassilvitskii 2007, with the ``2 + log K``
local trials of scikit-learn's ``kmeans_plusplus``): the first head is a random row;
each next one is the best, by the resulting potential ``sum_i min_h ||x_i - mu_h||^2``,
of ``2 + log K`` rows drawn with probability proportional to their squared distance to
the heads chosen so far.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads of the runs, shape ``(R, K, d)``
``J``          ``objective``   k-means objective per row of each run, ``(R,)``
=============  ==============  =============================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["LloydRuns", "kmeans_plusplus_runs", "lloyd_runs"]


def kmeans_plusplus_runs(X: torch.Tensor, n_clusters: int, n_runs: int,
                         gen: np.random.Generator) -> torch.Tensor:
    """``n_runs`` greedy k-means++ seedings of ``n_clusters`` heads among the rows of ``X``.

    Returns the heads, ``(n_runs, n_clusters, d)`` (rows of ``X``); the random draws come
    from ``gen``, so a seeded generator gives the same heads on every call.

    Examples
    --------
    >>> X = torch.tensor([[0.0], [0.1], [10.0], [10.1]], dtype=torch.float64)
    >>> heads = kmeans_plusplus_runs(X, 2, 3, np.random.default_rng(0))
    >>> heads.shape, sorted(float(h) // 5 for h in heads[0, :, 0])
    (torch.Size([3, 2, 1]), [0.0, 2.0])
    """
    n, R, K = X.shape[0], n_runs, n_clusters
    trials = 2 + int(math.log(K))
    sq = (X * X).sum(1)                                       # (n,)
    first = torch.as_tensor(gen.integers(n, size=R), device=X.device)
    chosen = [first]                                          # K tensors of (R,) row indices
    closest = (sq[None] - 2 * X[first] @ X.T + sq[first][:, None]).clamp_min_(0)   # (R, n)
    for _ in range(1, K):
        pot = closest.sum(1, keepdim=True)                    # (R, 1)
        draws = torch.as_tensor(gen.random((R, trials)), dtype=X.dtype, device=X.device)
        cand = torch.searchsorted(closest.cumsum(1), draws * pot).clamp_max_(n - 1)  # (R, t)
        dist = (sq[None, None] - 2 * (X[cand] @ X.T) + sq[cand][..., None]).clamp_min_(0)
        new = torch.minimum(closest[:, None], dist)           # (R, t, n)
        best = new.sum(2).argmin(1)                           # (R,)
        runs = torch.arange(R, device=X.device)
        chosen.append(cand[runs, best])
        closest = new[runs, best]
    return X[torch.stack(chosen, 1)]                          # (R, K, d)


class LloydRuns(NamedTuple):
    """Result of :func:`lloyd_runs`."""

    heads: torch.Tensor
    """Heads of each run after its last step, ``(R, K, d)``."""
    objective: torch.Tensor
    """``J / n`` of each run's final heads, ``(R,)``."""
    n_steps: int
    """Steps taken (all runs step together until every partition is stable)."""


def _assign(X, heads, chunk):
    """Labels ``(n, R)`` and summed squared distances ``(R,)`` of every run's nearest heads."""
    R, K, d = heads.shape
    flat = heads.reshape(R * K, d)
    half = 0.5 * (flat * flat).sum(1)
    labels, dist = [], X.new_zeros(R)
    for s in range(0, X.shape[0], chunk):
        Xc = X[s:s + chunk]
        best, z = (Xc @ flat.T - half).reshape(-1, R, K).max(2)   # (m, R)
        labels.append(z)
        dist += (Xc * Xc).sum() - 2.0 * best.sum(0)
    return torch.cat(labels), dist


def lloyd_runs(X: torch.Tensor, heads: torch.Tensor, max_steps: int, *,
               chunk: int = 4096) -> LloydRuns:
    """Hard Lloyd steps of ``R`` runs together, each until its partition no longer changes.

    Each run is exactly the Lloyd iteration of its own heads: cells of the nearest head,
    heads moved to the means of their cells (an empty cell keeps its head). A run whose
    partition is stable leaves the batch, so the later steps cost only the runs still
    moving.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [0.2, 0.0], [3.0, 0.0], [3.4, 0.0]], dtype=torch.float64)
    >>> res = lloyd_runs(X, torch.stack([X[[0, 1]], X[[0, 2]]]), 10)
    >>> res.heads[0].tolist(), res.objective.round(decimals=3).tolist()
    ([[0.1, 0.0], [3.2, 0.0]], [0.025, 0.025])
    """
    R, K, d = heads.shape
    heads = heads.clone()
    labels, dist = _assign(X, heads, chunk)                   # (n, R), (R,)
    active = torch.arange(R, device=X.device)
    steps = 0
    while steps < int(max_steps) and active.numel():
        steps += 1
        old = labels[:, active]
        sums = X.new_zeros(active.numel(), K, d)
        counts = X.new_zeros(active.numel(), K)
        for r in range(active.numel()):
            sums[r].index_add_(0, old[:, r], X)
            counts[r] = torch.bincount(old[:, r], minlength=K).to(X.dtype)
        moved = torch.where((counts > 0)[..., None], sums / counts.clamp_min(1)[..., None],
                            heads[active])
        new, new_dist = _assign(X, moved, chunk)
        heads[active], labels[:, active], dist[active] = moved, new, new_dist
        active = active[(new != old).any(0)]
    return LloydRuns(heads, dist / X.shape[0], steps)

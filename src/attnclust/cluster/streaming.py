"""Streaming fits: what ``AttentionClustering.partial_fit`` does with each batch of rows.

First batch
-----------
Exactly what ``fit`` does before its solver, on the batch, through the same steps of the
fit's resolved settings (a :class:`~attnclust.cluster.plan.FitPlan`, made by the estimator from
its parameters on the first batch and kept): the preprocessing
(``normalize="center-scale"`` learns ``mean_`` and ``scale_`` here), the working space of
Euclidean heads (rows centred and scaled by the batch's mean and root-mean-square
spread: a fixed affine map from then on), the seeding (k-means++ on the batch, weighted)
and, for ``inverse_temperature="auto"``, the hard Lloyd steps and the boundary variance
that fix ``lambda``. ``lambda`` stays fixed afterwards.

Every batch (the first included)
--------------------------------
The batch's sufficient statistics at the current heads and ``lambda`` are the row sums
of one pass of the fixed-point solver (:func:`attnclust.cluster.fixed_point.pass_sums`: the
summed error, ``W^T X``, ``A^T A``, ``sum_i a_ih P_ih``, ``sum_i W_ih``, every term
weighted by the sample weight); they are added to running sums,

    S_t = S_{t-1} + S(batch_t),        n_t = n_{t-1} + sum_i w_i,

and the heads take one full fixed-point step from ``S_t / n_t``
(:func:`attnclust.cluster.fixed_point.step_from_sums`). The forgetting rule is that of
scikit-learn's ``MiniBatchKMeans``: running counts, nothing forgotten. With hard attention
the step is exactly its update: each head becomes the mean of every row it has won so far
(``mu_h <- (n_h mu_h + sum of the batch's rows of h) / (n_h + m_h)``); with soft
attention, the soft counts ``N_h = sum_i w_i a_ih`` and sums ``sum_i W_ih x_i`` replace
them, so a fixed point of the running step is a fixed point of the batch solver on the
rows seen. Memory is one batch plus ``O(K d + K^2)`` numbers.

Before its sums are taken, every batch may move two heads: the single swap of
:mod:`attnclust.cluster.kmeans.swap` (a head that costs the batch's k-means cost little to remove
moves, with the head of the largest within-cell cost, to the two centres of that cell's
2-means split, when this lowers the batch's k-means cost). The running statistics of
the two moved heads are forgotten (:func:`attnclust.cluster.fixed_point.forget_heads`), so
their next step is taken from the rows they win from then on; nothing else is
forgotten. Running counts alone cannot repair a seeding that puts two heads in one
cluster and one head on two (every seed of ``bench_streaming.py``'s ``K = 32`` set
with ``--quick``); this does, in one or two swaps.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads in the working space, ``(K, d)``
``lambda``     ``lam``         inverse temperature (working space), fixed
``S_t``        ``sums``        running row sums of the passes over batches
``n_t``        ``total``       running total weight of the rows seen
=============  ==============  =============================================

``stream_state_.n_swaps`` counts the swaps taken.

After ``fit``
-------------
The stream goes on from the fitted heads (:func:`_resumed_state`). After a fit whose heads
merged into clusters it streams one head per cluster, the clusters' centres, and
``lambda`` is not the merged heads' (set for many heads a small distance apart) but the
clusters' own, read on the first batch as a first batch fixes it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from .._validation import as_generator
from .communicator import Communicator
from .degenerate import user_stacklevel, warn_capped
from .fixed_point import forget_heads, pass_sums, step_from_sums
from .kmeans.swap import single_swap
from .rows import WorkingRows, WorkingSpace
from .warm_start import auto_lambda

if TYPE_CHECKING:
    from .plan import FitPlan

__all__ = ["StreamState", "check_streaming", "partial_fit"]


@dataclass
class StreamState:
    """What ``partial_fit`` keeps between batches (the estimator's ``stream_state_``)."""

    heads: torch.Tensor            # (K, d), working space
    lam: float                     # working space
    sums: torch.Tensor             # running pass sums
    total: float                   # running total weight
    space: WorkingSpace            # the first batch's working space (fit's conversions)
    dtype: torch.dtype
    device: str
    chunk: int
    n_batches: int = 0
    n_swaps: int = 0
    weight_unit: float = 1.0       # every batch's weights are divided by it (fixed first)

    def to_working(self, Xp: np.ndarray) -> torch.Tensor:
        """Preprocessed rows -> the working space, on the fit's device and dtype, as
        ``fit`` maps its rows (:meth:`~attnclust.cluster.rows.WorkingSpace.rows_in`)."""
        rows = torch.from_numpy(np.ascontiguousarray(Xp))
        return self.space.rows_in(rows, self.dtype).to(self.device)


def _first_state(plan: FitPlan, Xp: np.ndarray, weights, gen) -> StreamState:
    """Initial heads and lambda from the first batch, as ``fit`` starts (see above)."""
    rows = plan.working_rows(Xp, Communicator.local(Xp.shape[0]), weights=weights)
    S, _, start, lam = plan.warm_start(rows, gen, hard=False)
    if start.capped:            # every later batch keeps it: say so now, as fit does
        warn_capped(rows.inverse_temperature_out(float(lam)),
                    where=" of the first batch, which fixes lambda for the stream,")
    return StreamState(start.heads, float(lam), start.heads.new_zeros(0), 0.0, rows.space,
                       S.dtype, str(plan.device), rows.chunk)


def _resumed_state(est, plan: FitPlan, Xp: np.ndarray, weights=None) -> StreamState:
    """A state for an estimator fitted by ``fit``: its heads and lambda, in a working space
    taken from this batch, and running sums of the heads as rows weighing their clusters'
    sizes (``labels_``; as ``MiniBatchKMeans`` keeps its counts): from no sums, a first
    batch of one row moved the heads it barely touched out of the data. After a fit whose
    heads merged, lambda is the clusters' own, read on this batch of sample ``weights``
    (:func:`_clusters_lambda`)."""
    plan = plan.with_clusters(len(est.cluster_centers_))
    rows = plan.working_rows(Xp, Communicator.local(Xp.shape[0]))
    one = rows.read(0, 1)
    heads = torch.as_tensor(rows.heads_in(est.cluster_centers_), dtype=one.dtype,
                            device=one.device)
    lam = _clusters_lambda(rows, heads, plan, weights) if getattr(est, "merge_heads_", False) \
        else float(rows.inverse_temperature_in(est.inverse_temperature_))
    labels = getattr(est, "labels_", None)          # -1: a noise row, in no cluster
    sizes = torch.as_tensor(np.ones(len(heads)) if labels is None else np.bincount(
        labels[labels >= 0], minlength=len(heads)), dtype=one.dtype, device=one.device)
    sums = pass_sums(heads, heads, lam, geometry=plan.geometry, weights=sizes,
                     chunk=rows.chunk)
    return StreamState(heads, lam, sums, float(sizes.sum()), rows.space, one.dtype,
                       str(plan.device), rows.chunk)


def _clusters_lambda(rows: WorkingRows, heads: torch.Tensor, plan: FitPlan, weights) -> float:
    """``lambda`` of one head per cluster after a fit whose heads merged: the ``"auto"`` rule's
    ``1 / s^2`` (:func:`~attnclust.cluster.warm_start.auto_lambda`), the boundary
    variance of the clusters' centres ``heads`` ``(K, d)`` on the batch ``rows``
    (working space; ``weights``: its sample weights, in the stream's units), as a first
    batch fixes it. The merged heads' ``lambda`` is theirs, many heads a small distance
    apart (1,550 on two moons, where a stream's first batch reads 5: every row's
    attention 0 or 1 and a score 180 times worse), and the ``K``-head fit's before the
    merge may be a shaped fit's (tempered EM's 1, in no unit of the rows)."""
    S = rows.read(0, rows.rows.shape[0])
    w = None if weights is None else torch.as_tensor(weights, dtype=S.dtype, device=S.device)
    lam, capped = auto_lambda(S, heads, plan.geometry, w)
    if capped:
        warn_capped(rows.inverse_temperature_out(lam),
                    where=" of the first batch after the merged fit, which fixes lambda for "
                          "the stream,")
    return lam


def partial_fit(est, plan: FitPlan, X: np.ndarray, weights: np.ndarray | None = None):
    """One batch of ``AttentionClustering.partial_fit`` (see the module docstring): the
    estimator ``est``'s validated rows ``X`` and their checked sample ``weights``, for the
    stream's resolved settings ``plan`` (the estimator checks its parameters and resolves
    them on the first batch, :func:`check_streaming` on every batch).

    Sets ``cluster_centers_``, ``n_clusters_``, ``inverse_temperature_``, ``labels_`` (of
    this batch, as ``MiniBatchKMeans`` does), ``n_steps_`` (batches seen), ``n_iter_`` (the
    same), ``loss_curve_`` (after each batch, the risk of the running sums: rows seen,
    weighted) and ``stream_state_``; on the first batch ``covariance_type_`` (spherical)
    and its reason, and a ``DegenerateFitWarning`` where its ``lambda``, which every batch
    keeps, is at its cap (a first batch of a few rows or of equal rows).

    Examples
    --------
    >>> import attnclust as ac
    >>> X, z = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.1).sample(
    ...     3000, rng=0, return_labels=True)
    >>> est = ac.AttentionClustering(3, random_state=0)
    >>> for start in range(0, 3000, 500):
    ...     _ = est.partial_fit(X[start:start + 500])
    >>> est.n_steps_, ac.adjusted_rand_index(z, est.predict(X))
    (6, 1.0)
    """
    state = getattr(est, "stream_state_", None)
    fitted = hasattr(est, "cluster_centers_")
    resumed = fitted and (state is None or not np.array_equal(
        est.cluster_centers_, _centers(est, state)))
    if resumed and weights is not None and not weights.max(initial=0.0) > 0:
        est.labels_ = est.predict(X)        # no row: no stream starts, the fit stays whole
        return est
    # weights count relative to each other, across batches too: the first batch's largest
    # weight is the unit of every batch (float32 holds weights of 1e39 or 1e-46 then)
    unit = 1.0 if weights is None or not weights.max(initial=0.0) > 0 else \
        float(weights.max())
    if not fitted:
        weights = None if weights is None else weights / unit
        local = Communicator.local(X.shape[0])
        est.mean_, est.scale_ = plan.learn_center(X, local, weights)
        Xp = plan.preprocess(X, (est.mean_, est.scale_), comm=local)
        state = _first_state(plan, Xp, weights, as_generator(plan.random_state, "random_state"))
        state.weight_unit = unit
        est.loss_curve_ = np.zeros(0)
        est.covariance_type_ = "spherical"             # as fit records its heads' shape
        est.covariance_type_reason_ = ("spherical: partial_fit streams spherical heads"
                                       if plan.covariance.automatic else "given")
    else:
        Xp = plan.preprocess(X, (est.mean_, est.scale_))
        if resumed:
            state = _resumed_state(est, plan, Xp, None if weights is None else weights / unit)
            state.weight_unit = unit
            est.loss_curve_ = np.zeros(0)
        if weights is not None:
            weights = weights / state.weight_unit
        elif state.weight_unit != 1.0:   # no weights: each row weighs 1 in the first's units
            weights = np.full(X.shape[0], 1.0 / state.weight_unit)
    # after a fit's merge of heads: the stream moves cluster_centers_, one head per cluster,
    # and the merged heads (left in place) would go on predicting
    merged = hasattr(est, "merge_heads_")
    if merged and est.merge_heads_:
        warnings.warn(f"partial_fit after a fit whose {len(est.heads_)} heads merged into "
                      f"{len(est.cluster_centers_)} clusters streams one head per cluster "
                      "(cluster_centers_): the merged heads, which drew the clusters' shapes, "
                      "are dropped; fit again to keep them", UserWarning,
                      stacklevel=user_stacklevel())
    if merged:
        est.merge_heads_ = False        # the step's own predictions: one head per cluster
    _step(est, state, state.to_working(Xp), weights, plan.geometry)
    est.n_clusters_ = len(est.cluster_centers_)
    if merged:                          # one head per cluster, as streamed
        est.merge_heads_, est.merge_heads_reason_ = False, "not merged: partial_fit streams"
        est.heads_, est.head_labels_ = est.cluster_centers_, np.arange(est.n_clusters_)
    return est


def check_streaming(est) -> None:
    """A ``ValueError`` when the estimator's parameters cannot stream (before each batch:
    a fitted estimator's parameters may have changed since its fit)."""
    if est.solver != "fixed-point" or est.penalty is not None:
        raise ValueError(f"partial_fit takes fixed-point steps without a penalty; got "
                         f"solver={est.solver!r}, penalty={est.penalty!r}")
    fitted = hasattr(est, "cluster_centers_")
    if not fitted and isinstance(est.n_clusters, str):
        raise ValueError("partial_fit needs n_clusters as a number: 'auto' chooses K on "
                         "all the rows at once (fit n_clusters='auto', "
                         "covariance_type='spherical' on a sample, then stream on from "
                         "that fit)")
    plan = getattr(est, "_plan", None)
    if fitted and plan is not None and plan.covariance.shaped:
        raise ValueError(f"partial_fit streams spherical heads, and this fit's heads are "
                         f"{est.covariance_type_} (their covariances would not follow the "
                         "stream, and predict would read them); fit with "
                         "covariance_type='spherical' to stream on from the fit")
    if fitted and est.n_clusters not in ("auto", len(est.cluster_centers_)):
        raise ValueError(f"n_clusters={est.n_clusters} but the estimator streams "
                         f"{len(est.cluster_centers_)} heads; fit a new estimator to change "
                         "n_clusters")


def _centers(est, state: StreamState) -> np.ndarray:
    """The state's heads in the preprocessed space (what ``cluster_centers_`` holds)."""
    return state.space.heads_out(state.heads)


def _swap(state: StreamState, rows: torch.Tensor, w, geometry) -> None:
    """The single swap of :mod:`attnclust.cluster.kmeans.swap` on the batch, before its sums
    are taken; the moved heads' running statistics are forgotten."""
    move = single_swap(rows, state.heads, geometry, weights=w, chunk=state.chunk)
    if move is None:
        return
    state.heads = state.heads.clone()
    state.heads[[move.h, move.g]] = move.new.to(state.heads.dtype)
    if state.sums.numel():
        state.sums = forget_heads(state.sums, *state.heads.shape, [move.h, move.g])
    state.n_swaps += 1


def _step(est, state: StreamState, rows: torch.Tensor, weights, geometry) -> None:
    """Add the batch's sums to the running ones and take the step; set the attributes."""
    w = None if weights is None else torch.as_tensor(weights, dtype=state.dtype,
                                                     device=rows.device)
    if w is not None and not float(w.sum()) > 0:   # no row, no step: the last one again,
        est.labels_ = geometry.logits(rows, state.heads, state.lam).argmax(1).cpu().numpy()
        return                                     # from the same sums, moved the heads
    _swap(state, rows, w, geometry)
    batch = pass_sums(rows, state.heads, state.lam, geometry=geometry, weights=w,
                      chunk=state.chunk)
    state.sums = batch if state.sums.numel() == 0 else state.sums + batch
    state.total += float(rows.shape[0] if w is None else w.sum())
    state.n_batches += 1
    if state.total > 0:
        state.heads, risk = step_from_sums(state.sums, state.heads, state.lam, state.total,
                                           geometry=geometry)
    else:                                    # only rows of weight zero so far
        risk = float("nan")
    labels = geometry.logits(rows, state.heads, state.lam).argmax(1)
    scale2 = state.space.scale * state.space.scale
    # the first batch's lambda is fit's, mapped back as fit maps it (first: it may raise)
    est.inverse_temperature_ = state.space.inverse_temperature_out(state.lam, weights)
    est.stream_state_ = state
    est.cluster_centers_ = _centers(est, state)
    est.labels_ = labels.cpu().numpy().astype(np.int64)
    est.n_steps_ = est.n_iter_ = state.n_batches
    est.loss_curve_ = np.append(est.loss_curve_, risk * scale2)
    est.inverse_temperature_curve_ = np.full(est.loss_curve_.shape, est.inverse_temperature_)
    est.converged_ = False

"""Clustering with the trained K-head attention layer: the ``AttentionClustering`` estimator.

The model is the K-head layer of :mod:`attnclust.heads`, with unit heads ``mu_h``:

    a_h(x)  = softmax_h( lambda <x, mu_h> ),      T_mu(x) = sum_h a_h(x) mu_h,

fitted by minimizing the empirical risk ``f(mu) = (1/n) sum_i ||x_i - T_mu(x_i)||^2``
(plus ``rho * Pen(mu)`` when a penalty is asked for) over the product of spheres.
A point is assigned to its most-attended head, ``argmax_h a_h(x)``.

Solver (``solver="fixed-point"``, the default)
----------------------------------------------
Write ``P = X mu^T`` (the projections, ``(n, K)``), ``A = softmax(lambda P)``,
``T = A mu``, ``r_i = x_i - T_i`` and ``c_ih = <r_i, mu_h - T_i>``. The Euclidean
gradient of ``f`` with respect to head ``h`` is

    grad_h f = -(2/n) [ sum_i (a_ih + lambda a_ih c_ih) x_i - sum_g (A^T A)_hg mu_g ],

where everything but the two ``(K, d)`` products is computed in the ``K``-dimensional
space of projections: ``<r_i, mu_h> = P_ih - (A G)_ih`` and ``<r_i, T_i> =
sum_h a_ih (P_ih - (A G)_ih)`` with ``G = mu mu^T``. One pass over the data therefore
costs two ``n x d x K`` matrix products, like one Lloyd iteration of k-means.

The step is projected gradient descent with a *per-head* step ``1 / (2 N_h)``, where
``N_h = (1/n) sum_i a_ih`` is the soft proportion of head ``h``:

    mu_h  <-  normalize( mu_h - grad_h f / (2 N_h) ).

Two facts make this step the right one. (i) For fixed attention weights the risk is the
quadratic ``(1/n) ||X - A mu||^2`` in the values, whose Hessian ``(2/n) A^T A`` is
dominated by ``2 diag(N)`` (a symmetric matrix with non-negative entries is below the
diagonal matrix of its row sums), so the step minimizes a majorizer of the value part on
the sphere. (ii) When the attention is hard (``a_ih`` in ``{0, 1}``, the limit of large
``lambda``) the step is *exactly* the spherical Lloyd step ``mu_h <- normalize(mean of
the points of head h)``, so well-separated data converge in a handful of passes. The
attention (key) part is not majorized, so every step is safeguarded: if the risk does
not decrease, the step is halved (``normalize(mu - t grad / (2N))``, ``t = 1/2, 1/4,
...``), which for small ``t`` moves along minus the Riemannian gradient and therefore
decreases the risk. The risk is thus non-increasing along ``loss_curve_`` at a fixed
temperature, and a fixed point satisfies ``grad_h f = (scalar) mu_h``: its Riemannian
gradient is zero. The iteration stops when no head moves by more than ``tol`` (see below
for the extrapolated steps).
Only the tangent part of the attention (key) gradient enters the step: its radial part
``<grad_h^key, mu_h>`` is of order ``lambda`` (it is the derivative of a shift of all the
logits of head ``h``) and carries no information on the sphere, but through the
normalization it shrank or flipped the step at large ``lambda``. The radial part of the
value gradient is kept, which is what makes the hard-attention step exactly Lloyd's (it
costs one ``K``-vector per pass, ``sum_i a_ih <x_i, mu_h>``, sent in place of ``N``, which
is recovered as the row sums of ``A^T A``). The step length restarts from the last
accepted one and is doubled again only after two steps accepted at first try, so a run
of damped steps costs about one pass per step.

Overlapping clusters make these steps slow: the step length is set by the stiff (key)
directions of the Hessian, so the safeguard settles on ``t = 1/4`` or ``1/8``, successive
steps point in nearly opposite directions (cosine -0.3 to -0.7) and the heads creep along
the flat directions. On digits (row-normalized, ``K = 10``, ``random_state=0``) the plain
steps ran to ``max_iter`` with the risk still falling by ``2e-9`` per step (relative
``1e-8``: not converged to float precision) and a Riemannian gradient ``6e-5``. Each step
therefore first tries an *Anderson extrapolation* of the full-step map ``S(mu) =
normalize(mu - D grad)`` (``D`` the per-head step above): with the last ``m <=
_ANDERSON_DEPTH`` iterates ``x_j`` and residuals ``f_j = S(x_j) - x_j`` at this
temperature, ``gamma`` minimizes ``||f - dF gamma||`` over the differences of consecutive
residuals and the candidate is ``normalize(x + t f - (dX + t dF) gamma)``. It costs one
pass and is kept only if the objective does not increase (the acceptance test of the
plain step); otherwise the history restarts from the current iterate and the plain,
halved step is taken from it. So the objective stays non-increasing at a fixed
temperature, and the stopping test is on the *full* step ``S(mu) - mu`` (zero exactly at
a fixed point) or on an accepted plain step, never on a short extrapolation. Measured
(``random_state`` 0 to 5, passes over the data, plain / extrapolated): digits 1773 / 924
(4 / 6 runs converged), iris 248 / 169, wine 199 / 156; the synthetic ``n = 100,000``
benchmark (13 steps, 17 passes) is unchanged. All quantities are global sums or come
from them, so data-parallel ranks take the same branches.
``solver="pgd"`` runs plain projected gradient descent (:func:`attnclust.pgd.pgd`).

Temperature
-----------
On the sphere, ``a_h(x)`` are exactly the E-step responsibilities of an equal-weight
isotropic Gaussian mixture with variance ``1/lambda`` (``||x - mu_h||^2 = ||x||^2 + 1 -
2 <x, mu_h>``), or of a von Mises-Fisher mixture with concentration ``lambda``, so
``lambda`` is one over the noise variance per direction. ``temperature="auto"`` sets

    lambda = 1 / s^2,   s^2 = (1/n) sum_h n_h s_h^2,

where ``s_h^2`` is the within-cluster variance of the rows along the tangent direction
at ``mu_h`` pointing to its nearest head ``mu_g`` (``<x, mu_g - G_hg mu_h> / sqrt(1 -
G_hg^2)``), pooled with the same quantity of cluster ``g`` at ``mu_g``: the spread
across the boundary that the softmax has to resolve. Clusters are the hard labels after
the initialization and hard spherical Lloyd steps to a stable partition (at most
``_LLOYD_STEPS``); the fit then starts from these Lloyd heads, unless ``init`` gives the
heads, which are then kept as the start. For isotropic noise ``sigma`` this is
``1/sigma^2`` (rows as given) or ``(1 + d sigma^2) / sigma^2`` (rows normalized: the
noise left is tangent), wherever the clusters sit on the sphere. An earlier rule used
the variance of the projections on the heads themselves; on rows normalized into a small
cap (wine, iris, breast cancer, whose rows point nearly the same way) those projections
``<x, mu_h> = 1 - ||x - mu_h||^2 / 2`` vary only to second order and that rule gave
``lambda`` 10 to 100 times too large (``2e5`` on wine), with the slow convergence that
comes with it.

Measured (ARI / matched centroid error, max over heads, against the true centroids or the
normalized class means), rows normalized, ``random_state=0``; the sweep refits at
``c * lambda_auto``, ``c`` in ``1/8 .. 8``, from k-means++ without the Lloyd warm start
that ``"auto"`` gets; mixtures: ``K`` unit centroids at least 60 degrees apart, 300 rows
per cluster; unbalanced: weights .6/.25/.1/.05. The previous rule's ``lambda`` in brackets.

====================  ============  ================  ============  ========  =====
data                  lambda auto   ARI / err (auto)  best c: ARI   KMeans    GMM sph
====================  ============  ================  ============  ========  =====
iris                  1.4e3 (1.5e4) 0.922 / 0.006     8: 0.941      0.904     0.868
wine                  2.4e3 (2.5e5) 0.281 / 0.070     8: 0.360      0.347     0.331
digits                154 (355)     0.638 / 0.440     2: 0.641      0.648     0.634
breast cancer         767 (6.2e4)   0.595 / 0.032     8: 0.607      0.595     0.598
K=3 d=10 s=.05/.1     384 / 103     1.000 / .01-.02   all 1.000     1.000     1.000
K=3 d=10 s=.2         38            0.993 / 0.047     all 0.993     0.993     0.993
K=3 d=10 s=.4         17            0.804 / 0.158     1/4: 0.815    0.800     0.803
K=3 d=50 s=.05/.1     431 / 145     1.000 / .02-.04   all 1.000     1.000     1.000
K=3 d=50 s=.2         75            0.997 / 0.085     all 0.997     0.997     0.997
K=3 d=50 s=.4         63            0.681 / 0.496     1: 0.681      0.768     0.764
K=8 d=10 s=.05/.1     412 / 108     1.000 / .01-.02   all 1.000     1.000     1.000
K=8 d=10 s=.2         35            0.985 / 0.042     4: 0.987      0.985     0.986
K=8 d=10 s=.4         17            0.604 / 0.362     8: 0.629      0.558     0.540
K=8 d=50 s=.05/.1     459 / 153     1.000 / .02-.05   all 1.000     1.000     1.000
K=8 d=50 s=.2         71            0.789 / 1.117     1: 0.789      0.991     0.991
K=8 d=50 s=.4         61            0.479 / 0.534     1: 0.479      0.622     0.627
unbalanced K=4 d=10   52            1.000 / 0.026     all 1.000     1.000     1.000
====================  ============  ================  ============  ========  =====

The auto value is within a factor 8 of the best of the sweep everywhere, and the sweep
gains at most 0.08 ARI (wine). Where it loses to KMeans (``d = 50``, ``sigma >= 0.2``
after normalization, i.e. clusters that overlap strongly), no temperature of the sweep
does better: the fit reaches a *lower* risk than the Lloyd partition but a worse one,
a property of the objective (soft values are pulled toward each other), not of ``lambda``.

Initialization
--------------
``init="kmeans++"`` runs scikit-learn's k-means++ seeding on the rows, normalized to
unit norm; above ``100,000`` rows it seeds from ``100,000`` rows drawn without
replacement with the estimator's generator (seeding cost stays bounded, and a
data-parallel fit can assemble exactly the same rows on every rank).

Data-parallel fitting
---------------------
Every statistic the fit needs is a sum over rows: the pass above (loss, ``sum_i w_i
x_i``, ``A^T A``, ``N``), the hard Lloyd sums and the projections' moments of the
``"auto"`` temperature, the column sums of ``"center-scale"``. With each rank holding a
shard of the rows, summing these over ranks (one all-reduce per pass, see
:mod:`attnclust.distributed`) gives every rank the same numbers as one process on all
rows, up to the order of floating-point additions; the safeguard and the stopping rule
then take the same branch on every rank. Single-process fitting is the case "no
reduction" of the same code.

Annealing (``anneal=True``)
---------------------------
The temperature follows ``lambda/8, lambda/4, lambda/2, lambda`` (a few steps at each of
the first three, then until convergence). At small ``lambda`` the attention is diffuse,
heads are pulled together and nearby heads merge; as ``lambda`` grows they split again
along the directions of largest spread, which moves heads out of poor starting
positions (deterministic annealing, started warm from the initialization).

Notation
--------
=============  ====================  =============================================
paper          code                  meaning
=============  ====================  =============================================
``mu_h``       ``cluster_centers_``  unit heads, shape ``(K, d)``
``lambda``     ``temperature_``      inverse temperature
``a_h(x)``     ``predict_proba``     attention of ``x`` on head ``h``
``T_mu(x)``    ``transform``         output of the layer
``R(mu)``      ``-score``            empirical risk
``N_h``        ``counts``            soft proportion of head ``h``
=============  ====================  =============================================
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.utils.validation import check_is_fitted, validate_data

from ._validation import as_generator, check_int, check_nonnegative, check_temperature
from .heads import softmax_heads

__all__ = ["AttentionClustering", "IterationInfo", "FixedPointResult", "auto_temperature",
           "fixed_point_fit"]

_logger = logging.getLogger("attnclust")

_NORMALIZE = ("rows", "center-scale", None)
_PENALTIES = (None, "repulsion", "balance")
_ANNEAL_FACTORS = (1 / 8, 1 / 4, 1 / 2)
_ANNEAL_STEPS = 5          # fixed-point steps at each intermediate temperature
_MAX_HALVINGS = 30
_ANDERSON_DEPTH = 5       # past steps the extrapolation combines (0: plain steps only)
_ANDERSON_REG = 1e-10     # Tikhonov term of its least squares, relative to their scale
_GROW_AFTER = 2           # first-try acceptances before the step is doubled again
_LLOYD_STEPS = 20         # hard spherical Lloyd steps before "auto" (stops when stable)
_INIT_SAMPLE = 100_000     # k-means++ seeds on at most this many rows (drawn with the seed)


class IterationInfo(NamedTuple):
    """What the ``callback`` of :class:`AttentionClustering` receives after each step."""

    iteration: int
    loss: float
    temperature: float
    shift: float


class FixedPointResult(NamedTuple):
    """Result of :func:`fixed_point_fit`."""

    heads: torch.Tensor
    """Fitted unit heads, ``(K, d)``."""
    loss_curve: list[float]
    """Objective after each accepted step (first entry: at the start)."""
    temperature_curve: list[float]
    """Temperature at which each entry of ``loss_curve`` was evaluated."""
    n_iter: int
    converged: bool


# -- one pass over the data -------------------------------------------------------------
class _Pass(NamedTuple):
    loss: torch.Tensor       # 0-dim, objective (risk + rho * penalty)
    grad: torch.Tensor       # (K, d) Euclidean gradient of the objective
    counts: torch.Tensor     # (K,) soft proportions N_h
    value_radial: torch.Tensor  # (K,) <grad_h of the value part, mu_h>


def _risk_pass(X, sq_norms, heads, lam, *, chunk, penalty=None, rho=0.0, reduce=None,
               n_total=None) -> _Pass:
    """Risk, gradient and soft proportions in one pass, all in the K-dim projection space.

    The pass accumulates row sums (loss, ``sum_i w_i x_i``, ``A^T A``, counts) and divides by
    ``n`` at the end. With ``reduce`` (a sum over data-parallel ranks, see
    :mod:`attnclust.distributed`) the sums of the local rows are summed over ranks in one
    flat buffer of ``1 + K d + K^2 + K`` numbers (``+ K^2 d`` for the balance penalty)
    before dividing by ``n_total``, the number of rows of all ranks.
    """
    n = X.shape[0] if n_total is None else n_total
    K = heads.shape[0]
    gram = heads @ heads.T                                   # (K, K)
    loss = X.new_zeros(())
    lin = X.new_zeros(K, X.shape[1])                         # sum_i (a + lam a c)_i x_i
    ata = X.new_zeros(K, K)                                  # A^T A
    vproj = X.new_zeros(K)                                   # sum_i a_ih <x_i, mu_h>
    need_pairs = penalty == "balance" and rho > 0
    pair_x = X.new_zeros(K, K, X.shape[1]) if need_pairs else None
    for start in range(0, n, chunk):
        Xc = X[start:start + chunk]                          # (m, d)
        P = Xc @ heads.T                                     # (m, K)
        A = softmax_heads(lam * P)                           # (m, K)
        AG = A @ gram                                        # (m, K) = <T_i, mu_h>
        AP = A * P
        xt = AP.sum(1)                                       # <x_i, T_i>
        tt = (A * AG).sum(1)                                 # ||T_i||^2
        loss = loss + sq_norms[start:start + chunk].sum() - (2 * xt - tt).sum()
        # W = a + lam a c with c = <r_i, mu_h> - <r_i, T_i> = (P - AG) - (xt - tt),
        # built in place: the hot loop of the solver, whose gradient is explicit (no autograd)
        W = (P - AG).sub_((xt - tt)[:, None]).mul_(lam).add_(1.0).mul_(A)
        lin = lin + W.T @ Xc
        ata = ata + A.T @ A
        vproj = vproj + AP.sum(0)
        if need_pairs:
            pair_x = pair_x + torch.einsum("nh,ng,nd->hgd", A, A, Xc)
    if reduce is not None:
        parts = [loss, lin, ata, vproj] + ([pair_x] if need_pairs else [])
        flat = reduce(torch.cat([t.reshape(-1) for t in parts]))
        pieces = [q.reshape(t.shape)
                  for q, t in zip(torch.split(flat, [t.numel() for t in parts]), parts,
                                  strict=True)]
        loss, lin, ata, vproj = pieces[:4]
        if need_pairs:
            pair_x = pieces[4]
    loss, lin, ata, vproj = loss / n, lin / n, ata / n, vproj / n
    counts = ata.sum(1)                                      # rows of A sum to one
    grad = -2.0 * (lin - ata @ heads)
    value_radial = -2.0 * (vproj - (ata * gram).sum(1))      # <-2 (A^T X - A^T A mu)_h, mu_h>
    if penalty == "repulsion" and rho > 0:
        off = gram - torch.diag(torch.diagonal(gram))
        loss = loss + rho * 0.5 * (off**2).sum()             # sum_{h<h'} <mu_h, mu_h'>^2
        grad = grad + rho * 2.0 * off @ heads
    elif need_pairs:
        w = counts - 1.0 / K                                 # dPen/dN_h / 2
        loss = loss + rho * (w**2).sum()
        # dN_h/dmu_g = lam [delta_hg sum_i a_ih x_i - sum_i a_ih a_ig x_i] / n, and
        # sum_g pair_x[h, g] = sum_i a_ih x_i since the weights of a row sum to one
        pair_x = pair_x / n                                  # (K_h, K_g, d)
        own = pair_x.sum(1)                                  # (K, d)
        grad = grad + 2.0 * rho * lam * (w[:, None] * own - torch.einsum("h,hgd->gd", w, pair_x))
    return _Pass(loss, grad, counts, value_radial)


def _fixed_point_step(heads, p: _Pass, t: float) -> torch.Tensor:
    # the tangent part of the gradient, plus the radial part of the value gradient only
    radial = (p.grad * heads).sum(1) - p.value_radial        # (K,) radial part to drop
    direction = p.grad - radial[:, None] * heads
    step = direction / (2.0 * p.counts.clamp_min(torch.finfo(heads.dtype).tiny))[:, None]
    new = heads - t * step
    norm = torch.linalg.vector_norm(new, dim=1, keepdim=True)
    # a head whose step lands on the origin keeps its position
    return torch.where(norm > 0, new / norm.clamp_min(torch.finfo(heads.dtype).tiny), heads)


def _anderson_candidate(heads, hist_x, hist_f, beta: float):
    """Anderson extrapolation of the fixed-point map, projected back on the spheres.

    ``hist_x[j]`` are past iterates and ``hist_f[j] = S(x_j) - x_j`` their full-step
    residuals (flattened, the last entry is the current iterate). With ``dX``, ``dF`` the
    differences of consecutive entries, ``gamma`` minimizes ``||f - dF gamma||`` (a small
    Tikhonov term keeps it bounded when ``dF`` is nearly rank deficient) and the candidate is
    ``normalize(x + beta f - (dX + beta dF) gamma)``. ``None`` when the history holds one
    entry or the solve is not finite.
    """
    if len(hist_x) < 2:
        return None
    dX = torch.stack([b - a for a, b in zip(hist_x[:-1], hist_x[1:], strict=True)], 1)
    dF = torch.stack([b - a for a, b in zip(hist_f[:-1], hist_f[1:], strict=True)], 1)
    f = hist_f[-1]
    # the (m, m) normal equations in float64 on the CPU: tiny, and the same on every rank
    gram = (dF.T @ dF).to("cpu", torch.float64)
    rhs = (dF.T @ f).to("cpu", torch.float64)
    scale = float(torch.trace(gram)) / gram.shape[0]
    if not scale > 0 or not np.isfinite(scale):
        return None
    gram = gram + _ANDERSON_REG * scale * torch.eye(gram.shape[0], dtype=torch.float64)
    gamma = torch.linalg.solve(gram, rhs).to(heads.device, heads.dtype)
    if not bool(torch.isfinite(gamma).all()):
        return None
    x = (hist_x[-1] + beta * f - (dX + beta * dF) @ gamma).reshape(heads.shape)
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    if not bool((norm > 0).all() and torch.isfinite(norm).all()):
        return None
    return x / norm


def fixed_point_fit(
    X: torch.Tensor,
    heads0: torch.Tensor,
    *,
    temperatures: list[float],
    steps_per_temperature: list[int],
    tol: float = 1e-6,
    chunk_size: int | None = None,
    penalty: str | None = None,
    rho: float = 0.0,
    callback: Callable[[IterationInfo], None] | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> FixedPointResult:
    """Minimize the empirical risk of the K-head layer by safeguarded fixed-point steps.

    ``mu_h <- normalize(mu_h - grad_h f / (2 N_h))`` with step halving whenever the
    objective would increase, each step first trying an Anderson extrapolation that is
    kept only if the objective does not increase (see the module docstring).

    Parameters
    ----------
    X : Tensor of shape (n, d)
        Data, on the device and in the dtype of the computation.
    heads0 : Tensor of shape (K, d)
        Unit initial heads.
    temperatures, steps_per_temperature : lists of the same length
        Annealing schedule: at most ``steps_per_temperature[s]`` steps at
        ``temperatures[s]`` (the last stage also stops when converged).
    tol : float
        Stop when the full step would move no head by more than ``tol`` (Euclidean), or an
        accepted plain step moved none by more.
    chunk_size : int, optional
        Rows per chunk of each pass (memory bound only; the steps are full-batch).
    penalty, rho :
        Regularizer (``None``, ``"repulsion"`` or ``"balance"``) and its weight.
    callback : callable, optional
        Called with an :class:`IterationInfo` after each accepted step.
    reduce : callable, optional
        Data-parallel fitting: ``X`` holds this rank's rows and ``reduce(t)`` returns the
        sum of ``t`` over all ranks (the same tensor on every rank, e.g. an all-reduce).
        Each pass then sums its per-row statistics over ranks, so every quantity that
        decides a branch (the objective of the safeguard, the shift of the heads) is the
        global one and all ranks take the same steps. ``None`` (one process) is the same
        code with no reduction.

    Returns
    -------
    FixedPointResult

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> X = torch.as_tensor(ac.GaussianMixture.antipodal(d=3, sigma=0.1).sample(200, rng=0))
    >>> h0 = torch.tensor([[0.6, 0.8, 0.0], [-0.6, 0.0, 0.8]], dtype=torch.float64)
    >>> res = fixed_point_fit(X, h0, temperatures=[50.0], steps_per_temperature=[100])
    >>> res.converged, bool(res.heads[:, 0].abs().min() > 0.99)
    (True, True)
    """
    n = X.shape[0]
    chunk = max(1, n) if chunk_size is None else max(1, int(chunk_size))
    sq_norms = (X * X).sum(1)                                # (n,)
    n_total = n if reduce is None else int(reduce(torch.tensor([n], dtype=torch.float64,
                                                               device=X.device)).item())
    pass_args = dict(chunk=chunk, penalty=penalty, rho=rho, reduce=reduce, n_total=n_total)
    heads = heads0
    losses: list[float] = []
    temps: list[float] = []
    n_iter, converged = 0, False
    eps = 1e-12 if X.dtype == torch.float64 else 1e-5
    for stage, (lam, n_steps) in enumerate(zip(temperatures, steps_per_temperature,
                                               strict=True)):
        last = stage == len(temperatures) - 1
        cur = _risk_pass(X, sq_norms, heads, lam, **pass_args)
        losses.append(float(cur.loss))
        temps.append(lam)
        t_prev, streak = 1.0, 0
        hist_x: list[torch.Tensor] = []                      # Anderson history, this stage
        hist_f: list[torch.Tensor] = []
        for _ in range(n_steps):
            # start from the last accepted step, doubled (at most to the full step 1) only
            # after _GROW_AFTER steps accepted at first try: a run of damped steps then costs
            # about one pass per step instead of paying for the same halving again and again
            t, accepted = (min(1.0, 2.0 * t_prev) if streak >= _GROW_AFTER else t_prev), False
            residual = _fixed_point_step(heads, cur, 1.0) - heads
            if float(torch.linalg.vector_norm(residual, dim=1).max()) <= tol:
                converged = last
                break
            # Anderson extrapolation, kept only if the objective does not increase
            extrapolated = False
            if _ANDERSON_DEPTH > 0:
                hist_x = [*hist_x, heads.reshape(-1)][-(_ANDERSON_DEPTH + 1):]
                hist_f = [*hist_f, residual.reshape(-1)][-(_ANDERSON_DEPTH + 1):]
                cand = _anderson_candidate(heads, hist_x, hist_f, t)
                if cand is not None:
                    new = _risk_pass(X, sq_norms, cand, lam, **pass_args)
                    extrapolated = accepted = (float(new.loss) <= float(cur.loss)
                                               + eps * abs(float(cur.loss)))
                    if not accepted:                         # restart from this iterate
                        hist_x, hist_f = hist_x[-1:], hist_f[-1:]
            t_first = t
            for _ in range(0 if extrapolated else _MAX_HALVINGS):
                cand = _fixed_point_step(heads, cur, t)
                new = _risk_pass(X, sq_norms, cand, lam, **pass_args)
                if float(new.loss) <= float(cur.loss) + eps * abs(float(cur.loss)):
                    accepted = True
                    break
                t *= 0.5
            if not extrapolated:
                streak = 0 if not accepted or t < t_first or t >= 1.0 else streak + 1
            n_iter += 1
            if not accepted:                                 # no descent left: stationary
                converged = last
                break
            shift = float(torch.linalg.vector_norm(cand - heads, dim=1).max())
            heads, cur, t_prev = cand, new, (t_prev if extrapolated else t)
            losses.append(float(cur.loss))
            temps.append(lam)
            if callback is not None:
                callback(IterationInfo(n_iter, losses[-1], lam, shift))
            _logger.debug("iter %d  lambda %.4g  loss %.8g  shift %.2e", n_iter, lam,
                          losses[-1], shift)
            if shift <= tol and not extrapolated:  # a short extrapolation proves nothing
                converged = last
                break
    return FixedPointResult(heads, losses, temps, n_iter, converged)


# -- helpers of the estimator ------------------------------------------------------------
def _torch_dtype(dtype) -> torch.dtype:
    name = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", str(dtype))
    name = str(np.dtype(name)) if not isinstance(dtype, torch.dtype) else str(dtype)
    name = name.removeprefix("torch.")
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    return getattr(torch, name)


class _DataParallel(NamedTuple):
    """How a data-parallel fit sees the other ranks (built by :mod:`attnclust.distributed`).

    The local rows are rows ``offset .. offset + n_local - 1`` of the concatenation of all
    ranks' rows in rank order.
    """

    reduce: Callable[[torch.Tensor], torch.Tensor]     # sum over ranks, same on every rank
    broadcast: Callable[[torch.Tensor], torch.Tensor]  # rank 0's tensor on every rank
    offset: int                                        # global index of the first local row
    n_total: int                                       # rows of all ranks


def _sum(t: torch.Tensor, reduce) -> torch.Tensor:
    return t if reduce is None else reduce(t)


def _sum_array(a: np.ndarray, dp: _DataParallel) -> np.ndarray:
    """Sum of a NumPy array over the ranks of a data-parallel fit."""
    return dp.reduce(torch.from_numpy(np.array(a, dtype=np.float64))).cpu().numpy()


def _check_device(device) -> None:
    """``ValueError`` naming ``device`` unless torch can allocate on it here."""
    try:
        torch.empty(0, device=torch.device(device))
    except (RuntimeError, AssertionError, TypeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a usable torch device here "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                         ) from exc


def _normalize_rows(X: np.ndarray) -> np.ndarray:
    """Rows divided by their norm; an all-zero row is an error naming it.

    Rows are first divided by their largest absolute entry, so that no square overflows
    (entries ~1e200) or underflows (~1e-200): the result is a unit vector for every
    non-zero finite row.
    """
    big = np.abs(X).max(axis=1, initial=0.0)                 # (n,)
    zero = np.flatnonzero(big == 0)
    if zero.size:
        raise ValueError(f"row {zero[0]} (0-based) of X is all zeros and has no direction; "
                         "normalize='rows' needs non-zero rows")
    Y = X / big[:, None]                                     # entries in [-1, 1], one is +-1
    return Y / np.linalg.norm(Y, axis=1)[:, None]


def _squared_norms(X: np.ndarray, how: str) -> np.ndarray:
    """Squared row norms ``(n,)``; ``ValueError`` when one overflows float64."""
    with np.errstate(over="ignore"):
        sq = np.einsum("ij,ij->i", X, X)                     # (n,)
    bad = np.flatnonzero(~np.isfinite(sq))
    if bad.size:
        raise ValueError(f"{how}: the squared norm of row {bad[0]} (0-based) of X overflows "
                         f"float64 (largest entry {np.abs(X[bad[0]]).max():.3g}); rescale the "
                         "data or use normalize='rows'")
    return sq


def _hard_lloyd(X, heads, n_steps: int, *, reduce=None):
    """Hard spherical Lloyd steps, at most ``n_steps``, stopping early once no label changes.

    Returns the heads and the labels of the last assignment.
    """
    labels = (X @ heads.T).argmax(1)
    for _ in range(n_steps):
        sums = _sum(torch.zeros_like(heads).index_add_(0, labels, X), reduce)
        norm = torch.linalg.vector_norm(sums, dim=1, keepdim=True)
        heads = torch.where(norm > 0, sums / norm.clamp_min(torch.finfo(X.dtype).tiny), heads)
        new = (X @ heads.T).argmax(1)
        changed = _sum((new != labels).sum().to(X.dtype).reshape(1), reduce)
        labels = new
        if float(changed[0]) == 0:
            break
    return heads, labels


def auto_temperature(X: torch.Tensor, heads: torch.Tensor, *, reduce=None) -> float:
    """``1 / s^2`` with ``s^2`` the within-cluster variance across each head's nearest boundary.

    Clusters are the hard assignments ``z_i = argmax_h <x_i, mu_h>``. For cluster ``h``
    with nearest other head ``g = argmax_{g != h} <mu_h, mu_g>`` and ``G_hg = <mu_h,
    mu_g>``, ``s_h^2`` is the variance of ``<x, u_hg>`` along the unit tangent at ``mu_h``
    pointing to ``mu_g``, ``u_hg = (mu_g - G_hg mu_h) / sqrt(1 - G_hg^2)``, within cluster
    ``h``, pooled (weighted by cluster size) with the same variance of cluster ``g`` along
    ``u_gh``; ``s^2`` is the mean of ``s_h^2`` weighted by cluster size. Only the
    projections ``P = X mu^T`` are needed: the variance along ``u_hg`` follows from each
    cluster's ``K x K`` covariance of ``P``. ``s^2`` is floored at ``1e-6`` times the mean
    squared norm of the rows (so ``lambda`` stays finite on duplicated points); with one
    head (the attention is then constant) it is the within-cluster variance of ``P``.
    With ``reduce`` (a sum over data-parallel ranks), ``X`` holds one rank's rows and every
    statistic is summed over ranks first.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=20, k=2, sigma=0.1)
    >>> X = torch.as_tensor(mix.sample(20_000, rng=0))
    >>> round(auto_temperature(X, torch.as_tensor(mix.centroids)), -1)
    100.0
    """
    P = X @ heads.T                                          # (n, K)
    labels = P.argmax(1)
    K = heads.shape[0]
    counts = torch.bincount(labels, minlength=K).to(X.dtype)
    sums = torch.zeros(K, K, dtype=X.dtype, device=X.device).index_add_(0, labels, P)
    outer = torch.zeros(K, K, K, dtype=X.dtype, device=X.device).index_add_(
        0, labels, P[:, :, None] * P[:, None, :])            # (K, K, K): sum_{i in h} P_i P_i^T
    extra = torch.stack([(X * X).sum(), X.new_tensor(float(X.shape[0]))])
    stats = _sum(torch.cat([counts, sums.reshape(-1), outer.reshape(-1), extra]), reduce)
    counts, sums = stats[:K], stats[K:K + K * K].reshape(K, K)
    outer = stats[K + K * K:K + K * K + K**3].reshape(K, K, K)
    sq_norm, n = float(stats[-2]), float(stats[-1])
    means = sums / counts.clamp_min(1)[:, None]              # (K, K) mean projection
    cov = outer / counts.clamp_min(1)[:, None, None] - means[:, :, None] * means[:, None, :]
    if K == 1:
        s2 = float(cov[0, 0, 0] * counts[0]) / n
    else:
        gram = heads @ heads.T
        near = (gram - 3.0 * torch.eye(K, dtype=X.dtype, device=X.device)).argmax(1)  # (K,)
        h = torch.arange(K, device=X.device)
        g2 = gram[h, near]                                   # (K,) G_hg
        c = near

        # variance within cluster a of <x, mu_b - G mu_a>: e^T cov_a e, e = e_b - G e_a,
        # the projection on the tangent at mu_a pointing to mu_b (norm sqrt(1 - G^2))
        def var_tangent(a, b):
            return cov[a, b, b] - 2 * g2 * cov[a, a, b] + g2**2 * cov[a, a, a]
        pooled = (counts * var_tangent(h, c) + counts[c] * var_tangent(c, h)) \
            / (counts + counts[c]).clamp_min(1)
        tang2 = (1.0 - g2**2).clamp_min(torch.finfo(X.dtype).tiny)
        s2 = float((counts * pooled.clamp_min(0) / tang2).sum()) / n
    floor = 1e-6 * sq_norm / n
    return 1.0 / max(s2, floor, torch.finfo(X.dtype).tiny)


class AttentionClustering(ClusterMixin, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Clustering by a trained K-head attention layer with unit heads.

    Fits the heads ``mu_h`` of ``T_mu(x) = sum_h softmax_h(lambda <x, mu_h>) mu_h`` by
    minimizing the empirical risk ``mean ||x - T_mu(x)||^2`` on the sphere (see the
    module docstring for the solver, the ``"auto"`` temperature and annealing).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of heads ``K``.
    temperature : float or "auto", default="auto"
        Inverse temperature ``lambda``; ``"auto"`` is ``1 / s^2`` with ``s^2`` the
        within-cluster variance across each head's nearest boundary (tangent direction to
        the nearest head), after hard spherical Lloyd steps from the initialization.
    init : {"kmeans++", "sphere"} or array of shape (n_clusters, n_features)
        Initial heads: k-means++ seeding (scikit-learn's; on a seeded sample of 100,000
        rows when there are more) normalized to unit norm, uniform random unit vectors,
        or given heads (normalized). With ``temperature="auto"`` a seeding
        (``"kmeans++"``, ``"sphere"``) is replaced by the hard Lloyd heads that estimate
        ``lambda`` (a warm start); given heads are only used to estimate ``lambda`` that
        way and the fit starts from them as given.
    normalize : {"rows", "center-scale"} or None, default="rows"
        Preprocessing, applied in ``fit`` and to every later input: ``"rows"`` projects
        each row on the unit sphere (an all-zero row is an error); ``"center-scale"``
        subtracts the column means and divides by the root-mean-square row norm, both
        learned in ``fit`` (``mean_``, ``scale_``); ``None`` uses the rows as given and
        warns when their mean squared norm is outside ``[1/4, 4]`` (the heads have unit
        norm and cannot then follow the data's scale).
    penalty : {None, "repulsion", "balance"}, default=None
        Regularizer added with weight ``rho``: ``sum_{h<h'} <mu_h, mu_h'>^2``, or
        ``sum_h (N_h - 1/K)^2`` with ``N_h`` the mean attention of head ``h``.
    rho : float, default=0.0
    anneal : bool, default=True
        Start at ``lambda/8`` and double the temperature up to ``lambda``.
    solver : {"fixed-point", "pgd"}, default="fixed-point"
        Safeguarded fixed-point steps (fast) or plain projected gradient descent.
    max_iter : int, default=300
        Steps at the final temperature.
    tol : float, default=1e-6
        Stop when no head moves by more than ``tol`` in one step.
    batch_size : int, optional
        Rows per chunk of each pass (memory only: steps stay full-batch); for
        ``solver="pgd"``, the mini-batch size of stochastic steps.
    step_size : float, default=0.5
        Step of ``solver="pgd"`` (ignored by the fixed-point solver).
    device : str, default="cpu"
        Torch device of the computation; fitted attributes are NumPy arrays.
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, Generator or None
        Seeds the initialization.
    verbose : int, default=0
        ``> 0`` logs each step on the ``"attnclust"`` logger (level INFO).
    callback : callable, optional
        Called with an :class:`IterationInfo` after each fixed-point step (progress bars).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Unit-norm heads, in the preprocessed space.
    labels_ : ndarray of shape (n_samples,)
        ``argmax_h a_h(x)`` of the training rows.
    temperature_ : float
        The temperature used (the resolved value of ``"auto"``).
    n_iter_ : int
        Steps taken, all temperatures together.
    loss_curve_ : ndarray
        Objective after each accepted step, at the temperature in ``temperature_curve_``
        (non-increasing while the temperature is constant).
    temperature_curve_ : ndarray
    converged_ : bool
    n_features_in_ : int
    mean_, scale_ : preprocessing of ``normalize="center-scale"`` (None otherwise)

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.1)
    >>> X, z = mix.sample(600, rng=0, return_labels=True)
    >>> est = ac.AttentionClustering(n_clusters=3, normalize=None, random_state=0).fit(X)
    >>> ac.adjusted_rand_index(z, est.labels_)
    1.0
    >>> ac.centroid_distance(est.cluster_centers_, mix.centroids).max < 0.05
    True
    """

    def __init__(self, n_clusters=8, *, temperature="auto", init="kmeans++", normalize="rows",
                 penalty=None, rho=0.0, anneal=True, solver="fixed-point", max_iter=300,
                 tol=1e-6, batch_size=None, step_size=0.5, device="cpu", dtype="float64",
                 random_state=None, verbose=0, callback=None):
        self.n_clusters = n_clusters
        self.temperature = temperature
        self.init = init
        self.normalize = normalize
        self.penalty = penalty
        self.rho = rho
        self.anneal = anneal
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.step_size = step_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback

    # -- input handling -------------------------------------------------------------------
    def _check_params(self, n_samples: int) -> None:
        check_int(self.n_clusters, "n_clusters", 1)
        if n_samples < self.n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        if self.normalize not in _NORMALIZE:
            raise ValueError(f"normalize must be 'rows', 'center-scale' or None, got "
                             f"{self.normalize!r}")
        if self.penalty not in _PENALTIES:
            raise ValueError(f"penalty must be None, 'repulsion' or 'balance', got "
                             f"{self.penalty!r}")
        check_nonnegative(self.rho, "rho")
        if self.solver not in ("fixed-point", "pgd"):
            raise ValueError(f"solver must be 'fixed-point' or 'pgd', got {self.solver!r}")
        check_int(self.max_iter, "max_iter", 1)
        check_nonnegative(self.tol, "tol")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1)
        if self.solver == "pgd":
            check_nonnegative(self.step_size, "step_size")
        _check_device(self.device)
        if not (self.temperature == "auto" if isinstance(self.temperature, str) else True):
            raise ValueError(f"temperature must be a positive number or 'auto', got "
                             f"{self.temperature!r}")
        if not isinstance(self.temperature, str):
            check_temperature(self.temperature)

    def _preprocess(self, X: np.ndarray, *, fitting: bool, dp=None) -> np.ndarray:
        """Apply ``normalize`` to validated rows (float64 NumPy); ``dp``: data-parallel fit."""
        if self.normalize == "rows":
            return _normalize_rows(X)
        if self.normalize == "center-scale":
            if fitting:
                # mean, then RMS norm of the centred rows computed on rows divided by their
                # largest entry (so that no square overflows), summed over ranks with dp
                with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                    total = X.sum(0) if dp is None else _sum_array(X.sum(0), dp)
                    n = X.shape[0] if dp is None else dp.n_total
                    self.mean_ = total / n
                    big = float(np.abs(X - self.mean_).max(initial=0.0))
                if dp is not None:  # a unit common to all ranks, between max and R * max
                    big = float(_sum_array(np.array([big]), dp)[0])
                if not np.isfinite(big):
                    raise ValueError("normalize='center-scale': the column sums or X - mean "
                                     "overflow float64 (entries near 1e308); rescale the data")
                unit = big if big > 0 else 1.0
                dev = np.sum(((X - self.mean_) / unit) ** 2)
                dev = float(dev if dp is None else _sum_array(dev, dp))
                scale = unit * float(np.sqrt(dev / n))
                self.scale_ = scale if scale > 0 else 1.0
            return (X - self.mean_) / self.scale_
        sq = _squared_norms(X, "normalize=None")
        if fitting:
            msq = (float(np.mean(sq)) if dp is None else
                   float(_sum_array(np.sum(sq), dp)) / dp.n_total)
            if not 0.25 <= msq <= 4.0:
                warnings.warn(
                    f"normalize=None but the rows' mean squared norm is {msq:.3g}, far from 1: "
                    "the heads have unit norm; pass normalize='rows' or 'center-scale' to "
                    "bring the data to the sphere's scale", UserWarning, stacklevel=3)
        return X

    def _tensor(self, X: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(X), dtype=_torch_dtype(self.dtype),
                               device=self.device)

    def _init_rows(self, Xn: np.ndarray, gen, dp) -> np.ndarray:
        """Rows the k-means++ seeding sees: all rows, or ``_INIT_SAMPLE`` of them.

        The sample is drawn with the estimator's generator from the global row indices,
        so a data-parallel fit (where each rank fills in the sampled rows it holds and a
        sum over ranks assembles them) seeds from exactly the rows one process would.
        """
        n = Xn.shape[0] if dp is None else dp.n_total
        idx = None if n <= _INIT_SAMPLE else np.sort(gen.choice(n, _INIT_SAMPLE, replace=False))
        if dp is None:
            return Xn if idx is None else Xn[idx]
        idx = np.arange(n) if idx is None else idx
        mine = (idx >= dp.offset) & (idx < dp.offset + Xn.shape[0])
        rows = np.zeros((idx.size, Xn.shape[1]))                 # (m, d), zero where not ours
        rows[mine] = Xn[idx[mine] - dp.offset]
        return _sum_array(rows, dp)                              # x + 0 = x exactly

    def _initial_heads(self, Xt: torch.Tensor, Xn: np.ndarray, gen, dp=None) -> torch.Tensor:
        K, d = self.n_clusters, Xn.shape[1]
        if isinstance(self.init, str):
            if self.init == "kmeans++":
                seed = int(gen.integers(2**31 - 1))
                centers, _ = kmeans_plusplus(self._init_rows(Xn, gen, dp), K, random_state=seed)
            elif self.init == "sphere":
                centers = gen.standard_normal((K, d))
            else:
                raise ValueError(f"init must be 'kmeans++', 'sphere' or an array, got "
                                 f"{self.init!r}")
        else:
            centers = np.array(self.init, dtype=np.float64)
            if centers.shape != (K, d):
                raise ValueError(f"init array must have shape (n_clusters, n_features) = "
                                 f"{(K, d)}, got {centers.shape}")
            if not np.all(np.isfinite(centers)):
                raise ValueError("init array contains NaN or inf")
        norms = np.linalg.norm(centers, axis=1)
        bad = norms == 0
        if bad.any():  # a center at the origin has no direction: draw one at random
            centers[bad] = gen.standard_normal((int(bad.sum()), d))
            norms = np.linalg.norm(centers, axis=1)
        heads = self._tensor(centers / norms[:, None])
        # every rank computed the same heads; rank 0's copy makes sure they agree bitwise
        return heads if dp is None else dp.broadcast(heads)

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit the heads to ``X`` (n_samples, n_features); ``y`` is ignored."""
        return self._fit(X)

    def _fit(self, X, dp: _DataParallel | None = None):
        """``fit``; with ``dp``, ``X`` is this rank's shard of a data-parallel fit."""
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=1)
        self._check_params(X.shape[0] if dp is None else dp.n_total)
        if dp is not None and self.solver != "fixed-point":
            raise ValueError(f"data-parallel fitting needs solver='fixed-point', got "
                             f"{self.solver!r}")
        reduce = None if dp is None else dp.reduce
        self.mean_, self.scale_ = None, None
        Xn = self._preprocess(X, fitting=True, dp=dp)
        gen = as_generator(self.random_state)
        Xt = self._tensor(Xn)
        heads0 = self._initial_heads(Xt, Xn, gen, dp)
        if isinstance(self.temperature, str):  # "auto", checked above
            lloyd, _ = _hard_lloyd(Xt, heads0, _LLOYD_STEPS, reduce=reduce)
            lam = auto_temperature(Xt, lloyd, reduce=reduce)
            if isinstance(self.init, str):  # a seeding is warm-started; given heads are kept
                heads0 = lloyd
        else:
            lam = check_temperature(self.temperature)
        temps = [lam * f for f in _ANNEAL_FACTORS] + [lam] if self.anneal else [lam]
        steps = [_ANNEAL_STEPS] * (len(temps) - 1) + [int(self.max_iter)]
        if self.solver == "fixed-point":
            res = fixed_point_fit(Xt, heads0, temperatures=temps, steps_per_temperature=steps,
                                  tol=float(self.tol), chunk_size=self.batch_size,
                                  penalty=self.penalty, rho=float(self.rho),
                                  callback=self._callback_fn(), reduce=reduce)
            heads, losses, temp_curve = res.heads, res.loss_curve, res.temperature_curve
            n_iter, converged = res.n_iter, res.converged
        else:
            heads, losses, temp_curve, n_iter, converged = self._fit_pgd(Xt, heads0, temps,
                                                                         steps, gen)
        self.cluster_centers_ = heads.detach().cpu().numpy().astype(np.float64)
        self.temperature_ = float(lam)
        self.loss_curve_ = np.asarray(losses, dtype=np.float64)
        self.temperature_curve_ = np.asarray(temp_curve, dtype=np.float64)
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        if not converged:
            warnings.warn(f"AttentionClustering did not converge in max_iter={self.max_iter} "
                          "steps; increase max_iter or tol", UserWarning, stacklevel=2)
        self.labels_ = self._weights(Xn).argmax(1).cpu().numpy().astype(np.int64)
        return self

    def _callback_fn(self):
        if self.callback is None and not self.verbose:
            return None

        def call(info: IterationInfo) -> None:
            if self.verbose:
                _logger.info("iter %d  lambda %.4g  loss %.8g  shift %.2e", *info)
            if self.callback is not None:
                self.callback(info)
        return call

    def _fit_pgd(self, Xt, heads0, temps, steps, gen):
        """Plain PGD (:func:`attnclust.pgd.pgd`, float64 on the data's device)."""
        from .pgd import pgd

        # one temperature per step: the annealing stages, then the target
        schedule = [t for t, s in zip(temps[:-1], steps[:-1], strict=True) for _ in range(s)]
        n_anneal = len(schedule)
        schedule += [temps[-1]] * int(self.max_iter)
        user = self._callback_fn()

        def reporter(offset: int, temperature_of):
            # pgd calls back with the number of updates of that call, ``step``, after the
            # update made at temperature ``temperature_of(step - 1)``
            if user is None:
                return None

            def on_step(step: int, heads: torch.Tensor) -> None:
                user(IterationInfo(offset + step, float("nan"), temperature_of(step - 1),
                                   float("nan")))
            return on_step

        common = dict(step_size=float(self.step_size), penalty=self.penalty,
                      rho=float(self.rho), record_every=1, batch_size=self.batch_size, rng=gen)
        losses: list[float] = []
        temp_curve: list[float] = []
        n_iter = 0
        if n_anneal:  # the annealing stages, without stopping rule
            def anneal_at(t: int) -> float:
                return schedule[min(t, n_anneal - 1)]
            res = pgd(Xt, heads0, temperature=temps[-1], n_steps=n_anneal, tol=0.0,
                      temperature_schedule=anneal_at, callback=reporter(0, anneal_at), **common)
            # record t is the heads before update t, at its temperature; the last record
            # (after the last update) is the first record of the final phase, at lambda
            losses += [float(v) for v in res.history.risk[:-1]]
            temp_curve += [float(v) for v in res.history.temperature[:-1]]
            heads0, n_iter = res.heads, res.n_iter
        res = pgd(Xt, heads0, temperature=temps[-1], n_steps=int(self.max_iter),
                  tol=float(self.tol), callback=reporter(n_iter, lambda t: temps[-1]), **common)
        losses += [float(v) for v in res.history.risk]
        temp_curve += [float(v) for v in res.history.temperature]
        n_iter += res.n_iter
        heads = torch.as_tensor(res.heads, dtype=Xt.dtype, device=Xt.device)
        return heads, losses, temp_curve, int(n_iter), bool(res.converged)

    # -- prediction -------------------------------------------------------------------------
    def _validated(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self._preprocess(X, fitting=False)

    def _weights(self, Xn: np.ndarray) -> torch.Tensor:
        heads = self._tensor(self.cluster_centers_)
        return softmax_heads(self.temperature_ * (self._tensor(Xn) @ heads.T))

    def predict_proba(self, X) -> np.ndarray:
        """Attention weights ``a_h(x)``, shape (n_samples, n_clusters), rows sum to one."""
        return self._weights(self._validated(X)).cpu().numpy()

    def predict(self, X) -> np.ndarray:
        """Index of the most-attended head, ``argmax_h a_h(x)``."""
        return self._weights(self._validated(X)).argmax(1).cpu().numpy().astype(np.int64)

    def fit_predict(self, X, y=None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def _outputs(self, Xn: np.ndarray) -> np.ndarray:
        """``T_mu(x)`` of preprocessed rows, ``(n, d)``: what ``transform`` and ``score`` use."""
        return (self._weights(Xn) @ self._tensor(self.cluster_centers_)).cpu().numpy()

    def transform(self, X) -> np.ndarray:
        """Layer outputs ``T_mu(x)`` of the preprocessed rows, shape (n_samples, n_features)."""
        return self._outputs(self._validated(X))

    def score(self, X, y=None) -> float:
        """Minus the empirical risk, ``-mean ||x - T_mu(x)||^2`` (higher is better)."""
        Xn = self._validated(X)
        return -float(np.mean(np.sum((Xn - self._outputs(Xn)) ** 2, axis=1)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

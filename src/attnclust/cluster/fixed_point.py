"""The default solver of ``AttentionClustering``: safeguarded fixed-point steps.

The model is the K-head layer of :mod:`attnclust.layer.heads`, ``a_h(x) = softmax_h(lambda
<x, mu_h> - b_h)``, ``T_mu(x) = sum_h a_h(x) mu_h``, fitted by minimizing the empirical
risk ``f(mu) = (1/n) sum_i ||x_i - T_mu(x_i)||^2`` (plus ``rho * Pen(mu)``): over the
product of spheres for unit heads (``b_h = 0``), over ``R^{K x d}`` for Euclidean heads
(``b_h = lambda ||mu_h||^2 / 2``; see the end of this docstring).

Step
----
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
decreases the risk. The risk is thus non-increasing along the loss curve at a fixed
inverse_temperature, and a fixed point satisfies ``grad_h f = (scalar) mu_h``: its Riemannian
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
directions of the Hessian, so the safeguard settles on a short step, successive steps
point in nearly opposite directions and the heads creep along the flat directions. Each
step therefore first tries an *Anderson extrapolation* of the full-step map ``S(mu) =
normalize(mu - D grad)`` (``D`` the per-head step above): with the last ``m <=
_ANDERSON_DEPTH`` iterates ``x_j`` and residuals ``f_j = S(x_j) - x_j`` at this
inverse_temperature, ``gamma`` minimizes ``||f - dF gamma||`` over the differences of consecutive
residuals and the candidate is ``normalize(x + t f - (dX + t dF) gamma)``. It costs one
pass and is kept only if the objective does not increase (the acceptance test of the
plain step); otherwise the history restarts from the current iterate and the plain,
halved step is taken from it. So the objective stays non-increasing at a fixed
inverse_temperature, and the stopping test is on the *full* step ``S(mu) - mu`` (zero exactly at
a fixed point) or on an accepted plain step, never on a short extrapolation. All
quantities are global sums or come from them, so data-parallel ranks take the same
branches. How many passes the extrapolation saves (``benchmarks/bench_solver.py``) and
the measurements that motivated it are in ``docs/solver.md``.

Sample weights
--------------
With weights ``w_i >= 0`` the risk is ``f(mu) = sum_i w_i ||x_i - T_mu(x_i)||^2 / sum_i
w_i``: every row sum of a pass is weighted (``sum_i w_i (...)``) and ``n`` becomes the
total weight, so integer weights give the steps of repeated rows and zero weights those
of absent rows; ``N_h`` is then the weighted soft proportion.

Euclidean heads
---------------
The key bias adds ``-lambda mu_h`` to the derivative of each logit of head ``h``, hence
``+(2/n) lambda (sum_i a_ih c_ih) mu_h`` to ``grad_h f``; since ``lambda a c = W - a``
with ``W = a + lambda a c``, this costs one more ``K``-vector per pass, the column sums
of ``W``. The step is the same per-head step without normalization, ``mu_h <- mu_h -
t grad_h f / (2 N_h)``: with hard attention (``c = 0`` for the winning head, ``a = 0``
elsewhere) it is exactly the k-means (Lloyd) step ``mu_h <- mean of the cell``, and the
same safeguard and extrapolation apply (unnormalized). A head without any attention
(``N_h = 0``) keeps its position.

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``mu_h``       ``heads``       heads, shape ``(K, d)`` (unit on the sphere)
``lambda``     ``lam``         inverse temperature
``a_h(x)``     ``A[i, h]``     attention of row ``i`` on head ``h``
``N_h``        ``counts``      soft proportion of head ``h``
=============  ==============  =============================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from .._deprecation import REMOVED_IN, warn_deprecated
from .._threads import add_chunks
from ..layer.geometry import Geometry, Sphere, as_geometry
from ..layer.heads import softmax_heads
from ..layer.results import History, IterationInfo, SolverResult
from ..layer.schedules import Schedule, as_schedule

__all__ = ["fixed_point_fit", "forget_heads", "pass_sums", "step_from_sums"]

_logger = logging.getLogger("attnclust")

_MAX_HALVINGS = 30
_ANDERSON_DEPTH = 5       # past steps the extrapolation combines (0: plain steps only)
_ANDERSON_REG = 1e-10     # Tikhonov term of its least squares, relative to their scale
_GROW_AFTER = 2           # first-try acceptances before the step is doubled again
_SPHERE = Sphere()        # the default geometry of the private helpers (the paper's layer)


# -- one pass over the data -------------------------------------------------------------
class _Pass(NamedTuple):
    loss: torch.Tensor       # 0-dim, objective (risk + rho * penalty)
    risk: torch.Tensor       # 0-dim, the risk alone
    grad: torch.Tensor       # (K, d) Euclidean gradient of the objective
    counts: torch.Tensor     # (K,) soft proportions N_h
    value_radial: torch.Tensor  # (K,) <grad_h of the value part, mu_h>


def _chunk_reader(X, row_map):
    """``(start, stop) -> rows start:stop of the fit`` (through ``row_map`` when given)."""
    if row_map is None:
        return lambda start, stop: X[start:stop]
    return lambda start, stop: row_map(X[start:stop])


def _chunk_sums(Xc, sq_norms, heads, gram, lam, bias, need_pairs, w=None,
                need_values=False) -> torch.Tensor:
    """The row sums of one chunk ``Xc`` (m, d), flat: loss, ``W^T X``, ``A^T A``, ``sum_i a_ih
    P_ih``, ``sum_i W_ih`` (and ``sum_i a_ih a_ig x_i`` for the balance penalty, ``A^T X``
    with ``need_values``); each row's terms times its weight ``w_i`` when ``w`` (m,) is
    given."""
    P = Xc @ heads.T                                         # (m, K)
    A = softmax_heads(lam * P if bias is None else lam * P - bias)   # (m, K)
    AG = A @ gram                                            # (m, K) = <T_i, mu_h>
    AP = A * P
    xt = AP.sum(1)                                           # <x_i, T_i>
    tt = (A * AG).sum(1)                                     # ||T_i||^2
    # W = a + lam a c with c = <r_i, mu_h> - <r_i, T_i> = (P - AG) - (xt - tt),
    # built in place: the hot loop of the solver, whose gradient is explicit (no autograd)
    W = (P - AG).sub_((xt - tt)[:, None]).mul_(lam).add_(1.0).mul_(A)
    wA = A
    if w is None:
        loss = sq_norms.sum() - (2 * xt - tt).sum()
    else:                                                    # weigh each row's terms
        loss = (w * (sq_norms - (2 * xt - tt))).sum()
        W, AP, wA = W.mul_(w[:, None]), AP * w[:, None], A * w[:, None]
    parts = [loss.reshape(1), (W.T @ Xc).reshape(-1), (wA.T @ A).reshape(-1), AP.sum(0),
             W.sum(0)]
    if need_pairs:
        parts.append(torch.einsum("nh,ng,nd->hgd", wA, A, Xc).reshape(-1))
    if need_values:
        parts.append((wA.T @ Xc).reshape(-1))
    return torch.cat(parts)


def _risk_pass(X, sq_norms, heads, lam, *, chunk, geometry: Geometry = _SPHERE, penalty=None,
               rho=0.0, reduce=None, n_total=None, workers=1, row_map=None,
               weights=None) -> _Pass:
    """Risk, gradient and soft proportions in one pass, all in the K-dim projection space.

    The pass accumulates row sums (loss, ``sum_i w_i x_i``, ``A^T A``, counts) over chunks
    of ``chunk`` rows, on up to ``workers`` threads (:func:`attnclust._threads.add_chunks`:
    summed in chunk order), and divides by ``n`` at the end. With ``reduce`` (a sum over
    data-parallel ranks, see :mod:`attnclust.cluster.distributed`) the sums of the local rows are
    summed over ranks in one flat buffer of ``1 + K d + K^2 + 2 K`` numbers (``+ K^2 d``
    for the balance penalty) before dividing by ``n_total``, the number of rows of all
    ranks. ``row_map``, if given, maps each chunk of ``X`` to the rows of the fit (e.g. a
    centring applied on the fly, so that the rows are never copied whole). With
    ``weights`` (n,) the sums are weighted and ``n_total`` is the total weight.
    """
    n = X.shape[0] if n_total is None else n_total
    K, d = heads.shape
    gram = heads @ heads.T                                   # (K, K)
    bias = geometry.key_bias(heads, lam, sq_norms=torch.diagonal(gram))   # (K,) or None
    need_pairs = penalty == "balance" and rho > 0
    sizes = [1, K * d, K * K, K, K] + ([K * K * d] if need_pairs else [])
    rows = _chunk_reader(X, row_map)

    def sums(s):
        w = None if weights is None else weights[s:s + chunk]
        return _chunk_sums(rows(s, s + chunk), sq_norms[s:s + chunk], heads, gram, lam, bias,
                           need_pairs, w)
    flat = add_chunks(heads.new_zeros(sum(sizes)), sums, X.shape[0], chunk, workers)
    if reduce is not None:
        flat = reduce(flat)
    return _decode(flat, heads, gram, lam, n, geometry=geometry, penalty=penalty, rho=rho,
                   bias=bias is not None)


def _decode(flat, heads, gram, lam, n, *, geometry, penalty=None, rho=0.0, bias=False
            ) -> _Pass:
    """The objective, gradient and soft proportions from the flat row sums of a pass over
    rows of total weight ``n`` (see :func:`_risk_pass`; ``bias``: the geometry has a key
    bias)."""
    K, d = heads.shape
    need_pairs = penalty == "balance" and rho > 0
    sizes = [1, K * d, K * K, K, K] + ([K * K * d] if need_pairs else [])
    pieces = torch.split(flat, sizes)
    loss, lin, ata = pieces[0][0], pieces[1].reshape(K, d), pieces[2].reshape(K, K)
    vproj, wsum = pieces[3], pieces[4]
    pair_x = pieces[5].reshape(K, K, d) if need_pairs else None
    loss, lin, ata, vproj, wsum = loss / n, lin / n, ata / n, vproj / n, wsum / n
    counts = ata.sum(1)                                      # rows of A sum to one
    grad = -2.0 * (lin - ata @ heads)
    if bias:
        # the key bias adds d(-lam ||mu_h||^2 / 2)/d mu_h = -lam mu_h to each logit's
        # gradient: + 2 lam sum_i a_ih c_ih mu_h / n, and lam a c = W - a
        grad = grad + 2.0 * (wsum - counts)[:, None] * heads
    value_radial = -2.0 * (vproj - (ata * gram).sum(1))      # <-2 (A^T X - A^T A mu)_h, mu_h>
    risk = loss
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
    return _Pass(loss, risk, grad, counts, value_radial)


def pass_sums(X: torch.Tensor, heads: torch.Tensor, inverse_temperature: float, *,
              geometry: str | Geometry = "sphere", weights: torch.Tensor | None = None,
              chunk: int = 16_384) -> torch.Tensor:
    """The row sums one pass of the solver accumulates over the rows of ``X``, flat.

    ``1 + 2 K d + K^2 + 2 K`` numbers: the summed squared error ``sum_i w_i ||x_i -
    T(x_i)||^2``, ``W^T X``, ``A^T A``, ``sum_i a_ih P_ih``, ``sum_i W_ih`` (module
    docstring) and ``A^T X``, weighted by ``weights`` when given. Sums of disjoint sets of
    rows add up: what :mod:`attnclust.cluster.streaming` accumulates over batches (taken at
    different heads); :func:`step_from_sums` takes the step from them, with the radial
    part of the value gradient ``sum_i a_ih <x_i, mu_h>`` recomputed from ``A^T X`` at the
    heads it is given.

    Examples
    --------
    >>> X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> pass_sums(X, X, 1.0).shape      # K = 2, d = 2: 1 + 4 + 4 + 2 + 2 + 4
    torch.Size([17])
    """
    geometry = as_geometry(geometry)
    K, d = heads.shape
    gram = heads @ heads.T
    bias = geometry.key_bias(heads, inverse_temperature, sq_norms=torch.diagonal(gram))
    flat = heads.new_zeros(1 + 2 * K * d + K * K + 2 * K)
    for s in range(0, X.shape[0], chunk):
        Xc = X[s:s + chunk]
        w = None if weights is None else weights[s:s + chunk]
        flat += _chunk_sums(Xc, (Xc * Xc).sum(1), heads, gram, inverse_temperature, bias,
                            False, w, need_values=True)
    return flat


def forget_heads(sums: torch.Tensor, K: int, d: int, index) -> torch.Tensor:
    """:func:`pass_sums` without the statistics of the heads ``index``: their entries of
    ``W^T X``, ``sum_i a_ih P_ih``, ``sum_i W_ih`` and ``A^T X``, and their rows and
    columns of ``A^T A``, are zero (the summed error is kept). What a streamed fit keeps
    of heads that it moves: their past statistics were taken elsewhere.

    Examples
    --------
    >>> X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> kept = forget_heads(pass_sums(X, X, 50.0), 2, 2, [1])
    >>> step_from_sums(kept, X, 50.0, 2.0)[0].tolist()   # head 1 has no statistics: stays
    [[1.0, 0.0], [0.0, 1.0]]
    """
    sizes = [1, K * d, K * K, K, K, K * d]
    loss, lin, ata, proj, wsum, values = (p.clone() for p in torch.split(sums, sizes))
    lin, values, ata = lin.view(K, d), values.view(K, d), ata.view(K, K)
    for piece in (lin, values, ata, ata.T, proj, wsum):
        piece[index] = 0.0
    return torch.cat([loss, lin.reshape(-1), ata.reshape(-1), proj, wsum, values.reshape(-1)])


def step_from_sums(sums: torch.Tensor, heads: torch.Tensor, inverse_temperature: float,
                   total: float, *, geometry: str | Geometry = "sphere"
                   ) -> tuple[torch.Tensor, float]:
    """The full fixed-point step (``t = 1``, no safeguard) from :func:`pass_sums` of rows of
    total weight ``total``, and the risk those sums give.

    With hard attention it is Lloyd's step: the new heads are the means of the rows each
    wins (normalized on the sphere).

    Examples
    --------
    >>> X = torch.tensor([[2.0, 0.0], [4.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    >>> h = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> new, risk = step_from_sums(pass_sums(X, h, 1e3, geometry="euclidean"), h, 1e3, 3.0,
    ...                            geometry="euclidean")
    >>> new.tolist()
    [[3.0, 0.0], [0.0, 3.0]]
    """
    geometry = as_geometry(geometry)
    K, d = heads.shape
    base = 1 + K * d + K * K                   # the offset of sum_i a_ih P_ih
    values = sums[-K * d:].reshape(K, d)       # A^T X
    sums = torch.cat([sums[:base], (values * heads).sum(1), sums[base + K:-K * d]])
    gram = heads @ heads.T
    bias = geometry.key_bias(heads, inverse_temperature, sq_norms=torch.diagonal(gram))
    p = _decode(sums, heads, gram, inverse_temperature, total, geometry=geometry,
                bias=bias is not None)
    return _fixed_point_step(heads, p, 1.0, geometry), float(p.risk)


def _fixed_point_step(heads, p: _Pass, t: float, geometry: Geometry = _SPHERE) -> torch.Tensor:
    """The geometry's per-head step of length ``t`` from the pass ``p``."""
    return geometry.fixed_point_step(heads, p.grad, p.counts, p.value_radial, t)


def _halving_step(evaluate, heads, cur: _Pass, t: float, geometry: Geometry, bound: float):
    """The plain step of length ``t``, halved until the objective is at most ``bound``.

    Returns the candidate heads, its pass, the length used and whether it was accepted
    (``False`` after ``_MAX_HALVINGS`` halvings: no descent is left).
    """
    for _ in range(_MAX_HALVINGS):
        cand = _fixed_point_step(heads, cur, t, geometry)
        new = evaluate(cand)
        if float(new.loss) <= bound:
            return cand, new, t, True
        t *= 0.5
    return cand, new, t, False


def _anderson_candidate(heads, hist_x, hist_f, beta: float, geometry: Geometry):
    """Anderson extrapolation of the fixed-point map, projected back on the spheres.

    ``hist_x[j]`` are past iterates and ``hist_f[j] = S(x_j) - x_j`` their full-step
    residuals (flattened, the last entry is the current iterate). With ``dX``, ``dF`` the
    differences of consecutive entries, ``gamma`` minimizes ``||f - dF gamma||`` (a small
    Tikhonov term keeps it bounded when ``dF`` is nearly rank deficient) and the candidate is
    ``normalize(x + beta f - (dX + beta dF) gamma)`` (not normalized for Euclidean heads).
    ``None`` when the history holds one entry or the solve is not finite.
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
    return geometry.extrapolated((hist_x[-1] + beta * f - (dX + beta * dF) @ gamma)
                                 .reshape(heads.shape))


def fixed_point_fit(
    X: torch.Tensor,
    heads0: torch.Tensor,
    *,
    inverse_temperature: float | Schedule | None = None,
    n_steps: int | None = None,
    tol: float = 1e-6,
    chunk_size: int | None = None,
    geometry: str | Geometry = "sphere",
    penalty: str | None = None,
    rho: float = 0.0,
    callback: Callable[[IterationInfo], None] | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    workers: int = 1,
    row_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
    weights: torch.Tensor | None = None,
    inverse_temperatures: list[float] | None = None,
    stage_steps: list[int] | None = None,
) -> SolverResult:
    """Minimize the empirical risk of the K-head layer by safeguarded fixed-point steps.

    ``mu_h <- normalize(mu_h - grad_h f / (2 N_h))`` (not normalized for Euclidean heads)
    with step halving whenever the
    objective would increase, each step first trying an Anderson extrapolation that is
    kept only if the objective does not increase (see the module docstring).

    Parameters
    ----------
    X : Tensor of shape (n, d)
        Data, on the device and in the dtype of the computation.
    heads0 : Tensor of shape (K, d)
        Initial heads (unit on the sphere).
    inverse_temperature : float or Schedule
        ``lambda``, or a schedule of :mod:`attnclust.layer.schedules` (the one :func:`attnclust.pgd`
        takes), run as its :meth:`~attnclust.layer.schedules.Schedule.stages`: at most ``count``
        steps at each value (the last stage also stops when converged).
    n_steps : int
        Most steps in all (``lambda``'s stages are cut there).
    inverse_temperatures, stage_steps : lists of the same length
        Deprecated (0.2's form): ``inverse_temperature=Stages(inverse_temperatures,
        stage_steps)`` with ``n_steps=sum(stage_steps)``.
    tol : float
        Stop when the full step would move no head by more than ``tol`` (Euclidean), or an
        accepted plain step moved none by more.
    chunk_size : int, optional
        Rows per chunk of each pass (memory bound only; the steps are full-batch).
    geometry : {"sphere", "euclidean"} or Geometry, default="sphere"
        Unit heads (steps normalized back on the spheres) or free heads with the key bias
        ``lambda ||mu_h||^2 / 2`` (plain steps; see :mod:`attnclust.layer.geometry`).
    penalty, rho :
        Regularizer (``None``, ``"repulsion"`` or ``"balance"``) and its weight.
    callback : callable, optional
        Called with an :class:`~attnclust.layer.results.IterationInfo` after each accepted
        step (``loss``: the objective at the new heads).
    reduce : callable, optional
        Data-parallel fitting: ``X`` holds this rank's rows and ``reduce(t)`` returns the
        sum of ``t`` over all ranks (the same tensor on every rank, e.g. an all-reduce).
        Each pass then sums its per-row statistics over ranks, so every quantity that
        decides a branch (the objective of the safeguard, the shift of the heads) is the
        global one and all ranks take the same steps. ``None`` (one process) is the same
        code with no reduction.
    workers : int, default=1
        Threads that share the chunks of each pass (run torch single-threaded meanwhile,
        see :mod:`attnclust._threads`); the result does not depend on it.
    row_map : callable, optional
        Maps a chunk of rows of ``X`` to the rows to fit (in the dtype of ``heads0``), for
        a transformation applied on the fly instead of to a copy of ``X``.
    weights : Tensor of shape (n,), optional
        Sample weights ``w_i >= 0`` of the rows (see the module docstring), on ``X``'s
        device in the dtype of ``heads0``; with ``reduce``, this rank's rows' weights.

    Returns
    -------
    SolverResult
        Heads, :class:`~attnclust.layer.results.History` of every accepted step (the first
        iterate of each stage at its own ``lambda``), ``n_iter`` and ``converged``.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> X = torch.as_tensor(ac.GaussianMixture.antipodal(d=3, sigma=0.1).sample(200, rng=0))
    >>> h0 = torch.tensor([[0.6, 0.8, 0.0], [-0.6, 0.0, 0.8]], dtype=torch.float64)
    >>> res = fixed_point_fit(X, h0, inverse_temperature=50.0, n_steps=100)
    >>> res.converged, bool(res.heads[:, 0].abs().min() > 0.99)
    (True, True)
    """
    geometry = as_geometry(geometry)
    _check_penalty(geometry, penalty)
    n = X.shape[0]
    chunk = max(1, n) if chunk_size is None else max(1, int(chunk_size))
    rows = _chunk_reader(X, row_map)
    sq_norms = torch.cat([(c * c).sum(1) for c in (rows(s, s + chunk)      # (n,) by chunks
                                                   for s in range(0, n, chunk))]
                         or [heads0.new_zeros(0)])
    local = float(n) if weights is None else float(weights.sum())
    n_total = local if reduce is None else float(reduce(torch.tensor(
        [local], dtype=torch.float64, device=X.device)).item())
    if weights is not None and not n_total > 0:
        raise ValueError("the sample weights sum to zero: there is nothing to fit")
    pass_args = dict(chunk=chunk, geometry=geometry, penalty=penalty, rho=rho, reduce=reduce,
                     n_total=n_total, workers=workers, row_map=row_map, weights=weights)
    heads = heads0
    log = _Log(callback, rho, geometry)
    n_iter, converged = 0, False
    eps = 1e-12 if heads0.dtype == torch.float64 else 1e-5
    stages = _stages(inverse_temperature, n_steps, inverse_temperatures, stage_steps)
    for stage, (lam, n_steps) in enumerate(stages):
        last = stage == len(stages) - 1
        cur = _risk_pass(X, sq_norms, heads, lam, **pass_args)
        log.record(n_iter, lam, heads, cur)
        t_prev, streak = 1.0, 0
        hist_x: list[torch.Tensor] = []                      # Anderson history, this stage
        hist_f: list[torch.Tensor] = []
        def evaluate(cand, lam=lam):
            return _risk_pass(X, sq_norms, cand, lam, **pass_args)

        for _ in range(n_steps):
            # start from the last accepted step, doubled (at most to the full step 1) only
            # after _GROW_AFTER steps accepted at first try: a run of damped steps then costs
            # about one pass per step instead of paying for the same halving again and again
            t, accepted = (min(1.0, 2.0 * t_prev) if streak >= _GROW_AFTER else t_prev), False
            bound = float(cur.loss) + eps * abs(float(cur.loss))   # what a step may reach
            residual = _fixed_point_step(heads, cur, 1.0, geometry) - heads
            if float(torch.linalg.vector_norm(residual, dim=1).max()) <= tol:
                converged = last
                break
            # Anderson extrapolation, kept only if the objective does not increase
            extrapolated = False
            if _ANDERSON_DEPTH > 0:
                hist_x = [*hist_x, heads.reshape(-1)][-(_ANDERSON_DEPTH + 1):]
                hist_f = [*hist_f, residual.reshape(-1)][-(_ANDERSON_DEPTH + 1):]
                cand = _anderson_candidate(heads, hist_x, hist_f, t, geometry)
                if cand is not None:
                    new = evaluate(cand)
                    extrapolated = accepted = float(new.loss) <= bound
                    if not accepted:                         # restart from this iterate
                        hist_x, hist_f = hist_x[-1:], hist_f[-1:]
            if not extrapolated:
                t_first = t
                cand, new, t, accepted = _halving_step(evaluate, heads, cur, t, geometry,
                                                       bound)
                streak = 0 if not accepted or t < t_first or t >= 1.0 else streak + 1
            n_iter += 1
            if not accepted:                                 # no descent left: stationary
                converged = last
                break
            shift = float(torch.linalg.vector_norm(cand - heads, dim=1).max())
            heads, cur, t_prev = cand, new, (t_prev if extrapolated else t)
            log.record(n_iter, lam, heads, cur, shift)
            if shift <= tol and not extrapolated:  # a short extrapolation proves nothing
                converged = last
                break
    return SolverResult(heads, log.history(), n_iter, converged)


def _stages(lam, n_steps, old_lams, old_steps) -> list[tuple[float, int]]:
    """``[(lambda, most steps), ...]`` from a value or schedule and ``n_steps``, or from
    0.2's two lists (with a FutureWarning)."""
    if old_lams is not None or old_steps is not None:
        if lam is not None or n_steps is not None:
            raise ValueError("pass inverse_temperature and n_steps, or the deprecated "
                             "inverse_temperatures and stage_steps, not both")
        warn_deprecated("inverse_temperatures and stage_steps are deprecated and will be "
                        f"removed in {REMOVED_IN}; pass inverse_temperature=attnclust.layer."
                        "schedules.Stages(values, steps) and n_steps=sum(steps)", stacklevel=3)
        return list(zip(old_lams, old_steps, strict=True))
    if lam is None or n_steps is None:
        raise ValueError("fixed_point_fit needs inverse_temperature and n_steps")
    return as_schedule(lam).stages(n_steps)


def _check_penalty(geometry: Geometry, penalty) -> None:
    """The pass's closed forms: repulsion for both geometries, balance on the sphere only
    (its gradient leaves out the key bias of Euclidean heads)."""
    if penalty not in (None, "repulsion", "balance"):
        raise ValueError(f"penalty must be None, 'repulsion' or 'balance', got {penalty!r}")
    if penalty is not None and penalty not in geometry.penalties:
        raise ValueError(f"penalty={penalty!r} is implemented for geometry='sphere' only")


class _Log:
    """The history of a fit, and the callback after each accepted step."""

    def __init__(self, callback, rho: float, geometry: Geometry):
        self.callback, self.rho, self.geometry = callback, float(rho), geometry
        self.rows: dict[str, list] = {field: [] for field in History._fields}

    def record(self, n_iter: int, lam: float, heads: torch.Tensor, cur: _Pass,
               shift: float | None = None) -> None:
        """Record the iterate ``heads`` (``shift=None``: the first of a stage)."""
        grad = self.geometry.egrad2rgrad(heads, cur.grad)
        for field, value in zip(History._fields, (
                n_iter, float(cur.risk), float(torch.linalg.vector_norm(grad)), lam,
                self.rho, heads.detach().cpu().double().numpy()), strict=True):
            self.rows[field].append(value)
        if shift is None:
            return
        loss = float(cur.loss)
        _logger.debug("iter %d  lambda %.4g  loss %.8g  shift %.2e", n_iter, lam, loss, shift)
        if self.callback is not None:
            self.callback(IterationInfo(n_iter, loss, lam, shift, heads.detach().clone()))

    def history(self) -> History:
        return History(*(np.asarray(self.rows[field], dtype=np.int64 if field == "step"
                                    else np.float64) for field in History._fields))

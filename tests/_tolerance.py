"""Tolerances for comparing two different computations of one quantity.

Two computations that run the same operations in the same order give the same bits, on
any machine: compare them exactly. Two that do not (another summation order, chunking,
thread count, BLAS kernel, row order or memory layout; a value updated step by step
against one recomputed; float32 against float64) differ by rounding, and a test must
allow for it from the computation alone, never from what one machine happened to give.
The bounds here are the textbook ones (N. J. Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed.: (3.4)-(3.5) for inner products, (4.4) for sums), with ``u`` the unit
roundoff and ``eps = 2 u`` (``np.finfo(dtype).eps``):

* a sum of ``n`` terms, in any order (blocked, pairwise, over threads), is within
  ``(n - 1) u sum |x_i|`` of the exact sum; two such sums are within ``(n - 1) eps
  sum |x_i|`` of each other (:func:`sum_tol`, relative to ``sum |x_i|``);
* an inner product of length ``d`` is within ``d u sum |x_i y_i|`` (the same bound);
* a squared distance computed as ``||x||^2 - 2 <x, mu> + ||mu||^2`` (as the library's
  nearest-head search does, one matrix product) is within about ``(d + 2) u (||x|| +
  ||mu||)^2`` of the exact one: its error scales with the rows' norms, not with the
  distance, so a small objective next to large rows (a far outlier, data far from the
  origin) has a large relative error (:func:`objective_tol`).

Each helper returns a tolerance that still catches a real bug: an off-by-one in a sum of
``n`` terms changes it by about ``1 / n`` of its value, many orders above these bounds
for the sizes the tests use.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assert_nearest", "assert_same_labels", "eps", "near_ties", "objective_tol",
           "sq_dist_tol", "sum_tol", "attention_risk_tol", "balance_tol",
           "assert_labels_off_ties"]


def eps(dtype=np.float64) -> float:
    """Machine epsilon of ``dtype`` (numpy or torch dtype, or a name): ``2 u``."""
    if not isinstance(dtype, (str, type, np.dtype)):        # a torch dtype
        dtype = str(dtype).replace("torch.", "")
    return float(np.finfo(np.dtype(dtype)).eps)


def sum_tol(n: int, dtype=np.float64) -> float:
    """Relative difference allowed between two sums of the same ``n`` terms added in
    different orders, relative to ``sum |x_i|`` (which is the sum itself for terms of
    one sign: counts, squared distances, weights).

    Each order is within ``(n - 1) u sum |x_i|`` of the exact sum (Higham (4.4)), so two
    orders are within ``(n - 1) 2 u = (n - 1) eps``; ``n eps`` here (``n`` >= 1).

    Examples
    --------
    >>> sum_tol(1000) < 3e-13, sum_tol(1000, "float32") < 2e-4
    (True, True)
    """
    return max(int(n), 1) * eps(dtype)


def _pair_scale(X, heads) -> np.ndarray:
    """``(a + b) (a + b + ||m||)`` for each row and head, ``(n, K)``: ``a = ||x - m||``,
    ``b = ||mu - m||``, ``m`` the rows' mean. The library computes distances on rows
    centred on ``m`` (error ``~ u (a + b)^2``) and maps heads back by adding ``m``
    (a head off by ``u ||m||``, a squared distance by ``2 u ||m|| ||x - mu||``)."""
    X = np.asarray(X, dtype=np.float64)
    heads = np.asarray(heads, dtype=np.float64).reshape(-1, X.shape[1])
    m = X.mean(0)
    ab = np.linalg.norm(X - m, axis=1)[:, None] + np.linalg.norm(heads - m, axis=1)[None]
    return ab * (ab + np.linalg.norm(m))


def sq_dist_tol(X, heads, dtype=np.float64) -> np.ndarray:
    """For each row of ``X`` (n, d) and head of ``heads`` (K, d), ``(n, K)``, the absolute
    difference allowed between two computations of their squared distance: ``(d + 2) eps
    (a + b) (a + b + ||m||)`` with ``a = ||x - m||``, ``b = ||mu - m||`` and ``m`` the rows'
    mean. Computed as ``||x||^2 - 2 <x, mu> + ||mu||^2`` the error is within ``(d + 2) u
    (||x|| + ||mu||)^2`` (three inner products of length ``d`` and two additions); the
    library does so on rows centred on ``m``, then adds ``m`` to its heads.

    Examples
    --------
    >>> sq_dist_tol(np.array([[3.0, 4.0], [-3.0, -4.0]]), np.zeros((1, 2))) / eps()
    array([[100.],
           [100.]])
    """
    return (np.asarray(X).shape[1] + 2) * eps(dtype) * _pair_scale(X, heads)


def _sq_dists(X, heads) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    heads = np.asarray(heads, dtype=np.float64)
    return ((X[:, None, :] - heads[None]) ** 2).sum(-1)                     # (n, K), direct


def near_ties(X, heads, dtype=np.float64) -> np.ndarray:
    """Rows of ``X`` whose two nearest ``heads`` are within rounding of each other
    (:func:`sq_dist_tol` of both): their label may differ between two computations.

    Examples
    --------
    >>> near_ties(np.array([[0.0], [1.0]]), np.array([[-1.0], [1.0]])).tolist()
    [True, False]
    """
    D = _sq_dists(X, heads)
    if D.shape[1] < 2:
        return np.zeros(D.shape[0], dtype=bool)
    two = np.argsort(D, axis=1)[:, :2]
    D2, tol = np.take_along_axis(D, two, 1), np.take_along_axis(sq_dist_tol(X, heads, dtype),
                                                                two, 1)
    return D2[:, 1] - D2[:, 0] <= tol.sum(1)


def assert_nearest(labels, X, heads, dtype=np.float64) -> None:
    """Assert that ``labels[i]`` is a nearest head of row ``i`` up to rounding: its squared
    distance exceeds the smallest by at most the :func:`sq_dist_tol` of both heads.
    Exact where no two heads are within rounding of a row's nearest (:func:`near_ties`),
    which a comparison with a dense ``argmin`` by ``array_equal`` assumes silently.

    Examples
    --------
    >>> assert_nearest(np.array([0, 1]), np.array([[0.0], [1.0]]), np.array([[-1.0], [1.0]]))
    >>> assert_nearest(np.array([1, 1]), np.array([[0.0], [1.0]]), np.array([[-1.0], [1.0]]))
    """
    D, tol = _sq_dists(X, heads), sq_dist_tol(X, heads, dtype)
    rows, labels, best = np.arange(len(D)), np.asarray(labels), D.argmin(1)
    excess = D[rows, labels] - D[rows, best]
    bad = np.flatnonzero(excess > tol[rows, labels] + tol[rows, best])
    assert bad.size == 0, f"rows {bad[:10].tolist()} are not at their nearest head " \
        f"(excess squared distance {excess[bad[:10]].tolist()})"


def assert_same_labels(a, b, X, heads, dtype=np.float64) -> None:
    """Assert that two computations' labels ``a`` and ``b`` of the rows ``X`` agree on
    every row that is not within rounding of a tie between ``heads`` (:func:`near_ties`),
    and that both are nearest heads up to rounding (:func:`assert_nearest`)."""
    a, b = np.asarray(a), np.asarray(b)
    differ = np.flatnonzero((a != b) & ~near_ties(X, heads, dtype))
    assert differ.size == 0, f"labels differ off ties at rows {differ[:10].tolist()}"
    assert_nearest(a, X, heads, dtype)
    assert_nearest(b, X, heads, dtype)


def objective_tol(X, centers, labels=None, *, steps: int = 1, dtype=np.float64) -> float:
    """Absolute difference allowed between two computations of the k-means objective
    ``R = (1/n) sum_i ||x_i - c_{z_i}||^2`` (``X`` (n, d), ``centers`` (K, d), ``labels``
    (n,), by default each row's nearest center), one of which may be the library's:
    distances from one matrix product, the sum of a cell's distances updated over
    ``steps`` Lloyd steps when its head moves, rows and heads in the working space
    ``(x - m) / s`` mapped back to data units.

    Per row, ``||x||^2 - 2 <x, mu> + ||mu||^2`` is within ``(d + 2) u (||x|| + ||mu||)^2``
    of the exact value; each update ``2 (a - b) . (s - n a) + n ||a - b||^2`` of a cell's
    sum adds at most about as much per row of the cell (its terms are of the same size);
    the map to data units moves a head by ``u (||s nu|| + ||m||)``. So the mean over
    rows of ``(steps + 1)`` times :func:`sq_dist_tol` of the row and its center, and
    :func:`sum_tol` of the mean itself, bound the difference.

    Examples
    --------
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0]])  # objective 4/3 both times
    >>> float(objective_tol(X, X[[0, 2]], np.array([0, 0, 1]))) < 1e-13
    True
    >>> X[2, 0] = 1e6               # a far row: its norm, not the objective, sets the bound
    >>> float(objective_tol(X, X[[0, 2]], np.array([0, 0, 1]))) > 1e-3
    True
    """
    X = np.asarray(X, dtype=np.float64)
    if labels is None:
        labels = _sq_dists(X, centers).argmin(1)
    labels = np.asarray(labels)
    c = np.asarray(centers, dtype=np.float64)[labels]
    scale = _pair_scale(X, centers)[np.arange(len(X)), labels]
    objective = float(np.mean(np.sum((X - c) ** 2, axis=1)))
    d = X.shape[1]
    return (steps + 1) * (d + 2) * eps(dtype) * float(scale.mean()) \
        + sum_tol(X.shape[0], dtype) * objective


def attention_risk_tol(n: int, scale: float, lam: float, K: int, d: int,
                       dtype=np.float64) -> tuple[float, float]:
    """(value, gradient) absolute differences allowed between two evaluations of an
    attention risk ``sum_i w_i F(x_i)`` (weights summing to 1; ``F = ||x - T(x)||^2 =
    ||x||^2 - 2 a.P + a^T G a``, ``a = softmax(lambda P)``, ``P_h = <x, mu_h>``) over the
    same ``n`` nodes or rows in different orders (kernel against reference, shards,
    devices, chunks). ``scale`` is ``r + H``: ``r`` the largest (or root mean square)
    row norm, ``H`` the largest head norm, so ``|P_h| <= r H`` and every term of ``F`` is
    at most ``(r + H)^2``.

    Rounding steps, in units of ``eps``: the sum over ``n`` (Higham (4.4)), ``K^2 + d``
    for the products and the Gram matrix, and ``lambda (r + H)^2`` for the softmax (a
    relative error ``eps`` of a logit ``lambda P`` is an absolute one of ``lambda |P|
    eps``). Times the terms' size: ``(r + H)^2`` for the value, ``2 (r + H) (1 + lambda
    (r + H)^2)`` for the gradient (``dF/dmu`` has ``2 (r + H)`` directly and ``lambda
    (r + H)^2 (r + H)`` through ``a``).

    Examples
    --------
    >>> v, g = attention_risk_tol(1000, 2.0, 5.0, 3, 10)
    >>> bool(v < 1e-12 and g < 1e-10)
    True
    """
    m = (n + K * K + d + lam * scale * scale) * eps(dtype)
    return m * scale * scale, m * 2 * scale * (1 + lam * scale * scale)


def balance_tol(n: int, scale: float, lam: float, K: int, d: int,
                dtype=np.float64) -> tuple[float, float]:
    """(value, gradient) absolute differences allowed for the balance penalty ``sum_h
    (A_h - t_h)^2``, ``A_h`` the weighted mean of ``a_h <= 1`` over ``n`` nodes or rows:
    each ``A_h`` is within ``delta`` (the rounding steps of :func:`attention_risk_tol`
    times ``eps``), so the value within ``2 sum_h |A_h - t_h| delta <= 2 K delta``
    (absolute: the penalty may be near 0), and the gradient ``2 sum_h (A_h - t_h) dA_h /
    dmu``, ``|dA_h / dmu| <= lambda (r + H)``, within ``2 K delta (1 + lambda (r + H))``.

    Examples
    --------
    >>> v, g = balance_tol(1000, 2.0, 5.0, 3, 10)
    >>> bool(v < 1e-11 and g < 1e-10)
    True
    """
    delta = (n + K * K + d + lam * scale * scale) * eps(dtype)
    return 2 * K * delta, 2 * K * delta * (1 + lam * scale)


def assert_labels_off_ties(a, b, log_a, log_b, slack=0.0) -> None:
    """Assert that two computations' labels ``a`` and ``b`` (``(n,)``, each the most
    probable of ``K``) agree except on rows within their difference of a tie. ``log_a``
    and ``log_b`` (``(n, K)``) are the two computations' log-probabilities (or logits, up to
    a constant per row) of the same rows; ``slack`` (scalar or ``(n,)``) the rounding of
    ``log_a`` itself (the labels may come from logits computed another way).

    On row ``i`` the two differ by at most ``m_i = max_h |log_a - log_b|``, so the gap
    between ``a``'s two highest entries moves by at most ``2 m_i``: where the gap exceeds
    ``2 (m_i + slack_i)``, ``b``'s highest is ``a``'s. The fits' differences are measured,
    not assumed: this holds for two fits whose parameters drifted apart by rounding.

    Examples
    --------
    >>> la = np.log(np.array([[0.7, 0.3], [0.5, 0.5]]))
    >>> lb = np.log(np.array([[0.7, 0.3], [0.49, 0.51]]))
    >>> assert_labels_off_ties(np.array([0, 0]), np.array([0, 1]), la, lb)
    """
    log_a, log_b = np.asarray(log_a, dtype=np.float64), np.asarray(log_b, dtype=np.float64)
    moved = np.abs(log_a - log_b).max(1)
    top = np.sort(log_a, axis=1)
    gap = top[:, -1] - top[:, -2]
    bad = np.flatnonzero((np.asarray(a) != np.asarray(b)) & (gap > 2 * (moved + slack)))
    assert bad.size == 0, f"labels differ off ties at rows {bad[:10].tolist()} " \
        f"(gaps {gap[bad[:10]].tolist()})"
    # fits that drifted far apart excuse every row above: two computations of one fit
    # disagree on a few rows near a tie at most
    differ = np.asarray(a) != np.asarray(b)
    assert differ.sum() <= max(1, 0.01 * differ.size), \
        f"labels differ on {differ.mean():.1%} of the rows"

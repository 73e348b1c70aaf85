"""The leading eigenpairs of a covariance given by its rows, for wide rows.

A covariance of ``d`` columns costs ``d^2`` numbers to form and ``d^3`` steps to
diagonalize: 6,000 columns took ``attnclust fit --plot`` 50 s and 2 GB, and the
temperature path, which diagonalizes a covariance per group at each ``lambda``, did not
finish. Beyond :data:`DENSE_FEATURES` columns the callers here take the few leading
eigenpairs from the rows ``Z = sqrt(w / sum(w)) Y`` (``C = Z^T Z``): by the ``n x n``
Gram matrix ``Z Z^T`` where the rows are few (:data:`GRAM_ROWS`), else by Lanczos
iterations (scipy's ``eigsh``) on the products ``C v = Z^T (Z v)``, each ``O(n d)``; up
to :data:`DENSE_FEATURES` columns they keep their dense ``eigh``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DENSE_FEATURES", "GRAM_ROWS", "leading_eigenpairs"]

DENSE_FEATURES = 256    # columns up to which the d x d covariance is formed and diagonalized
GRAM_ROWS = 1024        # rows up to which the n x n Gram matrix is diagonalized instead


def leading_eigenpairs(Y: np.ndarray, k: int, weights: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues ``(k,)``, in decreasing order, and unit eigenvectors
    ``(d, k)`` of ``C = Y^T diag(w) Y / sum(w)``, ``Y`` the centred rows ``(n, d)`` (``w``:
    their weights, ones by default). The same rows give the same vectors (Lanczos starts
    from a fixed vector); a zero eigenvalue's vector is a unit axis.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Y = rng.normal(size=(50, 400)) * np.r_[3.0, 2.0, np.full(398, 0.1)]
    >>> vals, vecs = leading_eigenpairs(Y - Y.mean(0), 2)
    >>> ref = np.linalg.eigvalsh(np.cov(Y.T, bias=True))[::-1][:2]
    >>> bool(np.allclose(vals, ref)), vecs.shape
    (True, (400, 2))
    >>> leading_eigenpairs(np.zeros((5, 400)), 1)[0]         # no spread: no direction
    array([0.])
    """
    Y = np.asarray(Y, dtype=np.float64)
    n, d = Y.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    Z = Y * np.sqrt(w / w.sum())[:, None]
    vals, vecs = np.zeros(k), np.eye(d, k)
    if not float((Z * Z).sum()) > 0:
        return vals, vecs
    if n <= GRAM_ROWS:                  # C = Z^T Z and Z Z^T share their nonzero eigenvalues
        gram_vals, U = np.linalg.eigh(Z @ Z.T)
        top = np.argsort(gram_vals)[::-1][:k]
        held = gram_vals[top] > gram_vals[top[0]] * n * np.finfo(np.float64).eps
        vals[:len(top)][held] = gram_vals[top][held]
        vecs[:, :len(top)][:, held] = (Z.T @ U[:, top[held]]) / np.sqrt(gram_vals[top][held])
        return vals, vecs
    from scipy.sparse.linalg import LinearOperator, eigsh

    product = LinearOperator((d, d), matvec=lambda v: Z.T @ (Z @ v), dtype=np.float64)
    found, V = eigsh(product, k=k, which="LA", v0=np.random.default_rng(0).standard_normal(d))
    order = np.argsort(found)[::-1]
    return found[order], V[:, order]

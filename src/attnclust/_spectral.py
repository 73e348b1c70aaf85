"""The leading eigenpairs of a covariance given by its rows, for wide rows.

A covariance of ``d`` columns costs ``d^2`` numbers to form and ``d^3`` steps to
diagonalize: 6,000 columns took ``attnclust fit --plot`` 50 s and 2 GB, and the
temperature path, which diagonalizes a covariance per group at each ``lambda``, did not
finish. Beyond :data:`DENSE_FEATURES` columns the callers here take the few leading
eigenpairs by Lanczos iterations (scipy's ``eigsh``) on the products ``C v = Y^T (w * (Y
v)) / sum(w)``, each ``O(n d)``, never forming ``C``; up to it they keep their dense
``eigh``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DENSE_FEATURES", "leading_eigenpairs"]

DENSE_FEATURES = 256    # columns up to which the d x d covariance is formed and diagonalized


def leading_eigenpairs(Y: np.ndarray, k: int, weights: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues ``(k,)``, in decreasing order, and their unit
    eigenvectors ``(d, k)`` of ``C = Y^T diag(w) Y / sum(w)``, ``Y`` the centred rows
    ``(n, d)`` (``w``: their weights, ones by default), by Lanczos iterations from a fixed
    start (the same rows give the same vectors; signs as Lanczos leaves them).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Y = rng.normal(size=(50, 400)) * np.r_[3.0, 2.0, np.full(398, 0.1)]
    >>> vals, vecs = leading_eigenpairs(Y - Y.mean(0), 2)
    >>> ref = np.linalg.eigvalsh(np.cov(Y.T, bias=True))[::-1][:2]
    >>> bool(np.allclose(vals, ref)), vecs.shape
    (True, (400, 2))
    """
    from scipy.sparse.linalg import LinearOperator, eigsh

    Y = np.asarray(Y, dtype=np.float64)
    n, d = Y.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    total = float(w.sum())
    product = LinearOperator((d, d), matvec=lambda v: Y.T @ (w * (Y @ v)) / total,
                             dtype=np.float64)
    start = np.random.default_rng(0).standard_normal(d)
    vals, vecs = eigsh(product, k=k, which="LA", v0=start)
    order = np.argsort(vals)[::-1]
    return vals[order], vecs[:, order]

"""Heads that learn their shape: the K-head layer with a query-key metric per head.

Today's Euclidean layer (:mod:`attnclust.heads`) scores a token by ``-lambda ||x -
mu_h||^2 / 2``: every head sees the data through the identity metric, so its cell is a
(soft) Voronoi cell. Here head ``h`` has its own positive definite precision ``P_h``
(a query-key metric) and a log-weight ``log pi_h``:

    s_h(x)  = -lambda/2 (x - mu_h)^T P_h (x - mu_h) + b_h,
    b_h     = lambda ( log pi_h + 1/2 log det P_h ),
    a_h(x)  = softmax_h s_h(x),          T(x) = sum_h a_h(x) mu_h.

``P_h = U_h U_h^T`` with ``U_h`` upper triangular with a positive diagonal (the Cholesky
factor of the precision, scikit-learn's ``precisions_cholesky_``), so ``(x - mu_h)^T P_h
(x - mu_h) = ||(x - mu_h) U_h||^2`` and ``log det P_h = 2 sum_j log (U_h)_jj``: a query
map ``W_h = U_h^T`` per head. At ``lambda = 1``, ``a_h(x)`` is the posterior of
component ``h`` of the Gaussian mixture ``sum_h pi_h N(mu_h, P_h^{-1})`` (the ``-d/2
log 2 pi`` is common to all heads and cancels); ``lambda`` tempers it (see
:mod:`attnclust.shaped_fit` for the objective). The bias is the *whole* log-prior and
log-normalizer, scaled by ``lambda`` like the quadratic term, so that the tempered
posterior is ``p_h(x)^lambda / sum_g p_g(x)^lambda``.

``covariance_type`` says what ``U_h`` is, as in ``sklearn.mixture.GaussianMixture``:

- ``"full"``: ``(K, d, d)`` upper triangular;
- ``"diag"``: ``(K, d)``, ``U_h = diag(u_h)`` (axis-aligned cells);
- ``"spherical"``: ``(K,)``, ``U_h = u_h I`` (one scale per head).

With ``"spherical"``, ``u_h = 1`` for every head and equal weights, the logits are
today's Euclidean layer's, ``-lambda ||x - mu_h||^2 / 2``, up to a constant per token.

Notation
--------
==============  ========================  ==============================================
paper           code                      meaning
==============  ========================  ==============================================
``mu_h``        ``means[h]``              head ``h`` (key and value), shape ``(K, d)``
``U_h``         ``precisions_cholesky``   factor of the precision ``P_h = U_h U_h^T``
``pi_h``        ``weights``               mixing weight (``log_weights``: its log)
``lambda``      ``inverse_temperature``   tempering of the logits, ``> 0``
``s_h(x)``      ``shaped_logits``         logits, ``(..., K)``
``a_h(x)``      ``shaped_weights``        attention of ``x`` on head ``h``
``T(x)``        ``shaped_attention``      output of the layer
==============  ========================  ==============================================
"""

from __future__ import annotations

import torch
from torch import nn

from ._validation import as_tensor, check_inverse_temperature
from .heads import softmax_heads

__all__ = ["COVARIANCE_TYPES", "check_covariance_type", "whitened_norms", "mahalanobis",
           "log_det_precision",
           "precision_trace", "shaped_logits", "shaped_weights", "shaped_attention",
           "ShapedAttentionHeads"]

COVARIANCE_TYPES = ("spherical", "diag", "full")


def check_covariance_type(covariance_type) -> str:
    """``covariance_type`` if it is one of :data:`COVARIANCE_TYPES`, else a ``ValueError``.

    Examples
    --------
    >>> check_covariance_type("full")
    'full'
    """
    if not isinstance(covariance_type, str) or covariance_type not in COVARIANCE_TYPES:
        raise ValueError(f"covariance_type must be 'spherical', 'diag' or 'full', got "
                         f"{covariance_type!r}")
    return covariance_type


def whitened_norms(diff: torch.Tensor, precisions_cholesky: torch.Tensor,
                   covariance_type: str) -> torch.Tensor:
    """``||d U_h||^2`` of differences ``(K, N, d)`` (row ``h`` against head ``h``): ``(K, N)``.

    Examples
    --------
    >>> whitened_norms(torch.tensor([[[2.0, 1.0]]]), torch.tensor([[2.0, 1.0]]), "diag")
    tensor([[17.]])
    """
    if covariance_type == "full":
        y = diff @ precisions_cholesky                                      # (K, N, d)
        return (y * y).sum(-1)
    sq = diff * diff
    if covariance_type == "diag":
        return (sq * (precisions_cholesky * precisions_cholesky)[:, None]).sum(-1)
    return sq.sum(-1) * (precisions_cholesky * precisions_cholesky)[:, None]


def mahalanobis(x: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                covariance_type: str) -> torch.Tensor:
    """Squared distances ``||(x - mu_h) U_h||^2`` of tokens ``(..., d)`` to heads: ``(..., K)``.

    Examples
    --------
    >>> mahalanobis(torch.tensor([[2.0, 1.0]]), torch.zeros(1, 2), torch.tensor([0.5]),
    ...             "spherical")
    tensor([[1.2500]])
    """
    k, d = means.shape
    diff = x.reshape(-1, d).unsqueeze(0) - means[:, None]                   # (K, N, d)
    dist = whitened_norms(diff, precisions_cholesky, covariance_type)       # (K, N)
    return dist.T.reshape(*x.shape[:-1], k)


def log_det_precision(precisions_cholesky: torch.Tensor, covariance_type: str,
                      n_features: int) -> torch.Tensor:
    """``log det P_h = 2 sum_j log (U_h)_jj``, shape ``(K,)``.

    Examples
    --------
    >>> log_det_precision(torch.tensor([2.0]), "spherical", 3)
    tensor([4.1589])
    """
    if covariance_type == "full":
        return 2.0 * torch.diagonal(precisions_cholesky, dim1=-2, dim2=-1).log().sum(-1)
    if covariance_type == "diag":
        return 2.0 * precisions_cholesky.log().sum(-1)
    return 2.0 * n_features * precisions_cholesky.log()


def precision_trace(precisions_cholesky: torch.Tensor, covariance_type: str,
                    floor: torch.Tensor) -> torch.Tensor:
    """``tr(P_h D) = sum_j D_j (P_h)_jj`` for a diagonal ``D = diag(floor)``, shape ``(K,)``.

    The term of the fit's objective that a covariance floor ``D`` adds
    (:mod:`attnclust.shaped_fit`).

    Examples
    --------
    >>> precision_trace(torch.tensor([2.0]), "spherical", torch.ones(3))
    tensor([12.])
    """
    sq = precisions_cholesky * precisions_cholesky
    if covariance_type == "full":
        return sq.sum(-1) @ floor                 # (P_h)_jj = sum_k (U_h)_jk^2
    if covariance_type == "diag":
        return sq @ floor
    return sq * floor.sum()


def shaped_logits(x: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                  log_weights: torch.Tensor | None = None, *, inverse_temperature: float,
                  covariance_type: str = "full") -> torch.Tensor:
    """Logits ``s_h(x) = lambda (-1/2 ||(x - mu_h) U_h||^2 + log pi_h + 1/2 log det P_h)``.

    Parameters
    ----------
    x : Tensor of shape (..., d)
    means : Tensor of shape (K, d)
    precisions_cholesky : Tensor of shape (K, d, d), (K, d) or (K,)
        ``U_h`` for ``"full"``, ``"diag"``, ``"spherical"`` (positive diagonal).
    log_weights : Tensor of shape (K,), optional
        ``log pi_h``; ``None``: equal weights (a constant, left out).
    inverse_temperature : float
        ``lambda > 0``.
    covariance_type : {"full", "diag", "spherical"}, default="full"

    Returns
    -------
    Tensor of shape (..., K)

    Examples
    --------
    >>> u = torch.tensor([[[1.0, 0.0], [0.0, 4.0]], [[1.0, 0.0], [0.0, 1.0]]])
    >>> shaped_logits(torch.tensor([0.0, 1.0]), torch.zeros(2, 2), u, inverse_temperature=1.0)
    tensor([-6.6137, -0.5000])
    """
    d = means.shape[-1]
    logits = -0.5 * mahalanobis(x, means, precisions_cholesky, covariance_type)
    logits = logits + 0.5 * log_det_precision(precisions_cholesky, covariance_type, d)
    if log_weights is not None:
        logits = logits + log_weights
    return inverse_temperature * logits


def shaped_weights(x, means, precisions_cholesky, log_weights=None, *,
                   inverse_temperature: float = 1.0, covariance_type: str = "full"
                   ) -> torch.Tensor:
    """Attention ``a_h(x) = softmax_h s_h(x)`` of tokens ``(..., d)``: ``(..., K)``.

    Arguments as in :func:`shaped_logits` (array-like accepted, converted to the means'
    dtype). At ``inverse_temperature=1`` this is the posterior of the Gaussian mixture.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal as mvn
    >>> x, m = np.array([0.5, 0.2]), np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> cov = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.2, 0.0], [0.0, 2.0]]])
    >>> u = np.linalg.inv(np.linalg.cholesky(cov)).transpose(0, 2, 1)
    >>> a = shaped_weights(x, m, u, np.log([0.3, 0.7])).numpy()
    >>> p = [0.3 * mvn(m[0], cov[0]).pdf(x), 0.7 * mvn(m[1], cov[1]).pdf(x)]
    >>> bool(np.allclose(a, np.array(p) / sum(p)))
    True
    """
    x, means, factors, log_weights, lam, cov = _inputs(
        x, means, precisions_cholesky, log_weights, inverse_temperature, covariance_type)
    return softmax_heads(shaped_logits(x, means, factors, log_weights, inverse_temperature=lam,
                                       covariance_type=cov))


def shaped_attention(x, means, precisions_cholesky, log_weights=None, *,
                     inverse_temperature: float = 1.0, covariance_type: str = "full"
                     ) -> torch.Tensor:
    """Output ``T(x) = sum_h a_h(x) mu_h`` of tokens ``(..., d)``: ``(..., d)``.

    Examples
    --------
    >>> m = torch.tensor([[0.0, 0.0], [4.0, 0.0]], dtype=torch.float64)
    >>> u = torch.tensor([[10.0, 0.1], [0.1, 10.0]], dtype=torch.float64)   # (K, d): diag
    >>> shaped_attention(torch.tensor([[0.0, 3.0]], dtype=torch.float64), m, u,
    ...                  covariance_type="diag")
    tensor([[0., 0.]], dtype=torch.float64)
    """
    x, means, factors, log_weights, lam, cov = _inputs(
        x, means, precisions_cholesky, log_weights, inverse_temperature, covariance_type)
    return softmax_heads(shaped_logits(x, means, factors, log_weights, inverse_temperature=lam,
                                       covariance_type=cov)) @ means


def _inputs(x, means, factors, log_weights, inverse_temperature, covariance_type):
    """Tensors in the means' dtype and device, and the checked scalars."""
    means = as_tensor(means, name="means")
    kw = dict(dtype=means.dtype, device=means.device)
    x = as_tensor(x, name="x", **kw)
    factors = as_tensor(factors, name="precisions_cholesky", **kw)
    if log_weights is not None:
        log_weights = as_tensor(log_weights, name="log_weights", **kw)
    cov = check_covariance_type(covariance_type)
    expected = {"full": means.shape + means.shape[-1:], "diag": means.shape,
                "spherical": means.shape[:1]}[cov]
    if tuple(factors.shape) != tuple(expected):
        raise ValueError(f"precisions_cholesky must have shape {tuple(expected)} for "
                         f"covariance_type={cov!r}, got {tuple(factors.shape)}")
    return x, means, factors, log_weights, check_inverse_temperature(inverse_temperature), cov


class ShapedAttentionHeads(nn.Module):
    """The K-head layer with a learned metric per head, ``(..., d) -> (..., d)``.

    Trainable parameters, unconstrained so that any optimizer keeps ``P_h`` positive
    definite and the weights on the simplex: the means, the log of the factor's diagonal,
    its strict upper triangle (``"full"``) and unnormalized log-weights.

    Parameters
    ----------
    means : array-like of shape (K, d)
    inverse_temperature : float, default=1.0
    covariance_type : {"spherical", "diag", "full"}, default="spherical"
    precisions_cholesky : array-like, optional
        Initial ``U_h`` (shapes as in :func:`shaped_logits`); default: identity.
    weights : array-like of shape (K,), optional
        Initial mixing weights; default: equal.

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> from attnclust.shaped import ShapedAttentionHeads
    >>> m = [[0.0, 0.0], [3.0, 0.0]]
    >>> layer = ShapedAttentionHeads(m, inverse_temperature=2.0)        # today's layer
    >>> x = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    >>> bool(torch.allclose(layer(x), ac.attention_heads(x, m, inverse_temperature=2.0,
    ...                                                   geometry="euclidean")))
    True
    >>> full = ShapedAttentionHeads(m, covariance_type="full")
    >>> full.precisions_cholesky.shape
    torch.Size([2, 2, 2])
    """

    def __init__(self, means, inverse_temperature: float = 1.0, *,
                 covariance_type: str = "spherical", precisions_cholesky=None, weights=None):
        super().__init__()
        means = as_tensor(means, name="means").detach().clone()
        if means.ndim != 2:
            raise ValueError(f"means must have shape (K, d), got {tuple(means.shape)}")
        self.covariance_type = check_covariance_type(covariance_type)
        self.inverse_temperature = check_inverse_temperature(inverse_temperature)
        k, d = means.shape
        kw = dict(dtype=means.dtype, device=means.device)
        if precisions_cholesky is None:
            shape = {"full": (k, d, d), "diag": (k, d), "spherical": (k,)}[covariance_type]
            factors = torch.eye(d, **kw).expand(shape).clone() if covariance_type == "full" \
                else torch.ones(shape, **kw)
        else:
            _, _, factors, _, _, _ = _inputs(means[:1], means, precisions_cholesky, None, 1.0,
                                             covariance_type)
        diag = torch.diagonal(factors, dim1=-2, dim2=-1) if covariance_type == "full" \
            else factors
        if not bool((diag > 0).all()):
            raise ValueError("precisions_cholesky must have a positive diagonal")
        self.means = nn.Parameter(means)
        self.log_diagonal = nn.Parameter(diag.log().clone())
        if covariance_type == "full":
            self.upper = nn.Parameter(torch.triu(factors, diagonal=1).clone())
        weights = torch.full((k,), 1.0 / k, **kw) if weights is None else as_tensor(
            weights, name="weights", **kw)
        if weights.shape != (k,) or not bool((weights > 0).all()):
            raise ValueError(f"weights must be {k} positive numbers, got {weights.tolist()}")
        self.log_weights = nn.Parameter(weights.log().clone())

    @property
    def precisions_cholesky(self) -> torch.Tensor:
        """``U_h``: ``(K, d, d)`` upper triangular, ``(K, d)`` or ``(K,)``."""
        if self.covariance_type != "full":
            return self.log_diagonal.exp()
        return torch.triu(self.upper, diagonal=1) + torch.diag_embed(self.log_diagonal.exp())

    @property
    def precisions(self) -> torch.Tensor:
        """``P_h = U_h U_h^T`` (``(K, d, d)``; per-coordinate or scalar for diag/spherical)."""
        u = self.precisions_cholesky
        return u @ u.transpose(-1, -2) if self.covariance_type == "full" else u * u

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``s_h(x)``, shape ``(..., K)``."""
        if not isinstance(x, torch.Tensor):
            x = as_tensor(x, name="x", dtype=self.means.dtype, device=self.means.device)
        dtype = x.dtype
        return shaped_logits(x, self.means.to(dtype), self.precisions_cholesky.to(dtype),
                             torch.log_softmax(self.log_weights, 0).to(dtype),
                             inverse_temperature=self.inverse_temperature,
                             covariance_type=self.covariance_type)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Attention ``a_h(x)``, shape ``(..., K)``."""
        return softmax_heads(self.logits(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.weights(x)
        return a @ self.means.to(a.dtype)

    def extra_repr(self) -> str:
        k, d = self.means.shape
        return (f"n_heads={k}, d={d}, inverse_temperature={self.inverse_temperature:g}, "
                f"covariance_type={self.covariance_type}")


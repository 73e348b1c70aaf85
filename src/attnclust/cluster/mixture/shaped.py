"""Heads that learn their shape: the K-head layer with a query-key metric per head.

Today's Euclidean layer (:mod:`attnclust.layer.heads`) scores a token by ``-lambda ||x -
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
:mod:`attnclust.cluster.mixture.tempered` for the objective). The bias is the *whole* log-prior and
log-normalizer, scaled by ``lambda`` like the quadratic term, so that the tempered
posterior is ``p_h(x)^lambda / sum_g p_g(x)^lambda``.

``covariance_type`` says what ``U_h`` is, as in ``sklearn.mixture.GaussianMixture`` (an
object of :mod:`attnclust.cluster.mixture.covariance`, which owns the operations that depend on
it; the functions here take the name and resolve it once, at their entry):

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

from ..._validation import as_tensor, check_inverse_temperature
from ...layer.heads import softmax_heads
from .covariance import COVARIANCE_TYPES, Covariance, as_covariance

__all__ = ["COVARIANCE_TYPES", "check_covariance_type", "whitened_norms", "mahalanobis",
           "log_det_precision",
           "precision_trace", "shaped_logits", "shaped_weights", "shaped_attention",
           "ShapedAttentionHeads"]


def check_covariance_type(covariance_type) -> str:
    """The name of ``covariance_type`` if it is one of :data:`COVARIANCE_TYPES` (or a
    :class:`~attnclust.cluster.mixture.covariance.Covariance`), else a ``ValueError``.

    Examples
    --------
    >>> check_covariance_type("full")
    'full'
    """
    return as_covariance(covariance_type).name


# the functions below take ``covariance_type`` as a name (or a Covariance) and resolve it
# once: the operations are the covariance object's (:mod:`attnclust.cluster.mixture.covariance`)
def whitened_norms(diff: torch.Tensor, precisions_cholesky: torch.Tensor,
                   covariance_type: str | Covariance) -> torch.Tensor:
    """``||d U_h||^2`` of differences ``(K, N, d)`` (row ``h`` against head ``h``): ``(K, N)``.

    Examples
    --------
    >>> whitened_norms(torch.tensor([[[2.0, 1.0]]]), torch.tensor([[2.0, 1.0]]), "diag")
    tensor([[17.]])
    """
    return as_covariance(covariance_type).whitened_norms(diff, precisions_cholesky)


def mahalanobis(x: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                covariance_type: str | Covariance) -> torch.Tensor:
    """Squared distances ``||(x - mu_h) U_h||^2`` of tokens ``(..., d)`` to heads: ``(..., K)``.

    Examples
    --------
    >>> mahalanobis(torch.tensor([[2.0, 1.0]]), torch.zeros(1, 2), torch.tensor([0.5]),
    ...             "spherical")
    tensor([[1.2500]])
    """
    return as_covariance(covariance_type).mahalanobis(x, means, precisions_cholesky)


def log_det_precision(precisions_cholesky: torch.Tensor, covariance_type: str | Covariance,
                      n_features: int) -> torch.Tensor:
    """``log det P_h = 2 sum_j log (U_h)_jj``, shape ``(K,)``.

    Examples
    --------
    >>> log_det_precision(torch.tensor([2.0]), "spherical", 3)
    tensor([4.1589])
    """
    return as_covariance(covariance_type).log_det_precision(precisions_cholesky, n_features)


def precision_trace(precisions_cholesky: torch.Tensor, covariance_type: str | Covariance,
                    floor: torch.Tensor) -> torch.Tensor:
    """``tr(P_h D) = sum_j D_j (P_h)_jj`` for a diagonal ``D = diag(floor)``, shape ``(K,)``.

    The term of the fit's objective that a covariance floor ``D`` adds
    (:mod:`attnclust.cluster.mixture.tempered`).

    Examples
    --------
    >>> precision_trace(torch.tensor([2.0]), "spherical", torch.ones(3))
    tensor([12.])
    """
    return as_covariance(covariance_type).precision_trace(precisions_cholesky, floor)


def shaped_logits(x: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                  log_weights: torch.Tensor | None = None, *, inverse_temperature: float,
                  covariance_type: str | Covariance = "full") -> torch.Tensor:
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
    covariance_type : {"full", "diag", "spherical"} or Covariance, default="full"

    Returns
    -------
    Tensor of shape (..., K)

    Examples
    --------
    >>> u = torch.tensor([[[1.0, 0.0], [0.0, 4.0]], [[1.0, 0.0], [0.0, 1.0]]])
    >>> shaped_logits(torch.tensor([0.0, 1.0]), torch.zeros(2, 2), u, inverse_temperature=1.0)
    tensor([-6.6137, -0.5000])
    """
    return as_covariance(covariance_type).logits(x, means, precisions_cholesky, log_weights,
                                                 inverse_temperature)


def shaped_weights(x, means, precisions_cholesky, log_weights=None, *,
                   inverse_temperature: float = 1.0, covariance_type: str | Covariance = "full"
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
    return softmax_heads(cov.logits(x, means, factors, log_weights, lam))


def shaped_attention(x, means, precisions_cholesky, log_weights=None, *,
                     inverse_temperature: float = 1.0, covariance_type: str | Covariance = "full"
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
    return softmax_heads(cov.logits(x, means, factors, log_weights, lam)) @ means


def _inputs(x, means, factors, log_weights, inverse_temperature, covariance_type):
    """Tensors in the means' dtype and device, the checked scalar and the covariance
    type (resolved here, once)."""
    means = as_tensor(means, name="means")
    kw = dict(dtype=means.dtype, device=means.device)
    x = as_tensor(x, name="x", **kw)
    factors = as_tensor(factors, name="precisions_cholesky", **kw)
    if log_weights is not None:
        log_weights = as_tensor(log_weights, name="log_weights", **kw)
    cov = as_covariance(covariance_type)
    expected = cov.shape(*means.shape) if means.ndim == 2 else None
    if expected is None or tuple(factors.shape) != tuple(expected):
        raise ValueError(f"precisions_cholesky must have shape {expected} for "
                         f"covariance_type={cov.name!r}, got {tuple(factors.shape)}")
    if factors.ndim == 3 and not torch.equal(factors, torch.triu(factors)):
        raise ValueError("precisions_cholesky must be upper triangular, as GaussianMixture's "
                         "(U with U U^T the precision): from a covariance's Cholesky factor C, "
                         "U = inv(C)^T")
    if not bool((cov.diagonal(factors) > 0).all()):
        raise ValueError("precisions_cholesky must have a positive diagonal")
    if log_weights is not None and tuple(log_weights.shape) != (means.shape[0],):
        raise ValueError(f"log_weights must have shape ({means.shape[0]},), one per head, "
                         f"got {tuple(log_weights.shape)}")
    if x.ndim < 1 or x.shape[-1] != means.shape[1]:
        raise ValueError(f"x must have shape (..., {means.shape[1]}) as the means, got "
                         f"{tuple(x.shape)}")
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
    >>> from attnclust.cluster.mixture.shaped import ShapedAttentionHeads
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
        if means.ndim != 2 or 0 in means.shape:
            raise ValueError(f"means must have shape (K, d) with K, d >= 1, got "
                             f"{tuple(means.shape)}")
        cov = self._covariance = as_covariance(covariance_type)
        self.covariance_type = cov.name
        self.inverse_temperature = check_inverse_temperature(inverse_temperature)
        k, d = means.shape
        kw = dict(dtype=means.dtype, device=means.device)
        if precisions_cholesky is None:
            factors = cov.unit(k, d, **kw).clone()
        else:
            _, _, factors, _, _, _ = _inputs(means[:1], means, precisions_cholesky, None, 1.0,
                                             cov)
        diag = cov.diagonal(factors)                   # positive: unit, or checked there
        self.means = nn.Parameter(means)
        self.log_diagonal = nn.Parameter(diag.log().clone())
        upper = cov.strict_upper(factors)
        if upper is not None:
            self.upper = nn.Parameter(upper)
        weights = torch.full((k,), 1.0 / k, **kw) if weights is None else as_tensor(
            weights, name="weights", **kw)
        if weights.shape != (k,) or not bool((weights > 0).all()):
            raise ValueError(f"weights must be {k} positive numbers, got {weights.tolist()}")
        self.log_weights = nn.Parameter(weights.log().clone())

    @property
    def precisions_cholesky(self) -> torch.Tensor:
        """``U_h``: ``(K, d, d)`` upper triangular, ``(K, d)`` or ``(K,)``."""
        return self._covariance.from_parts(self.log_diagonal, getattr(self, "upper", None))

    @property
    def precisions(self) -> torch.Tensor:
        """``P_h = U_h U_h^T`` (``(K, d, d)``; per-coordinate or scalar for diag/spherical)."""
        return self._covariance.precisions(self.precisions_cholesky)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``s_h(x)``, shape ``(..., K)``."""
        if not isinstance(x, torch.Tensor):
            x = as_tensor(x, name="x", dtype=self.means.dtype, device=self.means.device)
        dtype = x.dtype
        return self._covariance.logits(x, self.means.to(dtype),
                                       self.precisions_cholesky.to(dtype),
                                       torch.log_softmax(self.log_weights, 0).to(dtype),
                                       self.inverse_temperature)

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


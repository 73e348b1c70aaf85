"""The heads' query-key metric, as an object: ``covariance_type`` of shaped heads.

Head ``h`` of a shaped layer (:mod:`attnclust.cluster.mixture.shaped`) scores a token by the
log-joint of a Gaussian component, tempered by ``lambda``,

    s_h(x) = lambda ( -1/2 ||(x - mu_h) U_h||^2 + log pi_h + 1/2 log det P_h ),

with ``P_h = U_h U_h^T`` (``U_h`` the upper-triangular Cholesky factor of the precision,
scikit-learn's ``precisions_cholesky_``). A covariance type fixes what ``U_h`` is, as in
``sklearn.mixture.GaussianMixture``, and owns every operation that depends on it:

- :class:`Full`: ``U_h`` ``(K, d, d)`` upper triangular, ``Sigma_h`` any positive
  definite matrix;
- :class:`Diag`: ``U_h = diag(u_h)``, stored ``(K, d)``: axis-aligned cells;
- :class:`Spherical`: ``U_h = u_h I``, stored ``(K,)``: one scale per head. For the
  estimator this is the unshaped layer (one isotropic metric shared by all heads, fitted
  on the risk): :attr:`Covariance.shaped` is ``False``.

As with :mod:`attnclust.layer.geometry`, the solvers call the object's operations and
never compare names; the user-facing string is resolved once by :func:`as_covariance`.
``"auto"`` resolves to :data:`AUTO`, the choice of a type per data set
(:mod:`attnclust.cluster.mixture.shape_choice`), known to :func:`as_covariance_type` (the
estimator's parameter) and not to :func:`as_covariance` (a layer's); until the choice is
made the fit is the unshaped layer's.

Both EMs use the same objects: on torch chunks (:mod:`~attnclust.cluster.mixture.tempered`)
and on NumPy rows held whole (:mod:`~attnclust.cluster.mixture.em`). The M-step
(:meth:`~Covariance.update`) sets ``Sigma_h = M_h + D``, ``M_h`` the weighted second
moments about the new mean and ``D = diag(r_1..r_d)`` the floor (``"diag"``: their
diagonals, ``"spherical"``: their means over the features); it and the floor ratio take
either library's arrays.

Notation
--------
============  =========================  ==============================================
paper         code                       meaning
============  =========================  ==============================================
``U_h``       ``factors[h]``             Cholesky factor of the precision ``P_h``
``Sigma_h``   ``covariances[h]``         covariance, ``P_h^{-1}``
``D``         ``floor``                  covariance floor ``(r_1..r_d)``, ``(d,)``
``pi_h``      ``log_weights`` (its log)  mixing weight
``lambda``    ``lam``                    tempering of the logits, ``> 0``
============  =========================  ==============================================
"""

from __future__ import annotations

import functools
import math
import warnings
from abc import ABC, abstractmethod

import numpy as np
import torch

from ...layer.geometry import Stateless
from ..degenerate import DegenerateFitWarning, user_stacklevel
from .floor import spread_features

__all__ = ["AUTO", "COVARIANCE_TYPES", "Covariance", "Diag", "Full", "ShapeChoiceMarker",
           "Spherical", "as_covariance", "as_covariance_type", "positive_factors"]

_LOG_2PI = math.log(2.0 * math.pi)
MOMENT_NUMBERS = 2_000_000   # full covariances: rows x d (d + 1) / 2 moments kept, at most


def _lib(a):
    """The array library of ``a``: torch for a tensor, else NumPy."""
    return torch if isinstance(a, torch.Tensor) else np


def _nonnegative(a):
    """``max(a, 0)`` of a tensor or an array (cheaper than ``np.clip``)."""
    return a.clamp_min(0.0) if isinstance(a, torch.Tensor) else np.maximum(a, 0.0)


class Covariance(Stateless, ABC):
    """What a head's precision factor ``U_h`` is, and the operations that depend on it.

    Attributes
    ----------
    name : str
        The user-facing name (``covariance_type="..."``).
    shaped : bool
        Whether the estimator fits each head its own metric and weight (tempered EM,
        :mod:`attnclust.cluster.mixture.tempered`) rather than the risk's unshaped layer.
    """

    name: str
    shaped: bool
    automatic = False     # the covariance type is the fit's (see :class:`ShapeChoiceMarker`)
    joint = False         # one covariance over all features: d + 1 rows give it full rank

    # -- shapes -----------------------------------------------------------------------------
    @abstractmethod
    def shape(self, n_heads: int, n_features: int) -> tuple[int, ...]:
        """Shape of the covariances and of the factors of ``n_heads`` heads."""

    @abstractmethod
    def unit(self, n_heads: int, n_features: int, *, dtype=None, device=None) -> torch.Tensor:
        """Unit covariances (and factors): the identity for every head."""

    @abstractmethod
    def n_parameters(self, n_heads: int, n_features: int) -> int:
        """Free parameters of the mixture: means, weights (summing to one) and covariances
        (for an information criterion such as BIC)."""

    # -- the layer ----------------------------------------------------------------------------
    @abstractmethod
    def whitened_norms(self, diff: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
        """``||d U_h||^2`` of differences ``(K, N, d)`` (row ``h`` against head ``h``):
        ``(K, N)``."""

    @abstractmethod
    def log_det_precision(self, factors: torch.Tensor, n_features: int) -> torch.Tensor:
        """``log det P_h = 2 sum_j log (U_h)_jj``, shape ``(K,)``."""

    @abstractmethod
    def precision_trace(self, factors: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
        """``tr(P_h D) = sum_j D_j (P_h)_jj`` for ``D = diag(floor)``, shape ``(K,)``."""

    @abstractmethod
    def precisions(self, factors):
        """``P_h = U_h U_h^T`` in the factors' layout; tensors or NumPy arrays."""

    @abstractmethod
    def diagonal(self, factors: torch.Tensor) -> torch.Tensor:
        """The diagonal of the factors (all of them but for ``"full"``)."""

    def strict_upper(self, factors: torch.Tensor) -> torch.Tensor | None:
        """The factors' strict upper triangle, ``None`` when they have none."""
        return None

    def from_parts(self, log_diagonal: torch.Tensor, upper: torch.Tensor | None
                   ) -> torch.Tensor:
        """Factors from the log of their diagonal and their strict upper triangle (the
        unconstrained parameters of :class:`~.shaped.ShapedAttentionHeads`)."""
        return log_diagonal.exp()

    def mahalanobis(self, x: torch.Tensor, means: torch.Tensor, factors: torch.Tensor
                    ) -> torch.Tensor:
        """Squared distances ``||(x - mu_h) U_h||^2`` of tokens ``(..., d)``: ``(..., K)``.

        Examples
        --------
        >>> Spherical().mahalanobis(torch.tensor([[2.0, 1.0]]), torch.zeros(1, 2),
        ...                         torch.tensor([0.5]))
        tensor([[1.2500]])
        """
        k, d = means.shape
        diff = x.reshape(-1, d).unsqueeze(0) - means[:, None]                   # (K, N, d)
        dist = self.whitened_norms(diff, factors)                               # (K, N)
        return dist.T.reshape(*x.shape[:-1], k)

    def logits(self, x: torch.Tensor, means: torch.Tensor, factors: torch.Tensor,
               log_weights: torch.Tensor | None, lam: float) -> torch.Tensor:
        """``s_h(x) = lambda (-1/2 ||(x - mu_h) U_h||^2 + log pi_h + 1/2 log det P_h)``
        (``log_weights=None``: equal weights, a constant left out), ``(..., K)``."""
        d = means.shape[-1]
        logits = -0.5 * self.mahalanobis(x, means, factors)
        logits = logits + 0.5 * self.log_det_precision(factors, d)
        if log_weights is not None:
            logits = logits + log_weights
        return lam * logits

    def log_joint(self, x: torch.Tensor, means: torch.Tensor, factors: torch.Tensor,
                  log_weights: torch.Tensor, lam: float, floor: torch.Tensor | None = None
                  ) -> torch.Tensor:
        """``lambda l~_h(x)``: :meth:`logits` with the density's ``-d/2 log 2 pi`` and the
        floor's ``-(1/2) tr(P_h D)`` in the bias (the E-step's logits; their log-sum-exp
        over ``lambda`` is the tempered log-likelihood of ``x``)."""
        d = means.shape[-1]
        bias = log_weights - 0.5 * d * _LOG_2PI
        if floor is not None:
            bias = bias - 0.5 * self.precision_trace(factors, floor.to(factors.dtype))
        return self.logits(x, means, factors, bias, lam)

    # -- the M-step ---------------------------------------------------------------------------
    def moments(self, diff: torch.Tensor, qw: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """First and second moments ``sum_i qw_hi (x_i - mu_h)(...)`` of a chunk's
        differences ``(K, n, d)``, in float64 (float32's err by the floor's size: a full
        head lost positive definiteness): ``(K, d)`` and the shape of the covariances."""
        weighted = qw.double()[..., None] * diff.double()                       # (K, n, d)
        return weighted.sum(1), self._second(weighted, diff.double())

    @abstractmethod
    def _second(self, weighted: torch.Tensor, diff: torch.Tensor) -> torch.Tensor:
        """The second moments of :meth:`moments`."""

    @abstractmethod
    def update(self, second, n, shift, floor, alive, previous):
        """The M-step's covariances: the second moments ``second`` (about the old means,
        or the origin) over the counts ``n``, less the means' ``shift`` from there, plus
        the floor; a head not ``alive`` keeps its ``previous`` covariance."""

    @abstractmethod
    def marginal(self, covariances, keep):
        """The covariances of the features ``keep`` ``(d,)`` bool: a Gaussian's marginal."""

    @abstractmethod
    def floor_ratio(self, covariances, floor, features=None):
        """Each head's smallest covariance in units of the floor, ``(K,)`` (``>= 1``): for
        diag and full heads in the ``features`` ``(d,)`` bool (``None``: those with spread
        in the data, :func:`~attnclust.cluster.mixture.floor.spread_features`), for
        spherical ones their one variance over the floor's mean."""

    # -- rows read whole (NumPy) -------------------------------------------------------------
    @abstractmethod
    def row_moments(self, X: np.ndarray, n_heads: int) -> np.ndarray | None:
        """Per-row second moments ``(n, m)`` in the covariances' layout (``None``: too
        many to keep; :meth:`second_moments` then forms them head by head)."""

    @abstractmethod
    def second_moments(self, rw: np.ndarray, X: np.ndarray, moments: np.ndarray | None
                       ) -> np.ndarray:
        """``sum_i rw_hi x_i x_i^T`` about the origin, in the covariances' layout, from the
        weights ``rw`` ``(K, n)`` and the rows' :meth:`row_moments`."""

    @abstractmethod
    def whole_quadratic(self, X: np.ndarray, XT: np.ndarray, moments: np.ndarray | None,
                        means: np.ndarray, covariances: np.ndarray, floor: np.ndarray):
        """``||(x - mu_h) U_h||^2`` of rows ``X`` ``(n, d)`` (``XT``: ``X.T`` in C order),
        heads by rows ``(K, n)``, ``log det P_h`` and ``tr(P_h D)`` ``(K,)``."""

    @abstractmethod
    def factors(self, covariances: torch.Tensor) -> torch.Tensor:
        """``U_h`` (``U_h U_h^T = Sigma_h^{-1}``); ``ValueError`` when a covariance is not
        positive definite."""

    @abstractmethod
    def jittered(self, covariances: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """Covariances with ``scale`` ``(K,)`` added to their diagonal (negative variances
        of rounding clamped to zero first)."""


class _Axes(Covariance):
    """Covariances diagonal in the features' axes (factors ``u_h`` of ``U_h = diag(u_h)``,
    per feature or one per head): what :class:`Spherical` and :class:`Diag` share."""

    def precisions(self, factors):
        return factors * factors

    def diagonal(self, factors):
        return factors

    def factors(self, covariances):
        return _inverse_sqrt(covariances)

    def jittered(self, covariances, scale):
        return covariances.clamp_min(0) + scale.reshape((-1,) + (1,) * (covariances.dim() - 1))

    def whole_quadratic(self, X, XT, moments, means, covariances, floor):
        """The quadratic form from the rows' second moments, less the cross terms (three
        products, no ``(K, n, d)`` array; rows centred, so the cancellation is bounded by
        the spread, not the offset)."""
        K, d = means.shape
        P = (1.0 / covariances).reshape(K, -1)                  # (K, d) or (K, 1)
        Pm = P * means
        quad = P @ moments.T - 2.0 * (Pm @ XT) + (Pm * means).sum(1)[:, None]
        return quad, np.log(P).sum(1) * (d // P.shape[1]), (P * floor).sum(1)


class Spherical(_Axes):
    """``U_h = u_h I`` (factors ``(K,)``): one scale per head; the estimator's unshaped
    layer.

    Examples
    --------
    >>> Spherical().log_det_precision(torch.tensor([2.0]), 3)
    tensor([4.1589])
    >>> Spherical().n_parameters(3, 2)
    11
    """

    name = "spherical"
    shaped = False

    def shape(self, n_heads, n_features):
        return (n_heads,)

    def unit(self, n_heads, n_features, *, dtype=None, device=None):
        return torch.ones((n_heads,), dtype=dtype, device=device)

    def n_parameters(self, n_heads, n_features):
        return n_heads * n_features + n_heads - 1 + n_heads

    def whitened_norms(self, diff, factors):
        return (diff * diff).sum(-1) * (factors * factors)[:, None]

    def log_det_precision(self, factors, n_features):
        return 2.0 * n_features * factors.log()

    def precision_trace(self, factors, floor):
        return factors * factors * floor.sum()

    def _second(self, weighted, diff):
        return (weighted * diff).sum(1).double().sum(-1)     # summed in float64

    def update(self, second, n, shift, floor, alive, previous):
        spread = second / n - (shift * shift).sum(-1)
        covs = _nonnegative(spread) / shift.shape[1] + floor.mean()
        return _lib(second).where(alive, covs, previous)

    def marginal(self, covariances, keep):
        return covariances

    def floor_ratio(self, covariances, floor, features=None):
        return covariances / floor.mean()

    def row_moments(self, X, n_heads):
        return np.einsum("ij,ij->i", X, X)[:, None]

    def second_moments(self, rw, X, moments):
        return (rw @ moments)[:, 0]


class Diag(_Axes):
    """``U_h = diag(u_h)`` (factors ``(K, d)``): axis-aligned cells.

    Examples
    --------
    >>> Diag().whitened_norms(torch.tensor([[[2.0, 1.0]]]), torch.tensor([[2.0, 1.0]]))
    tensor([[17.]])
    >>> Diag().n_parameters(3, 2)
    14
    """

    name = "diag"
    shaped = True

    def shape(self, n_heads, n_features):
        return (n_heads, n_features)

    def unit(self, n_heads, n_features, *, dtype=None, device=None):
        return torch.ones((n_heads, n_features), dtype=dtype, device=device)

    def n_parameters(self, n_heads, n_features):
        return 2 * n_heads * n_features + n_heads - 1

    def whitened_norms(self, diff, factors):
        return (diff * diff * (factors * factors)[:, None]).sum(-1)

    def log_det_precision(self, factors, n_features):
        return 2.0 * factors.log().sum(-1)

    def precision_trace(self, factors, floor):
        return (factors * factors) @ floor

    def _second(self, weighted, diff):
        return (weighted * diff).sum(1)

    def update(self, second, n, shift, floor, alive, previous):
        spread = second / n[:, None] - shift * shift
        covs = _nonnegative(spread) + floor
        return _lib(second).where(alive[:, None], covs, previous)

    def marginal(self, covariances, keep):
        return covariances[:, keep]

    def floor_ratio(self, covariances, floor, features=None):
        read = spread_features(floor) if features is None else features
        return _lib(covariances).amin((covariances / floor)[..., read], -1)

    def row_moments(self, X, n_heads):
        return X * X

    def second_moments(self, rw, X, moments):
        return rw @ moments


class Full(Covariance):
    """``U_h`` upper triangular (factors ``(K, d, d)``): any positive definite covariance.

    Examples
    --------
    >>> c = torch.tensor([[[4.0, 2.0], [2.0, 2.0]]], dtype=torch.float64)
    >>> u = Full().factors(c)
    >>> torch.allclose(u @ u.mT, torch.linalg.inv(c))
    True
    >>> Full().n_parameters(3, 2)
    17
    """

    name = "full"
    shaped = True
    joint = True

    def shape(self, n_heads, n_features):
        return (n_heads, n_features, n_features)

    def unit(self, n_heads, n_features, *, dtype=None, device=None):
        eye = torch.eye(n_features, dtype=dtype, device=device)
        return eye.expand(n_heads, n_features, n_features)

    def n_parameters(self, n_heads, n_features):
        d = n_features
        return n_heads * (d + d * (d + 1) // 2) + n_heads - 1

    def whitened_norms(self, diff, factors):
        y = diff @ factors                                                      # (K, N, d)
        return (y * y).sum(-1)

    def log_det_precision(self, factors, n_features):
        return 2.0 * torch.diagonal(factors, dim1=-2, dim2=-1).log().sum(-1)

    def precision_trace(self, factors, floor):
        return (factors * factors).sum(-1) @ floor    # (P_h)_jj = sum_k (U_h)_jk^2

    def precisions(self, factors):
        return factors @ factors.swapaxes(-1, -2)

    def diagonal(self, factors):
        return torch.diagonal(factors, dim1=-2, dim2=-1)

    def strict_upper(self, factors):
        return torch.triu(factors, diagonal=1).clone()

    def from_parts(self, log_diagonal, upper):
        return torch.triu(upper, diagonal=1) + torch.diag_embed(log_diagonal.exp())

    def _second(self, weighted, diff):
        return weighted.mT @ diff                                               # (K, d, d)

    def update(self, second, n, shift, floor, alive, previous):
        lib = _lib(second)
        spread = second / n[:, None, None] - shift[:, :, None] * shift[:, None, :]
        spread = 0.5 * (spread + spread.swapaxes(-1, -2))
        covs = spread + lib.diag(floor)
        return lib.where(alive[:, None, None], covs, previous)

    def marginal(self, covariances, keep):
        return covariances[:, keep][:, :, keep]

    def floor_ratio(self, covariances, floor, features=None):
        lib = _lib(covariances)
        root = 1.0 / lib.sqrt(floor)  # the covariance in units of the floor: eigenvalues >= 1
        read = spread_features(floor) if features is None else features
        scaled = (covariances * root[:, None] * root)[:, read][:, :, read]
        return lib.linalg.eigvalsh(scaled)[:, 0]

    def row_moments(self, X, n_heads):
        """``x_j x_k`` for ``j <= k`` (``np.triu_indices(d)``'s order), kept where ``d (d +
        1) / 2 <= 4 K`` and ``MOMENT_NUMBERS`` bounds them: forming them costs more than a
        few steps of the products head by head where the heads are few."""
        n, d = X.shape
        m = d * (d + 1) // 2
        if m > 4 * n_heads or n * m > MOMENT_NUMBERS:
            return None
        XT = np.ascontiguousarray(X.T)       # rows of XT are contiguous: x_j x_k by rows
        return np.concatenate([XT[j:] * XT[j] for j in range(d)]).T

    def second_moments(self, rw, X, moments):
        if moments is None:
            XT = np.ascontiguousarray(X.T)
            second = np.stack([(XT * r) @ X for r in rw])                       # (K, d, d)
            return 0.5 * (second + second.transpose(0, 2, 1))
        d = X.shape[1]
        j, k = _upper_indices(d)
        upper = rw @ moments                                                    # (K, m)
        second = np.empty((len(rw), d, d))
        second[:, j, k] = upper
        second[:, k, j] = upper
        return second

    def whole_quadratic(self, X, XT, moments, means, covariances, floor):
        """The whitened rows ``L_h^{-1} (x - mu_h)`` of all heads in one product ``(K d,
        n)``, their squares summed head by head."""
        K, d = means.shape
        inv = _inverse_cholesky(covariances, self)                          # (K, d, d)
        log_det = 2.0 * np.log(np.abs(np.diagonal(inv, axis1=1, axis2=2))).sum(1)
        Z = inv.reshape(K * d, d) @ XT                     # row block h: L_h^{-1} x
        Z -= np.einsum("ked,kd->ke", inv, means).reshape(K * d, 1)
        Z *= Z
        return Z.reshape(K, d, -1).sum(1), log_det, (inv * inv).sum(1) @ floor

    def factors(self, covariances):
        chol, info = torch.linalg.cholesky_ex(covariances)
        if bool((info > 0).any()):
            bad = torch.nonzero(info > 0).flatten().tolist()
            raise ValueError(f"the covariance of head(s) {bad} is not positive definite")
        eye = torch.eye(covariances.shape[-1], dtype=covariances.dtype,
                        device=covariances.device)
        return torch.linalg.solve_triangular(chol, eye.expand_as(chol), upper=False).mT

    def jittered(self, covariances, scale):
        eye = torch.eye(covariances.shape[-1], dtype=covariances.dtype,
                        device=covariances.device)
        return covariances + scale[:, None, None] * eye


@functools.lru_cache(maxsize=64)
def _upper_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(d)``, made once per ``d`` (a third of a small full M-step)."""
    j, k = np.triu_indices(d)
    j.flags.writeable = k.flags.writeable = False
    return j, k


def _inverse_cholesky(covs: np.ndarray, cov: Covariance) -> np.ndarray:
    """``L_h^{-1}`` (``L_h L_h^T = Sigma_h``), with :func:`positive_factors`' jitter."""
    try:
        return np.linalg.inv(np.linalg.cholesky(covs))
    except np.linalg.LinAlgError:
        U = positive_factors(torch.from_numpy(np.ascontiguousarray(covs)), cov).numpy()
        return U.transpose(0, 2, 1)       # U U^T = Sigma^{-1}: U^T whitens as L^{-1} does


def positive_factors(covs: torch.Tensor, cov: Covariance) -> torch.Tensor:
    """The covariances' factors, with a jitter when rounding (or no floor) left a
    covariance that is not positive definite."""
    try:
        return cov.factors(covs)
    except ValueError:
        warnings.warn("a covariance lost positive definiteness (floor reg_covar too small "
                      "for this data); added 1e-10 of its largest entry to its diagonal",
                      DegenerateFitWarning, stacklevel=user_stacklevel())
        scale = covs.reshape(covs.shape[0], -1).abs().amax(-1).clamp_min(1e-300) * 1e-10
        return cov.factors(cov.jittered(covs, scale))


def _inverse_sqrt(covariances: torch.Tensor) -> torch.Tensor:
    """``Sigma^{-1/2}`` of positive (diagonal or scalar) covariances."""
    if not bool((covariances > 0).all()):
        raise ValueError("a covariance is not positive (a head without spread)")
    return covariances.rsqrt()


_REGISTRY: dict[str, Covariance] = {c.name: c for c in (Spherical(), Diag(), Full())}
COVARIANCE_TYPES = tuple(_REGISTRY)    # the covariance types ``as_covariance`` knows


class ShapeChoiceMarker:
    """``covariance_type="auto"``: the heads' shape is chosen by the fit among
    ``candidates`` (:mod:`~.shape_choice`); until then the plan is the unshaped layer's
    (``shaped`` is ``False``: warm start, ending and defaults of ``"spherical"``).

    Examples
    --------
    >>> AUTO.automatic, AUTO.shaped, AUTO.candidates
    (True, False, (Spherical(), Diag(), Full()))
    """

    name = "auto"
    shaped = False
    automatic = True
    candidates: tuple[Covariance, ...] = tuple(_REGISTRY.values())

    def __repr__(self) -> str:
        return "ShapeChoiceMarker()"


AUTO = ShapeChoiceMarker()


def as_covariance(covariance_type: str | Covariance) -> Covariance:
    """The covariance type named ``covariance_type`` (a :class:`Covariance` passes through).

    Examples
    --------
    >>> as_covariance("full")
    Full()
    >>> as_covariance("full").shaped, as_covariance("spherical").shaped
    (True, False)
    >>> as_covariance("tied")
    Traceback (most recent call last):
    ...
    ValueError: covariance_type must be 'spherical', 'diag' or 'full', got 'tied'
    """
    if isinstance(covariance_type, Covariance):
        return covariance_type
    if isinstance(covariance_type, str) and covariance_type in _REGISTRY:
        return _REGISTRY[covariance_type]
    raise ValueError(f"covariance_type must be 'spherical', 'diag' or 'full', got "
                     f"{covariance_type!r}")


def as_covariance_type(covariance_type) -> Covariance | ShapeChoiceMarker:
    """The estimator's ``covariance_type``: a covariance type, or ``"auto"``
    (:data:`AUTO`, the shape chosen by the fit).

    Examples
    --------
    >>> as_covariance_type("auto").automatic, as_covariance_type("diag")
    (True, Diag())
    >>> as_covariance_type("tied")
    Traceback (most recent call last):
    ...
    ValueError: covariance_type must be 'spherical', 'diag', 'full' or 'auto', got 'tied'
    """
    if isinstance(covariance_type, ShapeChoiceMarker):
        return covariance_type
    if isinstance(covariance_type, str) and covariance_type == AUTO.name:
        return AUTO
    try:
        return as_covariance(covariance_type)
    except ValueError:
        raise ValueError(f"covariance_type must be 'spherical', 'diag', 'full' or 'auto', "
                         f"got {covariance_type!r}") from None

"""The mixture a fitted layer describes: its log-density and parameter count.

The attention of a fitted layer is the posterior of a mixture, so every fit, whatever its
heads' shape, scores rows by one quantity, the log-likelihood ``log p(x)`` of that
mixture (``AttentionClustering.score_samples``; ``score``, ``bic`` and ``aic`` follow as in
``sklearn.mixture.GaussianMixture``):

- Euclidean heads of one isotropic metric (``covariance_type="spherical"``):
  ``softmax_h(-lambda ||x - mu_h||^2 / 2)`` is the posterior of the equal-weight mixture
  of ``N(mu_h, I / lambda)``,

      p(x) = (1/K) sum_h N(x; mu_h, I / lambda);

- shaped heads (``"diag"``, ``"full"``): ``p(x) = sum_h pi_h N(x; mu_h, Sigma_h)``, the
  mixture itself (untempered, whatever the fit's tempering; the covariance floor is
  already in ``Sigma_h``), and with a noise head the uniform background ``pi_0 / V``
  among the components;
- unit heads (``geometry="sphere"``): ``softmax_h(lambda <x, mu_h>)`` is the posterior of
  the equal-weight mixture of von Mises-Fisher densities on the unit sphere
  ``S^{d-1}`` with concentration ``kappa = lambda``,

      p(x) = (1/K) sum_h C_d(kappa) exp(kappa <x, mu_h>),
      C_d(kappa) = kappa^{d/2 - 1} / ((2 pi)^{d/2} I_{d/2 - 1}(kappa)),

  a density with respect to the surface measure of the sphere (``I_v`` the modified
  Bessel function of the first kind, read as ``scipy.special.ive`` for stability).

The free parameters (for BIC and AIC) are those of each mixture: ``K d`` means and
``lambda`` (spherical heads), ``K (d - 1)`` unit heads and ``kappa`` (the sphere), or
the means, covariances and ``K - 1`` weights of ``sklearn.mixture.GaussianMixture``
(shaped heads; one more weight with the noise head).

Notation
--------
=============  ========================  =============================================
paper          code                      meaning
=============  ========================  =============================================
``mu_h``       ``centers``               heads, ``(K, d)``
``lambda``     ``inverse_temperature``   inverse temperature (``kappa`` on the sphere)
``U_h``        ``precisions_cholesky``   Cholesky factor of the precision of head ``h``
``pi_h``       ``weights``               mixing weight of head ``h``
``C_d``        ``log_vmf_normalizer``    (its log) vMF normaliser on ``S^{d-1}``
=============  ========================  =============================================
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.special import ive
from sklearn.utils.validation import check_is_fitted

from ..._validation import check_sample_weight
from ...layer.geometry import Geometry
from .covariance import Covariance

__all__ = ["LikelihoodMixin", "log_vmf_normalizer", "mixture_log_density",
           "n_parameters", "spherical_log_density", "squared_distances",
           "vmf_log_density"]

_LOG_2PI = math.log(2.0 * math.pi)
_TINY = float(np.finfo(np.float64).tiny)


def squared_distances(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """``||x_i - mu_h||^2`` of rows ``(n, d)`` and centres ``(K, d)``: ``(n, K)``, from the
    differences (no ``||x||^2 - 2 <x, mu> + ||mu||^2`` cancellation far from the origin).

    Examples
    --------
    >>> squared_distances(torch.tensor([[1e8 + 1.0, 0.0]], dtype=torch.float64),
    ...                   torch.tensor([[1e8, 0.0], [1e8, 2.0]], dtype=torch.float64))
    tensor([[1., 5.]], dtype=torch.float64)
    """
    dist = torch.cdist(X, centers, compute_mode="donot_use_mm_for_euclid_dist")
    return dist * dist


def spherical_log_density(X: torch.Tensor, centers: torch.Tensor,
                          inverse_temperature: float) -> torch.Tensor:
    """``log (1/K) sum_h N(x; mu_h, I / lambda)`` of rows ``(n, d)``: ``(n,)``.

    Examples
    --------
    >>> x = torch.zeros(1, 2, dtype=torch.float64)
    >>> float(spherical_log_density(x, x, 1.0)) == -math.log(2 * math.pi)
    True
    """
    lam, (K, d) = float(inverse_temperature), centers.shape
    logits = -0.5 * lam * squared_distances(X, centers)                   # (n, K)
    return torch.logsumexp(logits, dim=1) - math.log(K) + 0.5 * d * (math.log(lam) - _LOG_2PI)


def _log_bessel_iv(v: float, kappa: float) -> float:
    """``log I_v(kappa)`` for ``v >= -1/2``, ``kappa > 0``: ``log ive + kappa``, or
    where ``ive`` underflows (a large order ``v`` at a small ``kappa``, or a tiny
    ``kappa``): the power series ``sum_m (kappa/2)^{v+2m} / (m! Gamma(v+m+1))`` where
    ``kappa^2 / 4 <= 1e-3 (v + 1)``, else :func:`_log_bessel_iv_uniform` (then ``v`` is
    large: ``(kappa/2)^v / Gamma(v + 1)`` underflows)."""
    scaled = float(ive(v, kappa))
    if _TINY <= scaled < math.inf:       # not subnormal: all its digits
        return math.log(scaled) + kappa
    if kappa > 1e3 * (v * v + 1.0):      # ive is NaN from kappa ~ 1e10: Hankel's expansion
        return _log_bessel_iv_large(v, kappa)
    y = 0.25 * kappa * kappa
    if y <= 1e-3 * (v + 1.0):            # the series' first three terms, to 2e-10
        return v * math.log(0.5 * kappa) - math.lgamma(v + 1.0) + math.log1p(
            y / (v + 1.0) * (1.0 + y / (2.0 * (v + 2.0))))
    return _log_bessel_iv_uniform(v, kappa)


def _log_bessel_iv_large(v: float, kappa: float) -> float:
    """``log I_v(kappa)`` for ``kappa >> v^2`` by Hankel's expansion (DLMF 10.40.1) to its
    fourth term: ``e^kappa / sqrt(2 pi kappa)`` times ``1 - (mu - 1) / (8 kappa) + (mu - 1)
    (mu - 9) / (2! (8 kappa)^2) - ...``, ``mu = 4 v^2``; relative error below ``(mu /
    8 kappa)^4`` (1e-12 where ``kappa > 1e3 (v^2 + 1)``)."""
    mu, x = 4.0 * v * v, 1.0 / (8.0 * kappa)
    series = x * (mu - 1.0) * (-1.0 + x * (mu - 9.0) / 2.0 * (1.0 - x * (mu - 25.0) / 3.0))
    return kappa - 0.5 * math.log(2.0 * math.pi * kappa) + math.log1p(series)


def _log_bessel_iv_uniform(v: float, kappa: float) -> float:
    """``log I_v(kappa)`` for ``v > 0`` by the uniform asymptotic expansion of ``I_v(v z)``
    in ``1/v`` to its second term (DLMF 10.41.3; relative error ``O(v^-3)`` in ``I_v``)."""
    z = kappa / v
    root = math.sqrt(1.0 + z * z)
    t = 1.0 / root
    eta = root + math.log(z / (1.0 + root))
    u1 = (3.0 * t - 5.0 * t**3) / 24.0
    u2 = (81.0 * t**2 - 462.0 * t**4 + 385.0 * t**6) / 1152.0
    return (-0.5 * math.log(2.0 * math.pi * v) + v * eta + 0.5 * math.log(t)
            + math.log1p(u1 / v + u2 / (v * v)))


def log_vmf_normalizer(kappa: float, n_features: int) -> float:
    """``log C_d(kappa)`` of the von Mises-Fisher density ``C_d(kappa) exp(kappa <x, mu>)``
    on the unit sphere of ``R^d`` (``d = n_features``), with respect to its surface
    measure.

    Examples
    --------
    >>> # d = 3: C_3(kappa) = kappa / (4 pi sinh kappa)
    >>> abs(log_vmf_normalizer(2.0, 3) - math.log(2.0 / (4 * math.pi * math.sinh(2.0)))) < 1e-12
    True
    """
    kappa, v = float(kappa), 0.5 * n_features - 1.0
    if not kappa > 0:
        raise ValueError(f"kappa={kappa!r}: the concentration of a von Mises-Fisher density "
                         "must be positive")
    log_iv = _log_bessel_iv(v, kappa)      # d = 1: v = -1/2, I_{-1/2}(k) ~ cosh k
    return v * math.log(kappa) - 0.5 * n_features * _LOG_2PI - log_iv


def vmf_log_density(X: torch.Tensor, centers: torch.Tensor, kappa: float) -> torch.Tensor:
    """``log (1/K) sum_h C_d(kappa) exp(kappa <x, mu_h>)`` of rows ``(n, d)`` on the unit
    sphere and unit heads ``(K, d)``: ``(n,)``.

    Examples
    --------
    >>> x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> vmf_log_density(x, x, 3.0).tolist() == 2 * [float(vmf_log_density(x[:1], x, 3.0))]
    True
    """
    kappa = float(kappa)
    logits = kappa * (X @ centers.T)                                       # (n, K)
    return torch.logsumexp(logits, dim=1) - math.log(centers.shape[0]) + \
        log_vmf_normalizer(kappa, centers.shape[1])


def mixture_log_density(X: torch.Tensor, means: torch.Tensor, precisions_cholesky: torch.Tensor,
                        weights: torch.Tensor, covariance: Covariance, *,
                        noise_log_joint: float | None = None) -> torch.Tensor:
    """``log (sum_h pi_h N(x; mu_h, Sigma_h) + pi_0 / V)`` of rows ``(n, d)``: ``(n,)``, the
    precisions given by their Cholesky factors (``covariance``'s layout, as
    ``GaussianMixture.precisions_cholesky_``); ``noise_log_joint``: ``log(pi_0 / V)`` of a
    uniform background, when there is one. Rows and means are centred on the means' mean
    (precision far from the origin).

    Examples
    --------
    >>> from attnclust.cluster.mixture.covariance import Diag
    >>> x = torch.zeros(1, 2, dtype=torch.float64)
    >>> float(mixture_log_density(x, x, torch.ones(1, 2, dtype=torch.float64),
    ...                           torch.ones(1, dtype=torch.float64), Diag())) == \\
    ...     -math.log(2 * math.pi)
    True
    """
    center = means.mean(0)
    joint = covariance.log_joint(X - center, means - center, precisions_cholesky,
                                 weights.log(), 1.0)                        # (n, K)
    if noise_log_joint is not None:
        joint = torch.cat([joint, joint.new_full((len(joint), 1), noise_log_joint)], 1)
    return torch.logsumexp(joint, dim=1)


def n_parameters(n_clusters: int, n_features: int, *, geometry: Geometry,
                 covariance: Covariance, noise_head: bool = False) -> int:
    """Free parameters of the mixture of ``n_clusters`` heads in ``R^d``: unit heads
    ``K (d - 1) + 1`` (``kappa``), spherical Euclidean heads ``K d + 1`` (``lambda``),
    shaped heads ``GaussianMixture``'s count (means, covariances, ``K - 1`` weights), plus
    one for the noise head's weight.

    Examples
    --------
    >>> from attnclust.layer.geometry import as_geometry
    >>> from attnclust.cluster.mixture.covariance import Full, Spherical
    >>> n_parameters(3, 2, geometry=as_geometry("euclidean"), covariance=Full())
    17
    >>> n_parameters(3, 2, geometry=as_geometry("sphere"), covariance=Spherical())
    4
    """
    K, d = int(n_clusters), int(n_features)
    if geometry.unit_heads:
        return K * (d - 1) + 1
    if not covariance.shaped:
        return K * d + 1
    return covariance.n_parameters(K, d) + int(bool(noise_head))


class LikelihoodMixin:
    """``score_samples``, ``score``, ``bic`` and ``aic`` of an estimator whose fitted heads
    describe a mixture (see the module docstring); it reads the estimator's ``_by_chunks``
    (preprocessed rows in blocks) and ``_plan``.

    Examples
    --------
    The four scores of one fit, and two fits of different heads' shapes compared by BIC
    on two round blobs (the spherical heads' fewer parameters win):

    >>> import numpy as np
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.orthogonal(d=2, k=2, sigma=0.1).sample(200, rng=0)
    >>> sph = ac.AttentionClustering(2, covariance_type="spherical", random_state=0).fit(X)
    >>> sph.score_samples(X).shape, bool(sph.score(X) == sph.score_samples(X).mean())
    ((200,), True)
    >>> n, p = 200, 2 * 2 + 1            # rows; free parameters K d + 1
    >>> bool(abs(sph.bic(X) - (-2 * n * sph.score(X) + p * np.log(n))) < 1e-9)
    True
    >>> bool(abs(sph.aic(X) - (-2 * n * sph.score(X) + 2 * p)) < 1e-9)
    True
    >>> full = ac.AttentionClustering(2, covariance_type="full", random_state=0).fit(X)
    >>> bool(sph.bic(X) < full.bic(X))
    True
    """

    def score_samples(self, X) -> np.ndarray:
        """Log-likelihood ``log p(x)`` of each row under the mixture the fitted heads
        describe, shape (n_samples,), float64 (:mod:`attnclust.cluster.mixture.likelihood`).

        One meaning for every fit: spherical Euclidean heads, ``(1/K) sum_h N(mu_h, I /
        lambda)``; shaped heads, ``sum_h pi_h N(mu_h, Sigma_h)`` (untempered; with
        ``noise_head=True`` the uniform background among the components); unit heads
        (``geometry="sphere"``), the equal-weight von Mises-Fisher mixture with ``kappa =
        lambda``, a density on the unit sphere (of the rows projected there by
        ``normalize="rows"``; rows off the sphere are read as they are). The density is
        in the units of the rows given: ``normalize="center-scale"`` counts its Jacobian,
        ``-d log(scale_)``; after ``normalize="rows"`` it is a density of the projected
        rows, on the sphere.
        """
        check_is_fitted(self)
        plan = self._plan
        out = self._by_chunks(X, lambda Xp: self._log_density(
            torch.as_tensor(np.ascontiguousarray(Xp, dtype=np.float64),
                            device=plan.device)).cpu().numpy())
        scale = getattr(self, "scale_", None)
        return out if scale is None else out - self.n_features_in_ * math.log(float(scale))

    def _log_density(self, X: torch.Tensor) -> torch.Tensor:
        """``log p(x)`` of preprocessed rows (float64 tensor) ``(n,)``."""
        plan = self._plan

        def tensor(a):
            return torch.as_tensor(np.asarray(a, dtype=np.float64), device=X.device)
        centers = tensor(self.cluster_centers_)
        if plan.covariance.shaped:
            noise = self._noise_log_joint() if plan.noise_head else None
            return mixture_log_density(X, centers, tensor(self.precisions_cholesky_),
                                       tensor(self.weights_), plan.covariance,
                                       noise_log_joint=noise)
        if plan.geometry.unit_heads:
            return vmf_log_density(X, centers, self.inverse_temperature_)
        return spherical_log_density(X, centers, self.inverse_temperature_)

    def score(self, X, y=None, sample_weight=None) -> float:
        """Mean log-likelihood of the rows, ``mean score_samples(X)`` (higher is better; as
        ``GaussianMixture.score``), with ``sample_weight`` the weighted mean; ``y`` is
        ignored. Comparable across fits of any heads' shape on the same rows (and
        preprocessing).
        """
        logp = self.score_samples(X)
        weights = check_sample_weight(sample_weight, logp.shape[0])
        if weights is not None and not weights.sum() > 0:
            raise ValueError("sample_weight sums to zero: no row has a positive weight")
        return float(np.average(logp, weights=weights))

    def _n_parameters(self) -> int:
        """Free parameters of the fitted mixture (:func:`n_parameters`)."""
        check_is_fitted(self)
        plan = self._plan
        return n_parameters(len(self.cluster_centers_), self.n_features_in_,
                            geometry=plan.geometry, covariance=plan.covariance,
                            noise_head=plan.noise_head)

    def bic(self, X) -> float:
        """Bayesian information criterion of the fitted mixture on ``X``, ``-2 n score(X) +
        p log n`` (``p`` free parameters, :func:`n_parameters`; lower is better), as
        ``GaussianMixture.bic``.
        """
        n = self._validate(X, reset=False).shape[0]
        return -2.0 * self.score(X) * n + self._n_parameters() * math.log(n)

    def aic(self, X) -> float:
        """Akaike information criterion of the fitted mixture on ``X``, ``-2 n score(X) +
        2 p`` (lower is better), as ``GaussianMixture.aic``.
        """
        n = self._validate(X, reset=False).shape[0]
        return -2.0 * self.score(X) * n + 2.0 * self._n_parameters()

"""In-context quantization as a scikit-learn transformer: ``AttentionQuantizer``.

A thin shell over :func:`attnclust.study.in_context.identity_attention`. ``transform(X)``
treats the rows of ``X`` as one prompt of ``L`` tokens and returns
``Q_lambda(X)_i = sum_j softmax_j(lambda <X_i, X_j>) X_j``; ``fit`` only fixes the
inverse temperature ``lambda``.

The ``"auto"`` inverse temperature. The seeds' Figures 3 and 4 use ``lambda = 1 / (1 + 2
sigma^2)`` for clusters centred on the unit sphere with isotropic noise ``sigma``. For
the running example (two orthogonal unit centroids, equal weights) this is
``1 / (2 lambda_max)`` with ``lambda_max = 1/2 + sigma^2`` the largest eigenvalue of the
data covariance, the inverse temperature at which soft k-means first splits the data in two:
the layer is as sharp as it can be while staying on the smooth side of the split.
``fit`` estimates ``sigma`` from the data under the same model. As every centroid has
unit norm and the noise is independent of the cluster,

    E ||X||^2 = sum_k pi_k ||mu*_k||^2 + d sigma^2 = 1 + d sigma^2,

so ``sigma_hat^2 = max(0, mean_i ||x_i||^2 - 1) / d``: unbiased (before the clip) for
any number of clusters, any dimension (also ``d < K``, where the spectrum has no
noise-only direction) and ``sigma = 0``, with standard error
``sqrt((4 sigma^2 + 2 d sigma^4) / n) / d`` on ``sigma^2`` (about 1% of ``sigma`` for the
running example with ``n = 2000``; larger in low dimension and for small ``sigma``,
where the cross term ``2 sigma <mu*_k, xi>`` dominates: 7% of ``sigma`` for ``d = 3``,
``sigma = 0.1``). The estimate relies on the unit scale of the
centroids; data on another scale should be rescaled first, or given ``inverse_temperature``.

Notation
--------
============  ========================  ===========================================
paper         code                      meaning
============  ========================  ===========================================
``lambda``    ``inverse_temperature_``  inverse temperature used by ``transform``
``sigma``     ``sigma_``                estimated noise level (``"auto"`` only)
``d``         ``n_features_in_``        dimension of a token
============  ========================  ===========================================
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._deprecation import RenamedAttribute, RenamedParamsMixin, renamed_keywords
from .._validation import (
    as_numpy_input,
    check_device,
    check_inverse_temperature,
    readonly_tensor,
)
from .in_context import check_options, identity_attention

__all__ = ["AttentionQuantizer", "estimate_sigma"]


def estimate_sigma(X) -> float:
    """Noise level of clusters centred on the unit sphere, from the mean squared norm.

    ``sigma_hat = sqrt(max(0, mean_i ||x_i||^2 - 1) / d)``, since
    ``E ||X||^2 = 1 + d sigma^2`` when every centroid has unit norm.

    Parameters
    ----------
    X : array-like of shape (n, d)

    Returns
    -------
    float

    Examples
    --------
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3).sample(2000, rng=0)
    >>> round(estimate_sigma(X), 2)
    0.3
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.size == 0:
        raise ValueError(f"X must be a non-empty (n, d) array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf")
    peak = float(np.abs(X).max())
    if peak <= 1e150:                   # the squared norms stay within float64
        excess = np.mean(np.einsum("ij,ij->i", X, X)) - 1.0
        return float(np.sqrt(max(excess, 0.0) / X.shape[1]))
    U = X / peak                        # in units of the largest entry (1e200: no overflow)
    return peak * float(np.sqrt(max(np.mean(np.einsum("ij,ij->i", U, U)) - peak ** -2.0,
                                    0.0) / X.shape[1]))


class AttentionQuantizer(RenamedParamsMixin, TransformerMixin, BaseEstimator):
    """Parameter-free attention layer as a transformer: quantizes a prompt in context.

    ``transform(X)_i = sum_j softmax_j(lambda <X_i, X_j>) X_j`` over the rows of ``X``
    (one prompt), applied ``n_steps`` times.

    Parameters
    ----------
    inverse_temperature : float or "auto", default="auto"
        Inverse temperature ``lambda``; ``"auto"`` sets ``1 / (1 + 2 sigma_hat^2)`` with
        ``sigma_hat`` estimated by :func:`estimate_sigma` at ``fit``.
    n_steps : int, default=1
        Repeated applications of the layer.
    exclude_self : bool, default=False
        Leave each token out of its own softmax.
    renormalize : bool, default=False
        Project tokens to the unit sphere after each step.
    backend : {"auto", "dense", "fused", "chunked"}, default="auto"
    chunk_size : int or (int, int), optional
        Block sizes of the chunked backend.
    device : str, default="cpu"
        Torch device of the computation (e.g. ``"cuda"``), checked at ``fit``;
        ``transform`` returns NumPy. Tensor input (on any device, requiring grad or not)
        is detached and read like a NumPy array.

    Attributes
    ----------
    inverse_temperature_ : float
        The inverse temperature ``transform`` uses.
    sigma_ : float
        Estimated noise level (only with ``inverse_temperature="auto"``).
    n_features_in_ : int
        Dimension ``d`` of the tokens seen in ``fit``.

    Examples
    --------
    >>> import attnclust as ac
    >>> X = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3).sample(500, rng=0)
    >>> q = ac.AttentionQuantizer().fit(X)
    >>> round(q.inverse_temperature_, 2)
    0.85
    >>> q.transform(X).shape
    (500, 10)
    """

    temperature_ = RenamedAttribute("temperature_", "inverse_temperature_")  # until 0.5

    @renamed_keywords(temperature="inverse_temperature")
    def __init__(self, inverse_temperature="auto", *, n_steps=1, exclude_self=False,
                 renormalize=False, backend="auto", chunk_size=None, device="cpu"):
        self.inverse_temperature = inverse_temperature
        self.n_steps = n_steps
        self.exclude_self = exclude_self
        self.renormalize = renormalize
        self.backend = backend
        self.chunk_size = chunk_size
        self.device = device

    def fit(self, X, y=None):
        """Check ``X`` and fix the inverse temperature (estimating ``sigma`` for ``"auto"``).

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : ignored

        Returns
        -------
        self
        """
        X = validate_data(self, as_numpy_input(X), dtype=[np.float64, np.float32])
        check_device(self.device)
        check_options(self.n_steps, self.exclude_self, self.renormalize, self.backend,
                      self.chunk_size)
        if isinstance(self.inverse_temperature, str):
            if self.inverse_temperature != "auto":
                raise ValueError(f"inverse_temperature must be a positive number or 'auto', got "
                                 f"{self.inverse_temperature!r}")
            sigma = estimate_sigma(X)
            lam = 1.0 / (1.0 + 2.0 * sigma * sigma)
            if not lam > 0:                   # checked before the estimator is changed
                raise ValueError(f"the rows' noise level sigma_hat = {sigma:.3g} puts "
                                 "inverse_temperature='auto', 1 / (1 + 2 sigma_hat^2), below "
                                 "float64's range; rescale the rows (the layer expects "
                                 "centroids of unit norm)")
            self.sigma_, self.inverse_temperature_ = sigma, lam
        else:
            self.inverse_temperature_ = check_inverse_temperature(self.inverse_temperature)
            self.__dict__.pop("sigma_", None)          # an earlier "auto" fit's estimate
        return self

    def transform(self, X):
        """Quantize the rows of ``X``, taken as one prompt.

        Parameters
        ----------
        X : array-like of shape (L, d)

        Returns
        -------
        ndarray of shape (L, d)
        """
        check_is_fitted(self, "inverse_temperature_")
        X = validate_data(self, as_numpy_input(X), dtype=[np.float64, np.float32],
                          reset=False)
        device = check_device(self.device)
        Y = identity_attention(readonly_tensor(X).to(device), self.inverse_temperature_,
                               n_steps=self.n_steps, exclude_self=self.exclude_self,
                               renormalize=self.renormalize, backend=self.backend,
                               chunk_size=self.chunk_size)
        return Y.cpu().numpy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

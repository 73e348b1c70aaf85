"""Isotropic Gaussian mixtures with centroids on the unit sphere.

A token is ``X = mu*_Z + sigma * xi`` with ``Z ~ Cat(pi)`` and ``xi ~ N(0, I_d)``; a
prompt is ``L`` i.i.d. tokens. ``sigma = 0`` is the degenerate *Dirac mixture*, where
every token is one of the centroids.

Notation
--------
=============  ==================  =========================================
paper          code                meaning
=============  ==================  =========================================
``d``          ``d``               dimension of a token
``K``          ``k``               number of clusters
``mu*_k``      ``centroids[k]``    unit-norm centroid of cluster ``k``
``pi``         ``weights``         mixing proportions (sum to one)
``sigma``      ``sigma``           isotropic noise level, ``>= 0``
``Z``          ``labels``          latent cluster of a token
=============  ==================  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_generator, check_int, check_nonnegative

__all__ = ["GaussianMixture"]

_UNIT_TOL = 1e-8


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """Isotropic Gaussian mixture whose centroids lie on the unit sphere ``S^{d-1}``.

    Parameters
    ----------
    centroids : array-like of shape (k, d)
        Unit-norm centroids ``mu*_1..mu*_k``.
    sigma : float, default=0.0
        Standard deviation of the isotropic noise; ``0`` gives the Dirac mixture.
    weights : array-like of shape (k,), optional
        Mixing proportions ``pi``; uniform when omitted.

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> mix.k, mix.d, mix.sigma
    (2, 10, 0.3)
    >>> mix.sample(4, rng=0).shape
    (4, 10)

    Two mixtures are equal when their centroids, ``sigma`` and weights are equal by value;
    mixtures are hashable (usable as dict keys or in sets):

    >>> mix == ac.GaussianMixture(mix.centroids.copy(), sigma=0.3)
    True
    >>> len({mix, ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)})
    1
    """

    centroids: np.ndarray
    sigma: float = 0.0
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        centroids = np.array(self.centroids, dtype=np.float64)
        if centroids.ndim != 2 or centroids.shape[0] < 1 or centroids.shape[1] < 1:
            raise ValueError(
                f"centroids must be a non-empty (k, d) array, got shape {centroids.shape}"
            )
        if not np.all(np.isfinite(centroids)):
            raise ValueError("centroids contain NaN or inf")
        given = np.asarray(self.centroids).dtype        # float32 unit rows are off by ~1e-8
        coarse = given.kind == "f" and np.finfo(given).eps > np.finfo(np.float64).eps
        tol = 4 * (centroids.shape[1] + 1) * np.finfo(given).eps if coarse else _UNIT_TOL
        norms = np.linalg.norm(centroids, axis=1)
        if np.any(np.abs(norms - 1.0) > tol):
            raise ValueError(f"centroids must have unit norm, got norms off 1 by up to "
                             f"{np.abs(norms - 1.0).max():.3g} (allowed {tol:.2g})")
        if coarse:                                      # unit in float64, as the risks read
            centroids = centroids / norms[:, None]
        sigma = check_nonnegative(self.sigma, "sigma")
        k = centroids.shape[0]
        if self.weights is None:
            weights = np.full(k, 1.0 / k)
        else:
            weights = np.array(self.weights, dtype=np.float64)
            if weights.shape != (k,):
                raise ValueError(f"weights must have shape ({k},), got {weights.shape}")
            if np.any(~np.isfinite(weights)) or np.any(weights < 0):
                raise ValueError(f"weights must be finite and >= 0, got {weights}")
            if abs(weights.sum() - 1.0) > 1e-8:
                raise ValueError(f"weights must sum to 1, got sum {weights.sum():.6g}")
        centroids.setflags(write=False)
        weights.setflags(write=False)
        object.__setattr__(self, "centroids", centroids)
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "weights", weights)

    # -- equality by value (the generated dataclass __eq__ compares arrays with ``==``,
    # whose truth value is ambiguous, and arrays are unhashable) ---------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GaussianMixture):
            return NotImplemented
        return (self.sigma == other.sigma
                and np.array_equal(self.centroids, other.centroids)
                and np.array_equal(self.weights, other.weights))

    def __hash__(self) -> int:
        # + 0.0 turns -0.0 into 0.0: equal arrays must give equal bytes, hence equal hashes
        return hash((self.centroids.shape, (self.centroids + 0.0).tobytes(), self.sigma,
                     (self.weights + 0.0).tobytes()))

    # -- presets -------------------------------------------------------------------
    @classmethod
    def orthogonal(cls, d: int = 10, k: int = 2, sigma: float = 0.0) -> GaussianMixture:
        """The running example: ``mu*_0 = e_d`` and ``mu*_j = -e_j`` for ``j = 1..k-1``.

        For ``k = 2`` and ``d = 10`` these are the paper's ``e_10`` and ``-e_1``
        (1-based basis vectors); all centroids are pairwise orthogonal.

        Examples
        --------
        >>> GaussianMixture.orthogonal(d=3, k=2).centroids
        array([[ 0.,  0.,  1.],
               [-1.,  0.,  0.]])
        """
        d, k = check_int(d, "d", 1), check_int(k, "k", 1)
        if k > d:
            raise ValueError(f"orthogonal needs k <= d, got k={k}, d={d}")
        centroids = np.zeros((k, d))
        centroids[0, d - 1] = 1.0
        for j in range(1, k):
            centroids[j, j - 1] = -1.0
        return cls(centroids, sigma=sigma)

    @classmethod
    def antipodal(cls, d: int = 10, sigma: float = 0.0) -> GaussianMixture:
        """Two antipodal centroids ``+e_1`` and ``-e_1``.

        Examples
        --------
        >>> GaussianMixture.antipodal(d=2).centroids
        array([[ 1.,  0.],
               [-1.,  0.]])
        """
        d = check_int(d, "d", 1)
        centroids = np.zeros((2, d))
        centroids[0, 0], centroids[1, 0] = 1.0, -1.0
        return cls(centroids, sigma=sigma)

    @classmethod
    def random(
        cls,
        d: int,
        k: int,
        sigma: float = 0.0,
        *,
        min_angle: float = 0.0,
        rng=None,
        max_tries: int = 10_000,
    ) -> GaussianMixture:
        """``k`` centroids uniform on ``S^{d-1}``, pairwise at least ``min_angle`` apart.

        Centroids are drawn one at a time and rejected while closer than ``min_angle``
        (radians) to one already kept.

        Examples
        --------
        >>> import numpy as np
        >>> mix = GaussianMixture.random(d=5, k=3, min_angle=np.pi / 4, rng=0)
        >>> bool(np.all(mix.centroids @ mix.centroids.T - np.eye(3) <= np.cos(np.pi / 4)))
        True
        """
        d, k = check_int(d, "d", 1), check_int(k, "k", 1)
        if not 0.0 <= min_angle <= np.pi:
            raise ValueError(f"min_angle must be in [0, pi], got {min_angle}")
        gen = as_generator(rng)
        cos_max = np.cos(min_angle)
        kept: list[np.ndarray] = []
        for _ in range(max_tries):
            v = gen.standard_normal(d)
            v /= np.linalg.norm(v)
            if all(v @ u <= cos_max + 1e-12 for u in kept):
                kept.append(v)
                if len(kept) == k:
                    return cls(np.stack(kept), sigma=sigma)
        raise ValueError(
            f"could not place {k} centroids in dimension {d} at angle >= {min_angle:.3f} "
            f"after {max_tries} draws; lower min_angle"
        )

    # -- properties ----------------------------------------------------------------
    @property
    def k(self) -> int:
        """Number of clusters."""
        return self.centroids.shape[0]

    @property
    def d(self) -> int:
        """Dimension of a token."""
        return self.centroids.shape[1]

    @property
    def is_dirac(self) -> bool:
        """Whether ``sigma == 0`` (every token is a centroid)."""
        return self.sigma == 0.0

    def with_sigma(self, sigma: float) -> GaussianMixture:
        """The same centroids and weights with another noise level.

        Examples
        --------
        >>> mix = GaussianMixture.antipodal(d=2, sigma=0.5).with_sigma(0.1)
        >>> mix.sigma, mix.centroids[0]
        (0.1, array([1., 0.]))
        """
        return GaussianMixture(self.centroids, sigma=sigma, weights=self.weights)

    # -- sampling ------------------------------------------------------------------
    def sample(self, n: int, rng=None, *, return_labels: bool = False):
        """Draw ``n`` i.i.d. tokens.

        Parameters
        ----------
        n : int
            Number of tokens.
        rng : int or numpy.random.Generator, optional
            Seed or generator.
        return_labels : bool, default=False
            Also return the latent cluster of each token.

        Returns
        -------
        X : ndarray of shape (n, d)
        labels : ndarray of shape (n,), only if ``return_labels``

        Examples
        --------
        >>> mix = GaussianMixture.orthogonal(d=10, k=2, sigma=0.0)
        >>> X, z = mix.sample(3, rng=1, return_labels=True)
        >>> bool((X == mix.centroids[z]).all())
        True
        """
        n = check_int(n, "n", 0)
        gen = as_generator(rng)
        labels = gen.choice(self.k, size=n, p=self.weights)
        X = self.centroids[labels] + self.sigma * gen.standard_normal((n, self.d))
        return (X, labels) if return_labels else X

    def sample_prompts(self, n_prompts: int, length: int, rng=None, *, return_labels=False):
        """Draw ``n_prompts`` prompts of ``length`` i.i.d. tokens, shape ``(B, L, d)``.

        Examples
        --------
        >>> GaussianMixture.antipodal(d=4, sigma=0.1).sample_prompts(2, 5, rng=0).shape
        (2, 5, 4)
        """
        n_prompts, length = check_int(n_prompts, "n_prompts", 0), check_int(length, "length", 0)
        X, labels = self.sample(n_prompts * length, rng, return_labels=True)
        X = X.reshape(n_prompts, length, self.d)  # (B, L, d)
        labels = labels.reshape(n_prompts, length)
        return (X, labels) if return_labels else X

    # -- Bayes classifier ----------------------------------------------------------
    def posterior(self, X) -> np.ndarray:
        """Posterior cluster probabilities ``P(Z = k | X)``, shape ``(n, k)``.

        With unit centroids and isotropic noise,
        ``log P(Z=k|x) = log pi_k + <x, mu*_k> / sigma^2 + const``. For the Dirac
        mixture (its limit ``sigma -> 0``) the posterior is one-hot on the nearest
        centroid among the clusters of positive weight, ties going to the higher weight.

        Examples
        --------
        >>> mix = GaussianMixture.antipodal(d=2, sigma=0.5)
        >>> mix.posterior([[1.0, 0.0]]).round(3)
        array([[1., 0.]])
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.d:
            raise ValueError(f"X must have shape (n, {self.d}), got {X.shape}")
        if not np.isfinite(X).all():
            row = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
            raise ValueError(f"X contains NaN or inf (first in row {row}): such a token has "
                             "no posterior")
        scores = X @ self.centroids.T  # (n, k)
        with np.errstate(divide="ignore"):
            log_w = np.log(self.weights)  # -inf for an empty cluster
        if self.is_dirac:
            # nearest = largest <x, mu*_k> (unit centroids); a zero weight never wins
            scores = np.where(self.weights > 0, scores, -np.inf)
            tied = scores == scores.max(axis=1, keepdims=True)  # (n, k)
            best = np.argmax(np.where(tied, self.weights, -1.0), axis=1)
            post = np.zeros_like(scores)
            post[np.arange(len(X)), best] = 1.0
            return post
        # shifted by the nearest cluster of positive weight (an empty one's -inf weight
        # would not offset its score), then divided by sigma twice: sigma^2 under- or
        # overflows beyond 1e+-154
        held = np.where(self.weights > 0, scores, -np.inf)
        shifted = scores - held.max(axis=1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):   # -inf: a cluster out of reach
            logits = np.where(self.weights > 0, log_w + (shifted / self.sigma) / self.sigma,
                              -np.inf)
        logits -= logits.max(axis=1, keepdims=True)
        post = np.exp(logits)
        return post / post.sum(axis=1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        """Bayes-optimal cluster of each token (maximum posterior).

        Examples
        --------
        >>> mix = GaussianMixture.antipodal(d=2, sigma=0.5)
        >>> mix.predict([[0.3, 0.1], [-2.0, 1.0]])
        array([0, 1])
        """
        return np.argmax(self.posterior(X), axis=1)

    def bayes_error(self, n_samples: int = 200_000, rng=0) -> float:
        """Monte Carlo estimate of the Bayes classification error of the mixture.

        Examples
        --------
        >>> mix = GaussianMixture.antipodal(d=2, sigma=0.5)
        >>> err = mix.bayes_error(n_samples=20_000)  # exact: Phi(-1 / 0.5) = 0.0228
        >>> abs(err - 0.0228) < 0.005
        True
        """
        X, z = self.sample(n_samples, rng, return_labels=True)
        return float(np.mean(self.predict(X) != z))

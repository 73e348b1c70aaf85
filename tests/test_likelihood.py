"""The mixture log-likelihood's special functions against independent references."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("v", [0.5, 1.5, 5.0, 49.5, 500.0, 5000.0])
def test_log_bessel_against_arbitrary_precision(v):
    """``log I_v(kappa)`` (the von Mises-Fisher normalizer) against mpmath's, from
    ``kappa = 1e-300`` (``ive`` underflows: the power series) to 1000. The bound: the
    series' truncation (2e-10 relative) and the uniform expansion's ``O(v^-3)``, used only
    where ``(kappa/2)^v / Gamma(v + 1)`` underflows (``v`` in the hundreds: ``v^-3 <
    1e-7`` of a logarithm above 700), are both below 1e-9 of ``max(1, |log I|)``."""
    mpmath = pytest.importorskip("mpmath")
    from attnclust.cluster.mixture.likelihood import _log_bessel_iv

    for kappa in (1e-300, 1e-30, 1e-10, 1e-3, 0.1, 1.0, 30.0, 1000.0):
        exact = float(mpmath.log(mpmath.besseli(v, kappa, maxterms=10**6)))
        assert abs(_log_bessel_iv(v, kappa) - exact) <= 1e-9 * max(1.0, abs(exact))


@pytest.mark.parametrize("kappa", [1e9, 1e10, 1e12, 1e100, 1e300])
def test_log_bessel_beyond_scipys_range(kappa):
    """Where scipy's ``ive`` returns NaN (``kappa`` from about 1e10), Hankel's expansion,
    against the closed forms of the half orders: ``I_{1/2}(k) = sqrt(2 / (pi k)) sinh k``
    and ``I_{-1/2}(k) = sqrt(2 / (pi k)) cosh k``, whose logarithms at such ``k`` are
    ``k - log(2 pi k) / 2`` to far below the rounding of ``k`` (``eps k``)."""
    import math

    from attnclust.cluster.mixture.likelihood import _log_bessel_iv

    exact = kappa - 0.5 * math.log(2.0 * math.pi * kappa)   # e^{-2k}: below any rounding
    for v in (-0.5, 0.5):
        assert abs(_log_bessel_iv(v, kappa) - exact) <= 4 * 2.0**-52 * kappa


def test_sphere_scores_rows_at_the_capped_concentration():
    """Three directions of the circle, each repeated: lambda capped at 1e12 (d = 2, order
    0), and d = 3 at lambda = 1e300; the scores are finite, not a ZeroDivisionError or a
    math domain error."""
    import warnings

    import numpy as np

    from attnclust import AttentionClustering

    angle = np.repeat([0.0, 2.0, 4.0], 20)
    X = np.c_[np.cos(angle), np.sin(angle)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = AttentionClustering(3, geometry="sphere", random_state=0).fit(X)
        assert np.isfinite(est.score(X)) and np.isfinite(est.bic(X))
        X3 = np.random.default_rng(0).normal(size=(30, 3))
        far = AttentionClustering(2, geometry="sphere", random_state=0,
                                  inverse_temperature=1e300).fit(X3)
        assert np.all(np.isfinite(far.score_samples(X3)))

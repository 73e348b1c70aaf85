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

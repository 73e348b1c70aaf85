"""Random initial heads for :func:`attnclust.pgd`: on the sphere, or on the manifold ``M``.

``M`` is the unit sphere of ``span(mu*_1..mu*_K)``, the span of a mixture's centroids:

    mu_h = B^T c_h / ||B^T c_h||,   c_h ~ N(0, I_r)

with ``B`` ``(r, d)`` an orthonormal basis of the span (the right singular vectors of
the centroids whose singular values exceed ``1e-10`` times the largest), so each head is
uniform on ``M``. :func:`init_on_sphere` draws ``k`` heads uniform on ``S^{d-1}`` (the
"random initialization").

Notation
--------
==========  =====================  ===============================================
paper       code                   meaning
==========  =====================  ===============================================
``mu*_k``   ``mix.centroids``      centroids of the mixture, ``(K, d)``
``M``       ``init_on_manifold``   unit sphere of the centroids' span
``B``       ``basis``              orthonormal basis of the span, ``(r, d)``
``c_h``     ``coef``               Gaussian coefficients of head ``h``
==========  =====================  ===============================================
"""

from __future__ import annotations

import numpy as np
import torch

from .._validation import as_generator, check_int
from ..layer.sphere import random_sphere
from .mixture import GaussianMixture

__all__ = ["init_on_manifold", "init_on_sphere"]


def init_on_manifold(mix: GaussianMixture, rng=None, *, n_heads: int | None = None):
    """Heads uniform on the unit sphere of ``span(mu*_1..mu*_K)`` (the manifold ``M``).

    An orthonormal basis of the span comes from an SVD of the centroids; each head is
    that basis times a normalized standard Gaussian vector of coefficients.

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2)
    >>> heads = ac.init_on_manifold(mix, rng=0)
    >>> heads.shape, float(heads[:, 1:9].abs().max())
    (torch.Size([2, 10]), 0.0)
    """
    if not isinstance(mix, GaussianMixture):
        raise ValueError(f"mix must be an attnclust.GaussianMixture, got {type(mix).__name__}")
    n_heads = check_int(mix.k if n_heads is None else n_heads, "n_heads", 1)
    _, sv, vt = np.linalg.svd(mix.centroids, full_matrices=False)
    basis = vt[sv > 1e-10 * sv[0]]  # (r, d) orthonormal rows
    coef = as_generator(rng).standard_normal((int(n_heads), basis.shape[0]))
    coef /= np.linalg.norm(coef, axis=1, keepdims=True)
    heads = coef @ basis
    heads /= np.linalg.norm(heads, axis=1, keepdims=True)
    return torch.from_numpy(heads)


def init_on_sphere(k: int, d: int, *, rng=None) -> torch.Tensor:
    """``k`` heads uniform on ``S^{d-1}`` ("random initialization").

    Examples
    --------
    >>> init_on_sphere(3, 5, rng=0).shape
    torch.Size([3, 5])
    """
    return random_sphere(check_int(k, "k", 1), check_int(d, "d", 1), rng=rng)

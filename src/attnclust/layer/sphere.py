"""Operations on the unit sphere ``S^{d-1}``, applied row-wise to ``(..., d)`` tensors.

For a point ``mu`` with ``||mu|| = 1`` the tangent space is ``{v : <v, mu> = 0}``; the
Riemannian gradient of ``f`` restricted to the sphere is the tangent part of the
Euclidean gradient, ``(I - mu mu^T) grad f``; the retraction used by PGD is the metric
projection ``normalize(mu + v)``.

Notation
--------
==========  =================  ==========================================
paper       code               meaning
==========  =================  ==========================================
``mu_h``    ``mu[..., h, :]``  a point on the sphere (one head)
``P_mu``    ``tangent``        orthogonal projection on the tangent space
==========  =================  ==========================================
"""

from __future__ import annotations

import numpy as np
import torch

from .._validation import as_generator, check_int

__all__ = ["normalize", "row_norms", "tangent", "riemannian_gradient", "retract",
           "random_sphere"]


def normalize(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """Project each row of ``x`` onto the unit sphere: ``x / ||x||``.

    Raises ``ValueError`` naming the first zero row (it has no direction), unless
    ``eps > 0``.

    Rows whose squares overflow or underflow (``3e20`` or ``3e-30`` in float32) are
    measured in units of their largest entry.

    Examples
    --------
    >>> import torch
    >>> normalize(torch.tensor([[3.0, 4.0]]))
    tensor([[0.6000, 0.8000]])
    >>> normalize(torch.tensor([[3e20, 4e20], [3e-30, 4e-30]]))
    tensor([[0.6000, 0.8000],
            [0.6000, 0.8000]])
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    off = (norm == 0) | torch.isinf(norm)
    if not bool(off.any()):                             # the common case: nothing to mend
        return x / norm
    norm = torch.where(off, row_norms(x)[..., None], norm)    # squares out of range
    if eps == 0.0:
        zero = norm[..., 0] == 0
        if bool(zero.any()):
            index = tuple(int(i) for i in torch.nonzero(zero)[0])
            where = f"row {index[0] if len(index) == 1 else index} is" if index else "x is"
            raise ValueError(f"cannot normalize a zero vector ({where} zero and has no "
                             "direction)")
    return x / norm.clamp_min(eps) if eps > 0 else x / norm


def row_norms(x: torch.Tensor) -> torch.Tensor:
    """The Euclidean norms of the rows of ``x`` ``(..., d)``: ``(...)``, each in units of
    its largest entry, so that no square overflows or underflows (``3e20`` or ``3e-30``
    in float32).

    Examples
    --------
    >>> import torch
    >>> row_norms(torch.tensor([[3e20, 4e20], [0.0, 0.0]]))
    tensor([5.0000e+20, 0.0000e+00])
    """
    big = x.abs().amax(-1).clamp_min(torch.finfo(x.dtype).tiny)
    return big * torch.linalg.vector_norm(x / big[..., None], dim=-1)


def tangent(mu: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Tangent part of ``v`` at ``mu`` (unit rows): ``v - <v, mu> mu``.

    Examples
    --------
    >>> import torch
    >>> tangent(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 3.0]]))
    tensor([[0., 3.]])
    """
    return v - (v * mu).sum(-1, keepdim=True) * mu


def riemannian_gradient(mu: torch.Tensor, euclidean_grad: torch.Tensor) -> torch.Tensor:
    """Riemannian gradient on the product of spheres: the tangent part of the Euclidean one.

    Examples
    --------
    >>> import torch
    >>> mu = torch.tensor([[0.0, 1.0]])
    >>> riemannian_gradient(mu, torch.tensor([[2.0, 5.0]]))  # the radial 5 is dropped
    tensor([[2., 0.]])
    """
    return tangent(mu, euclidean_grad)


def retract(mu: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Move from ``mu`` by ``step`` and project back: ``normalize(mu + step)``.

    Examples
    --------
    >>> import torch
    >>> retract(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
    tensor([[0.7071, 0.7071]])
    """
    return normalize(mu + step)


def random_sphere(n: int, d: int, *, rng=None, dtype=torch.float64) -> torch.Tensor:
    """``n`` points drawn uniformly on ``S^{d-1}``, shape ``(n, d)``.

    Examples
    --------
    >>> x = random_sphere(5, 3, rng=0)
    >>> bool(torch.allclose(x.norm(dim=1), torch.ones(5, dtype=x.dtype)))
    True
    """
    n, d = check_int(n, "n", 0), check_int(d, "d", 1)      # S^{d-1} needs d >= 1
    gen = as_generator(rng)
    g = gen.standard_normal((n, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return torch.as_tensor(g, dtype=dtype)

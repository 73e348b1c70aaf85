"""The trainable K-head attention layer.

Each head ``h`` holds one vector ``mu_h``, which is both its key and its value. A token
``x`` queries the heads:

    a_h(x)  = softmax_h( lambda * <x, mu_h> - b_h )
    T_mu(x) = sum_h a_h(x) * mu_h

so the output lies in the convex hull of the heads. Applied to a prompt the layer acts
token-wise, on any leading batch shape. Two geometries:

- ``"sphere"`` (the paper's layer): unit heads and no key bias, ``b_h = 0``;
- ``"euclidean"``: free heads with the key bias ``b_h = lambda ||mu_h||^2 / 2``, so that
  ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)`` (the ``||x||^2`` term is common to
  all heads and cancels). The attention is then a soft Voronoi partition around the heads
  (hard k-means cells as ``lambda -> infinity``), where the sphere's is a partition into
  cones from the origin. With unit heads the bias is a constant and the two coincide.

Notation
--------
============  =======================  ===========================================
paper         code                     meaning
============  =======================  ===========================================
``mu_h``      ``heads[h]``             head ``h``, shape ``(K, d)`` (unit on the sphere)
``lambda``    ``inverse_temperature``  inverse temperature, ``> 0``
``a_h(x)``    ``head_weights``         attention of token ``x`` on head ``h``
``T_mu(x)``   ``attention_heads``      output of the layer
============  =======================  ===========================================
"""

from __future__ import annotations

import torch
from torch import nn

from .._deprecation import RenamedAttribute, renamed_keywords
from .._validation import as_tensor, check_finite, check_inverse_temperature
from .geometry import GEOMETRIES, Geometry, as_geometry

__all__ = ["GEOMETRIES", "head_logits", "head_weights", "attention_heads", "AttentionHeads",
           "softmax_heads"]

# Up to this many heads, exp-normalize costs less than torch.softmax on CPU (float64
# scores of many rows); at 64 heads torch.softmax costs less.
_FEW_HEADS = 16


def softmax_heads(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last (heads) dimension, fast for a few heads.

    Examples
    --------
    >>> softmax_heads(torch.tensor([[0.0, 0.0], [1000.0, 0.0]]))
    tensor([[0.5000, 0.5000],
            [1.0000, 0.0000]])
    """
    if scores.shape[-1] > _FEW_HEADS:
        return torch.softmax(scores, dim=-1)
    e = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def head_logits(x: torch.Tensor, heads: torch.Tensor, lam: float,
                geometry: str | Geometry = "sphere") -> torch.Tensor:
    """Scores ``lambda <x, mu_h> - b_h`` of tokens ``(..., d)`` on heads ``(K, d)``: ``(..., K)``.

    ``b_h = 0`` on the sphere and ``lambda ||mu_h||^2 / 2`` for Euclidean heads
    (:meth:`attnclust.layer.geometry.Geometry.logits`); no checks (the solvers' hot path).

    Examples
    --------
    >>> heads = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    >>> head_logits(torch.tensor([1.0, 0.0]), heads, 1.0, "euclidean")
    tensor([0., 0.])
    """
    return as_geometry(geometry).logits(x, heads, lam)


def _inputs(x, heads, inverse_temperature, geometry):
    """Tensors ``x``, ``heads`` and the float ``lambda``; NumPy input follows the heads.

    Cheap on the hot path: tensors pass through untouched, the inverse temperature check is a
    float comparison.
    """
    heads = as_tensor(heads, name="heads")
    if not isinstance(x, torch.Tensor):
        x = as_tensor(x, name="x", dtype=heads.dtype, device=heads.device)
    if heads.ndim != 2 or 0 in heads.shape or x.ndim < 1 or x.shape[-1] != heads.shape[-1]:
        raise ValueError(f"x of shape {tuple(x.shape)} and heads of shape "
                         f"{tuple(heads.shape)}: heads must be (K, d), K, d >= 1, and x "
                         "(..., d)")
    if x.dtype != heads.dtype or x.device != heads.device:
        raise ValueError(f"x is {x.dtype} on {x.device} and the heads {heads.dtype} on "
                         f"{heads.device}: pass them in one dtype, on one device")
    return x, heads, check_inverse_temperature(inverse_temperature), as_geometry(geometry)


@renamed_keywords(temperature="inverse_temperature")
def head_weights(x: torch.Tensor, heads: torch.Tensor, *, inverse_temperature: float,
                 geometry: str | Geometry = "sphere") -> torch.Tensor:
    """Attention weights ``a_h(x) = softmax_h(lambda <x, mu_h> - b_h)``.

    Parameters
    ----------
    x : Tensor or array-like of shape (..., d)
        Tokens; NumPy input is converted to a tensor of the heads' dtype.
    heads : Tensor or array-like of shape (K, d)
    inverse_temperature : float
        Inverse temperature ``lambda > 0``.
    geometry : {"sphere", "euclidean"}, default="sphere"
        Key bias ``b_h``: none, or ``lambda ||mu_h||^2 / 2`` (see the module docstring).

    Returns
    -------
    Tensor of shape (..., K), rows summing to one.

    Examples
    --------
    >>> import torch
    >>> heads = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> head_weights(torch.tensor([1.0, 0.0]), heads, inverse_temperature=2.0)
    tensor([0.8808, 0.1192])
    >>> head_weights(torch.tensor([3.0, 0.0]), 2 * heads, inverse_temperature=0.5,
    ...              geometry="euclidean")
    tensor([0.9526, 0.0474])
    """
    x, heads, lam, geometry = _inputs(x, heads, inverse_temperature, geometry)
    return softmax_heads(geometry.logits(x, heads, lam))


@renamed_keywords(temperature="inverse_temperature")
def attention_heads(x: torch.Tensor, heads: torch.Tensor, *, inverse_temperature: float,
                    geometry: str | Geometry = "sphere") -> torch.Tensor:
    """Output of the K-head layer, ``T_mu(x) = sum_h a_h(x) mu_h``.

    Parameters
    ----------
    x, heads, inverse_temperature, geometry :
        As in :func:`head_weights`, whose weights ``a_h(x)`` average the heads.

    Returns
    -------
    Tensor of shape (..., d)

    Examples
    --------
    >>> import torch
    >>> heads = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    >>> x = torch.tensor([[0.0, 5.0]], dtype=torch.float64)
    >>> attention_heads(x, heads, inverse_temperature=1.0)
    tensor([[0., 0.]], dtype=torch.float64)
    """
    x, heads, lam, geometry = _inputs(x, heads, inverse_temperature, geometry)
    return softmax_heads(geometry.logits(x, heads, lam)) @ heads


class AttentionHeads(nn.Module):
    """The K-head attention layer as a ``torch.nn.Module``, ``(..., d) -> (..., d)``.

    The heads are a trainable parameter. With ``geometry="sphere"`` keep them on the
    sphere with :func:`attnclust.layer.sphere.normalize` after each optimizer step (or train them
    with :func:`attnclust.pgd`, which does); Euclidean heads are free. The ``state_dict``
    holds the heads only: build the layer with its ``inverse_temperature`` and
    ``geometry``, then load it (as a ``Linear``'s sizes are its constructor's).

    Parameters
    ----------
    heads : array-like of shape (K, d)
        Initial heads; normalized to unit norm on the sphere, kept as given otherwise.
    inverse_temperature : float
        Inverse temperature ``lambda``.
    geometry : {"sphere", "euclidean"}, default="sphere"
        Key bias: none, or ``lambda ||mu_h||^2 / 2`` (see the module docstring).

    Examples
    --------
    >>> import torch, attnclust as ac
    >>> layer = ac.AttentionHeads([[1.0, 0.0], [-1.0, 0.0]], inverse_temperature=30.0)
    >>> layer(torch.tensor([[0.9, 0.1]], dtype=torch.float64)).round(decimals=3)
    tensor([[1., 0.]], dtype=torch.float64, grad_fn=<RoundBackward1>)
    >>> cells = ac.AttentionHeads([[3.0, 3.0], [0.0, 0.0]], inverse_temperature=30.0,
    ...                           geometry="euclidean")
    >>> cells(torch.tensor([[2.5, 2.0]], dtype=torch.float64)).round(decimals=3)
    tensor([[3., 3.]], dtype=torch.float64, grad_fn=<RoundBackward1>)
    """

    temperature = RenamedAttribute("temperature", "inverse_temperature")  # until 0.3

    @renamed_keywords(temperature="inverse_temperature")
    def __init__(self, heads, inverse_temperature: float, *,
                 geometry: str | Geometry = "sphere"):
        super().__init__()
        heads = as_tensor(heads, name="heads")
        if heads.ndim != 2 or 0 in heads.shape:
            raise ValueError(f"heads must have shape (K, d) with K, d >= 1, got "
                             f"{tuple(heads.shape)}")
        check_finite(heads, "heads")
        geometry = as_geometry(geometry)
        self.geometry = geometry.name
        self.heads = nn.Parameter(geometry.projx(heads.detach().clone()))
        self.inverse_temperature = check_inverse_temperature(inverse_temperature)

    def _heads_like(self, x) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` as a tensor and the heads cast to its dtype (a differentiable cast)."""
        if not isinstance(x, torch.Tensor):
            x = as_tensor(x, name="x", dtype=self.heads.dtype, device=self.heads.device)
        return x, self.heads.to(dtype=x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, heads = self._heads_like(x)
        return attention_heads(x, heads, inverse_temperature=self.inverse_temperature,
                               geometry=self.geometry)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Attention weights of ``x`` on each head, shape ``(..., K)``.

        Examples
        --------
        >>> import torch
        >>> layer = AttentionHeads([[1.0, 0.0], [0.0, 1.0]], inverse_temperature=2.0)
        >>> layer.weights(torch.tensor([[1.0, 0.0]])).detach()
        tensor([[0.8808, 0.1192]])
        """
        x, heads = self._heads_like(x)
        return head_weights(x, heads, inverse_temperature=self.inverse_temperature,
                            geometry=self.geometry)

    def extra_repr(self) -> str:
        k, d = self.heads.shape
        return (f"n_heads={k}, d={d}, inverse_temperature={self.inverse_temperature:g}, "
                f"geometry={self.geometry}")

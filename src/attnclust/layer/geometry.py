"""Where the heads live: the geometry of the K-head layer, as an object.

The layer of :mod:`attnclust.layer.heads` scores a token ``x`` on head ``h`` by

    s_h(x) = lambda <x, mu_h> - b_h(mu),       a_h(x) = softmax_h s_h(x),

and a geometry fixes the set the heads live on and the key bias ``b_h``:

- :class:`Sphere` (the paper's layer): unit heads, ``||mu_h|| = 1``, and ``b_h = 0``; the
  attention partitions space into cones from the origin (spherical k-means in the hard
  limit);
- :class:`Euclidean`: free heads in ``R^d`` with ``b_h = lambda ||mu_h||^2 / 2``, so that
  ``a_h(x) = softmax_h(-lambda ||x - mu_h||^2 / 2)`` (the ``||x||^2`` term is common to
  all heads and cancels): a soft Voronoi partition, k-means cells in the hard limit. With
  unit heads the bias is a constant and the two layers coincide.

As in geoopt's manifolds, a solver only calls the geometry's operations (``logits``,
``egrad2rgrad``, ``retr``, the fixed-point step, the Lloyd step) and never asks which
geometry it holds. On the sphere the tangent space at ``mu`` is ``{v : <v, mu> = 0}``, the
Riemannian gradient is the tangent part of the Euclidean one, ``(I - mu mu^T) grad``, and
the retraction is ``normalize(mu + v)`` (the functions of :mod:`attnclust.layer.sphere`); in
``R^d`` all three are the identity or a plain sum. The user-facing parameter stays a
string, resolved once by :func:`as_geometry`; the estimator's ``"auto"`` settings
(``normalize``, ``tol``, ``anneal``, ``n_init``) are read off the geometry it resolves.

Notation
--------
=============  ==================  =============================================
paper          code                meaning
=============  ==================  =============================================
``mu_h``       ``heads[h]``        head ``h``, shape ``(K, d)``
``lambda``     ``lam``             inverse temperature
``b_h``        ``key_bias``        key bias of head ``h``
``N_h``        ``counts[h]``       soft proportion of head ``h`` (fixed-point step)
``G``          ``gram``            the heads' Gram matrix ``mu mu^T``
=============  ==================  =============================================
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

from .sphere import normalize, retract, riemannian_gradient, row_norms, tangent

__all__ = ["GEOMETRIES", "Euclidean", "Geometry", "Sphere", "Stateless", "as_geometry"]

# heads whose squared distance is within this many units in the last place of their
# squared norms coincide: the gram's rounding cannot tell them apart
_COINCIDE = 64
_PRECISE = 1e-9     # the largest rounding of a predicted logit (Euclidean.precise_logits)


class Stateless:
    """A value with no state but its class: shown as ``Name()``, equal to (and hashed as)
    every instance of the same class, so that ``Sphere() == Sphere()`` and either may key a
    table.

    Examples
    --------
    >>> class Unit(Stateless):
    ...     pass
    >>> Unit(), Unit() == Unit(), len({Unit(), Unit()})
    (Unit(), True, 1)
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

class Geometry(Stateless, ABC):
    """The set the heads live on, the key bias of their logits and the steps that keep
    the heads on that set (subclass it for another geometry, e.g. shaped heads).

    Attributes
    ----------
    name : str
        The user-facing name (``geometry="..."``).
    unit_heads : bool
        Whether heads have unit norm (the data must then be at the sphere's scale).
    equivariant : bool
        Whether the layer is equivariant under translations and scalings of the rows
        (``lambda`` scaling by the inverse square), so that a fit may run on rows centred
        and scaled to unit root-mean-square norm and map its heads back.
    penalties : tuple of str
        The penalties whose closed forms the fixed-point pass implements here.
    kmeans_limit : bool
        Whether the layer's hard limit (``lambda -> infinity``) is k-means: nearest-head
        cells, heads at their means. The estimator's default fit then ends there (see
        :mod:`attnclust.cluster.kmeans`).
    normalize, tol, anneal :
        The estimator's ``"auto"`` preprocessing, stopping tolerance and annealing.
    """

    name: str
    unit_heads: bool
    equivariant: bool
    penalties: tuple[str, ...]
    kmeans_limit: bool
    normalize: str | None
    tol: float
    anneal: bool

    # -- the layer ----------------------------------------------------------------------
    @abstractmethod
    def key_bias(self, heads: torch.Tensor, lam: float, *, sq_norms=None
                 ) -> torch.Tensor | None:
        """``b_h``, shape ``(K,)``, or ``None`` when there is none (``sq_norms``: the
        heads' squared norms when the caller has them)."""

    @abstractmethod
    def offset_vjp(self, heads: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        """``(dc/dmu)^T v`` for the key offsets ``c_h = -b_h`` at ``lambda = 1`` (heads
        ``(..., K, d)``, ``v`` ``(..., K)``): ``(..., K, d)``, or ``None`` without a key
        bias (the chain rule of the population risk's offsets)."""

    def logits(self, x: torch.Tensor, heads: torch.Tensor, lam: float) -> torch.Tensor:
        """Scores ``lambda <x, mu_h> - b_h`` of tokens ``(..., d)`` on heads ``(K, d)``:
        ``(..., K)``; no checks (the solvers' hot path).

        Examples
        --------
        >>> heads = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
        >>> Euclidean().logits(torch.tensor([1.0, 0.0]), heads, 1.0)
        tensor([0., 0.])
        >>> Sphere().logits(torch.tensor([1.0, 0.0]), heads, 1.0)
        tensor([2., 0.])
        """
        scores = lam * (x @ heads.transpose(-1, -2))
        bias = self.key_bias(heads, lam)
        return scores if bias is None else scores - bias

    # -- the manifold (geoopt's vocabulary) -----------------------------------------------
    @abstractmethod
    def projx(self, heads: torch.Tensor) -> torch.Tensor:
        """The nearest point of the geometry's set to each row of ``heads``."""

    @abstractmethod
    def proju(self, heads: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The tangent part of ``u`` at ``heads``."""

    @abstractmethod
    def egrad2rgrad(self, heads: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """The Riemannian gradient from the Euclidean gradient ``grad`` at ``heads``."""

    @abstractmethod
    def retr(self, heads: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Move from ``heads`` by ``u`` and come back to the set."""

    # -- the estimator's solver -----------------------------------------------------------
    @abstractmethod
    def fixed_point_step(self, heads, grad, counts, value_radial, t: float) -> torch.Tensor:
        """The per-head step of :mod:`attnclust.cluster.fixed_point`, ``mu_h - t grad_h / (2 N_h)``
        brought back to the set (``value_radial``: ``<grad_h of the value part, mu_h>``)."""

    @abstractmethod
    def extrapolated(self, x: torch.Tensor) -> torch.Tensor | None:
        """An extrapolated iterate brought back to the set, or ``None`` when it cannot be."""

    @abstractmethod
    def lloyd_step(self, sums, counts, heads) -> torch.Tensor:
        """Heads from the per-cell sums ``(K, d)`` of hard attention (the hard limit of the
        fixed-point step); an empty cell keeps its head."""

    # -- the warm start's inverse temperature ---------------------------------------------
    @abstractmethod
    def spread(self, sq_norm: float, col_sums: torch.Tensor, n: float) -> float:
        """The rows' mean squared norm (sphere) or distance from their mean (Euclidean):
        the scale of the floor on ``s^2``."""

    @abstractmethod
    def one_head_variance(self, heads, cov, counts, sq_norm: float, n: float, d: int
                          ) -> float:
        """``s^2`` with one head (the attention is then constant)."""

    @abstractmethod
    def nearest_boundary(self, gram: torch.Tensor):
        """For each head ``h``: the nearest other head ``c_h``, the factor ``g_h`` of the
        boundary normal ``mu_c - g_h mu_h`` and its squared norm, three ``(K,)`` tensors.
        Heads on top of ``h`` (to ``_COINCIDE`` units in the last place of their squared
        norms) share its cell and no boundary: ``c_h`` is the nearest distinct head, and
        where there is none the squared norm is ``inf`` (the cell crosses no boundary)."""

    # -- the estimator's starting heads and predictions -----------------------------------
    def n_init(self, seeded: bool) -> int:
        """The estimator's ``n_init="auto"`` (``seeded``: ``init`` is a seeding rule)."""
        return 1

    @abstractmethod
    def init_directions(self, draws: np.ndarray) -> np.ndarray:
        """Starting heads of ``init="sphere"`` from standard normal ``draws`` ``(K, d)``, in
        the units of the fit's rows (before :meth:`start_heads`)."""

    @abstractmethod
    def start_heads(self, centers: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        """Starting heads ``(K, d)`` brought to the set (float64 NumPy)."""

    def precise_logits(self, x: torch.Tensor, heads: torch.Tensor, lam: float) -> torch.Tensor:
        """Logits ``(n, K)`` of rows ``x`` computed for precision rather than speed (the
        estimator's predictions), up to a constant per row (the same attention)."""
        return self.logits(x, heads, lam)


class Sphere(Geometry):
    """Unit heads and no key bias: ``a_h(x) = softmax_h(lambda <x, mu_h>)`` (the paper's).

    Examples
    --------
    >>> import torch
    >>> sphere = as_geometry("sphere")
    >>> mu = torch.tensor([[0.0, 1.0]])
    >>> sphere.egrad2rgrad(mu, torch.tensor([[2.0, 5.0]]))   # the radial 5 is dropped
    tensor([[2., 0.]])
    >>> sphere.retr(mu, torch.tensor([[1.0, 0.0]]))
    tensor([[0.7071, 0.7071]])
    """

    name = "sphere"
    unit_heads = True
    equivariant = False
    kmeans_limit = False
    penalties = ("repulsion", "balance")
    normalize = "rows"
    tol = 1e-6
    anneal = True

    def key_bias(self, heads, lam, *, sq_norms=None):
        return None

    def offset_vjp(self, heads, v):
        return None

    def projx(self, heads):
        return normalize(heads)

    def proju(self, heads, u):
        return tangent(heads, u)

    def egrad2rgrad(self, heads, grad):
        return riemannian_gradient(heads, grad)

    def retr(self, heads, u):
        return retract(heads, u)

    def fixed_point_step(self, heads, grad, counts, value_radial, t):
        """``normalize(mu_h - t D_h / (2 N_h))`` with ``D_h`` the tangent part of the gradient
        plus the radial part of its value part (what makes the hard step Lloyd's); a head
        whose step lands on the origin keeps its position."""
        tiny = torch.finfo(heads.dtype).tiny
        radial = (grad * heads).sum(1) - value_radial           # (K,) radial part to drop
        direction = grad - radial[:, None] * heads
        step = direction / (2.0 * counts.clamp_min(tiny))[:, None]
        new = heads - t * step
        norm = torch.linalg.vector_norm(new, dim=1, keepdim=True)
        return torch.where(norm > 0, new / norm.clamp_min(tiny), heads)

    def extrapolated(self, x):
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
        if not bool((norm > 0).all() and torch.isfinite(norm).all()):
            return None
        return x / norm

    def lloyd_step(self, sums, counts, heads):
        """Spherical k-means: ``mu_h <- normalize(sum of the cone of h)``."""
        norm = torch.linalg.vector_norm(sums, dim=1, keepdim=True)
        return torch.where(norm > 0, sums / norm.clamp_min(torch.finfo(sums.dtype).tiny), heads)

    def spread(self, sq_norm, col_sums, n):
        return sq_norm / n

    def one_head_variance(self, heads, cov, counts, sq_norm, n, d):
        return float(cov[0, 0, 0] * counts[0]) / n      # the variance of <x, mu_0>

    def nearest_boundary(self, gram):
        """Nearest head in angle; the tangent at ``mu_h`` pointing to ``mu_g`` is ``mu_g - G
        mu_h``, of squared norm ``1 - G^2``. Nearly antipodal heads have no such direction
        (every tangent points to ``mu_g``): there the boundary ``<x, mu_h> = <x, mu_g>`` is
        crossed along the chord ``mu_g - mu_h``, as for Euclidean heads."""
        K, tiny = gram.shape[0], torch.finfo(gram.dtype).tiny
        sq = torch.diagonal(gram)         # 1 to rounding: float32's falls short by 1e-7
        tol = _COINCIDE * torch.finfo(gram.dtype).eps
        same = gram >= (1.0 - tol) * torch.minimum(sq[:, None], sq[None, :])   # on top
        same |= torch.eye(K, dtype=torch.bool, device=gram.device)              # itself
        c = (gram - 3.0 * same).argmax(1)
        G = gram[torch.arange(K, device=gram.device), c]
        antipodal = 1.0 - G**2 < 1e-3
        g = torch.where(antipodal, torch.ones_like(G), G)
        norm2 = torch.where(antipodal, 2.0 - 2.0 * G, 1.0 - G**2).clamp_min(tiny)
        return c, g, norm2.masked_fill(same.all(1), float("inf"))

    def init_directions(self, draws):
        return draws                 # normalized by start_heads, like every starting head

    def start_heads(self, centers, gen):
        """Normalized rows; a center at the origin has no direction: one is drawn at random."""
        norms = np.linalg.norm(centers, axis=1)
        bad = norms == 0
        if bad.any():
            centers[bad] = gen.standard_normal((int(bad.sum()), centers.shape[1]))
            norms = np.linalg.norm(centers, axis=1)
        return centers / norms[:, None]


class Euclidean(Geometry):
    """Free heads with the key bias ``lambda ||mu_h||^2 / 2``: ``a_h(x) = softmax_h(-lambda
    ||x - mu_h||^2 / 2)``.

    Examples
    --------
    >>> import torch
    >>> cells = as_geometry("euclidean")
    >>> heads = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    >>> cells.logits(torch.tensor([[0.9, 0.0]]), heads, 1.0).argmax(1).tolist()   # nearest
    [0]
    >>> cells.retr(heads, torch.ones(2, 2))
    tensor([[1., 1.],
            [3., 1.]])
    """

    name = "euclidean"
    unit_heads = False
    equivariant = True
    kmeans_limit = True
    penalties = ("repulsion",)   # balance's gradient would need the key bias's term
    normalize = None
    tol = 1e-4                   # overlapping clusters converge slowly; labels settle first
    anneal = False               # from a Lloyd warm start; at lambda/8 nearby heads merge

    def key_bias(self, heads, lam, *, sq_norms=None):
        if sq_norms is None:
            sq_norms = (heads * heads).sum(-1)
        return (0.5 * lam) * sq_norms

    def offset_vjp(self, heads, v):
        """``c_h = -||mu_h||^2 / 2``, so ``dc_h/dmu_h = -mu_h``."""
        return -v[..., None] * heads

    def projx(self, heads):
        return heads

    def proju(self, heads, u):
        return u

    def egrad2rgrad(self, heads, grad):
        return grad

    def retr(self, heads, u):
        return heads + u

    def fixed_point_step(self, heads, grad, counts, value_radial, t):
        """``mu_h - t grad_h / (2 N_h)``; a head without any attention (``N_h = 0``) stays."""
        tiny = torch.finfo(heads.dtype).tiny
        step = grad / (2.0 * counts.clamp_min(tiny))[:, None]
        return torch.where((counts > 0)[:, None], heads - t * step, heads)

    def extrapolated(self, x):
        return x if bool(torch.isfinite(x).all()) else None

    def lloyd_step(self, sums, counts, heads):
        """k-means: ``mu_h <- mean of the cell of h`` (``counts``: maybe sums of sample
        weights, below 1)."""
        new = sums / counts.clamp_min(torch.finfo(sums.dtype).tiny)[:, None]
        return torch.where((counts > 0)[:, None], new, heads)

    def spread(self, sq_norm, col_sums, n):
        return sq_norm / n - float((col_sums / n) @ (col_sums / n))

    def one_head_variance(self, heads, cov, counts, sq_norm, n, d):
        return (sq_norm / n - float(heads[0] @ heads[0])) / d   # the head is the mean

    def nearest_boundary(self, gram):
        """Nearest head in distance; boundary normal ``mu_g - mu_h``."""
        K, tiny = gram.shape[0], torch.finfo(gram.dtype).tiny
        sq = torch.diagonal(gram)
        dist2 = sq[:, None] + sq[None, :] - 2 * gram
        tol = _COINCIDE * torch.finfo(gram.dtype).eps
        same = dist2 <= tol * (sq[:, None] + sq[None, :])         # heads on top of each other
        same |= torch.eye(K, dtype=torch.bool, device=gram.device)              # itself
        c = dist2.masked_fill(same, float("inf")).argmin(1)
        g = torch.ones(K, dtype=gram.dtype, device=gram.device)
        norm2 = dist2[torch.arange(K, device=gram.device), c].clamp_min(tiny)
        return c, g, norm2.masked_fill(same.all(1), float("inf"))

    def n_init(self, seeded):
        return 10 if seeded else 1   # KMeans(n_init=10)'s seedings, on small data

    def init_directions(self, draws):
        # unit directions: the fit's rows have unit root-mean-square norm about their mean
        draws /= np.linalg.norm(draws, axis=1, keepdims=True)
        return draws

    def start_heads(self, centers, gen):
        return centers

    def precise_logits(self, x, heads, lam):
        """The logits in the frame centred on the heads' mean, and ``-lambda ||x -
        mu_h||^2 / 2`` from the differences (``torch.cdist``, which costs more than the
        product form) for the rows where the product form's rounding could reorder the two
        highest logits or move one by more than ``_PRECISE``: its terms grow with the
        distance from the frame's origin, and a far head (a row at 1e9 beside two blobs
        near 0) left the near heads' logits equal to rounding. Not for rows farther from
        the heads than their reach: there the squared distances round more (a row 1e17
        away tied every head) and the product form orders the heads."""
        center = heads.mean(0)
        xc, hc = x - center, heads - center
        logits = self.logits(xc, hc, lam)
        if heads.shape[0] < 2:
            return logits
        reach = torch.linalg.vector_norm(hc, dim=1).max()
        norm = row_norms(xc)                                             # no overflow
        # the rounding of lam (<x, mu> - ||mu||^2 / 2): d + 2 terms up to |x| |mu| + |mu|^2
        error = ((x.shape[1] + 2) * torch.finfo(x.dtype).eps * lam) * (
            norm * reach + reach * reach)
        top, z = logits.max(1)
        runner = logits.scatter(1, z[:, None], float("-inf")).amax(1)
        # the differences round ||x - mu||^2 instead, the runner-up's ||x||^2 - 2 runner /
        # lam: less only within about the heads' reach (1e17 away they tied every head)
        near = norm * norm - 2.0 * runner / lam <= (norm + reach) * reach
        redo = torch.nonzero(((top - runner <= 2.0 * error) | (error > _PRECISE)) & near)[:, 0]
        if redo.numel():
            dist = torch.cdist(x[redo], heads, compute_mode="donot_use_mm_for_euclid_dist")
            logits[redo] = (-0.5 * lam) * dist.square_()    # another constant per row
        return logits


_REGISTRY: dict[str, Geometry] = {g.name: g for g in (Sphere(), Euclidean())}
GEOMETRIES = tuple(_REGISTRY)   # the names of the geometries ``as_geometry`` knows


def as_geometry(geometry: str | Geometry) -> Geometry:
    """The geometry named ``geometry`` (a :class:`Geometry` passes through).

    Examples
    --------
    >>> as_geometry("sphere")
    Sphere()
    >>> as_geometry("torus")
    Traceback (most recent call last):
    ...
    ValueError: geometry must be 'sphere' or 'euclidean', got 'torus'
    """
    if isinstance(geometry, Geometry):
        return geometry
    if isinstance(geometry, str) and geometry in _REGISTRY:
        return _REGISTRY[geometry]
    raise ValueError(f"geometry must be 'sphere' or 'euclidean', got {geometry!r}")

"""How well heads recover centroids, and how well a layer quantizes.

- *Centroid distance up to relabelling*: heads and centroids are matched by the
  Hungarian algorithm on Euclidean distances; we report the largest and the
  root-mean-square matched distance.
- *Distortion*: ``E ||X - T(X)||^2``, estimated on tokens.
- *Assignment error*: the fraction of tokens whose most-attended head is not the head
  matched to their true cluster, next to the Bayes error of the mixture.

For in-context quantization (:func:`attnclust.identity_attention`, outputs ``Y`` of a
prompt ``X``):

- *Spread ratio*: within-cluster spread of ``Y`` over that of ``X``, small for a
  quantizer.
- *Limit distance*: ``||Y_i - Q_inf(X_i)||``, the distance of each output to its
  infinite-prompt limit (:func:`attnclust.infinite_prompt_limit`).
- *Cluster count*: the number of groups of (nearly) coincident tokens.

Notation
--------
===========  ==============  ==========================================
paper        code            meaning
===========  ==============  ==========================================
``mu``       ``heads``       trained heads, shape ``(K, d)``
``mu*``      ``centroids``   true centroids, shape ``(K, d)``
``sigma``    permutation     ``heads[matching[k]]`` is matched to ``mu*_k``
``X, Y``     ``X, Y``        a prompt and the layer's output, ``(L, d)``
``Q_inf``    ``limit``       infinite-prompt limit of identity attention
===========  ==============  ==========================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

from .._deprecation import renamed_keywords
from .._validation import as_tensor, check_finite
from ..layer.heads import head_weights
from .in_context import infinite_prompt_limit
from .mixture import GaussianMixture

__all__ = [
    "CentroidDistance",
    "AssignmentError",
    "centroid_distance",
    "match_heads",
    "distortion",
    "assignment_error",
    "adjusted_rand_index",
    "SpreadRatio",
    "LimitDistance",
    "ClusterCount",
    "spread_ratio",
    "limit_distance",
    "count_clusters",
]


class CentroidDistance(NamedTuple):
    """Matched distance between heads and centroids."""

    max: float
    """Largest matched Euclidean distance."""
    rms: float
    """Root-mean-square of the matched distances."""
    matching: np.ndarray
    """``matching[k]`` is the index of the head matched to centroid ``k``."""


class AssignmentError(NamedTuple):
    """Matched classification error of the most-attended head, and the Bayes error."""

    error: float
    bayes_error: float


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def match_heads(heads, centroids) -> np.ndarray:
    """Hungarian matching: ``matching[k]`` is the head matched to ``centroids[k]``.

    With more heads than centroids the extra heads stay unmatched.

    Examples
    --------
    >>> match_heads([[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    array([1, 0])
    """
    heads, centroids = _to_numpy(heads), _to_numpy(centroids)
    if heads.ndim != 2 or centroids.ndim != 2 or heads.shape[1] != centroids.shape[1]:
        raise ValueError(
            f"heads (K, d) and centroids (K', d) must share d, got {heads.shape}, "
            f"{centroids.shape}"
        )
    if len(heads) < len(centroids):
        raise ValueError(f"need at least as many heads as centroids, got {len(heads)} < "
                         f"{len(centroids)}")
    if not (np.isfinite(heads).all() and np.isfinite(centroids).all()):
        raise ValueError("heads and centroids must be finite (no NaN or inf)")
    cost = np.linalg.norm(centroids[:, None, :] - heads[None, :, :], axis=-1)  # (K', K)
    rows, cols = linear_sum_assignment(cost)
    matching = np.empty(len(centroids), dtype=np.int64)
    matching[rows] = cols
    return matching


def centroid_distance(heads, centroids) -> CentroidDistance:
    """Distance between heads and centroids up to relabelling.

    Parameters
    ----------
    heads : array-like of shape (K, d)
    centroids : array-like of shape (K, d)

    Returns
    -------
    CentroidDistance
        ``max`` and ``rms`` of the matched Euclidean distances, and the matching.

    Examples
    --------
    >>> import numpy as np
    >>> dist = centroid_distance([[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    >>> dist.max, dist.rms
    (0.0, 0.0)
    """
    heads_np, centroids_np = _to_numpy(heads), _to_numpy(centroids)
    if centroids_np.size == 0:
        raise ValueError(f"centroids must hold at least one centroid, got shape "
                         f"{centroids_np.shape}")
    matching = match_heads(heads_np, centroids_np)
    dist = np.linalg.norm(heads_np[matching] - centroids_np, axis=1)
    return CentroidDistance(float(dist.max()), float(np.sqrt(np.mean(dist**2))), matching)


def distortion(X, outputs) -> float:
    """Quantization distortion ``mean_i ||X_i - T(X_i)||^2`` over tokens.

    Parameters
    ----------
    X : array-like or Tensor of shape (..., d)
        Tokens (any leading shape, e.g. ``(n, d)`` or prompts ``(B, L, d)``).
    outputs : array-like or Tensor of the same shape
        The layer's outputs ``T(X)``.

    Returns
    -------
    float
        The mean over all tokens of the squared Euclidean error.

    Examples
    --------
    >>> distortion([[1.0, 0.0]], [[0.0, 0.0]])
    1.0
    """
    X, outputs = _to_numpy(X), _to_numpy(outputs)
    if X.shape != outputs.shape:
        raise ValueError(f"X and outputs must have the same shape, got {X.shape}, "
                         f"{outputs.shape}")
    return float(np.mean(np.sum((X - outputs) ** 2, axis=-1)))


@renamed_keywords(temperature="inverse_temperature", mixture="mix")
def assignment_error(heads, X, labels, *, inverse_temperature: float,
                     mix=None) -> AssignmentError:
    """Matched error of ``argmax_h a_h(x)`` against true labels, next to the Bayes error.

    Heads are matched to clusters by majority vote (Hungarian on the confusion
    matrix). The Bayes error is that of the mixture's own Bayes classifier on the same
    tokens (``nan`` when ``mix`` is not given).

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=3, sigma=0.2)
    >>> X, z = mix.sample(500, rng=0, return_labels=True)
    >>> res = assignment_error(mix.centroids[::-1], X, z, inverse_temperature=5.0, mix=mix)
    >>> res.error == res.bayes_error == 0.0
    True
    """
    X_t = as_tensor(X, name="X")
    heads_t = as_tensor(heads, name="heads", dtype=X_t.dtype)
    check_finite(X_t, "X")                 # NaN rows were all in head 0: half of them right
    check_finite(heads_t, "heads")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or labels.size != X_t.shape[0] or \
            not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        shown = labels if labels.size <= 10 else f"shape {labels.shape}, dtype {labels.dtype}"
        raise ValueError(f"labels must be a non-empty 1-D array of non-negative integers, one "
                         f"per row of X ({X_t.shape[0] if X_t.ndim else 0}), got {shown!r}")
    weights = head_weights(X_t, heads_t, inverse_temperature=inverse_temperature)
    pred = weights.argmax(-1).cpu().numpy()
    k = max(int(labels.max()) + 1, heads_t.shape[0])
    confusion = np.zeros((k, k))
    np.add.at(confusion, (labels, pred), 1)
    rows, cols = linear_sum_assignment(-confusion)
    error = 1.0 - confusion[rows, cols].sum() / len(labels)
    bayes = float("nan")
    if mix is not None:
        bayes = float(np.mean(mix.predict(_to_numpy(X)) != labels))
    return AssignmentError(float(error), bayes)


def adjusted_rand_index(labels_true, labels_pred) -> float:
    """Adjusted Rand index (scikit-learn's), invariant to relabelling.

    Examples
    --------
    >>> adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    >>> adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1])
    -0.5
    """
    return float(adjusted_rand_score(labels_true, labels_pred))


# --------------------------------------------------------------------------------------
# quantization by identity attention
# --------------------------------------------------------------------------------------
class SpreadRatio(NamedTuple):
    """Within-cluster spread of the outputs over that of the inputs."""

    ratio: float
    """Pooled ratio ``sum_k sum_{i in k} ||Y_i - Ybar_k||^2 / (same for X)``."""
    per_cluster: np.ndarray
    """The same ratio cluster by cluster (``nan`` where the input spread is zero)."""
    input_spread: float
    """Mean squared distance of the inputs to their cluster mean."""
    output_spread: float
    """Mean squared distance of the outputs to their cluster mean."""


class LimitDistance(NamedTuple):
    """Distances ``||Y_i - Q_inf(X_i)||`` between outputs and their limit points."""

    mean: float
    rms: float
    max: float


class ClusterCount(NamedTuple):
    """Groups of (nearly) coincident tokens."""

    n_clusters: int
    labels: np.ndarray
    """Group of each token, numbered in order of first appearance."""
    centers: np.ndarray
    """Mean of each group, shape ``(n_clusters, d)``."""


def _rows(a, name: str) -> np.ndarray:
    arr = a.detach().cpu().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(
        a, dtype=np.float64)
    if arr.ndim not in (2, 3) or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty (L, d) or (B, L, d) array, got shape "
                         f"{arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr.reshape(-1, arr.shape[-1])


def spread_ratio(X, Y, labels) -> SpreadRatio:
    """Within-cluster spread of the outputs ``Y`` relative to that of the inputs ``X``.

    ``ratio = sum_k sum_{i: z_i = k} ||Y_i - Ybar_k||^2 / sum_k sum_{i: z_i = k}
    ||X_i - Xbar_k||^2``; a quantizer sends each cluster close to one point, so the
    ratio is small.

    Parameters
    ----------
    X, Y : array-like of shape (L, d) or (B, L, d)
        Inputs and outputs of a layer (pooled over the batch).
    labels : array-like of shape (L,) or (B, L)
        Cluster of each token.

    Examples
    --------
    >>> X = [[0.0, 1.0], [0.0, -1.0], [5.0, 1.0], [5.0, -1.0]]
    >>> Y = [[0.0, 0.1], [0.0, -0.1], [5.0, 0.1], [5.0, -0.1]]
    >>> round(spread_ratio(X, Y, [0, 0, 1, 1]).ratio, 6)
    0.01
    """
    x, y = _rows(X, "X"), _rows(Y, "Y")
    z = np.asarray(labels).reshape(-1)
    if x.shape != y.shape or z.shape != (len(x),):
        raise ValueError(f"X, Y and labels must describe the same tokens, got shapes "
                         f"{np.shape(X)}, {np.shape(Y)}, {np.shape(labels)}")
    clusters = np.unique(z)
    sx = np.array([np.sum((x[z == k] - x[z == k].mean(0)) ** 2) for k in clusters])
    sy = np.array([np.sum((y[z == k] - y[z == k].mean(0)) ** 2) for k in clusters])
    with np.errstate(divide="ignore", invalid="ignore"):
        per_cluster = np.where(sx > 0, sy / np.where(sx > 0, sx, 1.0), np.nan)
        ratio = float(sy.sum() / sx.sum()) if sx.sum() > 0 else float("nan")
    return SpreadRatio(ratio, per_cluster, float(sx.sum() / len(x)), float(sy.sum() / len(x)))


@renamed_keywords(temperature="inverse_temperature")
def limit_distance(X, Y, mix: GaussianMixture, *, inverse_temperature: float) -> LimitDistance:
    """Distance of each output ``Y_i`` to its infinite-prompt limit ``Q_inf(X_i)``.

    Parameters
    ----------
    X, Y : array-like of shape (L, d) or (B, L, d)
        A prompt drawn from ``mix`` and its one-step output ``identity_attention(X,
        inverse_temperature)``.
    mix : GaussianMixture
    inverse_temperature : float

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    >>> X = mix.sample(2000, rng=0)
    >>> Y = ac.identity_attention(X, 0.85)
    >>> res = limit_distance(X, Y, mix, inverse_temperature=0.85)
    >>> res.mean < 0.05
    True
    """
    x, y = _rows(X, "X"), _rows(Y, "Y")
    if x.shape != y.shape:
        raise ValueError(f"X and Y must have the same shape, got {np.shape(X)}, {np.shape(Y)}")
    limit = infinite_prompt_limit(x, mix, inverse_temperature=inverse_temperature)
    dist = np.linalg.norm(y - limit, axis=1)
    return LimitDistance(float(dist.mean()), float(np.sqrt(np.mean(dist**2))), float(dist.max()))


def count_clusters(Y, *, tol: float = 1e-3) -> ClusterCount:
    """Number of distinct clusters among tokens, grouping tokens closer than ``tol``.

    Greedy leader grouping: the first token not yet grouped opens a group and takes
    every ungrouped token within ``tol`` of it. When every true group has diameter
    below ``tol`` and distinct groups are more than ``tol`` apart (collapsed or
    metastable clusters after repeated steps), the count does not depend on the order.

    Parameters
    ----------
    Y : array-like of shape (L, d)
    tol : float, default=1e-3

    Examples
    --------
    >>> count_clusters([[0.0, 0.0], [1e-6, 0.0], [1.0, 0.0]], tol=1e-3).n_clusters
    2
    """
    y = _rows(Y, "Y")
    if np.ndim(Y) != 2:
        raise ValueError(f"Y must be one prompt of shape (L, d), got shape {np.shape(Y)}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    labels = np.full(len(y), -1, dtype=np.int64)
    left = np.arange(len(y))
    centers = []
    while left.size:
        close = np.linalg.norm(y[left] - y[left[0]], axis=1) < tol
        labels[left[close]] = len(centers)
        centers.append(y[left[close]].mean(0))
        left = left[~close]
    return ClusterCount(len(centers), labels, np.array(centers))

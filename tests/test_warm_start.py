"""Tests of the warm start: hard Lloyd steps and the auto lambda
(``attnclust.cluster.warm_start``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import sum_tol
from attnclust.cluster.warm_start import auto_inverse_temperature


@pytest.mark.parametrize("sigma", [0.05, 0.1, 0.3])
def test_auto_inverse_temperature_is_inverse_noise_variance(sigma):
    mix = ac.GaussianMixture.orthogonal(d=20, k=3, sigma=sigma)
    X = torch.as_tensor(mix.sample(30_000, rng=0))
    lam = auto_inverse_temperature(X, torch.as_tensor(mix.centroids))
    assert lam == pytest.approx(1 / sigma**2, rel=0.05)


@pytest.mark.parametrize("cap", [1.0, 0.05])
def test_auto_inverse_temperature_in_a_small_cap_is_still_inverse_noise_variance(cap):
    """The defining property: lambda = 1/sigma^2 however close the clusters sit on the sphere.

    With centroids in a cap of angular radius ``cap`` the projections on the heads vary
    only to second order (``<x, mu> = 1 - ||x - mu||^2 / 2``); the rule measures the
    spread across the boundaries between heads, which is first order, so it does not
    blow up to ~1/sigma^4 when the cap is small (as row-normalized wine or iris are).
    """
    d, K, sigma = 12, 3, 0.1 * cap
    base = np.eye(d)[0]
    cent = np.stack([np.cos(cap) * base + np.sin(cap) * np.eye(d)[k + 1] for k in range(K)])
    X = ac.normalize(torch.as_tensor(ac.GaussianMixture(cent, sigma=sigma).sample(30_000, rng=0)))
    # rows on the sphere: the noise is tangent, of variance sigma^2 / (1 + d sigma^2) per
    # direction (the von Mises-Fisher concentration is its inverse)
    assert auto_inverse_temperature(X, torch.as_tensor(cent)) == pytest.approx((1 + d * sigma**2)
                                                                       / sigma**2, rel=0.05)


@pytest.mark.parametrize("sigma", [0.05, 0.3, 2.0])
def test_euclidean_auto_inverse_temperature_is_inverse_noise_variance(sigma):
    """Isotropic clusters anywhere: lambda = 1 / sigma^2 (the E-step of a Gaussian mixture)."""
    gen = np.random.default_rng(0)
    centers = 10 * sigma * np.eye(6)[:4] + 100.0      # 14 sigma apart, far from the origin
    X = torch.as_tensor(np.concatenate([c + sigma * gen.standard_normal((10_000, 6))
                                        for c in centers]))
    lam = auto_inverse_temperature(X, torch.as_tensor(centers), geometry="euclidean")
    assert lam == pytest.approx(1 / sigma**2, rel=0.05)


def test_euclidean_auto_inverse_temperature_reads_the_spread_across_the_boundary():
    """Anisotropic clusters: the variance that counts is the one along the centres' axis."""
    gen = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [0.0, 10.0]])
    X = np.concatenate([c + gen.standard_normal((20_000, 2)) * [5.0, 0.5] for c in centers])
    lam = auto_inverse_temperature(torch.as_tensor(X), torch.as_tensor(centers),
                                   geometry="euclidean")
    assert lam == pytest.approx(1 / 0.5**2, rel=0.05)


def test_opposite_heads_on_the_sphere_get_a_finite_sensible_inverse_temperature():
    """K = 2 centred data: Lloyd on the sphere ends with exactly opposite heads, where the
    tangent to the nearest head is undefined; lambda must still be ~ 1 / spread^2."""
    gen = np.random.default_rng(6)
    X = np.concatenate([gen.normal([3.0, 0.0], 1.0, (500, 2)),
                        gen.normal([-3.0, 0.0], 1.0, (500, 2))])
    X = torch.as_tensor((X - X.mean(0)) / np.sqrt(np.mean(np.sum((X - X.mean(0))**2, 1))))
    heads = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    lam = auto_inverse_temperature(X, heads)
    spread = float(X[X[:, 0] > 0, 0].var())
    assert lam == pytest.approx(1 / spread, rel=0.1)


def test_boundary_variance_packs_no_buffer_for_a_sum_over_ranks():
    """The warm start runs on a sample every rank holds whole, so its statistics need no
    sum over ranks; they are read as computed, with no buffer packed (``torch.cat``) and
    unpacked again for a reduction that never happens."""
    import ast
    import inspect

    from attnclust.cluster import warm_start

    tree = ast.parse(inspect.getsource(warm_start.boundary_variance))
    packs = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr in ("cat", "stack")]
    assert packs == []


def test_boundary_variance_is_the_pooled_variance_along_the_normals():
    """Against a direct computation: each cluster's variance along the unit normal of its
    nearest boundary (sphere: the tangent at mu_h towards the nearest head), pooled with
    the neighbour's along the reverse normal, averaged with the cluster sizes."""
    from attnclust.cluster.warm_start import boundary_variance, hard_labels
    from attnclust.layer.geometry import Sphere

    gen = np.random.default_rng(3)
    mix = ac.GaussianMixture.random(d=5, k=3, sigma=0.2, min_angle=1.0, rng=1)
    X = torch.as_tensor(mix.sample(3000, rng=2))
    heads = ac.normalize(torch.as_tensor(mix.centroids + 0.05 * gen.standard_normal((3, 5))))
    z = hard_labels(X, heads, "sphere").numpy()
    Xn, H = X.numpy(), heads.numpy()
    c, _, norm2 = Sphere().nearest_boundary(heads @ heads.T)
    total = 0.0
    for h in range(3):
        g = int(c[h])
        u = H[g] - (H[g] @ H[h]) * H[h]
        u /= np.linalg.norm(u)
        v = H[h] - (H[h] @ H[g]) * H[g]
        v /= np.linalg.norm(v)
        nh, ng = np.sum(z == h), np.sum(z == g)
        pooled = (nh * np.var(Xn[z == h] @ u) + ng * np.var(Xn[z == g] @ v)) / (nh + ng)
        total += nh * pooled
    # the library takes each variance as E[p^2] - E[p]^2 of projections |p| <= ||x|| over
    # the rows (n eps max ||x||^2 each, sum_tol), combines (1, -2 g, g^2) of them (|g| <= 1:
    # at most 4 times that) and divides by the normal's squared norm; the direct two-pass
    # variance is closer. An absolute bound: the variance is a difference of such sums.
    tol = 4 * sum_tol(len(Xn)) * float((Xn**2).sum(1).max()) / float(norm2.min())
    assert boundary_variance(X, heads).variance == pytest.approx(total / len(Xn), rel=0,
                                                                 abs=tol)


def test_the_spherical_seeding_is_the_engines_kmeans_plusplus():
    """``init="kmeans++"`` without a k-means limit (the sphere) seeds with the engine's
    greedy k-means++ (one run of ``kmeanspp_batch``) from a ``RandomState`` seeded off
    ``gen``: scikit-learn's ``kmeans_plusplus`` with that seed (its draws, as before the
    engine seeded it), and never a row of weight zero."""
    from sklearn.cluster import kmeans_plusplus

    from attnclust.cluster.warm_start import _SEEDINGS

    gen = np.random.default_rng(3)
    S = torch.as_tensor(gen.normal(size=(300, 4)))
    w = torch.as_tensor((np.arange(300) % 3 > 0).astype(np.float64))    # every third: 0
    sphere = ac.layer.geometry.Sphere()
    for weights in (None, w):
        heads = _SEEDINGS["kmeans++"](S, 6, np.random.default_rng(7), sphere, weights)
        seed = int(np.random.default_rng(7).integers(2**31 - 1))
        reference = kmeans_plusplus(S.numpy(), 6, random_state=seed, sample_weight=None
                                    if weights is None else weights.numpy())[0]
        np.testing.assert_array_equal(heads, reference)
    picked = [int(np.flatnonzero((S.numpy() == h).all(1))[0]) for h in heads]
    assert all(i % 3 > 0 for i in picked) and len(set(picked)) == 6

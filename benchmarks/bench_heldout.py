"""A second battery the defaults were not chosen on: generated like public benchmark families.

Twelve sets: eight shaped like families of public clustering benchmarks (none of them is in
``bench_battery.py``, whose sets chose the defaults): many overlapping 2-D clusters (SIPU's
A sets), anisotropic overlapping clusters (S sets), a grid of touching blobs (Birch),
dense big clusters beside sparse small ones (unbalance), well-separated clusters in 64-D
(dim sets), a table with columns on scales 1-100 plus noise columns, blobs over 20%
uniform noise (scored without the noise points), and scikit-learn's digits on a 0-255
scale; and four sets of the shape families (three sticks, a ring around a blob over 10%
outliers, an unbalanced pair in 16-D, sheared blobs in 4-D), drawn with other generators
than the battery's and not used to choose ``covariance_type="auto"``'s rule (but the ring
around a blob was in view while its second EM start was built:
``attnclust.cluster.mixture.candidates``). Columns: the
mean ARI over ``random_state`` 200-209 (quick: 200-201) of the default
``AttentionClustering`` (``covariance_type="auto"``), its spherical fit alone
(``covariance_type="spherical"``), ``KMeans(n_init=1)``,
``KMeans(n_init=10)`` and ``GaussianMixture(full)``, and the best-of-3 fit times over
``KMeans(n_init=1)``'s and ``KMeans(n_init=10)``'s at seed 0, every method on one thread.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_blobs
from sklearn.mixture import GaussianMixture

import attnclust as ac

sys.path.insert(0, str(Path(__file__).parent))
from bench_battery import datasets as battery_sets  # noqa: E402
from bench_battery import run as battery_run  # noqa: E402  (the same scoring and timing)


def _anisotropic(rng, k=15, per=300):
    centres = rng.uniform(0, 100, (k, 2))
    X = np.vstack([rng.normal(size=(per, 2)) @ (3 * rng.normal(size=(2, 2))) + c
                   for c in centres])
    return X, np.repeat(np.arange(k), per)


def _unbalanced(rng):
    sizes = [2000, 2000, 2000, 100, 100, 100, 100, 100]
    centres = rng.uniform(0, 50, (8, 2))
    X = np.vstack([rng.normal(c, 1.5 if s > 1000 else 3.0, (s, 2))
                   for c, s in zip(centres, sizes, strict=True)])
    return X, np.repeat(np.arange(8), sizes)


def _noisy_blobs(rng):
    X, y = make_blobs(3000, centers=10, cluster_std=1.5, center_box=(-30, 30), random_state=5)
    noise = rng.uniform(X.min(0), X.max(0), (750, 2))
    return np.vstack([X, noise]), np.r_[y, -np.ones(750, dtype=int)]


def datasets():
    """``(name, X, y)`` of the held-out sets (``y = -1``: noise, not scored)."""
    rng = np.random.default_rng(1000)
    yield "A-like K=35", *make_blobs(35 * 150, centers=rng.uniform(0, 100, (35, 2)),
                                     cluster_std=3.0, random_state=1)
    yield "S-like K=15 anisotropic", *_anisotropic(rng)
    grid, z = 10 * np.stack(np.meshgrid(np.arange(8), np.arange(8)), -1).reshape(-1, 2), \
        rng.integers(0, 64, 6400)
    yield "grid 8x8 sigma 2.5", grid[z] + rng.normal(0, 2.5, (6400, 2)), z
    yield "unbalance-like K=8", *_unbalanced(rng)
    yield "dim64-like K=16", *make_blobs(1024, n_features=64, centers=16, cluster_std=8.0,
                                         center_box=(-50, 50), random_state=3)
    X, y = make_blobs(1500, n_features=6, centers=5, cluster_std=1.2, random_state=4)
    yield "mixed-scale table K=5", np.hstack([X * [1, 10, 100, 1, 10, 100],
                                              rng.normal(0, 5, (1500, 3))]), y
    yield "10 blobs + 20% noise", *_noisy_blobs(rng)
    X, y = load_digits(return_X_y=True)
    yield "digits x16", X * 16.0, y
    yield from _shape_families(np.random.default_rng(2000))


def _shape_families(rng):
    """Sets of the shape families of ``bench_battery.py`` drawn afresh (other generators,
    seeds and sizes; not used to choose ``covariance_type="auto"``'s rule)."""
    X, y = [], []
    for h, (t, c) in enumerate(((0.2, [0, 0]), (1.4, [6, 1]), (-0.7, [3, 7]))):
        s = np.c_[rng.uniform(-5, 5, 400), rng.normal(0, 0.2, 400)]
        X.append(s @ np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]]) + c)
        y.append(np.full(400, h))
    yield "three sticks K=3", np.vstack(X), np.concatenate(y)
    t = rng.uniform(0, 2 * np.pi, 700)
    ring = np.c_[np.cos(t), np.sin(t)] * rng.normal(5, 0.3, 700)[:, None]
    blob = rng.normal(0, 0.6, (500, 2))
    out = rng.uniform(-8, 8, (120, 2))
    yield "ring around a blob + 10% outliers", np.vstack([blob, ring, out]), \
        np.r_[np.zeros(500, int), np.ones(700, int), -np.ones(120, int)]
    u = rng.normal(size=16)
    u /= np.linalg.norm(u)
    yield "pair d=16 sep 3, 600/200", np.r_[rng.normal(0, 1, (600, 16)),
                                            rng.normal(0, 1, (200, 16)) + 3.0 * u], \
        np.repeat([0, 1], [600, 200])
    cov = np.diag([9.0, 0.25, 0.25, 0.25])
    yield "sheared blobs 4-D K=4", np.vstack([rng.multivariate_normal(c, cov, 300) for c in
                                             rng.uniform(-6, 6, (4, 4))]), np.repeat(range(4), 300)


def _methods(K: int, seed: int) -> dict:
    return {"default": lambda X: ac.AttentionClustering(K, random_state=seed).fit(X).labels_,
            "spherical": lambda X: ac.AttentionClustering(K, covariance_type="spherical",
                                                          random_state=seed).fit(X).labels_,
            "noise head": lambda X: ac.AttentionClustering(K, noise_head=True,
                                                           random_state=seed).fit(X).labels_,
            "KMeans(1)": lambda X: KMeans(K, n_init=1, random_state=seed).fit(X).labels_,
            "KMeans(10)": lambda X: KMeans(K, n_init=10, random_state=seed).fit(X).labels_,
            "GMM full": lambda X: GaussianMixture(K, covariance_type="full", reg_covar=1e-6,
                                                  random_state=seed).fit(X).predict(X)}


def rows_of_both(row, keep, quick: bool, heldout_seeds: int = 10) -> list[dict]:
    """``row(name, X, y, seeds)`` of every set of both batteries that ``keep(name, y)``
    selects: seeds 0-4 on the battery's sets, ``heldout_seeds`` from 200 on the held-out
    ones (quick: two seeds, the first set of each)."""
    def picked(sets):
        sets = [(name, np.asarray(X), np.asarray(y)) for name, X, y in sets
                if keep(name, np.asarray(y))]
        return sets[:1] if quick else sets
    battery_seeds = range(2) if quick else range(5)
    seeds = range(200, 202 if quick else 200 + heldout_seeds)
    return ([row(*s, battery_seeds) for s in picked(battery_sets())]
            + [row(*s, seeds) for s in picked(datasets())])


def run(quick: bool) -> list[dict]:
    return battery_run(quick, _methods, range(200, 202 if quick else 210), datasets())


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

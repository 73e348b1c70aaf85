"""Development battery: AttentionClustering's defaults against k-means and a spherical GMM.

One row per data set: the adjusted Rand index (mean over ``random_state`` 0..4) of
``AttentionClustering`` with its defaults (Euclidean heads), with ``geometry="sphere"``
(rows normalized, the paper's layer), scikit-learn ``KMeans(n_init=1)`` and
``KMeans(n_init=10)`` and ``GaussianMixture(covariance_type="spherical")``, and the
median fit time of the default relative to ``KMeans(n_init=1)``'s on the same data
(fits interleaved, one per seed, every method on one thread: on data this small threads
measure the machine's load more than the methods). Every method sees the rows as given;
the true ``K``.

The data: scikit-learn's bundled sets and generated ones covering what clusters
directions from the origin gets wrong (blobs on one ray, many blobs in a quadrant away
from the origin, a central cluster, data around the origin) and what soft assignments
may (unequal spreads, anisotropy, unbalanced sizes, overlap), K = 2 wherever it applies.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads

SEEDS = range(5)


def _blobs(sizes, centers, stds, seed, transform=None):
    rng = np.random.default_rng(seed)
    centers = np.asarray(centers, dtype=float)
    X = np.concatenate([rng.normal(c, s, size=(m, centers.shape[1]))
                        for m, c, s in zip(sizes, centers, stds, strict=True)])
    y = np.repeat(np.arange(len(sizes)), sizes)
    return (X if transform is None else X @ np.asarray(transform)), y


def datasets(quick: bool = False):
    """``(name, X, y)`` of the battery (all of it is small; ``quick`` keeps 5 sets)."""
    sets = [(name, *loader(return_X_y=True)) for name, loader in (
        ("iris", load_iris), ("wine", load_wine), ("breast cancer", load_breast_cancer),
        ("digits", load_digits))]
    X, y = make_blobs(1500, centers=3, cluster_std=[0.5, 1.5, 3.0], random_state=1)
    sets.append(("unequal spreads K=3", X, y))
    X, y = _blobs([400, 400, 400], [[0, 0], [4, 1], [1, 5]], [1, 1, 1], 2,
                  transform=[[0.6, -0.64], [-0.41, 0.85]])
    sets.append(("anisotropic K=3", X, y))
    sets.append(("unbalanced 1000/200/50",
                 *_blobs([1000, 200, 50], [[0, 0], [5, 0], [0, 5]], [1, 1, 1], 3)))
    for k in (15, 30):
        X, y = make_blobs(100 * k, centers=k, cluster_std=1.0, center_box=(10, 60),
                          random_state=k)
        sets.append((f"{k} blobs in 2-D, away from 0", X, y))
    sets.append(("two blobs on one ray K=2",
                 *_blobs([500, 500], [[2, 2], [6, 6]], [0.5, 0.5], 4)))
    sets.append(("central cluster K=5", *_blobs(
        [300] * 5, [[0, 0], [6, 0], [-6, 0], [0, 6], [0, -6]], [1] * 5, 5)))
    sets.append(("around the origin K=4", *_blobs(
        [300] * 4, [[0, 0, 0], [3, 0, 0], [0, 3, 0], [0, 0, 3]], [0.8] * 4, 6)))
    sets.append(("two blobs at (+-3, 0) K=2", *_blobs([500, 500], [[3, 0], [-3, 0]], [1, 1], 7)))
    sets.append(("elongated pair K=2", *_blobs([500, 500], [[0, 0], [0, 3]], [1, 1], 8,
                                               transform=[[4, 0], [0, 0.5]])))
    mix = ac.GaussianMixture.random(d=50, k=5, sigma=0.25, min_angle=np.pi / 3, rng=9)
    X, y = mix.sample(2000, rng=10, return_labels=True)
    sets.append(("mixture d=50 K=5 (shifted)", X + 3.0, y))
    X, y = make_blobs(2000, n_features=10, centers=8, cluster_std=2.5, random_state=11)
    sets.append(("overlapping d=10 K=8", X, y))
    return [sets[i] for i in (0, 3, 7, 9, 10)] if quick else sets


def _methods(K: int, seed: int):
    return {
        "default": lambda X: ac.AttentionClustering(K, random_state=seed).fit(X).labels_,
        "sphere": lambda X: ac.AttentionClustering(K, geometry="sphere", random_state=seed)
        .fit(X).labels_,
        "KMeans(1)": lambda X: KMeans(K, n_init=1, random_state=seed).fit(X).labels_,
        "KMeans(10)": lambda X: KMeans(K, n_init=10, random_state=seed).fit(X).labels_,
        "GMM sph": lambda X: GaussianMixture(K, covariance_type="spherical",
                                             random_state=seed).fit(X).predict(X),
    }


def run(quick: bool) -> list[dict]:
    with threadpool_limits(1), torch_threads(1):
        return _run(quick)


def _run(quick: bool) -> list[dict]:
    rows = []
    for name, X, y in datasets(quick):
        K = len(np.unique(y))
        ari: dict[str, list[float]] = {}
        times: dict[str, list[float]] = {}
        for seed in SEEDS:
            for method, fit in _methods(K, seed).items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    labels = fit(X)
                    times.setdefault(method, []).append(time.perf_counter() - start)
                ari.setdefault(method, []).append(adjusted_rand_score(y, labels))
        row = {"data": name, "n": X.shape[0], "d": X.shape[1], "K": K}
        row.update({f"ARI {m}": float(np.mean(v)) for m, v in ari.items()})
        row["time default / KMeans(1)"] = float(np.median(times["default"])
                                                / np.median(times["KMeans(1)"]))
        rows.append(row)
    keys = [k for k in rows[0] if k.startswith("ARI")]
    mean = {"data": "mean", "n": "", "d": "", "K": ""}
    mean.update({k: float(np.mean([r[k] for r in rows])) for k in keys})
    mean["time default / KMeans(1)"] = float(np.median([r["time default / KMeans(1)"]
                                                        for r in rows]))
    return rows + [mean]

"""Development battery: AttentionClustering's default against k-means, Gaussian mixtures, faiss.

One row per data set: the adjusted Rand index (mean over ``random_state`` in ``SEEDS``)
of ``AttentionClustering`` with its defaults, scikit-learn ``KMeans(n_init=1)`` and
``KMeans(n_init=10)``, ``GaussianMixture`` with spherical and full covariances, and
``faiss.Kmeans`` (its defaults, when faiss is installed); then the fit time of the
default, of ``KMeans(n_init=10)`` and of faiss relative to ``KMeans(n_init=1)``'s on the
same data: fits interleaved round by round, best of ``ROUNDS`` rounds at seed 0, every
method on one thread (threadpoolctl for scikit-learn and BLAS, ``torch.set_num_threads(1)``,
``faiss.omp_set_num_threads(1)``): on data this small threads measure the machine's load
more than the methods. Every method sees the rows as given, and the true ``K``.

Points labelled ``-1`` (uniform background noise) are clustered like the others but left
out of the ARI: the methods are asked for the ``K`` clusters, not for the noise.

The sets (n <= 5,000 each; the large ones are in ``bench_clustering.py``):

- scikit-learn's bundled tables (iris, wine, breast cancer, digits): features on their own
  scales (wine's proline is ~1,000 times its hue);
- generated shapes: unequal spreads, anisotropic and elongated clusters (linear maps of
  round blobs), unbalanced sizes (down to 1:20), blobs far from the origin or around it,
  overlapping clusters in 10-D;
- noise: round or elongated blobs over a uniform background of 5-20 % of the points;
- non-convex 2-D shapes (scikit-learn's moons and circles; no k-means-like method gets
  them, the rows show by how much);
- tables whose columns are on scales 10^3-10^5 apart, once with the informative columns
  on the small scales (a per-column standardisation helps) and once on the large ones
  (it hurts: it blows up the noise columns);
- G2-like pairs of Gaussians (SIPU's G2 sets: two clusters of 1,024 points, centres 100
  apart in every coordinate, standard deviation ``sd``) at several overlaps and dimensions;
- many clusters: K = 30-100 (blobs in 2-D and 10-D, a 7 x 7 grid of touching blobs);
- the families where the heads' shape decides (``covariance_type="auto"``): elongated and
  line-like clusters (two lines and a blob, lines in 5-D, a cross of two sticks with one
  mean, two interlocked rings), rings with outliers (a core in a ring with four small
  corner groups, a ball in a shell, two rings over 5 % uniform outliers), unbalanced and
  touching clusters, and high-dimensional pairs (two round Gaussians in 8-64 D, two
  classes each a pair of Gaussians on shared means with unequal spreads, two Gaussians of
  one mean and unequal spreads).

The default (``covariance_type="auto"``: the shape chosen) is scored and timed beside
its spherical fit alone (column ``spherical``, the default before the shape was chosen)
and the fit with a uniform background head (column ``noise head``: ``noise_head=True``;
the rows it labels -1 count as a cluster of their own in its ARI), and
``GaussianMixture(full)`` is timed too; the last columns give the times over
``KMeans(n_init=10)``'s.

Quick (``attnclust bench --quick``): 6 sets, 2 seeds, 1 round. Other seeds for the ARI:
``python benchmarks/bench_battery.py --seeds 100:120`` (``random_state`` 100-119).
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_blobs,
    make_circles,
    make_moons,
)
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads

SEEDS = range(5)
ROUNDS = 3
QUICK = ("iris", "anisotropic K=3", "noise 10% K=4", "scales 1e5 apart, informative small",
         "G2 d=16 sd=60", "40 blobs in 2-D")


def _blobs(sizes, centers, stds, seed, transform=None):
    rng = np.random.default_rng(seed)
    centers = np.asarray(centers, dtype=float)
    X = np.concatenate([rng.normal(c, s, size=(m, centers.shape[1]))
                        for m, c, s in zip(sizes, centers, stds, strict=True)])
    y = np.repeat(np.arange(len(sizes)), sizes)
    return (X if transform is None else X @ np.asarray(transform)), y


def _with_noise(X, y, fraction, seed):
    """``X`` plus ``fraction`` of its size drawn uniformly over its bounding box (label -1)."""
    rng = np.random.default_rng(seed)
    m = int(round(fraction * X.shape[0]))
    lo, hi = X.min(0), X.max(0)
    noise = rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), size=(m, X.shape[1]))
    return np.concatenate([X, noise]), np.concatenate([y, -np.ones(m, dtype=y.dtype)])


def _g2(d, sd, seed):
    """SIPU G2-like: two clusters of 1,024 points, centres 500 and 600 in every coordinate."""
    return _blobs([1024, 1024], [[500.0] * d, [600.0] * d], [sd, sd], seed)


def _scaled_table(informative_small: bool, seed: int):
    """4 clusters in a table whose columns are on scales 1 to 10^5. ``informative_small``:
    4 informative columns on scales 1-10 beside 4 noise columns on 10^3-10^5 (the noise
    drowns the clusters unless the columns are standardised); else 3 informative columns
    on 10^4 beside 9 noise columns on 1-100 (standardising blows the noise up)."""
    rng = np.random.default_rng(seed)
    m, noise = (4, 4) if informative_small else (3, 9)
    X, y = _blobs([300] * 4, rng.normal(0, 3, size=(4, m)), [1] * 4, seed + 1)
    X = np.concatenate([X, rng.normal(0, 3, size=(X.shape[0], noise))], axis=1)
    scales = ([1, 1, 10, 10] + [1e3, 1e3, 1e5, 1e5] if informative_small
              else [1e4, 1e4, 1e4] + [1, 10, 100] * 3)
    return X * np.asarray(scales, dtype=float), y


def _grid(side, spacing, sigma, per_blob, seed):
    rng = np.random.default_rng(seed)
    centers = spacing * np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2)
    X = np.concatenate([rng.normal(c, sigma, size=(per_blob, 2)) for c in centers])
    return X, np.repeat(np.arange(side * side), per_blob)


def _generated():
    yield "unequal spreads K=3", *make_blobs(1500, centers=3, cluster_std=[0.5, 1.5, 3.0],
                                             random_state=1)
    yield "anisotropic K=3", *_blobs([400, 400, 400], [[0, 0], [4, 1], [1, 5]], [1, 1, 1], 2,
                                     transform=[[0.6, -0.64], [-0.41, 0.85]])
    yield "elongated K=4 in 5-D", *_blobs(
        [500] * 4, np.random.default_rng(12).normal(0, 4, (4, 5)), [1] * 4, 13,
        transform=np.diag([6.0, 0.3, 1.0, 0.5, 2.0]) @ np.random.default_rng(14).normal(
            0, 1, (5, 5)))
    yield "unbalanced 1000/200/50", *_blobs([1000, 200, 50], [[0, 0], [5, 0], [0, 5]],
                                            [1, 1, 1], 3)
    yield "unbalanced 1:10 K=4", *_blobs([2000, 200, 200, 200],
                                         [[0, 0], [6, 0], [0, 6], [6, 6]], [1.5] * 4, 15)
    for k in (15, 30):
        X, y = make_blobs(100 * k, centers=k, cluster_std=1.0, center_box=(10, 60),
                          random_state=k)
        yield f"{k} blobs in 2-D, away from 0", X, y
    yield "two blobs on one ray K=2", *_blobs([500, 500], [[2, 2], [6, 6]], [0.5, 0.5], 4)
    yield "central cluster K=5", *_blobs(
        [300] * 5, [[0, 0], [6, 0], [-6, 0], [0, 6], [0, -6]], [1] * 5, 5)
    yield "around the origin K=4", *_blobs(
        [300] * 4, [[0, 0, 0], [3, 0, 0], [0, 3, 0], [0, 0, 3]], [0.8] * 4, 6)
    yield "two blobs at (+-3, 0) K=2", *_blobs([500, 500], [[3, 0], [-3, 0]], [1, 1], 7)
    yield "elongated pair K=2", *_blobs([500, 500], [[0, 0], [0, 3]], [1, 1], 8,
                                        transform=[[4, 0], [0, 0.5]])
    mix = ac.GaussianMixture.random(d=50, k=5, sigma=0.25, min_angle=np.pi / 3, rng=9)
    X, y = mix.sample(2000, rng=10, return_labels=True)
    yield "mixture d=50 K=5 (shifted)", X + 3.0, y
    yield "overlapping d=10 K=8", *make_blobs(2000, n_features=10, centers=8, cluster_std=2.5,
                                              random_state=11)


def _hard():
    X, y = make_blobs(2000, centers=4, cluster_std=1.0, random_state=16)
    yield "noise 10% K=4", *_with_noise(X, y, 0.10, 17)
    X, y = _blobs([600, 600, 600], [[0, 0], [5, 5], [10, 0]], [1, 1, 1], 18,
                  transform=[[2.0, 0.0], [0.8, 0.5]])
    yield "elongated + noise 20% K=3", *_with_noise(X, y, 0.20, 19)
    X, y = make_blobs(3000, n_features=5, centers=6, cluster_std=1.5, random_state=20)
    yield "noise 5% d=5 K=6", *_with_noise(X, y, 0.05, 21)
    yield "moons", *make_moons(1000, noise=0.08, random_state=22)
    yield "circles", *make_circles(1000, factor=0.5, noise=0.05, random_state=23)
    yield "scales 1e5 apart, informative small", *_scaled_table(True, 24)
    yield "scales 1e5 apart, informative large", *_scaled_table(False, 25)
    for d, sd in ((2, 30), (2, 50), (16, 60), (16, 100), (128, 200)):
        yield f"G2 d={d} sd={sd}", *_g2(d, sd, 26 + d + sd)
    yield "40 blobs in 2-D", *make_blobs(4000, centers=40, cluster_std=1.0,
                                         center_box=(-40, 40), random_state=27)
    yield "100 blobs in 10-D", *make_blobs(5000, n_features=10, centers=100, cluster_std=1.0,
                                           center_box=(-10, 10), random_state=28)
    yield "7x7 grid of touching blobs", *_grid(7, 10.0, 3.0, 80, 29)


def _rotation(t):
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def _lines_and_blob(seed):
    rng = np.random.default_rng(seed)
    a = np.c_[rng.uniform(0, 4, 400), rng.normal(0, 0.12, 400)]
    b = np.c_[rng.normal(0, 0.12, 400), rng.uniform(0.6, 4, 400)]
    c = rng.normal([3, 2.5], 0.3, (200, 2))
    return np.r_[a, b, c], np.repeat([0, 1, 2], [400, 400, 200])


def _lines(d, k, seed):
    rng = np.random.default_rng(seed)
    X, y = [], []
    for h in range(k):
        u = rng.normal(size=d)
        u /= np.linalg.norm(u)
        X.append(rng.normal(0, 3, d) + rng.uniform(-6, 6, (300, 1)) * u
                 + rng.normal(0, 0.25, (300, d)))
        y.append(np.full(300, h))
    return np.vstack(X), np.concatenate(y)


def _cross(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(500, 2)) * [4.0, 0.3]
    b = (rng.normal(size=(500, 2)) * [4.0, 0.3]) @ _rotation(np.pi / 2).T
    return np.r_[a, b], np.repeat([0, 1], 500)


def _chainlink(seed):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, (2, 500))
    a = np.c_[np.cos(t[0]), np.sin(t[0]), np.zeros(500)]
    b = np.c_[1 + np.cos(t[1]), np.zeros(500), np.sin(t[1])]
    return np.r_[a, b] + rng.normal(0, 0.08, (1000, 3)), np.repeat([0, 1], 500)


def _target(seed):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 600)
    ring = np.c_[np.cos(t), np.sin(t)] * rng.normal(4, 0.2, 600)[:, None]
    corners = [rng.normal(c, 0.25, (12, 2)) for c in ([6, 6], [-6, 6], [6, -6], [-6, -6])]
    X = np.vstack([rng.normal(0, 0.4, (400, 2)), ring] + corners)
    return X, np.repeat(np.arange(6), [400, 600, 12, 12, 12, 12])


def _atom(seed):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(400, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    shell = u * rng.normal(4, 0.3, 400)[:, None]
    return np.r_[rng.normal(0, 0.5, (400, 3)), shell], np.repeat([0, 1], 400)


def _rings_with_outliers(seed):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 1000)
    r = np.where(np.arange(1000) < 500, 1.0, 3.0) + rng.normal(0, 0.1, 1000)
    X = np.c_[np.cos(t), np.sin(t)] * r[:, None]
    X[500:] += [8, 0]
    out = rng.uniform(X.min(0) - 2, X.max(0) + 2, (50, 2))
    return np.r_[X, out], np.r_[np.repeat([0, 1], 500), -np.ones(50, dtype=int)]


def _pair(d, sep, n, seed):
    """Two round Gaussian clusters in ``d`` dimensions, centres ``sep`` apart."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    return np.r_[rng.normal(0, 1, (n, d)), rng.normal(0, 1, (n, d)) + sep * u], \
        np.repeat([0, 1], n)


def _pairs_on_shared_means(d, seed, n=300):
    """Two classes, each a pair of Gaussians on the same two means, spreads 1 and 2.5."""
    rng = np.random.default_rng(seed)
    m = rng.normal(0, 3, (2, d))
    a = np.r_[rng.normal(m[0], 1, (n // 2, d)), rng.normal(m[1], 1, (n // 2, d))]
    b = np.r_[rng.normal(m[0], 2.5, (n // 2, d)), rng.normal(m[1], 2.5, (n // 2, d))]
    return np.r_[a, b], np.repeat([0, 1], n)


def _shapes():
    """The families where the heads' shape decides (see the module docstring)."""
    yield "two lines and a blob", *_lines_and_blob(101)
    yield "lines in 5-D K=4", *_lines(5, 4, 102)
    yield "cross of two sticks (one mean)", *_cross(103)
    yield "two interlocked rings 3-D", *_chainlink(104)
    yield "core, ring, corners K=6", *_target(105)
    yield "ball in a shell 3-D", *_atom(106)
    yield "two rings + 5% outliers", *_rings_with_outliers(107)
    yield "unbalanced touching 2000/300/100", *_blobs([2000, 300, 100],
                                                      [[0, 0], [3.5, 0], [0, 3.5]], [1] * 3, 108)
    yield "touching unequal K=4", *_blobs([800, 400, 200, 100], [[0, 0], [5, 0], [0, 4], [4, 4]],
                                          [1.5, 1, 0.7, 0.5], 109)
    yield "pair d=8 sep 3", *_pair(8, 3.0, 300, 110)
    yield "pair d=32 sep 3.5", *_pair(32, 3.5, 300, 111)
    yield "pair d=64 sep 4 (150 each)", *_pair(64, 4.0, 150, 112)
    yield "pairs on shared means d=8", *_pairs_on_shared_means(8, 113)
    rng = np.random.default_rng(114)
    yield "one mean, spreads 1 and 3, d=16", np.r_[rng.normal(0, 1, (400, 16)),
                                                   rng.normal(0, 3, (400, 16))], \
        np.repeat([0, 1], 400)


def datasets(quick: bool = False):
    """``(name, X, y)`` of the battery (every set has n <= 5,000; ``quick``: 6 of them)."""
    sets = [(name, *loader(return_X_y=True)) for name, loader in (
        ("iris", load_iris), ("wine", load_wine), ("breast cancer", load_breast_cancer),
        ("digits", load_digits))]
    sets += list(_generated()) + list(_hard()) + list(_shapes())
    return [s for s in sets if s[0] in QUICK] if quick else sets


def _faiss(K: int, seed: int):
    try:
        import faiss
    except ImportError:
        return None

    def fit(X):
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        km = faiss.Kmeans(X.shape[1], K, seed=seed, verbose=False)
        km.train(X32)
        return km.index.search(X32, 1)[1].ravel()
    return fit


def _methods(K: int, seed: int):
    methods = {
        "default": lambda X: ac.AttentionClustering(K, random_state=seed).fit(X).labels_,
        "spherical": lambda X: ac.AttentionClustering(K, covariance_type="spherical",
                                                      random_state=seed).fit(X).labels_,
        "noise head": lambda X: ac.AttentionClustering(K, noise_head=True,
                                                       random_state=seed).fit(X).labels_,
        "KMeans(1)": lambda X: KMeans(K, n_init=1, random_state=seed).fit(X).labels_,
        "KMeans(10)": lambda X: KMeans(K, n_init=10, random_state=seed).fit(X).labels_,
        "GMM sph": lambda X: GaussianMixture(K, covariance_type="spherical",
                                             random_state=seed).fit(X).predict(X),
        "GMM full": lambda X: GaussianMixture(K, covariance_type="full", reg_covar=1e-6,
                                              random_state=seed).fit(X).predict(X),
    }
    if (fit := _faiss(K, seed)) is not None:
        methods["faiss"] = fit
    return methods


TIMED = ("default", "spherical", "noise head", "KMeans(1)", "KMeans(10)", "GMM full", "faiss")


@contextlib.contextmanager
def _faiss_threads(n: int):
    """faiss on ``n`` OpenMP threads, its own count restored after (the benchmarks run in
    one process: the clustering benchmark's faiss keeps its default threads)."""
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def run(quick: bool, methods=_methods, seeds=None, sets=None) -> list[dict]:
    """The battery's rows (``methods(K, seed) -> {name: X -> labels}``, for prototypes;
    ``seeds``: the ARI's ``random_state`` values, default ``SEEDS``; ``sets``: ``(name, X,
    y)`` to score instead of :func:`datasets`)."""
    with _faiss_threads(1), threadpool_limits(1), torch_threads(1):
        return _run(quick, methods, seeds, datasets(quick) if sets is None else sets)


def _fit(fit, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        labels = fit(X)
        return labels, time.perf_counter() - start


def _run(quick: bool, methods, seeds, sets) -> list[dict]:
    rows = []
    seeds = seeds if seeds is not None else range(2) if quick else SEEDS
    for name, X, y in sets:
        keep = y >= 0
        K = len(np.unique(y[keep]))
        ari: dict[str, list[float]] = {}
        for seed in seeds:
            for method, fit in methods(K, seed).items():
                labels, _ = _fit(fit, X)
                ari.setdefault(method, []).append(adjusted_rand_score(y[keep], labels[keep]))
        best: dict[str, float] = {}
        timed = {m: f for m, f in methods(K, 0).items() if m in TIMED}
        for _ in range(1 if quick else ROUNDS):
            for method, fit in timed.items():
                best[method] = min(best.get(method, np.inf), _fit(fit, X)[1])
        row = {"data": name, "n": X.shape[0], "d": X.shape[1], "K": K}
        row.update({f"ARI {m}": float(np.mean(v)) for m, v in ari.items()})
        row.update({f"time {m} / KMeans(1)": best[m] / best["KMeans(1)"]
                    for m in timed if m != "KMeans(1)"})
        if "KMeans(10)" in best:
            row.update({f"time {m} / KMeans(10)": best[m] / best["KMeans(10)"]
                        for m in ("default", "spherical", "noise head") if m in best})
        rows.append(row)
    return rows + [_summary(rows)]


def _summary(rows: list[dict]) -> dict:
    """Mean ARI per method and the median of each time ratio."""
    mean = {"data": "mean (time: median)", "n": "", "d": "", "K": ""}
    mean.update({k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k.startswith("ARI")})
    mean.update({k: float(np.median([r[k] for r in rows])) for k in rows[0]
                 if k.startswith("time")})
    return mean


if __name__ == "__main__":      # python benchmarks/bench_battery.py [--seeds FIRST:STOP]
    from attnclust._bench import format_table

    spec = sys.argv[sys.argv.index("--seeds") + 1] if "--seeds" in sys.argv else None
    chosen = range(*map(int, spec.split(":"))) if spec else None
    print(format_table(run(quick="--quick" in sys.argv, seeds=chosen)))

"""AttentionClustering's default against scikit-learn KMeans(n_init=1) and faiss, at scale.

Rows: one per (data set, method): adjusted Rand index, the best of three wall times
(methods interleaved round by round, so that a burst of load on the machine hits them
all), and the time relative to ``KMeans(n_init=1)`` and to ``faiss.Kmeans`` measured in
the same rounds. Every method runs with its default threads. Data, float32:

- ``K`` well-separated Gaussian clusters (unit centroids at least 60 degrees apart,
  ``sigma = 0.15``), shifted away from the origin: 2,000,000 x 8 (K = 8; also through
  ``attnclust fit`` on a memory-mapped ``.npy``), 1,000,000 x 32 (K = 16) and
  200,000 x 128 (K = 32);
- 100,000 points of 100 round blobs on a 10 x 10 grid whose neighbours touch (spacing
  10, sigma 3): many heads share boundaries;
- 70,000 x 784 image-like rows: 10 classes, each a smooth 28 x 28 template (a few
  Gaussian bumps), times a random contrast, plus a smooth low-rank deformation and pixel
  noise (the shape of MNIST-like data; nothing is downloaded);
- 1,000,000 points of two interleaved crescents (``make_moons``, noise 0.05), where the
  default merges its heads into the clusters; beside it ``merge_heads=False``, the
  ``K``-head fit alone: the difference is the merge's cost at scale (issue 39: the merge
  works on heads, its cost must not grow with the rows beyond the fit's).

Targets (issue 18): at most 3x ``faiss.Kmeans`` (its defaults: 25 iterations on at most
256 rows per centroid) and at most 1.0x ``KMeans(n_init=1)``, at an ARI at least
faiss's and at least KMeans's - 0.01. Quick: a tenth of each ``n``, one round.
The battery of small real and generated data sets is ``bench_battery.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_moons
from sklearn.metrics import adjusted_rand_score

import attnclust as ac

sys.path.insert(0, str(Path(__file__).parent))
from bench_battery import _faiss  # noqa: E402  (faiss.Kmeans with its defaults)

ROUNDS = 3


def _data(n: int, d: int, K: int, dtype, seed: int):
    mix = ac.GaussianMixture.random(d=d, k=K, sigma=0.15, min_angle=np.pi / 3, rng=seed)
    X, z = mix.sample(n, rng=seed + 1, return_labels=True)
    return (X + 2.0).astype(dtype), z


def _grid(n: int, seed: int):
    """``n`` points of 100 blobs (sigma 3) on a 10 x 10 grid of spacing 10."""
    rng = np.random.default_rng(seed)
    centers = 10.0 * np.stack(np.meshgrid(np.arange(10), np.arange(10)), -1).reshape(-1, 2)
    z = rng.integers(0, 100, n)
    return (centers[z] + rng.normal(0.0, 3.0, (n, 2))).astype(np.float32), z


def _images(n: int, seed: int):
    """``n`` image-like rows (28 x 28, float32) of 10 classes: smooth templates, a random
    contrast, a smooth rank-8 deformation and pixel noise; built in blocks."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(28), np.arange(28)), -1).reshape(-1, 2)

    def bumps(m):   # (m, 784): sums of 3 Gaussian bumps of random place and width
        c = rng.uniform(6, 22, (m, 3, 2))
        w = rng.uniform(2, 5, (m, 3, 1))
        return np.exp(-((grid[None, None] - c[:, :, None]) ** 2).sum(-1) / (2 * w**2)).sum(1)
    templates, basis = bumps(10), 0.15 * bumps(8)
    z = rng.integers(0, 10, n)
    X = np.empty((n, 784), dtype=np.float32)
    for s in range(0, n, 10_000):
        m = min(n, s + 10_000) - s
        X[s:s + m] = (templates[z[s:s + m]] * rng.uniform(0.7, 1.3, (m, 1))
                      + rng.normal(0, 1, (m, 8)) @ basis + rng.normal(0, 0.1, (m, 784)))
    return X, z


def _cli_fit(X: np.ndarray, K: int):
    """``attnclust fit`` on the rows saved as .npy: labels and the fit time it prints."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, X)

        def fit(_X):
            out = subprocess.run([sys.executable, "-m", "attnclust", "fit", str(path), "-k",
                                  str(K), "--quiet", "--out", str(Path(tmp) / "r")],
                                 capture_output=True, text=True, check=True).stdout
            fit.seconds = float(re.search(r"time=([0-9.]+)s", out).group(1))
            return np.load(Path(tmp) / "r.labels.npy")
        yield fit


def _rows(name, X, z, methods, rounds) -> list[dict]:
    best = {m: float("inf") for m in methods}
    labels = {}
    for _ in range(rounds):
        for method, fit in methods.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                labels[method] = fit(X)
                seconds = getattr(fit, "seconds", time.perf_counter() - start)
            best[method] = min(best[method], seconds)
    faiss_time = best.get("faiss.Kmeans", float("nan"))
    return [{"data": name, "method": m, "ARI": float(adjusted_rand_score(z, labels[m])),
             "time_s": best[m], "time / KMeans(1)": best[m] / best["KMeans(n_init=1)"],
             "time / faiss": best[m] / faiss_time} for m in methods]


def _cases(scale: int):
    for n, d, K in ((2_000_000, 8, 8), (1_000_000, 32, 16), (200_000, 128, 32)):
        yield f"n={n // scale} d={d} K={K}", *_data(n // scale, d, K, np.float32, seed=0), K
    yield f"grid of 100 blobs n={100_000 // scale}", *_grid(100_000 // scale, seed=0), 100
    yield f"image-like n={70_000 // scale} d=784 K=10", *_images(70_000 // scale, seed=0), 10
    X, z = make_moons(1_000_000 // scale, noise=0.05, random_state=0)
    yield f"two crescents n={1_000_000 // scale}", X.astype(np.float32), z, 2


def run(quick: bool) -> list[dict]:
    rows = []
    for name, X, z, K in _cases(10 if quick else 1):
        methods = {
            "KMeans(n_init=1)": lambda X, K=K: KMeans(K, n_init=1, random_state=0).fit(X).labels_,
            "AttentionClustering": lambda X, K=K: ac.AttentionClustering(K, random_state=0)
            .fit(X).labels_,
        }
        if name.startswith("two crescents"):
            methods["AttentionClustering no merge"] = lambda X, K=K: ac.AttentionClustering(
                K, random_state=0, merge_heads=False).fit(X).labels_
        if (faiss_fit := _faiss(K, 0)) is not None:
            methods["faiss.Kmeans"] = faiss_fit
        rounds = 1 if quick else ROUNDS
        if X.shape[1] == 8:
            for cli_fit in _cli_fit(X, K):
                methods["attnclust fit (memmap)"] = cli_fit
                rows += _rows(name, X, z, methods, rounds)
        else:
            rows += _rows(name, X, z, methods, rounds)
    return rows

"""AttentionClustering's default against scikit-learn KMeans(n_init=1) and faiss, at scale.

Rows: one per (data set, method): adjusted Rand index, the best of three wall times
(methods interleaved round by round, so that a burst of load on the machine hits them
all), and the time relative to ``KMeans(n_init=1)`` measured in the same rounds. Data:
``K`` well-separated Gaussian clusters (unit centroids at least 60 degrees apart,
``sigma = 0.15``), shifted away from the origin, as given to every method:

- ``n = 100,000, d = 32, K = 8``, float64 (target: at most 1.0x KMeans at equal ARI);
- ``n = 2,000,000, d = 8, K = 8``, float32 (target: at most 2x KMeans), also through
  ``attnclust fit`` on a memory-mapped ``.npy`` (the command's own fit time);
- ``n = 1,000,000, d = 64, K = 32``, float32, reported beside KMeans and
  ``faiss.Kmeans`` (faiss-cpu is an optional benchmark dependency, skipped when absent;
  25 iterations, its default ``max_points_per_centroid`` subsampling).

Quick: a tenth of each ``n``. The battery of small real and generated data sets is
``bench_battery.py``.
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
from sklearn.metrics import adjusted_rand_score

import attnclust as ac

ROUNDS = 3


def _data(n: int, d: int, K: int, dtype, seed: int):
    mix = ac.GaussianMixture.random(d=d, k=K, sigma=0.15, min_angle=np.pi / 3, rng=seed)
    X, z = mix.sample(n, rng=seed + 1, return_labels=True)
    return (X + 2.0).astype(dtype), z


def _faiss(K: int):
    try:
        import faiss
    except ImportError:
        return None

    def fit(X):
        km = faiss.Kmeans(X.shape[1], K, niter=25, seed=0, verbose=False)
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        km.train(X32)
        return km.index.search(X32, 1)[1].ravel()
    return fit


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


def _rows(name, X, z, methods) -> list[dict]:
    best = {m: float("inf") for m in methods}
    labels = {}
    for _ in range(ROUNDS):
        for method, fit in methods.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                labels[method] = fit(X)
                seconds = getattr(fit, "seconds", time.perf_counter() - start)
            best[method] = min(best[method], seconds)
    return [{"data": name, "method": m, "ARI": float(adjusted_rand_score(z, labels[m])),
             "time_s": best[m], "time / KMeans(1)": best[m] / best["KMeans(n_init=1)"]}
            for m in methods]


def run(quick: bool) -> list[dict]:
    scale = 10 if quick else 1
    rows = []
    cases = [(100_000 // scale, 32, 8, np.float64), (2_000_000 // scale, 8, 8, np.float32),
             (1_000_000 // scale, 64, 32, np.float32)]
    for n, d, K, dtype in cases:
        X, z = _data(n, d, K, dtype, seed=0)
        name = f"n={n} d={d} K={K} {np.dtype(dtype).name}"
        methods = {
            "KMeans(n_init=1)": lambda X, K=K: KMeans(K, n_init=1, random_state=0).fit(X).labels_,
            "AttentionClustering": lambda X, K=K: ac.AttentionClustering(K, random_state=0)
            .fit(X).labels_,
        }
        if (faiss_fit := _faiss(K)) is not None:
            methods["faiss.Kmeans"] = faiss_fit
        if d == 8:
            for cli_fit in _cli_fit(X, K):
                methods["attnclust fit (memmap)"] = cli_fit
                rows += _rows(name, X, z, methods)
        else:
            rows += _rows(name, X, z, methods)
    return rows

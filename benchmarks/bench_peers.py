"""When to pick attnclust: the default against KMeans, GaussianMixture, HDBSCAN and Genie.

The data: the development battery of public labelled sets (``.npz`` files with ``X`` and
``y``, listed in ``index.json``; ``y == 0`` marks noise rows, left out of every score, and
the true ``K`` is the number of other labels). It is looked for in ``$ATTNCLUST_DEV_DATA``,
else in ``../shared/datasets/dev`` beside the checkout; where it is absent the benchmark
gives one row saying so. Sets with fewer than two clusters are skipped.

The methods, each given the true ``K`` (except HDBSCAN, which finds its own) and the rows
as given:

- ``attnclust``: ``AttentionClustering(K)``, its defaults (the heads' shape chosen, heads
  merged into clusters of any shape where their overlap says so);
- ``attnclust no merge``: the same with ``merge_heads=False`` (the ``K``-head fit alone);
- ``KMeans(10)``: scikit-learn ``KMeans(K, n_init=10)``, the baseline of the times;
- ``GMM full``: ``GaussianMixture(K, covariance_type="full")``, on sets with ``d <= 64``;
- ``HDBSCAN``: scikit-learn ``HDBSCAN()``, its defaults; the rows it calls noise (-1) are
  one more cluster in its scores;
- ``Genie``: ``genieclust.Genie(K, gini_threshold=0.3)`` where ``genieclust`` is installed
  (``pip install -e ".[bench]"``; it is imported here only, inside a ``try``).

faiss's k-means is not rerun here: it is a k-means (its quality is KMeans's, with one
seeding), and its speed at scale is measured by ``attnclust bench --only clustering``.

The scores, on the non-noise rows: the adjusted Rand index (ARI) and the normalized
clustering accuracy (NCA, :func:`nca`), each the mean over ``random_state`` 0-4 and then
over the sets (HDBSCAN and Genie are deterministic: fitted once per set). The times: on
each set and seed, the fit's time over ``KMeans(n_init=10)``'s, fitted just before it on
the same rows; the median over seeds, then over sets. Every method runs on one thread
(threadpoolctl for scikit-learn and BLAS, ``torch.set_num_threads(1)``; run with
``OMP_NUM_THREADS=1`` for Genie's OpenMP).

Rows: one per method over all sets, then the same over the 2-D artificial sets and the
real-world sets (``source`` in ``index.json``), and ``best`` counts the sets where the
method's mean NCA is within 0.01 of the best method's.

Quick (``attnclust bench --quick``): 8 sets, seed 0. Elsewhere:
``python benchmarks/bench_peers.py [--quick] [--per-set] [--data DIR]`` (``--per-set``: a
row per set and method before the summary).
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import HDBSCAN, KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads

SEEDS = range(5)
QUICK = ("3MC", "spiral", "zelnik1", "2d-4c", "rings", "xclara", "real-wisc", "real-vehicle")
GMM_MAX_D = 64
DETERMINISTIC = ("HDBSCAN", "Genie")


def nca(y_true, y_pred) -> float:
    """Normalized clustering accuracy (Gagolewski, J. Classification 2025).

    With ``K`` true clusters, the recall of true cluster ``i`` by predicted cluster ``j``
    is ``c_ij / n_i``; a one-to-one matching of true to predicted clusters (a true cluster
    left without a partner has recall 0) is chosen to maximise the summed recall, and

        NCA = mean_i (recall_i - 1/K) / (1 - 1/K),

    1 for a perfect partition, 0 where each true cluster is split evenly over ``K``
    predicted ones. Unlike ARI it is asymmetric: the reference is ``y_true``.

    Examples
    --------
    >>> nca([0, 0, 1, 1], [5, 5, 7, 7])
    1.0
    >>> nca([0, 0, 1, 1], [0, 1, 0, 1])
    0.0
    """
    _, t = np.unique(np.asarray(y_true), return_inverse=True)
    _, p = np.unique(np.asarray(y_pred), return_inverse=True)
    K, L = t.max() + 1, p.max() + 1
    counts = np.zeros((K, max(K, L)))
    np.add.at(counts, (t, p), 1.0)
    recall = counts / counts.sum(axis=1, keepdims=True)
    rows, cols = linear_sum_assignment(recall, maximize=True)
    return float(np.mean((recall[rows, cols] - 1 / K) / (1 - 1 / K)))


def data_folder(path: str | os.PathLike | None = None) -> Path | None:
    """The battery's folder: ``path``, ``$ATTNCLUST_DEV_DATA``, or the checkout's neighbour."""
    here = Path(__file__).resolve().parent
    for candidate in (path, os.environ.get("ATTNCLUST_DEV_DATA"),
                      here.parents[1] / "shared" / "datasets" / "dev"):
        if candidate and (Path(candidate) / "index.json").is_file():
            return Path(candidate)
    return None


def datasets(folder: Path, quick: bool = False):
    """``(name, group, X, y)`` of the battery, noise rows marked ``y == 0``."""
    index = json.loads((folder / "index.json").read_text())
    for name, info in index.items():
        if quick and name not in QUICK:
            continue
        with np.load(folder / f"{name}.npz") as f:
            X, y = f["X"].astype(np.float64), f["y"].astype(np.int64)
        if len(np.unique(y[y != 0])) < 2:
            continue
        group = "real-world" if info["source"].startswith("real") else f"{X.shape[1]}-D artificial"
        yield name, group, X, y


def _methods(K: int, d: int, seed: int) -> dict:
    methods = {   # the baseline first: every other time is over its time just before
        "KMeans(10)": lambda X: KMeans(K, n_init=10, random_state=seed).fit(X).labels_,
        "attnclust": lambda X: ac.AttentionClustering(K, random_state=seed).fit(X).labels_,
        "attnclust no merge": lambda X: ac.AttentionClustering(
            K, random_state=seed, merge_heads=False).fit(X).labels_,
    }
    if d <= GMM_MAX_D:
        methods["GMM full"] = lambda X: GaussianMixture(
            K, covariance_type="full", random_state=seed).fit(X).predict(X)
    methods["HDBSCAN"] = lambda X: HDBSCAN().fit(X).labels_
    try:
        import genieclust
    except ImportError:
        pass
    else:
        methods["Genie"] = lambda X: genieclust.Genie(
            n_clusters=K, gini_threshold=0.3).fit_predict(X)
    return methods


def _fit(fit, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        labels = np.asarray(fit(X))
        return labels, time.perf_counter() - start


def score_set(X, y, seeds) -> dict:
    """``{method: (mean ARI, mean NCA, median time over KMeans(10)'s)}`` on one set."""
    keep = y != 0
    K = len(np.unique(y[keep]))
    ari, acc, ratio = {}, {}, {}
    for seed in seeds:
        for method, fit in _methods(K, X.shape[1], seed).items():
            if method in DETERMINISTIC and seed != seeds[0]:
                continue
            labels, seconds = _fit(fit, X)
            if method == "KMeans(10)":
                baseline = seconds
            ari.setdefault(method, []).append(adjusted_rand_score(y[keep], labels[keep]))
            acc.setdefault(method, []).append(nca(y[keep], labels[keep]))
            ratio.setdefault(method, []).append(seconds / baseline)
    return {m: (np.mean(ari[m]), np.mean(acc[m]), np.median(ratio[m])) for m in ari}


def run(quick: bool, data: str | os.PathLike | None = None, per_set: bool = False) -> list[dict]:
    """The summary rows (``per_set``: one row per set and method before them)."""
    folder = data_folder(data)
    if folder is None:
        return [{"method": "skipped: no dev battery (index.json) in $ATTNCLUST_DEV_DATA "
                 "or ../shared/datasets/dev; pass --data DIR"}]
    seeds = list(range(1) if quick else SEEDS)
    per_set_rows = []
    with threadpool_limits(1), torch_threads(1):
        warm = np.random.default_rng(0).normal(size=(200, 2))
        score_set(warm, np.repeat([1, 2], 100), seeds[:1])    # imports and first calls, untimed
        for name, group, X, y in datasets(folder, quick):
            per_set_rows.append((name, group, score_set(X, y, seeds)))
    detail = [{"sets": name, "method": m, "n sets": 1, "ARI": float(v[0]), "NCA": float(v[1]),
               "time / KMeans(10)": float(v[2])}
              for name, _, scores in per_set_rows for m, v in scores.items()] if per_set else []
    return detail + _summary(per_set_rows)


def _summary(per_set) -> list[dict]:
    rows = []
    groups = ["all"] + sorted({g for _, g, _ in per_set})
    methods = list(dict.fromkeys(m for *_, s in per_set for m in s))
    for group in groups:
        chosen = [s for _, g, s in per_set if group in ("all", g)]
        for method in methods:
            mine = [s[method] for s in chosen if method in s]
            best = sum(s[method][1] >= max(v[1] for v in s.values()) - 0.01
                       for s in chosen if method in s)
            rows.append({
                "sets": group, "method": method, "n sets": len(mine),
                "ARI": float(np.mean([v[0] for v in mine])),
                "NCA": float(np.mean([v[1] for v in mine])),
                "best (NCA within 0.01)": best,
                "time / KMeans(10)": float(np.median([v[2] for v in mine])),
            })
    return rows


if __name__ == "__main__":   # python benchmarks/bench_peers.py [--quick] [--per-set] [--data DIR]
    from attnclust._bench import format_table

    where = sys.argv[sys.argv.index("--data") + 1] if "--data" in sys.argv else None
    print(format_table(run(quick="--quick" in sys.argv, data=where,
                           per_set="--per-set" in sys.argv)))

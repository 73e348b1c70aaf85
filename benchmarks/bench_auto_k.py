"""Choosing K, and starting without a seed: the temperature path against the usual recipes.

``auto K``: mixtures of 2-10 isotropic blobs of unequal spread (0.6-1.4 times a unit
sigma; 100-300 rows each), centres drawn in a box and at least 5 sigma apart, in d = 2,
5 and 20. On each, how often the chosen K is the true one for
``AttentionClustering(n_clusters="auto")`` (max_clusters 12), BIC over
``GaussianMixture(covariance_type="spherical")`` for K = 1..12, and the silhouette of
``KMeans(n_init=10)`` over K = 2..12; and the time of the auto fit over that of the BIC
sweep (sums over all mixtures, one run each, one thread each; the machine's load is in
both).

``anneal init``: on the development battery (``bench_battery.py``'s sets, true K),
``AttentionClustering(init="anneal")`` and the default ``init="kmeans++"``
(``random_state=0``) against ``KMeans(n_init=10)``: the k-means objective (sum of
squared distances to the nearest centre, of our centres over KMeans's), the adjusted
Rand index of each, and the time of the anneal fit over the default's (one fit each, one
thread; the path is the cost).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, silhouette_score
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads

sys.path.insert(0, str(Path(__file__).parent))
from bench_battery import _fit, datasets  # noqa: E402


def mixture(k: int, d: int, rng: np.random.Generator, sep: float = 5.0):
    """``k`` blobs at least ``sep`` apart, spreads 0.6-1.4, 100-300 rows each."""
    side = sep * max(2.0, 2.0 * k ** (1.0 / d))
    centres: list[np.ndarray] = []
    while len(centres) < k:
        c = rng.uniform(0.0, side, d)
        if all(np.linalg.norm(c - o) >= sep for o in centres):
            centres.append(c)
    spreads, sizes = rng.uniform(0.6, 1.4, k), rng.integers(100, 301, k)
    X = np.concatenate([c + s * rng.standard_normal((m, d))
                        for c, s, m in zip(centres, spreads, sizes, strict=True)])
    return X, np.repeat(np.arange(k), sizes)


def _bic_k(X) -> int:
    return 1 + int(np.argmin([GaussianMixture(k, covariance_type="spherical", random_state=0)
                              .fit(X).bic(X) for k in range(1, 13)]))


def _silhouette_k(X) -> int:
    scores = [silhouette_score(X, KMeans(k, n_init=10, random_state=0).fit_predict(X))
              for k in range(2, 13)]
    return 2 + int(np.argmax(scores))


def auto_k_rows(quick: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    per_d = 6 if quick else 30
    rows = []
    for d in (2, 5, 20):
        right = {"auto": 0, "BIC": 0, "silhouette": 0}
        t_auto = t_bic = 0.0
        for _ in range(per_d):
            k = int(rng.integers(2, 11))
            X, _ = mixture(k, d, rng)
            est, t = _fit(lambda X: ac.AttentionClustering("auto", max_clusters=12,
                                                             random_state=0).fit(X), X)
            t_auto += t
            bic, t = _fit(_bic_k, X)
            t_bic += t
            right["auto"] += est.n_clusters_ == k
            right["BIC"] += bic == k
            right["silhouette"] += _silhouette_k(X) == k
        rows.append({"d": d, "mixtures": per_d, **{f"{m} right": f"{c}/{per_d}"
                                                   for m, c in right.items()},
                     "time auto / BIC": round(t_auto / t_bic, 2)})
    return rows


def anneal_rows(quick: bool) -> list[dict]:
    rows = []
    for name, X, y in datasets(quick):
        X = np.asarray(X, dtype=np.float64)
        keep = y >= 0                   # background noise: clustered, not scored
        k = len(np.unique(y[keep]))
        km = KMeans(k, n_init=10, random_state=0).fit(X)
        row, seconds = {"data": name, "K": k}, {}
        for label, init in (("anneal", "anneal"), ("k-means++", "kmeans++")):
            ours, seconds[label] = _fit(
                lambda X, k=k, init=init: ac.AttentionClustering(k, init=init,
                                                                 random_state=0).fit(X),
                X)
            inertia = ((X[:, None, :] - ours.cluster_centers_[None]) ** 2).sum(-1).min(1).sum()
            row[f"objective {label} / KMeans(10)"] = round(float(inertia / km.inertia_), 4)
            row[f"ARI {label}"] = round(adjusted_rand_score(y[keep], ours.labels_[keep]), 3)
        rows.append({**row, "ARI KMeans(10)": round(
            adjusted_rand_score(y[keep], km.labels_[keep]), 3),
            "time anneal / k-means++": round(seconds["anneal"] / seconds["k-means++"], 2)})
    return rows


def run(quick: bool = False) -> list[dict]:
    with threadpool_limits(1), torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return auto_k_rows(quick) + anneal_rows(quick)


if __name__ == "__main__":
    from attnclust._bench import format_table

    rows = run()
    print(format_table([r for r in rows if "d" in r]))
    print(format_table([r for r in rows if "data" in r]))

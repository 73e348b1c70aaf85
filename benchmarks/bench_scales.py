"""Feature scales: the default on the rows as given, centred and scaled, and with every
column standardised, against the peers on the same rows.

For the sets of ``bench_battery.py`` and ``bench_heldout.py`` whose columns have unequal
scales (wine, breast cancer, the two tables of scales 1e5 apart, the mixed-scale table,
digits x16) or that hold noise rows: the mean ARI (on the non-noise rows) over seeds of
the default (``covariance_type="auto"``), the default with ``normalize="center-scale"``,
the default on columns standardised by scikit-learn's ``StandardScaler`` (which the
library does not do), the spherical fit, ``KMeans(n_init=10)`` and
``GaussianMixture(full)`` on the rows as given and standardised. Seeds: 0-4 on the
battery's sets, 200-204 on the held-out ones (quick: two seeds, two sets).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.preprocessing import StandardScaler

import attnclust as ac

sys.path.insert(0, str(Path(__file__).parent))
from bench_heldout import rows_of_both  # noqa: E402  (the same sets)

SCALED = ("wine", "breast cancer", "scales 1e5 apart, informative small",
          "scales 1e5 apart, informative large", "mixed-scale table K=5", "digits x16")


def _methods(K: int, seed: int) -> dict:
    def auto(**kw):
        return lambda X: ac.AttentionClustering(K, random_state=seed, **kw).fit(X).labels_

    def kmeans(X):
        return KMeans(K, n_init=10, random_state=seed).fit(X).labels_

    def gmm(X):
        return GaussianMixture(K, covariance_type="full", reg_covar=1e-6,
                               random_state=seed).fit(X).predict(X)

    def standardised(fit):
        return lambda X: fit(StandardScaler().fit_transform(X))
    return {"auto": auto(), "auto, center-scale": auto(normalize="center-scale"),
            "auto, standardised": standardised(auto()),
            "spherical": auto(covariance_type="spherical"), "KMeans(10)": kmeans,
            "KMeans(10), standardised": standardised(kmeans), "GMM full": gmm,
            "GMM full, standardised": standardised(gmm)}


def _row(name: str, X: np.ndarray, y: np.ndarray, seeds) -> dict:
    keep = y >= 0
    K = len(np.unique(y[keep]))
    ari: dict[str, list[float]] = {}
    for seed in seeds:
        for method, fit in _methods(K, seed).items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                labels = fit(X)
            ari.setdefault(method, []).append(adjusted_rand_score(y[keep], labels[keep]))
    return {"data": name, **{f"ARI {m}": float(np.mean(v)) for m, v in ari.items()}}


def run(quick: bool) -> list[dict]:
    return rows_of_both(_row, lambda name, y: name in SCALED or (y < 0).any(), quick,
                        heldout_seeds=5)


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

"""The noise head (``noise_head=True``) on the sets with noise rows of both batteries.

For every set of ``bench_battery.py`` and ``bench_heldout.py`` with rows labelled ``-1``
(uniform background noise or outliers): their share of the rows, the mean over seeds of
the fit's ``noise_weight_`` (the background head's weight, an estimate of that share),
of the share of the noise rows it labels ``-1``, and of the share of the clusters' rows
it labels ``-1``; and the ARI on the clusters' rows of the noise head and of the default
(``covariance_type="auto"``; the noise head's ``-1`` rows count as one more cluster
there). Seeds: ``random_state`` 0-4 on the battery's sets, 200-209 on the held-out
ones (quick: two seeds, the first set of each).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

import attnclust as ac

sys.path.insert(0, str(Path(__file__).parent))
from bench_heldout import rows_of_both  # noqa: E402  (the same sets)


def _row(name: str, X: np.ndarray, y: np.ndarray, seeds) -> dict:
    noise = y < 0
    K = len(np.unique(y[~noise]))
    weight, caught, false, ari, ari_default = [], [], [], [], []
    for seed in seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = ac.AttentionClustering(K, noise_head=True, random_state=seed).fit(X)
            default = ac.AttentionClustering(K, random_state=seed).fit(X)
        weight.append(est.noise_weight_)
        caught.append(np.mean(est.labels_[noise] == -1))
        false.append(np.mean(est.labels_[~noise] == -1))
        ari.append(adjusted_rand_score(y[~noise], est.labels_[~noise]))
        ari_default.append(adjusted_rand_score(y[~noise], default.labels_[~noise]))
    return {"data": name, "n": len(X), "noise share": float(noise.mean()),
            "noise_weight_": float(np.mean(weight)),
            "noise rows labelled -1": float(np.mean(caught)),
            "cluster rows labelled -1": float(np.mean(false)),
            "ARI noise head": float(np.mean(ari)), "ARI default": float(np.mean(ari_default))}


def run(quick: bool) -> list[dict]:
    return rows_of_both(_row, lambda name, y: (y < 0).any(), quick)


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

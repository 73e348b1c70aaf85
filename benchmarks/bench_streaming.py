"""``partial_fit`` over the chunks of the data against one ``fit`` of all of it.

Rows: one per (data set, chunk size): the adjusted Rand index of ``fit`` and of one
pass of ``partial_fit`` over the rows in chunks (in their order in the file, which is
random), each the mean over ``random_state`` 0, 1, 2 (with K = 32 one seeding in three
or so misses a cluster, whichever method: a single seed measures luck), the difference
(the target: at least ``-0.01``), the time of the pass over the time of the fit
(median over the seeds, fits interleaved; the machine's load weighs on both) and the
swaps each seed's pass took (``attnclust.cluster.kmeans.swap``). Data: the
large sets of ``bench_clustering.py`` (quick: a tenth of each) and the three largest of
the development battery (``bench_battery.py``).
The memory of a streamed fit is measured by ``bench_memory.py``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

import attnclust as ac

sys.path.insert(0, str(Path(__file__).parent))
from bench_battery import datasets  # noqa: E402
from bench_clustering import _data  # noqa: E402

SEEDS = range(3)


def _stream(X, K, chunk, seed):
    """One pass of ``partial_fit``: the labels of all rows and the swaps it took."""
    est = ac.AttentionClustering(K, random_state=seed)
    for start in range(0, X.shape[0], chunk):
        est.partial_fit(X[start:start + chunk])
    return est.predict(X), est.stream_state_.n_swaps


def _compare(name, X, z, K, chunks) -> list[dict]:
    """Mean ARI over ``SEEDS`` of ``fit`` and of the streamed fits; median time ratio."""
    ari = {c: [] for c in (None, *chunks)}
    ratio = {c: [] for c in chunks}
    swaps = {c: [] for c in chunks}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in SEEDS:            # interleaved: one fit, then each streamed fit
            start = time.perf_counter()
            ari[None].append(adjusted_rand_score(z, ac.AttentionClustering(
                K, random_state=seed).fit(X).labels_))
            fit_s = time.perf_counter() - start
            for c in chunks:
                start = time.perf_counter()
                labels, n_swaps = _stream(X, K, c, seed)
                ratio[c].append((time.perf_counter() - start) / fit_s)
                ari[c].append(adjusted_rand_score(z, labels))
                swaps[c].append(str(n_swaps))
    fit = float(np.mean(ari[None]))
    return [{"data": name, "chunk rows": c, "ARI fit": fit,
             "ARI partial_fit": float(np.mean(ari[c])),
             "difference": float(np.mean(ari[c])) - fit,
             "time / fit": float(np.median(ratio[c])),
             "swaps": " ".join(swaps[c])} for c in chunks]


def run(quick: bool) -> list[dict]:
    scale = 10 if quick else 1
    rows = []
    for n, d, K, dtype in [(100_000 // scale, 32, 8, np.float64),
                           (2_000_000 // scale, 8, 8, np.float32),
                           (1_000_000 // scale, 64, 32, np.float32)]:
        X, z = _data(n, d, K, dtype, seed=0)
        rows += _compare(f"n={n} d={d} K={K}", X, z, K, [n // 10, n // 40])
    battery = {name: (X, y) for name, X, y in datasets()}
    for name in ("30 blobs in 2-D, away from 0", "mixture d=50 K=5 (shifted)",
                 "overlapping d=10 K=8"):
        X, y = battery[name]
        perm = np.random.default_rng(0).permutation(len(X))     # a file in random order
        rows += _compare(name, X[perm], y[perm], len(np.unique(y)), [1000, 500])
    return rows


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

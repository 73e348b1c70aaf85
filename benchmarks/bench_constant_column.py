"""A column without spread: the default on the development battery's rows as given and
beside one constant column.

A constant column is in every table that carries an identifier or a unit's code; every
shaped head sits at the covariance floor along it, as the rows do. The heads' shape is
chosen on the columns with spread (:mod:`attnclust.cluster.mixture.floor`), so the column
should change neither the shape nor the labels.

The data: the development battery (``bench_peers.py``: ``$ATTNCLUST_DEV_DATA``, else
``../shared/datasets/dev``), its sets of at most 5,000 rows with two clusters or more.
``AttentionClustering(K, random_state=seed)`` on ``X`` and on ``[X, 7]``, seeds 0-1
(quick: ``bench_peers``'s quick sets, seed 0). Rows: the mean ARI (non-noise rows) of
both, and the fits whose chosen shape (``covariance_type_``) and labels are those without
the column.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads

sys.path.insert(0, str(Path(__file__).parent))
from bench_peers import data_folder, datasets  # noqa: E402  (the same sets)

MOST_ROWS = 5_000
SEEDS = (0, 1)


def run(quick: bool = False, data=None) -> list[dict]:
    folder = data_folder(data)
    if folder is None:
        return [{"constant column": "the development battery was not found (see bench_peers)"}]
    fits, plain, beside, same_shape, same_labels = 0, [], [], 0, 0
    with threadpool_limits(1), torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, _, X, y in datasets(folder, quick):
            keep = y != 0
            K = len(np.unique(y[keep]))
            if len(X) > MOST_ROWS or K < 2:
                continue
            wider = np.column_stack([X, np.full(len(X), 7.0)])
            for seed in SEEDS[:1] if quick else SEEDS:
                a = ac.AttentionClustering(K, random_state=seed).fit(X)
                b = ac.AttentionClustering(K, random_state=seed).fit(wider)
                fits += 1
                plain.append(adjusted_rand_score(y[keep], a.labels_[keep]))
                beside.append(adjusted_rand_score(y[keep], b.labels_[keep]))
                same_shape += a.covariance_type_ == b.covariance_type_
                same_labels += adjusted_rand_score(a.labels_, b.labels_) == 1.0
    return [{"fits": fits, "ARI as given": f"{np.mean(plain):.4f}",
             "ARI beside a constant column": f"{np.mean(beside):.4f}",
             "same shape": f"{same_shape}/{fits}", "same labels": f"{same_labels}/{fits}"}]


if __name__ == "__main__":     # python benchmarks/bench_constant_column.py [--quick]
    from attnclust._bench import format_table
    print(format_table(run(quick="--quick" in sys.argv)))

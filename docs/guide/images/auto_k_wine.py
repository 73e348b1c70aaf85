"""The temperature path and the choice of K on a real table: scikit-learn's wine.

Run from the repository root: ``python docs/guide/images/auto_k_wine.py`` writes
``auto_k_wine.png`` and ``auto_k_wine.json`` (the numbers quoted in
``docs/guide/temperature-path.md``) beside this file, in a few seconds on one core.

Panels: (a) the annealing path of the standardized rows (clusters counted against
``lambda``): no plateau of ``K >= 2`` spans a factor ``e``, which is why the plateau rule
answered ``K = 1``; (b) the BIC of :mod:`attnclust.cluster.choice.k_choice` for the ``K`` it
scanned (the least over the heads' shapes), the chosen ``K`` marked, with the shape and the
structure test's ``z`` in the title.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_wine
from sklearn.metrics import adjusted_rand_score

import attnclust as ac
from attnclust.cluster.choice.k_choice import choose_n_clusters, standardized
from attnclust.cluster.choice.path_choice import choose_from_path

OUT = Path(__file__).with_name("auto_k_wine.png")


def main() -> None:
    X, y = load_wine(return_X_y=True)
    Z = standardized(X)
    path = ac.temperature_path(Z, max_clusters=10)
    plateau = choose_from_path(X, 10, geometry="euclidean", random_state=0)[0]
    choice = choose_n_clusters(X, 10, random_state=0)
    fits = {cov: ac.AttentionClustering("auto", covariance_type=cov, random_state=0).fit(X)
            for cov in ("spherical", "full")}
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.step(path.inverse_temperatures, path.n_clusters, where="post")
    a.set(xscale="log", xlabel="inverse temperature lambda (standardized rows)",
          ylabel="clusters on the path", title="(a) wine: the annealing path")
    scanned = np.isfinite(choice.bic)                  # the scan stops past the least BIC
    ks = np.arange(1, len(choice.bic) + 1)[scanned]
    b.plot(ks, choice.bic[scanned], "o-")
    b.plot([choice.n_clusters], [choice.bic[choice.n_clusters - 1]], "r*", ms=14)
    b.set(xlabel="K", ylabel="BIC (least over shapes, uniform background)",
          title=f"(b) chosen K = {choice.n_clusters} ({choice.covariance_type}); "
                f"structure z = {choice.structure_z:.1f}")
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    widths = [(p.n_clusters, round(float(np.exp(p.width)), 3)) for p in path.plateaus]
    summary = {"plateaus (K, factor of lambda)": widths,
               "plateau rule on the raw rows": plateau.n_clusters,
               "chosen K": choice.n_clusters, "BIC weight": choice.weight,
               "structure z": choice.structure_z, "shape": choice.covariance_type,
               "BIC (null: not scanned)": [float(v) if np.isfinite(v) else None
                                           for v in choice.bic],
               "reason": choice.reason,
               **{f"ARI, covariance_type={cov}": adjusted_rand_score(y, est.labels_)
                  for cov, est in fits.items()}}
    OUT.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()

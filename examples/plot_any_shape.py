"""
Clusters of any shape: heads merged into clusters
=================================================

A Gaussian head draws a convex cell, and rings, crescents and spirals are no such cells.
With a given number of clusters, the default fit also tiles the rows with more small
heads than clusters and joins the heads whose attention overlaps
(``merge_heads="auto"``, :mod:`attnclust.cluster.merge`). It keeps the merged clusters
only when they cut the heads' overlap graph far more cleanly than the ``K``-head fit
does, or more cleanly where twice as many Gaussians describe the rows better than ``K``
(the ``K`` under-fit them): here on the three shapes, not on the Gaussian blobs of the
last panel.
"""

import matplotlib.pyplot as plt
import numpy as np

import attnclust as ac

gen = np.random.default_rng(0)


def rings(n=400):
    t = gen.uniform(0, 2 * np.pi, 2 * n)
    r = np.repeat([1.0, 3.0], n)
    return np.c_[r * np.cos(t), r * np.sin(t)] + gen.normal(0, 0.08, (2 * n, 2)), \
        np.repeat([0, 1], n)


def crescents(n=400):
    t = gen.uniform(0, np.pi, 2 * n)
    X = np.r_[np.c_[np.cos(t[:n]), np.sin(t[:n])],
              np.c_[1 - np.cos(t[n:]), 0.5 - np.sin(t[n:])]]
    return X + gen.normal(0, 0.06, (2 * n, 2)), np.repeat([0, 1], n)


def spirals(n=500):
    t = np.sqrt(gen.uniform(0.05, 1, 2 * n)) * 3 * np.pi
    arm = np.repeat([0, 1], n)
    X = np.c_[t * np.cos(t + np.pi * arm), t * np.sin(t + np.pi * arm)]
    return X + gen.normal(0, 0.15, (2 * n, 2)), arm


def blobs(n=250):
    centers = np.array([[0, 0], [6, 0], [0, 6], [6, 6]])
    return np.concatenate([c + gen.standard_normal((n, 2)) for c in centers]), \
        np.repeat(np.arange(4), n)


# %%
# Each set with its true number of clusters; the merged heads and the clusters they form.
fig, axes = plt.subplots(2, 4, figsize=(14, 7))
for col, (name, (X, y)) in enumerate({"rings": rings(), "crescents": crescents(),
                                      "spirals": spirals(), "Gaussian blobs": blobs()}.items()):
    K = len(np.unique(y))
    est = ac.AttentionClustering(K, random_state=0).fit(X)
    plain = ac.AttentionClustering(K, random_state=0, merge_heads=False).fit(X)
    print(f"{name}: {est.merge_heads_reason_}")
    for row, fit, title in ((0, plain, "K heads"), (1, est, "default")):
        ax = axes[row, col]
        ax.scatter(*X.T, c=fit.labels_, s=3, cmap="tab10", vmin=0, vmax=9)
        ax.scatter(*fit.heads_.T, c=fit.head_labels_, s=40, cmap="tab10", vmin=0, vmax=9,
                   edgecolors="k", marker="o")
        ari = ac.adjusted_rand_index(y, fit.labels_)
        ax.set_title(f"{name}, {title}: {len(fit.heads_)} heads, ARI {ari:.2f}", fontsize=9)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
fig.suptitle("Top: one head per cluster (merge_heads=False). Bottom: the default, heads "
             "(circles) coloured by the cluster they join")
fig.tight_layout()
plt.show()

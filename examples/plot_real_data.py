"""
Clustering real data
====================

``AttentionClustering`` is a scikit-learn estimator: a trained K-head attention layer
whose heads are the cluster centres and whose attention weights are soft assignments.
On three data sets bundled with scikit-learn (no download), we compare its adjusted
Rand index (ARI) with ``KMeans``, both on the rows as given and with the true number of
clusters.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.decomposition import PCA

import attnclust as ac

datasets = {"iris": load_iris(), "wine": load_wine(), "digits": load_digits()}
scores = {}
for name, data in datasets.items():
    X, y = data.data, data.target
    k = len(np.unique(y))
    est = ac.AttentionClustering(n_clusters=k, random_state=0).fit(X)
    km = KMeans(n_clusters=k, n_init=1, random_state=0).fit(X)
    scores[name] = (ac.adjusted_rand_index(y, est.labels_),
                    ac.adjusted_rand_index(y, km.labels_))
    print(f"{name:7s} n={len(X):5d} d={X.shape[1]:3d} K={k:2d}  ARI attention "
          f"{scores[name][0]:.3f}  k-means {scores[name][1]:.3f}")

# %%
# What the fitted estimator holds: centres, labels, the inverse temperature it chose
# (``"auto"``: one over the within-cluster variance across the nearest boundary) and
# the soft assignments, which are the layer's attention weights.
X = load_iris().data
est = ac.AttentionClustering(n_clusters=3, random_state=0).fit(X)
print("inverse_temperature_:", est.inverse_temperature_, " n_iter_:", est.n_iter_)
proba = est.predict_proba(X)                 # (n, K), rows sum to one
print("soft assignment of the first row:", np.round(proba[0], 3))

# %%
# Iris in its first two principal components, coloured by the fitted clusters, with the
# confidence of each assignment as the marker's opacity; and the ARIs side by side.
pca = PCA(2).fit(X)
Z, C = pca.transform(X), pca.transform(est.cluster_centers_)
fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
colors = np.asarray(plt.get_cmap("tab10").colors)[est.labels_]
axes[0].scatter(*Z.T, c=colors, alpha=np.clip(proba.max(1), 0.2, 1), s=14)
axes[0].scatter(*C.T, marker="x", c="k", s=80, linewidths=2, label="heads")
axes[0].set(title="iris: AttentionClustering, PCA view", xlabel="PC 1", ylabel="PC 2")
axes[0].legend()
pos = np.arange(len(scores))
axes[1].bar(pos - 0.2, [s[0] for s in scores.values()], 0.4, label="AttentionClustering")
axes[1].bar(pos + 0.2, [s[1] for s in scores.values()], 0.4, label="KMeans(n_init=1)")
axes[1].set(xticks=pos, xticklabels=list(scores), ylabel="ARI", ylim=(0, 1),
            title="agreement with the true classes")
axes[1].legend()
plt.show()

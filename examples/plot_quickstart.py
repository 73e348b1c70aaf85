"""
Quickstart: cluster an array
============================

``AttentionClustering`` is a scikit-learn clustering estimator. Give it the number of
clusters, or ``n_clusters="auto"`` and it chooses one. Here: four clusters in the plane,
two of them elongated and tilted, over a few uniform noise rows. The default fit chooses
the heads' shape (round, axis-aligned or full ellipses) by itself, so the tilted
clusters are not cut across as k-means cuts them.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans

import attnclust as ac

gen = np.random.default_rng(0)
tilt = np.array([[2.5, 0.5], [0.0, 0.3]])          # a linear map: long, tilted clusters
X = np.concatenate([
    gen.standard_normal((300, 2)) @ tilt + [-3, 0],
    gen.standard_normal((300, 2)) @ tilt + [-3, 4],
    0.6 * gen.standard_normal((200, 2)) + [5, 0],
    0.6 * gen.standard_normal((200, 2)) + [5, 4],
    gen.uniform([-10, -3], [8, 7], (40, 2)),        # noise rows
])
y = np.repeat([0, 1, 2, 3, -1], [300, 300, 200, 200, 40])
clustered = y >= 0

# %%
# A given number of clusters: the scikit-learn way.
est = ac.AttentionClustering(n_clusters=4, random_state=0).fit(X)
print("chosen shape:", est.covariance_type_)
print("ARI:", round(ac.adjusted_rand_index(y[clustered], est.labels_[clustered]), 3))
km = KMeans(4, n_init=10, random_state=0).fit(X)
print("ARI of KMeans(n_init=10):",
      round(ac.adjusted_rand_index(y[clustered], km.labels_[clustered]), 3))

# %%
# The number of clusters chosen from the data (the likelihood of the layer with shaped
# heads, with a penalty for every parameter; ``n_clusters_reason_`` says why).
auto = ac.AttentionClustering(n_clusters="auto", random_state=0).fit(X)
print("K chosen:", auto.n_clusters_)
print(auto.n_clusters_reason_)

# %%
# Rows that belong to no cluster: ``noise_head=True`` adds a uniform background head,
# and the rows it takes get the label -1, as scikit-learn's noise.
noisy = ac.AttentionClustering(n_clusters=4, noise_head=True, random_state=0).fit(X)
print("rows labelled noise:", int((noisy.labels_ == -1).sum()), "of", len(X))

# %%
# The three fits side by side: k-means' round cells cut the tilted clusters; the
# default's heads take their shape.
fig, axes = plt.subplots(1, 3, figsize=(12, 3.9), constrained_layout=True)
palette = np.asarray(plt.get_cmap("tab10").colors)
for ax, labels, title in zip(
        axes, (km.labels_, est.labels_, noisy.labels_),
        ("KMeans(4, n_init=10)", f"AttentionClustering(4): {est.covariance_type_} heads",
         "AttentionClustering(4, noise_head=True)"), strict=True):
    colors = np.where(labels[:, None] >= 0, palette[labels % 10], 0.75)
    ax.scatter(*X.T, c=colors, s=6)
    ax.set(title=title, xticks=[], yticks=[])
plt.show()

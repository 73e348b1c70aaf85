r"""
Geometry: cones on the sphere, cells in the plane
=================================================

The paper's layer has unit heads and attention :math:`\operatorname{softmax}_h(\lambda
\langle x, \mu_h\rangle)`: it partitions space into *cones from the origin* and clusters
directions (``geometry="sphere"``). The default Euclidean heads add a key bias
:math:`\lambda \|\mu_h\|^2 / 2`, so that the attention is
:math:`\operatorname{softmax}_h(-\lambda \|x - \mu_h\|^2 / 2)`, a soft Voronoi
partition: k-means cells (``geometry="euclidean"``). The same five blobs in the positive
quadrant, one of them behind another on the same ray from the origin, fitted with each.
(``python docs/geometry.py`` runs this script and writes the picture of the README and
of the estimator's page, ``docs/geometry.png``.)
"""

import matplotlib.pyplot as plt
import numpy as np

import attnclust as ac

gen = np.random.default_rng(0)
centers = np.array([[2.0, 2.0], [5.0, 5.0], [7.0, 1.5], [1.5, 7.0], [4.5, 2.5]])
X = np.concatenate([c + 0.5 * gen.standard_normal((150, 2)) for c in centers])
y = np.repeat(np.arange(len(centers)), 150)

# %%
# The background is the cluster that each point of the plane is assigned to
# (``predict`` on a grid); crosses are the heads, dashed lines the sphere's rays.
grid = np.stack(np.meshgrid(np.linspace(-0.5, 9, 300), np.linspace(-0.5, 9, 300)), -1)
fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), constrained_layout=True)
for ax, geometry in zip(axes, ("sphere", "euclidean"), strict=True):
    est = ac.AttentionClustering(len(centers), geometry=geometry, random_state=0).fit(X)
    regions = est.predict(grid.reshape(-1, 2)).reshape(grid.shape[:2])
    colors = plt.get_cmap("tab10").colors[:len(centers)]
    ax.contourf(grid[..., 0], grid[..., 1], regions, levels=np.arange(-0.5, len(centers)),
                colors=colors, alpha=0.25)
    ax.scatter(*X.T, c=np.asarray(colors)[est.labels_], s=4)
    heads = est.cluster_centers_
    if geometry == "sphere":   # unit heads: draw them on the unit circle and their rays
        for h in heads:
            ax.plot([0, 9 * h[0]], [0, 9 * h[1]], color="0.5", lw=0.6, ls="--")
    ax.scatter(*heads.T, marker="x", c="k", s=60, linewidths=2)
    ari = ac.adjusted_rand_index(y, est.labels_)
    title = ("sphere: cones from the origin" if geometry == "sphere"
             else "euclidean (default): k-means cells")
    ax.set(title=f"{title}\nARI {ari:.2f}", xlim=(-0.5, 9), ylim=(-0.5, 9), aspect="equal")
plt.show()

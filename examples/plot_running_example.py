r"""
The study's running example: two heads find two clusters
========================================================

The running example of the study: a mixture of two Gaussian clusters around unit
centroids :math:`\mu^*_0 = e_{10}` and :math:`\mu^*_1 = -e_1` in :math:`d = 10`, noise
:math:`\sigma = 0.3`. Projected gradient descent on the population risk
:math:`R(\mu) = \mathbb{E}\,\|X - T_\mu(X)\|^2` moves two unit heads from a random
start on the manifold :math:`M = \mathrm{span}(\mu^*_0, \mu^*_1)` towards the centroids;
at a finite inverse temperature :math:`\lambda` they stop a little short of them (the
temperature bias of the study).
"""

import matplotlib.pyplot as plt
import numpy as np

import attnclust as ac

mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
heads0 = ac.init_on_manifold(mix, rng=0)
res = ac.pgd(mix, heads0, inverse_temperature=30.0, step_size=0.5, n_steps=400,
             record_every=4)
print("distance to the centroids:", ac.centroid_distance(res.heads, mix.centroids).max)
print("population risk:", float(ac.population_risk(res.heads, mix, inverse_temperature=30.0)))

# %%
# The descent, step by step: the distance of the heads to the centroids (matched by
# the Hungarian algorithm) and the norm of the Riemannian gradient, from the solver's
# history.
hist = res.history
dist = [ac.centroid_distance(h, mix.centroids).max for h in hist.heads]

# %%
# The heads live on the unit circle of the plane of the centroids: draw their path in
# the coordinates ``(<mu, e_10>, <mu, e_1>)`` next to the curves.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), constrained_layout=True)
axes[0].semilogy(hist.step, dist, label="distance to centroids")
axes[0].semilogy(hist.step, hist.grad_norm, label="gradient norm")
axes[0].set(xlabel="PGD step", title="PGD on the population risk, lambda = 30")
axes[0].legend()
t = np.linspace(0, 2 * np.pi, 200)
axes[1].plot(np.cos(t), np.sin(t), color="0.8")
path = np.asarray(hist.heads)[:, :, [9, 0]]          # (T, K, 2)
for h in range(2):
    axes[1].plot(path[:, h, 0], path[:, h, 1], lw=1.5, label=f"head {h}")
    axes[1].plot(*path[0, h], "o", color="0.4")
axes[1].plot(mix.centroids[:, 9], mix.centroids[:, 0], "k*", ms=12, label="centroids")
axes[1].set(aspect="equal", xlabel="<mu, e_10>", ylabel="<mu, e_1>", title="heads on M")
axes[1].legend(loc="lower left", fontsize=8)
plt.show()

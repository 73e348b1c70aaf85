r"""
In-context quantization by identity attention
=============================================

An attention layer whose query, key and value matrices are the identity has no trained
parameter: :math:`Q_\lambda(X)_i = \sum_j \operatorname{softmax}_j(\lambda \langle X_i,
X_j\rangle)\, X_j`. Applied to a prompt of tokens from a mixture, it pulls each token
towards the tokens of its own cluster: it quantizes the prompt in context. One step at
:math:`\lambda = 1/(1 + 2\sigma^2)` shrinks the within-cluster spread of the study's
running example to a few percent; repeated steps collapse each cluster to a point.
"""

import matplotlib.pyplot as plt
import numpy as np

import attnclust as ac

sigma = 0.3
mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=sigma)
X, labels = mix.sample(500, rng=0, return_labels=True)
lam = 1 / (1 + 2 * sigma**2)
Y = ac.identity_attention(X, inverse_temperature=lam)
print(f"within-cluster spread after one step: {ac.spread_ratio(X, Y, labels).ratio:.1%}")

# %%
# Repeated steps (the dynamics of a deep stack of such layers, renormalized to the
# sphere after each step): how many distinct clusters remain.
for lam_steps in (1.0, 5.0, 20.0):
    Z = ac.identity_attention(X, lam_steps, n_steps=50, renormalize=True)
    print(f"lambda = {lam_steps:4.1f}: {ac.count_clusters(Z).n_clusters} cluster(s) after 50 steps")

# %%
# Inputs and outputs in the plane of the two centroids (coordinates on ``e_10`` and
# ``-e_1``): each cluster's outputs are squeezed onto a short stretch of the segment
# between the centroids (the study's "flattened point clouds").
fig, ax = plt.subplots(figsize=(5, 4.5), constrained_layout=True)
for data, marker, name in ((X, ".", "inputs"), (Y, "o", "outputs, one step")):
    ax.scatter(data[:, 9], -data[:, 0], c=np.asarray(["C0", "C1"])[labels], marker=marker,
               s=6 if marker == "." else 14, alpha=0.35 if marker == "." else 0.9,
               label=name)
ax.plot([1, 0], [0, 1], "k*", ms=12, label="centroids")
ax.set(aspect="equal", xlabel="<x, e_10>", ylabel="<x, -e_1>",
       title=f"identity attention, lambda = {lam:.3f}")
ax.legend(fontsize=8)
plt.show()

"""Isotropic cells against shaped cells, and what the reconstruction risk does to a metric.

Run from the repository root: ``python docs/guide/images/shaped_cells.py`` writes
``shaped_cells.png`` and ``shaped_cells.json`` (the numbers quoted in
``docs/guide/shaped-heads.md``) beside this file, in about a minute on one core.

The data are scikit-learn's anisotropic blobs (``make_blobs(600, random_state=170)``
sheared by ``[[0.6, -0.6], [-0.4, 0.8]]``): three tilted, elongated clusters. Panels:

1. today's layer, ``AttentionClustering(3)`` (one isotropic metric: k-means-like cells);
2. shaped heads (``covariance_type="full"``) whose metrics, weights and means are trained
   by Adam on the layer's reconstruction risk ``mean ||x - T(x)||^2``, starting from the
   tempered-EM fit of panel 3 (the right partition): the risk moves them away from it;
3. shaped heads fitted by tempered EM at ``lambda = 1`` from a k-means start.

The measurement of the derivation also trains the metrics and weights alone (means
fixed at the EM fit) on the risk, and compares the risk of the EM cells with the risk of
the nearest-mean (Voronoi) cells of the same means.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

import attnclust as ac
from attnclust.cluster.mixture.shaped import ShapedAttentionHeads
from attnclust.cluster.mixture.tempered import shaped_fit

OUT = Path(__file__).with_name("shaped_cells.png")
STEPS, LR = 2000, 0.01


def data() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_blobs(n_samples=600, random_state=170)
    return X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y


def risk_and_ari(layer, X: torch.Tensor, y) -> tuple[float, float]:
    with torch.no_grad():
        risk = float(((X - layer(X)) ** 2).sum(1).mean())
        return risk, float(ac.adjusted_rand_index(y, layer.weights(X).argmax(1).numpy()))


def train_on_risk(layer, X: torch.Tensor, *, means: bool) -> None:
    """Adam on the reconstruction risk (the means frozen when ``means`` is False)."""
    layer.means.requires_grad_(means)
    opt = torch.optim.Adam([p for p in layer.parameters() if p.requires_grad], lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        ((X - layer(X)) ** 2).sum(1).mean().backward()
        opt.step()


def condition_numbers(layer) -> list[float]:
    ev = np.linalg.eigvalsh(layer.precisions.detach().numpy())
    return [round(float(c), 1) for c in ev[:, -1] / ev[:, 0]]


def main(out: Path = OUT) -> dict:
    torch.manual_seed(0)
    X, y = data()
    Xt = torch.as_tensor(X)
    today = ac.AttentionClustering(3, random_state=0).fit(X)
    start = KMeans(3, n_init=10, random_state=0).fit(X).cluster_centers_
    em = shaped_fit(Xt, torch.as_tensor(start), covariance_type="full")

    def em_layer():
        return ShapedAttentionHeads(em.means, 1.0, covariance_type="full",
                                    precisions_cholesky=em.precisions_cholesky,
                                    weights=em.weights)

    shaped = em_layer()
    summary = {"steps": STEPS, "learning_rate": LR,
               "today_ari": float(ac.adjusted_rand_index(y, today.labels_)),
               "today_risk": -float(today.score(X))}
    summary["em_risk"], summary["em_ari"] = risk_and_ari(shaped, Xt, y)
    summary["em_condition_numbers"] = condition_numbers(shaped)
    sq = ((X[:, None] - em.means.numpy()) ** 2).sum(-1)                  # (n, K)
    labels = shaped.weights(Xt).argmax(1).numpy()
    summary["em_means_hard_risk_em_cells"] = float(sq[np.arange(len(X)), labels].mean())
    summary["em_means_hard_risk_voronoi_cells"] = float(sq.min(1).mean())
    metric_only = em_layer()
    train_on_risk(metric_only, Xt, means=False)
    summary["risk_metric_only"], summary["ari_metric_only"] = risk_and_ari(metric_only, Xt, y)
    on_risk = em_layer()
    train_on_risk(on_risk, Xt, means=True)
    summary["risk_all"], summary["ari_all"] = risk_and_ari(on_risk, Xt, y)
    summary["condition_numbers_all"] = condition_numbers(on_risk)

    lo, hi = X.min(0) - 1, X.max(0) + 1
    grid = np.stack(np.meshgrid(np.linspace(lo[0], hi[0], 300),
                                np.linspace(lo[1], hi[1], 300)), -1)
    flat = torch.as_tensor(grid.reshape(-1, 2))
    colors = np.asarray(plt.get_cmap("tab10").colors[:3])
    panels = [
        ("today's layer (isotropic)", today.predict(grid.reshape(-1, 2)), today.labels_,
         today.cluster_centers_, summary["today_ari"]),
        ("full metrics trained on the risk", *_cells(on_risk, flat, Xt),
         summary["ari_all"]),
        ("full metrics, tempered EM (shaped)", *_cells(shaped, flat, Xt),
         summary["em_ari"]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 5), layout="constrained")
    for ax, (title, regions, lab, heads, ari) in zip(axes, panels, strict=True):
        ax.contourf(grid[..., 0], grid[..., 1], np.asarray(regions).reshape(grid.shape[:2]),
                    levels=np.arange(-0.5, 3), colors=colors, alpha=0.25)
        ax.scatter(*X.T, c=colors[lab], s=4)
        ax.scatter(*np.asarray(heads).T, marker="x", c="k", s=60, linewidths=2)
        ax.set(title=f"{title}\nARI {ari:.2f}", xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]),
               aspect="equal")
    fig.savefig(out, dpi=100)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _cells(layer, grid: torch.Tensor, X: torch.Tensor):
    with torch.no_grad():
        return (layer.weights(grid).argmax(1).numpy(), layer.weights(X).argmax(1).numpy(),
                layer.means.numpy())


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))

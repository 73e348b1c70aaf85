"""Figure 3: inputs vs outputs of the trained two-head layer.

The running example (``d = 10``, ``sigma = 0.3``, ``L = 500``,
``lambda = 1/(1 + 2 sigma^2)``, ``mu*_0 = e_10``, ``mu*_1 = -e_1``). The heads are trained
by PGD on the population risk from an init on M; the layer is then applied to one
prompt of ``L`` tokens. A PCA fitted on the input tokens projects inputs, outputs and
heads to 2-D. Outputs lie on the segment between the two heads: each cluster is
flattened towards its head.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.decomposition import PCA

from ..heads import attention_heads
from ..metrics import centroid_distance, distortion
from ..pgd import init_on_manifold, pgd
from ..quantize import spread_ratio
from ._common import running_example
from ._runner import FigureResult
from ._style import COLORS, new_figure, save

NAME = "fig3"
DESCRIPTION = "inputs vs outputs of the trained two-head layer (PCA of the inputs)"

CONFIG = {"d": 10, "sigma": 0.3, "length": 500, "temperature": "1/(1+2 sigma^2)",
          "n_steps": 3000, "step_size": 0.5}
QUICK = {**CONFIG, "n_steps": 1000}


def temperature_of(config: dict) -> float:
    """The caption's ``lambda = 1/(1 + 2 sigma^2)`` unless the config gives a number."""
    lam = config["temperature"]
    return 1.0 / (1.0 + 2.0 * config["sigma"] ** 2) if isinstance(lam, str) else float(lam)


def prompt(config: dict, rng: np.random.Generator):
    """One prompt of the running example and its labels."""
    mix = running_example(config["sigma"], config["d"])
    X, z = mix.sample(config["length"], rng, return_labels=True)
    return mix, X, z


def projected(X: np.ndarray, outputs: np.ndarray, extra: np.ndarray | None = None) -> dict:
    """PCA fitted on the inputs, applied to inputs, outputs (and ``extra`` points)."""
    pca = PCA(n_components=2).fit(X)
    arrays = {"inputs_2d": pca.transform(X), "outputs_2d": pca.transform(outputs)}
    if extra is not None:
        arrays["heads_2d"] = pca.transform(extra)
    return arrays


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    lam = temperature_of(config)
    train_rng, data_rng = rng.spawn(2)
    mix, X, z = prompt(config, data_rng)
    res = pgd(mix, init_on_manifold(mix, train_rng), temperature=lam,
              step_size=config["step_size"], n_steps=config["n_steps"],
              record_every=config["n_steps"])
    heads = res.heads.numpy()
    Y = attention_heads(torch.as_tensor(X), res.heads, temperature=lam).numpy()
    arrays = {**projected(X, Y, heads), "labels": z, "heads": heads}
    summary = {
        "temperature": lam,
        "heads_distance_to_centroids": centroid_distance(heads, mix.centroids).max,
        "heads_angle_deg": float(np.degrees(np.arccos(np.clip(heads[0] @ heads[1], -1, 1)))),
        "within_cluster_spread_ratio": spread_ratio(X, Y, z).ratio,
        "distortion": distortion(X, Y),
    }
    return FigureResult(config, arrays, summary)


def inputs_vs_outputs(result: FigureResult, out, *, title: str) -> None:
    """Two panels, inputs and outputs in the inputs' PCA plane, coloured by cluster."""
    a = result.arrays
    fig, axes = new_figure(2, width=3.6, height=3.4)
    for ax, key, name in zip(axes, ("inputs_2d", "outputs_2d"), ("inputs", "outputs"),
                             strict=True):
        for k in np.unique(a["labels"]):
            pts = a[key][a["labels"] == k]
            ax.scatter(pts[:, 0], pts[:, 1], s=5, alpha=0.6, color=COLORS[int(k)],
                       label=f"cluster {int(k)}")
        if "heads_2d" in a:
            ax.scatter(a["heads_2d"][:, 0], a["heads_2d"][:, 1], marker="*", s=140,
                       color="black", label="heads")
        ax.set_title(name)
        ax.set_xlabel("PC 1")
        ax.set_aspect("equal", adjustable="box")
    # the same limits on both panels, so the contraction shows
    lims = np.concatenate([a["inputs_2d"], a["outputs_2d"]])
    for ax in axes:
        ax.set_xlim(lims[:, 0].min() - 0.1, lims[:, 0].max() + 0.1)
        ax.set_ylim(lims[:, 1].min() - 0.1, lims[:, 1].max() + 0.1)
    axes[0].set_ylabel("PC 2")
    axes[1].legend(loc="best", fontsize=7)
    fig.suptitle(title)
    save(fig, out)


def plot(result: FigureResult, out) -> None:
    s = result.summary
    inputs_vs_outputs(result, out, title=(
        rf"trained two-head layer, $\lambda={s['temperature']:.3g}$: "
        f"within-cluster spread x{s['within_cluster_spread_ratio']:.2f}"))

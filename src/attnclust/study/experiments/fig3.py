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

from ...layer.heads import attention_heads
from ..descent import pgd
from ..inits import init_on_manifold
from ..metrics import centroid_distance, distortion, spread_ratio
from ._common import inputs_vs_outputs, inverse_temperature_of, projected, prompt
from ._runner import FigureResult
from ._style import styled

NAME = "fig3"
DESCRIPTION = "inputs vs outputs of the trained two-head layer (PCA of the inputs)"

CONFIG = {"d": 10, "sigma": 0.3, "length": 500, "inverse_temperature": "1/(1+2 sigma^2)",
          "n_steps": 3000, "step_size": 0.5}
QUICK = {**CONFIG, "n_steps": 1000}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    lam = inverse_temperature_of(config)
    train_rng, data_rng = rng.spawn(2)
    mix, X, z = prompt(config, data_rng)
    res = pgd(mix, init_on_manifold(mix, train_rng), inverse_temperature=lam,
              step_size=config["step_size"], n_steps=config["n_steps"],
              record_every=config["n_steps"])
    heads = res.heads.numpy()
    Y = attention_heads(torch.as_tensor(X), res.heads, inverse_temperature=lam).numpy()
    arrays = {**projected(X, Y, heads), "labels": z, "heads": heads}
    summary = {
        "inverse_temperature": lam,
        "heads_distance_to_centroids": centroid_distance(heads, mix.centroids).max,
        "heads_angle_deg": float(np.degrees(np.arccos(np.clip(heads[0] @ heads[1], -1, 1)))),
        "within_cluster_spread_ratio": spread_ratio(X, Y, z).ratio,
        "distortion": distortion(X, Y),
    }
    return FigureResult(config, arrays, summary)


def plot_of(layer: str):
    """The ``plot(result, out)`` of a figure that passes this prompt through ``layer``
    (figures 3 and 4): inputs vs outputs, titled with ``lambda`` and the within-cluster
    spread ratio of the summary."""
    @styled
    def plot(result: FigureResult, out) -> None:
        s = result.summary
        inputs_vs_outputs(result, out, title=(
            rf"{layer}, $\lambda={s['inverse_temperature']:.3g}$: "
            f"within-cluster spread x{s['within_cluster_spread_ratio']:.2f}"))
    return plot


plot = plot_of("trained two-head layer")

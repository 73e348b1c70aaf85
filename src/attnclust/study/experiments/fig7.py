"""Figure 7: the role of the inverse temperature.

For the running example at several noise levels ``sigma`` and a grid of inverse
temperatures ``lambda``, PGD on the population risk from ``n_runs`` inits on M gives
the trained heads (the run with the lowest risk is kept; every run of the figure is in
one batched PGD call). We plot their matched distance to the centroids (the *bias* of a
finite inverse_temperature), the angle between the two heads (90 degrees at the centroids; 0
when the heads merge) and the distortion ``R`` they reach next to ``R`` at the
centroids themselves. The dotted lines mark ``lambda = 1/(1 + 2 sigma^2)``, the seeds'
temperature (``soft_kmeans_split_lambda`` in the results): where unconstrained soft
k-means with Gibbs weights ``exp(-lambda ||x - mu||^2)`` splits on this data; with this
layer's logits ``lambda <x, mu_h>`` (weights ``exp(-lambda ||x - mu||^2 / 2)``) the split
is at twice that, ``1/lambda_max(C) = 2/(1 + 2 sigma^2)`` (figure 10 measures it). The
angle panel shows where the layer on the sphere actually splits, if it does.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from ..descent import pgd
from ..objectives import PopulationRisk
from ._common import distance_max, initial_heads, running_example
from ._runner import FigureResult
from ._style import COLORS, new_figure, save, styled

NAME = "fig7"
DESCRIPTION = "bias of trained heads and distortion vs inverse temperature; where heads split"

CONFIG = {
    "d": 10, "sigmas": [0.1, 0.2, 0.3, 0.5],
    "inverse_temperatures": np.geomspace(0.2, 100, 15).tolist(),
    "n_runs": 10, "n_steps": 3000, "step_size": 0.5, "split_angle_deg": 10.0, "tol": 1e-12,
}
QUICK = {**CONFIG, "sigmas": [0.3], "inverse_temperatures": np.geomspace(0.2, 100, 6).tolist(),
         "n_runs": 2, "n_steps": 600}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    sigmas, lams, n = config["sigmas"], config["inverse_temperatures"], config["n_runs"]
    cells = list(itertools.product(sigmas, lams))
    mixes = [running_example(sigma, config["d"]) for sigma, _ in cells for _ in range(n)]
    streams = [s for child in rng.spawn(len(cells)) for s in child.spawn(n)]
    heads0 = initial_heads(mixes[0], "manifold", streams)  # the span is the same for all sigma
    lam_runs = [lam for _, lam in cells for _ in range(n)]
    res = pgd(mixes, heads0, inverse_temperature=lam_runs, step_size=config["step_size"],
              n_steps=config["n_steps"], record_every=config["n_steps"], tol=config["tol"])
    risks = res.history.risk[-1].reshape(len(sigmas), len(lams), n)
    best = np.argmin(risks, axis=-1)  # (sigma, lambda)
    heads = res.heads.numpy().reshape(len(sigmas), len(lams), n, 2, -1)
    heads = np.take_along_axis(heads, best[..., None, None, None], 2)[:, :, 0]
    distance = distance_max(res.heads, mixes).reshape(len(sigmas), len(lams), n)
    distance = np.take_along_axis(distance, best[..., None], 2)[..., 0]
    angle = np.degrees(np.arccos(np.clip((heads[..., 0, :] * heads[..., 1, :]).sum(-1), -1, 1)))
    centroids = torch.tensor(mixes[0].centroids).expand(len(cells), -1, -1)
    at_centroids = PopulationRisk([running_example(s, config["d"]) for s, _ in cells]) \
        .value_and_grad(centroids, torch.tensor([lam for _, lam in cells])).value
    summary = {}
    for i, sigma in enumerate(sigmas):
        split = [lam for lam, a in zip(lams, angle[i], strict=True)
                 if a > config["split_angle_deg"]]
        summary[f"sigma_{sigma:g}"] = {
            "soft_kmeans_split_lambda": 1.0 / (1.0 + 2.0 * sigma**2),
            "smallest_lambda_with_split_heads": min(split) if split else None,
            "distance_at_largest_lambda": float(distance[i, -1]),
            "angle_deg_at_smallest_lambda": float(angle[i, 0]),
            "largest_angle_deg": float(angle[i].max()),
            "runs_per_point_disagreeing_with_best": int(
                (np.abs(risks[i] - risks[i].min(-1, keepdims=True)) > 1e-9).sum()),
        }
    arrays = {"inverse_temperature": np.asarray(lams), "distance": distance, "angle_deg": angle,
              "risk": risks.min(-1),
              "risk_at_centroids": at_centroids.numpy().reshape(len(sigmas), len(lams))}
    return FigureResult(config, arrays, summary)


@styled
def plot(result: FigureResult, out) -> None:
    a, cfg = result.arrays, result.config
    fig, axes = new_figure(3, width=3.6)
    for i, sigma in enumerate(cfg["sigmas"]):
        color, label = COLORS[i], rf"$\sigma={sigma:g}$"
        lams = a["inverse_temperature"]
        axes[0].plot(lams, a["distance"][i], "o-", ms=3, color=color, label=label)
        axes[1].plot(lams, a["angle_deg"][i], "o-", ms=3, color=color, label=label)
        axes[2].plot(a["inverse_temperature"], a["risk"][i], "o-", ms=3, color=color, label=label)
        axes[2].plot(a["inverse_temperature"], a["risk_at_centroids"][i], "--", color=color, lw=1)
        for ax in axes:
            ax.axvline(1.0 / (1.0 + 2.0 * sigma**2), color=color, ls=":", lw=1)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel(r"inverse temperature $\lambda$")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("distance of trained heads to centroids")
    axes[1].set_ylabel("angle between heads (degrees)")
    axes[2].set_ylabel(r"risk $R$ (solid: trained, dashed: at centroids)")
    axes[0].legend()
    axes[1].set_title(f"best of {cfg['n_runs']} inits on M per point", fontsize=8)
    save(fig, out)

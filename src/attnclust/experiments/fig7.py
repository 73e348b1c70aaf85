"""Figure 7: the role of the temperature.

For the running example at several noise levels ``sigma`` and a grid of inverse
temperatures ``lambda``, PGD on the population risk from inits on M gives the trained
heads (the run with the lowest risk is kept). We plot their matched distance to the
centroids (the *bias* of a finite temperature), the angle between the two heads
(90 degrees at the centroids; 0 when the heads merge) and the distortion ``R`` they
reach next to ``R`` at the centroids themselves. The dotted lines mark
``lambda = 1/(1 + 2 sigma^2)``, where unconstrained soft k-means on this data splits;
the angle panel shows where the layer on the sphere actually splits, if it does.
"""

from __future__ import annotations

import numpy as np
import torch

from ..metrics import centroid_distance
from ..risk import population_risk
from ._common import pgd_runs, running_example
from ._runner import FigureResult, track
from ._style import COLORS, new_figure, save

NAME = "fig7"
DESCRIPTION = "bias of trained heads and distortion vs temperature; the split temperature"

CONFIG = {
    "d": 10, "sigmas": [0.1, 0.2, 0.3, 0.5], "temperatures": np.geomspace(0.2, 100, 15).tolist(),
    "n_runs": 3, "n_steps": 3000, "step_size": 0.5, "split_angle_deg": 10.0,
}
QUICK = {**CONFIG, "sigmas": [0.3], "temperatures": np.geomspace(0.2, 100, 6).tolist(),
         "n_runs": 2, "n_steps": 600}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    sigmas, lams = config["sigmas"], config["temperatures"]
    distance, angle, risk, risk_at_centroids = (np.empty((len(sigmas), len(lams)))
                                                for _ in range(4))
    jobs = [(i, j) for i in range(len(sigmas)) for j in range(len(lams))]
    for (i, j), child in track(zip(jobs, rng.spawn(len(jobs)), strict=True), desc=NAME,
                               total=len(jobs)):
        mix = running_example(sigmas[i], config["d"])
        runs = pgd_runs(mix, init="manifold", n_runs=config["n_runs"], rng=child,
                        desc=f"{NAME} run", temperature=lams[j], step_size=config["step_size"],
                        n_steps=config["n_steps"], record_every=config["n_steps"])
        risks = [float(population_risk(torch.as_tensor(h), mix, temperature=lams[j]))
                 for h in runs["heads"]]
        best = runs["heads"][int(np.argmin(risks))]
        distance[i, j] = centroid_distance(best, mix.centroids).max
        angle[i, j] = np.degrees(np.arccos(np.clip(best[0] @ best[1], -1.0, 1.0)))
        risk[i, j] = min(risks)
        risk_at_centroids[i, j] = float(population_risk(torch.tensor(mix.centroids), mix,
                                                        temperature=lams[j]))
    summary = {}
    for i, sigma in enumerate(sigmas):
        split = [lam for lam, a in zip(lams, angle[i], strict=True)
                 if a > config["split_angle_deg"]]
        summary[f"sigma_{sigma:g}"] = {
            "soft_kmeans_split_lambda": 1.0 / (1.0 + 2.0 * sigma**2),
            "smallest_lambda_with_split_heads": min(split) if split else None,
            "distance_at_largest_lambda": float(distance[i, -1]),
            "angle_deg_at_smallest_lambda": float(angle[i, 0]),
        }
    arrays = {"temperature": np.asarray(lams), "distance": distance, "angle_deg": angle,
              "risk": risk, "risk_at_centroids": risk_at_centroids}
    return FigureResult(config, arrays, summary)


def plot(result: FigureResult, out) -> None:
    a, cfg = result.arrays, result.config
    fig, axes = new_figure(3, width=3.6)
    for i, sigma in enumerate(cfg["sigmas"]):
        color, label = COLORS[i], rf"$\sigma={sigma:g}$"
        axes[0].plot(a["temperature"], a["distance"][i], "o-", ms=3, color=color, label=label)
        axes[1].plot(a["temperature"], a["angle_deg"][i], "o-", ms=3, color=color, label=label)
        axes[2].plot(a["temperature"], a["risk"][i], "o-", ms=3, color=color, label=label)
        axes[2].plot(a["temperature"], a["risk_at_centroids"][i], "--", color=color, lw=1)
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
    save(fig, out)

"""Figure 8: identity attention, finite prompts against the infinite-prompt limit, and
repeated steps.

Left: for prompts of growing length ``L`` from the running example, the mean distance
between one step of identity attention and its infinite-prompt limit
``Q_inf(x) = lambda sigma^2 x + sum_k softmax_k(log pi_k + lambda <x, mu*_k>) mu*_k``,
with the ``1/sqrt(L)`` slope for reference. Right: the number of distinct clusters
(tokens closer than ``cluster_tol`` are one) along repeated steps with tokens
renormalized to the sphere, for several inverse_temperatures: at small ``lambda`` the prompt
collapses to one point, at larger ``lambda`` clusters persist (metastability).
"""

from __future__ import annotations

import numpy as np

from ..in_context import identity_attention
from ..metrics import count_clusters, limit_distance
from ._common import running_example
from ._runner import FigureResult, track
from ._style import COLORS, band, new_figure, save, styled

NAME = "fig8"
DESCRIPTION = "identity attention: finite L vs the infinite-prompt limit; repeated steps"

CONFIG = {
    "d": 10, "sigma": 0.3, "inverse_temperature": "1/(1+2 sigma^2)",
    "lengths": [100, 300, 1000, 3000, 10000, 30000], "n_runs": 10,
    "steps_length": 200, "n_steps": 200, "step_inverse_temperatures": [1.0, 5.0, 20.0],
    "cluster_tol": 1e-3,
}
QUICK = {**CONFIG, "lengths": [100, 1000, 10000], "n_runs": 3, "n_steps": 60}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    sigma = config["sigma"]
    lam = 1.0 / (1.0 + 2.0 * sigma**2) if isinstance(config["inverse_temperature"], str) \
        else float(config["inverse_temperature"])
    mix = running_example(sigma, config["d"])
    lengths = config["lengths"]
    limit_rng, steps_rng = rng.spawn(2)

    distance = np.empty((config["n_runs"], len(lengths)))
    jobs = [(r, j) for r in range(config["n_runs"]) for j in range(len(lengths))]
    for (r, j), child in track(zip(jobs, limit_rng.spawn(len(jobs)), strict=True),
                               desc=f"{NAME} limit", total=len(jobs)):
        X = mix.sample(lengths[j], child)
        distance[r, j] = limit_distance(X, identity_attention(X, lam), mix,
                                        inverse_temperature=lam).mean

    temps = config["step_inverse_temperatures"]
    n_clusters = np.empty((len(temps), config["n_runs"], config["n_steps"] + 1))
    jobs = [(t, r) for t in range(len(temps)) for r in range(config["n_runs"])]
    for (t, r), child in track(zip(jobs, steps_rng.spawn(len(jobs)), strict=True),
                               desc=f"{NAME} steps", total=len(jobs)):
        Y = mix.sample(config["steps_length"], child)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
        n_clusters[t, r, 0] = count_clusters(Y, tol=config["cluster_tol"]).n_clusters
        for step in range(1, config["n_steps"] + 1):
            Y = identity_attention(Y, temps[t], renormalize=True)
            n_clusters[t, r, step] = count_clusters(Y, tol=config["cluster_tol"]).n_clusters

    # least-squares slope of log distance against log L (expect about -1/2)
    slope = float(np.polyfit(np.log(lengths), np.log(np.median(distance, axis=0)), 1)[0])
    summary = {
        "inverse_temperature": lam,
        "median_limit_distance": {f"L_{n}": float(v)
                                  for n, v in zip(lengths, np.median(distance, axis=0),
                                                  strict=True)},
        "log_log_slope": slope,
        "final_n_clusters_median": {f"lambda_{lt:g}": float(np.median(n_clusters[t, :, -1]))
                                    for t, lt in enumerate(temps)},
    }
    arrays = {"length": np.asarray(lengths), "limit_distance": distance,
              "step": np.arange(config["n_steps"] + 1), "n_clusters": n_clusters}
    return FigureResult(config, arrays, summary)


@styled
def plot(result: FigureResult, out) -> None:
    a, s = result.arrays, result.summary
    fig, axes = new_figure(2)
    band(axes[0], a["length"], a["limit_distance"], color=COLORS[0], log=True,
         label=f"one step (slope {s['log_log_slope']:.2f})")
    ref = np.median(a["limit_distance"][:, 0]) * np.sqrt(a["length"][0] / a["length"])
    axes[0].plot(a["length"], ref, "k--", lw=1, label=r"$\propto 1/\sqrt{L}$")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("prompt length L")
    axes[0].set_ylabel("mean distance to the infinite-prompt limit")
    axes[0].set_title(rf"$\lambda={s['inverse_temperature']:.3g}$")
    axes[0].legend()
    for t, lam in enumerate(result.config["step_inverse_temperatures"]):
        band(axes[1], a["step"], a["n_clusters"][t], color=COLORS[t + 1],
             label=rf"$\lambda={lam:g}$")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("number of attention steps (tokens renormalized)")
    axes[1].set_ylabel("distinct clusters")
    axes[1].legend()
    save(fig, out)

"""Figure 1: distance to the centroids along PGD on the population risk, init on M.

The running example (``d = 10``, ``sigma = 0.3``, ``mu*_0 = e_10``, ``mu*_1 = -e_1``),
minimizing ``R`` without regularization (``rho = 0``), heads initialized uniformly on
the unit circle of ``span(mu*_0, mu*_1)``. One curve per inverse temperature: the
median over 10 runs with its 95% percentile band. At finite temperature the minimizer
of ``R`` is biased away from the centroids, so each curve levels off at its own
distance. The summary also gives the fraction of ``n_rate_runs`` further inits that end
farther than ``failure_distance`` from the centroids (a head that wins no token).
"""

from __future__ import annotations

import numpy as np

from ._common import pgd_runs, running_example
from ._runner import FigureResult
from ._style import COLORS, band, new_figure, save

NAME = "fig1"
DESCRIPTION = "distance to centroids vs PGD iterations, population risk, init on M"

CONFIG = {
    "d": 10, "sigma": 0.3, "temperatures": [1.0, 3.0, 10.0, 30.0], "n_runs": 10,
    "n_steps": 400, "step_size": 0.5, "record_every": 2, "init": "manifold",
    "n_rate_runs": 100, "failure_distance": 0.5,
}
QUICK = {**CONFIG, "temperatures": [3.0, 10.0, 30.0], "n_steps": 200, "n_rate_runs": 20}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    mix = running_example(config["sigma"], config["d"])
    return pgd_figure(mix, config, rng, NAME)


def pgd_figure(mix, config: dict, rng: np.random.Generator, name: str) -> FigureResult:
    """Distance curves for each temperature of ``config`` (shared with figure 5)."""
    arrays, summary = {}, {}
    for lam, child in zip(config["temperatures"], rng.spawn(len(config["temperatures"])),
                          strict=True):
        runs = pgd_runs(mix, init=config["init"], n_runs=config["n_runs"], rng=child,
                        desc=f"{name} lambda={lam:g}", temperature=lam,
                        step_size=config["step_size"], n_steps=config["n_steps"],
                        record_every=config["record_every"])
        arrays["step"] = runs["step"]
        arrays[f"distance_lambda_{lam:g}"] = runs["distance"]
        final = runs["distance"][:, -1]
        # failure rate over many more inits (final distances only), from its own stream
        many = pgd_runs(mix, init=config["init"], n_runs=config["n_rate_runs"],
                        rng=child.spawn(1)[0], desc=f"{name} lambda={lam:g} rate",
                        temperature=lam, step_size=config["step_size"],
                        n_steps=config["n_steps"], record_every=config["n_steps"])
        failed = many["distance"][:, -1] > config["failure_distance"]
        summary[f"lambda_{lam:g}"] = {
            "final_distance_median": float(np.median(final)),
            "final_distance_max": float(final.max()),
            "runs_within_0.05": int(np.sum(final < 0.05)),
            f"failure_rate_over_{config['n_rate_runs']}_inits": float(failed.mean()),
        }
    return FigureResult(config, arrays, summary)


def plot(result: FigureResult, out) -> None:
    fig, (ax,) = new_figure()
    for i, lam in enumerate(result.config["temperatures"]):
        band(ax, result.arrays["step"], result.arrays[f"distance_lambda_{lam:g}"],
             label=rf"$\lambda={lam:g}$", color=COLORS[i], log=True)
    ax.set_xlabel("PGD iteration")
    ax.set_ylabel("distance to centroids (matched max)")
    sigma = result.config["sigma"]
    ax.set_title(f"init on M, d={result.config['d']}, " + rf"$\sigma={sigma:g}$")
    ax.legend()
    save(fig, out)

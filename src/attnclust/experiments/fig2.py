"""Figure 2: PGD from a random init on the sphere, regularized or not.

Heads start uniformly on ``S^{d-1}``. With tight clusters (``sigma = 0.1``) and a sharp
softmax (``lambda = 100``), a head that starts farther than the other head from every
centroid wins almost no token and receives almost no gradient: a *dead head*, which
plain PGD cannot revive. We minimize the regularized risk ``R + rho Pen`` with ``rho``
decaying to 0 (so the final minimizer is that of ``R``), for the ``repulsion`` and
``balance`` penalties, and anneal the temperature (``lambda / 100`` to ``lambda`` over
the first half of the steps), beside plain ``R``. One panel per dimension; median over
10 runs with its 95% percentile band.
"""

from __future__ import annotations

import numpy as np

from ._common import pgd_runs, running_example
from ._runner import FigureResult
from ._style import COLORS, band, new_figure, save

NAME = "fig2"
DESCRIPTION = "random init on the sphere: regularized risk and annealing vs plain risk"

VARIANTS = {  # label -> pgd keyword arguments
    "no penalty": {},
    "repulsion": {"penalty": "repulsion", "rho": 1.0, "rho_schedule": "decay"},
    "balance": {"penalty": "balance", "rho": 1.0, "rho_schedule": "decay"},
    "annealing": {"temperature_schedule": "anneal"},
}

CONFIG = {
    "dims": [10, 100], "sigma": 0.1, "temperature": 100.0, "n_runs": 10, "n_steps": 2000,
    "step_size": 0.5, "record_every": 10, "success_tol": 0.05, "variants": list(VARIANTS),
}
QUICK = {**CONFIG, "dims": [10], "n_runs": 4, "n_steps": 400}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    arrays, summary = {}, {}
    jobs = [(d, v) for d in config["dims"] for v in config["variants"]]
    for (d, variant), child in zip(jobs, rng.spawn(len(jobs)), strict=True):
        runs = pgd_runs(running_example(config["sigma"], d), init="sphere",
                        n_runs=config["n_runs"], rng=child, desc=f"{NAME} d={d} {variant}",
                        temperature=config["temperature"], step_size=config["step_size"],
                        n_steps=config["n_steps"], record_every=config["record_every"],
                        **VARIANTS[variant])
        arrays["step"] = runs["step"]
        arrays[f"distance_d{d}_{variant}"] = runs["distance"]
        final = runs["distance"][:, -1]
        summary[f"d{d}_{variant}"] = {
            "final_distance_median": float(np.median(final)),
            "success_rate": float(np.mean(final < config["success_tol"])),
        }
    return FigureResult(config, arrays, summary)


def plot(result: FigureResult, out) -> None:
    dims = result.config["dims"]
    fig, axes = new_figure(len(dims))
    for ax, d in zip(axes, dims, strict=True):
        for i, variant in enumerate(result.config["variants"]):
            rate = result.summary[f"d{d}_{variant}"]["success_rate"]
            band(ax, result.arrays["step"], result.arrays[f"distance_d{d}_{variant}"],
                 label=f"{variant} (success {rate:.0%})", color=COLORS[i], log=True)
        ax.set_title(f"random init on the sphere, d={d}")
        ax.set_xlabel("PGD iteration")
        ax.legend()
    axes[0].set_ylabel("distance to centroids (matched max)")
    save(fig, out)

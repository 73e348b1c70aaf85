"""Figure 6: more clusters and higher dimension, from random inits on the sphere.

For each number of clusters ``K``, dimension ``d`` and inverse temperature ``lambda``,
we draw random unit centroids (pairwise at least 60 degrees apart), start the heads
uniformly on ``S^{d-1}`` and run PGD on the population risk, estimated by quasi-Monte
Carlo with common random numbers for every ``K`` (the exact rule for ``K = 3`` is more
accurate than a success threshold needs, and slower). A run succeeds when every head
is within ``success_tol`` of a distinct centroid (Hungarian matching). We compare plain
PGD with PGD on the balance-regularized risk (``rho`` decaying to 0) and with the
repulsion penalty combined with temperature annealing.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..metrics import centroid_distance
from ..mixture import GaussianMixture
from ..pgd import init_on_sphere, pgd
from ._runner import FigureResult, track
from ._style import COLORS, new_figure, save

NAME = "fig6"
DESCRIPTION = "K = 3..8 clusters, d up to 1000, random init: success rate over lambda and d"

VARIANTS = {  # label -> pgd keyword arguments
    "plain": {},
    "balance": {"penalty": "balance", "rho": 1.0, "rho_schedule": "decay"},
    "repulsion + annealing": {"penalty": "repulsion", "rho": 1.0, "rho_schedule": "decay",
                              "temperature_schedule": "anneal"},
}

CONFIG = {
    "ks": [3, 5, 8], "dims": [10, 100, 1000], "temperatures": [10.0, 100.0],
    "sigma": 0.1, "min_angle_deg": 60.0, "n_runs": 10, "n_steps": 600, "step_size": 0.5,
    "n_samples": 1024, "success_tol": 0.05, "variants": list(VARIANTS),
}
QUICK = {**CONFIG, "ks": [3, 5], "dims": [10, 100], "temperatures": [30.0], "n_runs": 2,
         "n_steps": 200, "n_samples": 512, "variants": ["plain", "repulsion + annealing"]}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    grid = list(itertools.product(config["ks"], config["dims"], config["temperatures"],
                                  config["variants"]))
    # (K, d, lambda, variant, run) final matched max distance
    shape = tuple(len(config[key]) for key in ("ks", "dims", "temperatures", "variants"))
    final = np.empty((*shape, config["n_runs"]))
    for index, child in track(zip(itertools.product(*map(range, shape)),
                                  rng.spawn(len(grid)), strict=True),
                              desc=NAME, total=len(grid)):
        ik, idim, ilam, ivar = index
        k, d = config["ks"][ik], config["dims"][idim]
        lam, variant = config["temperatures"][ilam], config["variants"][ivar]
        for r, stream in enumerate(child.spawn(config["n_runs"])):
            mix = GaussianMixture.random(d, k, config["sigma"],
                                         min_angle=np.deg2rad(config["min_angle_deg"]),
                                         rng=stream)
            res = pgd(mix, init_on_sphere(k, d, rng=stream), temperature=lam,
                      step_size=config["step_size"], n_steps=config["n_steps"],
                      record_every=config["n_steps"], rng=stream, method="qmc",
                      n_samples=config["n_samples"], **VARIANTS[variant])
            final[ik, idim, ilam, ivar, r] = centroid_distance(res.heads, mix.centroids).max
    success = (final < config["success_tol"]).mean(axis=-1)  # (K, d, lambda, variant)
    per_setting = {
        f"K{k}_d{d}_lambda{lam:g}_{variant}": float(success[ik, idim, ilam, ivar])
        for (ik, k), (idim, d), (ilam, lam), (ivar, variant) in itertools.product(
            *(enumerate(config[key]) for key in ("ks", "dims", "temperatures", "variants")))
    }
    by_variant = {variant: float(success[..., ivar].mean())
                  for ivar, variant in enumerate(config["variants"])}
    return FigureResult(config, {"final_distance": final, "success_rate": success},
                        {"success_rate": per_setting, "success_rate_by_variant": by_variant})


def plot(result: FigureResult, out) -> None:
    cfg = result.config
    success = result.arrays["success_rate"]  # (K, d, lambda, variant)
    fig, axes = new_figure(len(cfg["ks"]), width=3.6, height=3.8)
    for ax, (ik, k) in zip(axes, enumerate(cfg["ks"]), strict=True):
        for ivar, variant in enumerate(cfg["variants"]):
            for ilam, lam in enumerate(cfg["temperatures"]):
                style = ["-", "--", ":"][ilam % 3]
                ax.plot(cfg["dims"], success[ik, :, ilam, ivar], style, marker="o", ms=3,
                        color=COLORS[ivar],
                        label=f"{variant}, " + rf"$\lambda={lam:g}$")
        ax.set_xscale("log")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("dimension d")
        ax.set_title(f"K = {k}")
    axes[0].set_ylabel(f"success rate (all heads within {cfg['success_tol']:g})")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(cfg["variants"]),
               fontsize=7)
    save(fig, out)

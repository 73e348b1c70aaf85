"""Figure 6: more clusters and higher dimension, from random inits on the sphere.

For each number of clusters ``K``, dimension ``d`` and inverse temperature ``lambda``,
each run draws its own random unit centroids (pairwise at least 60 degrees apart) and
starts its heads uniformly on ``S^{d-1}``; PGD runs on the population risk, estimated
by quasi-Monte Carlo on common random numbers (``n_samples`` scrambled Sobol points
per mixture component, the same for every run and step; the kernel in float32). A run
succeeds when every
head is within ``success_tol`` of a distinct centroid (Hungarian matching). We compare
plain PGD with PGD on the balance-regularized risk (``rho`` decaying to 0) and with the
repulsion penalty combined with annealing of lambda: ``n_runs`` runs per point, all
the runs of one ``(K, d)`` (both values of lambda, every variant) in one batched PGD call,
each solved in the coordinates of ``span(heads0, centroids)``, which the descent never
leaves (:func:`attnclust.study.experiments._common.in_span`; the cost does not grow with d).
Rates come with 95% Wilson intervals (error bars).

The QMC resolution follows the sharpness of the softmax: ``n_samples`` points per
component where ``lambda sigma < 10`` (32, float32 kernel: what fits the 10-minute
budget), ``sharp_n_samples`` (1,024) where ``lambda sigma >= 10``. With 32 points at
``lambda = 100`` (``lambda sigma = 10``) a head nearest to none of the points gets no
gradient, a dead head that the population risk does not have; the measurements that
set the 1,024 (and its check against 4,096 on a subset) are in ``docs/study.md``
(*Figure 6's QMC resolution*). 1,024 points cost about 13 times the 32-point time
per run, so only the first ``sharp_n_runs`` (20) of each point's 200 inits are run
there (Wilson intervals up to +-0.2; the 200 at ``lambda sigma < 10`` are unchanged).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from ..descent import pgd
from ..inits import init_on_sphere
from ..mixture import GaussianMixture
from ..objectives import Balance, PopulationRisk
from ._common import distance_max, in_span, overlapping, rate_summary, schedule_arguments
from ._runner import FigureResult, track
from ._style import COLORS, new_figure, save, styled

NAME = "fig6"
DESCRIPTION = "K = 3..8 clusters, d up to 1000, random init: success rate over lambda and d"

VARIANTS = {  # label -> penalty, its weight rho (decayed to 0?), lambda annealed?
    "plain": {"penalty": None, "rho": 0.0, "decay": False, "anneal": False},
    "balance": {"penalty": "balance", "rho": 1.0, "decay": True, "anneal": False},
    "repulsion + annealing": {"penalty": "repulsion", "rho": 1.0, "decay": True,
                              "anneal": True},
}

CONFIG = {
    "ks": [3, 5, 8], "dims": [10, 100, 1000], "inverse_temperatures": [10.0, 100.0],
    "sigma": 0.1, "min_angle_deg": 60.0, "n_runs": 200, "n_steps": 600, "step_size": 0.5,
    "n_samples": 32, "sharp_n_samples": 1024, "sharp_lambda_sigma": 10.0, "sharp_n_runs": 20,
    "qmc_dtype": "float32", "success_tol": 0.05, "variants": list(VARIANTS), "tol": 1e-6,
}
QUICK = {**CONFIG, "ks": [3, 5], "dims": [10, 100], "inverse_temperatures": [30.0], "n_runs": 16,
         "n_steps": 200, "variants": ["plain", "repulsion + annealing"]}


def _sharp(lam: float, config: dict) -> bool:
    return lam * config["sigma"] >= config.get("sharp_lambda_sigma", np.inf)


def qmc_points(lam: float, config: dict) -> int:
    """QMC points per component at inverse temperature ``lam``: more where the softmax is
    sharp (``lambda sigma >= sharp_lambda_sigma``)."""
    return config["sharp_n_samples"] if _sharp(lam, config) else config["n_samples"]


def runs_at(lam: float, config: dict) -> int:
    """Runs per point at inverse temperature ``lam``: the first ``sharp_n_runs`` of the
    ``n_runs`` inits where the softmax is sharp (what the finer estimator can afford)."""
    return config.get("sharp_n_runs", config["n_runs"]) if _sharp(lam, config) else config["n_runs"]


def _batch(k: int, d: int, config: dict, rng: np.random.Generator) -> np.ndarray:
    """Final matched max distance ``(lambda, variant, run)`` for one ``(K, d)``."""
    lams, variants, n = config["inverse_temperatures"], config["variants"], config["n_runs"]
    cells = list(itertools.product(lams, variants))
    streams = [s for cell in rng.spawn(len(cells)) for s in cell.spawn(n)]
    mixes, heads0 = [], []
    for stream in streams:
        mixes.append(GaussianMixture.random(d, k, config["sigma"],
                                            min_angle=np.deg2rad(config["min_angle_deg"]),
                                            rng=stream))
        heads0.append(init_on_sphere(k, d, rng=stream))
    seed = int(rng.integers(2**31))
    # the descent stays in span(heads0, centroids): solved there, whatever d is
    mixes, heads0, _ = in_span(mixes, torch.stack(heads0))
    used = np.array([r < runs_at(lam, config) for lam, _ in cells for r in range(n)])
    points_run = np.array([qmc_points(lam, config) for lam, _ in cells for _ in range(n)])
    each = [schedule_arguments(VARIANTS[v], lam, config["n_steps"]) for lam, v in cells]
    per_run = {key: [args[key] for args in each for _ in range(n)]
               for key in ("penalty", "rho", "inverse_temperature")}
    final = np.full(len(used), np.nan)  # NaN: an init not run at this lambda
    # one batched call per QMC resolution (all values of lambda that share it)
    for points in sorted(set(points_run.tolist())):
        idx = np.flatnonzero(used & (points_run == points)).tolist()
        group = [mixes[i] for i in idx]
        qmc = dict(method="qmc", n_samples=points, rng=seed, qmc_dtype=config["qmc_dtype"])
        risk, balance = PopulationRisk(group, **qmc), Balance(group, **qmc)
        args = {key: [values[i] for i in idx] for key, values in per_run.items()}
        args["penalty"] = [balance if p == "balance" else p for p in args["penalty"]]
        res = pgd(risk, heads0[idx], step_size=config["step_size"], n_steps=config["n_steps"],
                  record_every=config["n_steps"], tol=config["tol"], **args)
        final[idx] = distance_max(res.heads, group)
    return final.reshape(len(lams), len(variants), n)


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    shape = tuple(len(config[key]) for key in ("ks", "dims", "inverse_temperatures", "variants"))
    final = np.empty((*shape, config["n_runs"]))  # (K, d, lambda, variant, run)
    pairs = list(itertools.product(range(shape[0]), range(shape[1])))
    for (ik, idim), child in track(zip(pairs, rng.spawn(len(pairs)), strict=True), desc=NAME,
                                   total=len(pairs)):
        final[ik, idim] = _batch(config["ks"][ik], config["dims"][idim], config, child)
    success, ran = final < config["success_tol"], ~np.isnan(final)

    def summary(ix):        # success rate of the inits run at ``ix``, with its interval
        return rate_summary(success[ix][ran[ix]])
    per_setting, not_distinguishable = {}, {}
    for (ik, k), (idim, d), (ilam, lam) in itertools.product(
            *(enumerate(config[key]) for key in ("ks", "dims", "inverse_temperatures"))):
        cell = {v: summary((ik, idim, ilam, iv)) for iv, v in enumerate(config["variants"])}
        for v, s in cell.items():
            per_setting[f"K{k}_d{d}_lambda{lam:g}_{v}"] = s
        not_distinguishable[f"K{k}_d{d}_lambda{lam:g}"] = overlapping(cell)
    by_variant = {v: summary((..., iv, slice(None))) for iv, v in enumerate(config["variants"])}
    rate, lo, hi = (np.empty(shape) for _ in range(3))
    for index in itertools.product(*map(range, shape)):
        s = summary(index)
        rate[index], (lo[index], hi[index]) = s["rate"], s["wilson_95"]
    return FigureResult(config, {"success_rate": rate,
                                 "wilson_low": lo, "wilson_high": hi},
                        {"success_rate": per_setting, "success_rate_by_variant": by_variant,
                         "not_distinguishable": not_distinguishable})


@styled
def plot(result: FigureResult, out) -> None:
    cfg, a = result.config, result.arrays
    rate = a["success_rate"]  # (K, d, lambda, variant)
    fig, axes = new_figure(len(cfg["ks"]), width=3.6, height=3.8)
    n_var = len(cfg["variants"])
    for ax, (ik, k) in zip(axes, enumerate(cfg["ks"]), strict=True):
        for (ivar, variant), (ilam, lam) in itertools.product(enumerate(cfg["variants"]),
                                                               enumerate(cfg["inverse_temperatures"])):
            # spread the markers of one d a little, so the error bars do not overlap
            shift = 1.0 + 0.06 * (ivar * len(cfg["inverse_temperatures"]) + ilam - n_var)
            x = np.asarray(cfg["dims"], dtype=float) * shift
            r = rate[ik, :, ilam, ivar]
            err = [r - a["wilson_low"][ik, :, ilam, ivar], a["wilson_high"][ik, :, ilam, ivar] - r]
            ax.errorbar(x, r, yerr=err, fmt=["o-", "s--", "^:"][ilam % 3], ms=3, lw=1,
                        capsize=2, color=COLORS[ivar], label=f"{variant}, " + rf"$\lambda={lam:g}$")
        ax.set_xscale("log")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("dimension d")
        runs = ", ".join(f"{runs_at(lam, cfg)} at " + rf"$\lambda={lam:g}$"
                         for lam in cfg["inverse_temperatures"])
        ax.set_title(f"K = {k}; runs per point: {runs}", fontsize=9)
    axes[0].set_ylabel(f"success rate (all heads within {cfg['success_tol']:g}), 95% Wilson")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=n_var, fontsize=7)
    save(fig, out)

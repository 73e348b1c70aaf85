"""Figure 10: where the heads split as the inverse temperature grows.

Two fixed points are followed from the cold start (every head at the mean) for
two-cluster mixtures (``+-e_1``) and three-cluster ones (three orthogonal centroids)
over ``sigma`` and ``d`` (:mod:`attnclust.cluster.annealing`):

(a) deterministic annealing of the attention weights (the soft k-means free energy): its
    first split, measured on samples on a fine grid, against ``1 / lambda_max(C)`` (``C``
    the covariance; the population's from the centroids, the sample's from the rows);
(b) the Euclidean layer's own risk ``R = E||x - T(x)||^2``: its second derivative along
    the symmetric split ``mu = m +- t v`` at ``t = 0``, from the exact population risk
    (finite differences of :func:`attnclust.population_risk`, Euclidean heads) and from
    samples, against the derivation ``-4 lambda v^T C v`` (``docs/guide/temperature-path.md``):
    negative at every ``lambda``, so the risk has no merged phase and no critical value;
(c) the separation of the two heads that minimize ``R`` along that family (population,
    exact risk, a scalar minimization; and the fixed point on samples from a perturbed
    cold start) against the small-``lambda`` asymptote ``2 / sqrt(lambda)``, beside the
    annealing's separation, which is zero below its split;
(d) the sphere (figure 7's layer, the running example): the angle between the two heads
    of the risk's fixed point from a perturbed cold start, at every ``lambda``, and the
    annealing's split on the sphere against its own prediction ``||m|| / lambda_max(P C P)``.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from ...cluster.annealing import predicted_first_split, temperature_path
from ..mixture import GaussianMixture
from ..risk import population_risk
from ._common import running_example
from ._runner import FigureResult, track
from ._style import COLORS, new_figure, save, styled

NAME = "fig10"
DESCRIPTION = "where heads split: annealing at 1/lambda_max(C); the layer's risk never merges"

CONFIG = {
    "sigmas": [0.1, 0.2, 0.3, 0.5, 0.7], "dims": [2, 10, 50], "ks": [2, 3],
    "n_samples": 2000, "grid": [0.85, 1.25, 40], "max_iter": 4000,
    "risk_sigma": 0.3, "risk_d": 10, "risk_lambdas": np.geomspace(0.02, 20, 13).tolist(),
    "fd_step": 1e-2, "sphere_sigmas": [0.1, 0.3, 0.5],
}
QUICK = {**CONFIG, "sigmas": [0.3], "dims": [2], "ks": [2], "n_samples": 400,
         "grid": [0.85, 1.25, 12], "max_iter": 1500,
         "risk_lambdas": np.geomspace(0.05, 10, 4).tolist(), "sphere_sigmas": [0.3]}


def _mixture(k: int, d: int, sigma: float) -> GaussianMixture:
    return (GaussianMixture.antipodal(d=d, sigma=sigma) if k == 2
            else GaussianMixture.orthogonal(d=d, k=k, sigma=sigma))


def _population_cov(mix: GaussianMixture) -> np.ndarray:
    """``sum_k pi_k mu_k mu_k^T - m m^T + sigma^2 I``, from the centroids alone."""
    mu, pi = mix.centroids, mix.weights
    m = pi @ mu
    return (mu.T * pi) @ mu - np.outer(m, m) + mix.sigma**2 * np.eye(mix.d)


def _annealing_split(X, k, config, geometry="euclidean"):
    """First split of the annealing on a fine grid around the sample's prediction."""
    lam_c = predicted_first_split(X, geometry=geometry)
    lo, hi, n = config["grid"]
    path = temperature_path(X, max_clusters=k, geometry=geometry, max_iter=config["max_iter"],
                            tol=1e-10, inverse_temperatures=lam_c * np.geomspace(lo, hi, n))
    splits = path.split_inverse_temperatures
    return lam_c, (float(splits[0]) if len(splits) else float("nan"))


def _split_rows(config, rng):
    rows = []
    cells = [(k, d, sigma) for k, d, sigma in itertools.product(
        config["ks"], config["dims"], config["sigmas"]) if k <= d]   # k orthogonal centroids
    for (k, d, sigma), stream in track(zip(cells, rng.spawn(len(cells)), strict=True),
                                       desc="annealing splits", total=len(cells)):
        mix = _mixture(k, d, sigma)
        population = 1.0 / np.linalg.eigvalsh(_population_cov(mix))[-1]
        sample, measured = _annealing_split(mix.sample(config["n_samples"], rng=stream), k,
                                            config)
        rows.append((k, d, sigma, population, sample, measured))
    return np.array(rows)


def _split_direction(mix):
    C = _population_cov(mix)
    v = np.linalg.eigh(C)[1][:, -1]
    return mix.weights @ mix.centroids, v, float(v @ C @ v)


def _risk_curvature(config, rng):
    """``2 (R(t) - R(0)) / t^2`` along ``m +- t v``: population (exact) and samples."""
    mix = _mixture(2, config["risk_d"], config["risk_sigma"])
    m, v, var = _split_direction(mix)
    X = mix.sample(config["n_samples"], rng=rng)
    t = config["fd_step"]

    def pop(lam, s):
        heads = torch.tensor(np.stack([m + s * v, m - s * v]))
        return float(population_risk(heads, mix, inverse_temperature=lam, geometry="euclidean"))

    def emp(lam, s):
        heads = np.stack([m + s * v, m - s * v])
        logits = lam * X @ heads.T - 0.5 * lam * (heads**2).sum(1)
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        return float(((X - a @ heads) ** 2).sum(1).mean())

    lams = np.asarray(config["risk_lambdas"])
    curv = np.array([[2 * (f(lam, t) - f(lam, 0.0)) / t**2 for f in (pop, emp)]
                     for lam in lams])                                         # (L, 2)
    best = np.array([2 * minimize_scalar(lambda s, lam=lam: pop(lam, s), bounds=(1e-3, 20.0),
                                         method="bounded", options={"xatol": 1e-6}).x
                     for lam in lams])
    fixed = np.array([np.linalg.norm(np.subtract(*temperature_path(
        X, max_clusters=2, objective="risk", inverse_temperatures=[lam]).heads[-1]))
        for lam in lams])
    da_sep = np.array([np.linalg.norm(np.subtract(*temperature_path(
        X, max_clusters=2, inverse_temperatures=[lam], max_iter=config["max_iter"]).heads[-1]))
        for lam in lams])
    return lams, var, curv, best, fixed, da_sep


def _sphere(config, rng):
    """The risk's fixed point on the sphere from a perturbed cold start, and the
    annealing's split on the sphere against its prediction."""
    lams = np.asarray(config["risk_lambdas"])
    angles, splits = [], []
    for sigma, stream in zip(config["sphere_sigmas"], rng.spawn(len(config["sphere_sigmas"])),
                             strict=True):
        X = running_example(sigma).sample(config["n_samples"], rng=stream)
        row = []
        for lam in lams:
            h = temperature_path(X, max_clusters=2, geometry="sphere", objective="risk",
                                 inverse_temperatures=[lam]).heads[-1]
            row.append(np.degrees(np.arccos(np.clip(h[0] @ h[1], -1.0, 1.0))))
        angles.append(row)
        splits.append((sigma, np.sqrt(2) / (1 + 2 * sigma**2),
                       *_annealing_split(X, 2, config, geometry="sphere")))
    return np.array(angles), np.array(splits)


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    streams = rng.spawn(3)
    splits = _split_rows(config, streams[0])
    lams, var, curv, best, fixed, da_sep = _risk_curvature(config, streams[1])
    angles, sphere = _sphere(config, streams[2])
    ratio_sample = splits[:, 5] / splits[:, 4]
    ratio_pop = splits[:, 5] / splits[:, 3]
    step = (config["grid"][1] / config["grid"][0]) ** (1 / (config["grid"][2] - 1))
    predicted = -4 * lams * var
    summary = {
        "annealing_first_split": {
            "measured_over_sample_prediction": {"min": float(ratio_sample.min()),
                                                "max": float(ratio_sample.max())},
            "measured_over_population_prediction": {"min": float(ratio_pop.min()),
                                                    "max": float(ratio_pop.max())},
            "grid_step": float(step),
            "agrees_within": float(max(abs(ratio_sample - 1).max(), step - 1)),
        },
        "risk_curvature_at_mean": {
            "population_over_prediction": [float(x) for x in curv[:, 0] / predicted],
            "samples_over_prediction": [float(x) for x in curv[:, 1] / predicted],
            "negative_at_every_lambda": bool((curv < 0).all()),
            "lambda_range": [float(lams[0]), float(lams[-1])],
        },
        "risk_minimizer_separation": {
            "population": best.tolist(), "samples_fixed_point": fixed.tolist(),
            "two_over_sqrt_lambda": (2 / np.sqrt(lams)).tolist(),
        },
        "risk_critical_lambda": 0.0,
        "equals_deterministic_annealing": False,
        "sphere": {
            "risk_angle_deg_min": float(angles.min()),
            "annealing_split_over_prediction": (sphere[:, 3] / sphere[:, 2]).tolist(),
            "population_prediction_over_sample": (sphere[:, 1] / sphere[:, 2]).tolist(),
        },
    }
    arrays = {"splits": splits, "risk_lambdas": lams, "risk_curvature": curv,
              "risk_predicted": predicted, "risk_separation": best,
              "risk_separation_samples": fixed, "annealing_separation": da_sep,
              "sphere_angles": angles, "sphere_splits": sphere}
    return FigureResult(config, arrays, summary)


@styled
def plot(result: FigureResult, out) -> None:
    a, cfg = result.arrays, result.config
    fig, axes = new_figure(4, width=3.4)
    s = a["splits"]
    for i, (k, d) in enumerate(itertools.product(cfg["ks"], cfg["dims"])):
        rows = s[(s[:, 0] == k) & (s[:, 1] == d)]
        if not len(rows):
            continue
        axes[0].plot(rows[:, 2], rows[:, 5] / rows[:, 4], "o-" if k == 2 else "s--", ms=3,
                     color=COLORS[i % 10], label=f"K={k}, d={d}")
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_xlabel(r"$\sigma$")
    axes[0].set_ylabel(r"annealing: measured split $\times\ \lambda_{\max}(C)$")
    axes[0].legend(fontsize=7)
    lams = a["risk_lambdas"]
    axes[1].plot(lams, -a["risk_predicted"], "k-", lw=1, label=r"$4\lambda\, v^\top C v$ (derived)")
    axes[1].plot(lams, -a["risk_curvature"][:, 0], "o", ms=4, color=COLORS[0],
                 label="population (exact)")
    axes[1].plot(lams, -a["risk_curvature"][:, 1], "x", ms=5, color=COLORS[1], label="samples")
    axes[1].set_ylabel(r"$-\,\partial_t^2 R$ at all heads on the mean")
    axes[2].plot(lams, a["risk_separation"], "o-", ms=3, color=COLORS[0],
                 label="risk minimizer (population)")
    axes[2].plot(lams, a["risk_separation_samples"], "x", ms=5, color=COLORS[1],
                 label="risk fixed point (samples)")
    axes[2].plot(lams, 2 / np.sqrt(lams), "k:", lw=1, label=r"$2/\sqrt{\lambda}$")
    axes[2].plot(lams, a["annealing_separation"], "s--", ms=3, color=COLORS[2],
                 label="annealing (samples)")
    axes[2].set_ylabel(r"separation $\|\mu_1 - \mu_2\|$")
    axes[2].set_yscale("symlog", linthresh=0.1)
    for j, sigma in enumerate(cfg["sphere_sigmas"]):
        axes[3].plot(lams, a["sphere_angles"][j], "o-", ms=3, color=COLORS[j],
                     label=rf"$\sigma={sigma:g}$")
        axes[3].axvline(a["sphere_splits"][j, 1], color=COLORS[j], ls=":", lw=1)
    axes[3].set_ylabel("sphere: angle between the risk's heads (deg)")
    axes[3].set_ylim(0, 180)
    for ax in axes[1:]:
        ax.set_xscale("log")
        ax.set_xlabel(r"inverse temperature $\lambda$")
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    axes[3].set_title("dotted: annealing's split on the sphere", fontsize=8)
    save(fig, out)

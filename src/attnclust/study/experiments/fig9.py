"""Figure 9: the trained heads against classical estimators on the same samples.

For growing sample sizes ``n`` we draw ``n`` tokens of the running example and estimate
the centroids with (a) the two-head layer trained by PGD on the empirical risk, at two
inverse temperatures, (b) scikit-learn's ``KMeans(n_init=1)`` and (c) its spherical
``GaussianMixture`` (EM). The error is the matched max distance to the true centroids;
median and 95% band over 10 samples (for each size, the runs of both inverse temperatures on
all samples are one batched PGD call). The layer converges to its population
minimizer, which is biased at finite lambda (dashed lines, from PGD on the population
risk): at ``lambda = 3`` its error levels off at that bias, while at ``lambda = 30`` the
bias lies below the sampling error of every ``n`` shown and the layer matches k-means
and EM.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture as SklearnGMM

from ..descent import pgd
from ..inits import init_on_sphere
from ..metrics import centroid_distance
from ._common import distance_max, running_example
from ._runner import FigureResult, track
from ._style import COLORS, band, new_figure, save, styled

NAME = "fig9"
DESCRIPTION = "centroid error vs sample size: trained heads, KMeans and spherical EM"

CONFIG = {
    "d": 10, "sigma": 0.3, "inverse_temperatures": [3.0, 30.0],
    "sizes": [30, 100, 300, 1000, 3000, 10000], "n_runs": 10, "n_steps": 1000,
    "step_size": 0.5, "population_steps": 3000, "tol": 1e-12,
}
QUICK = {**CONFIG, "sizes": [30, 300, 3000], "n_runs": 3, "n_steps": 300,
         "population_steps": 600}


def _methods(config: dict) -> list[str]:
    return [f"attention heads, lambda={lam:g}" for lam in config["inverse_temperatures"]] + [
        "KMeans", "spherical EM"]


def _classical(method: str, X: np.ndarray, seed: int) -> np.ndarray:
    if method == "KMeans":
        return KMeans(2, n_init=1, random_state=seed).fit(X).cluster_centers_
    return SklearnGMM(2, covariance_type="spherical", random_state=seed).fit(X).means_


def _heads(samples: np.ndarray, config: dict, streams) -> np.ndarray:
    """PGD on each sample's empirical risk (full batch, random init on the sphere), at
    every inverse temperature: one batched call, runs ``(lambda, sample)``; ``(T, S, K, d)``."""
    lams, (S, _, d) = config["inverse_temperatures"], samples.shape
    X = torch.from_numpy(np.tile(samples, (len(lams), 1, 1)))  # (T * S, n, d)
    heads0 = torch.stack([init_on_sphere(2, d, rng=s) for s in streams])
    res = pgd(X, heads0, inverse_temperature=np.repeat(lams, S), step_size=config["step_size"],
              n_steps=config["n_steps"], record_every=config["n_steps"], tol=config["tol"])
    return res.heads.numpy().reshape(len(lams), S, 2, d)


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    mix = running_example(config["sigma"], config["d"])
    sizes, methods, n_runs = config["sizes"], _methods(config), config["n_runs"]
    n_lams = len(config["inverse_temperatures"])
    error = np.empty((len(methods), n_runs, len(sizes)))
    for j, child in track(enumerate(rng.spawn(len(sizes))), desc=NAME, total=len(sizes)):
        data_rng, init_rng, seed_rng = child.spawn(3)
        samples = np.stack([mix.sample(sizes[j], s) for s in data_rng.spawn(n_runs)])
        heads = _heads(samples, config, init_rng.spawn(n_lams * n_runs))
        seeds = seed_rng.integers(2**31, size=n_runs)
        for r in range(n_runs):
            estimates = [*heads[:, r], *(_classical(m, samples[r], int(seeds[r]))
                                         for m in methods[n_lams:])]
            for m, est in enumerate(estimates):
                error[m, r, j] = centroid_distance(est, mix.centroids).max
    # the population minimizer at each inverse temperature: the floor of the layer's error
    start = torch.tensor(mix.centroids).expand(n_lams, -1, -1)
    lams = config["inverse_temperatures"]
    minimizers = pgd(mix, start, inverse_temperature=lams, step_size=config["step_size"],
                     n_steps=config["population_steps"],
                     record_every=config["population_steps"], tol=config["tol"]).heads
    bias = distance_max(minimizers, mix)
    summary = {method: {f"n_{n}": float(np.median(error[m, :, j])) for j, n in enumerate(sizes)}
               for m, method in enumerate(methods)}
    summary["population_minimizer_distance"] = {
        f"lambda_{lam:g}": float(b) for lam, b in zip(lams, bias, strict=True)}
    return FigureResult(config, {"size": np.asarray(sizes), "error": error,
                                 "population_bias": bias}, summary)


@styled
def plot(result: FigureResult, out) -> None:
    a = result.arrays
    fig, (ax,) = new_figure(width=4.8, height=3.6)
    for m, method in enumerate(_methods(result.config)):
        band(ax, a["size"], a["error"][m], label=method.replace("lambda", r"$\lambda$"),
             color=COLORS[m], log=True)
    for m, bias in enumerate(a["population_bias"]):
        ax.axhline(float(bias), color=COLORS[m], ls="--", lw=1)
    ax.plot([], [], "k--", lw=1, label="population minimizer of the layer")
    ax.set_xscale("log")
    ax.set_xlabel("sample size n")
    ax.set_ylabel("centroid error (matched max distance)")
    ax.set_title(rf"running example, $\sigma={result.config['sigma']:g}$")
    ax.legend(fontsize=7)
    save(fig, out)

"""Figure 9: the trained heads against classical estimators on the same samples.

For growing sample sizes ``n`` we draw ``n`` tokens of the running example and estimate
the centroids with (a) the two-head layer trained by PGD on the empirical risk, (b)
scikit-learn's ``KMeans(n_init=1)`` and (c) its spherical ``GaussianMixture`` (EM). The
error is the matched max distance to the true centroids; median and 95% band over 10
samples. The layer at a finite temperature converges to its population minimizer,
which is biased (dashed line): its error levels off where the classical estimators'
keeps shrinking like ``1/sqrt(n)``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture as SklearnGMM

from ..metrics import centroid_distance
from ..pgd import init_on_sphere, pgd
from ._common import running_example
from ._runner import FigureResult, track
from ._style import COLORS, band, new_figure, save

NAME = "fig9"
DESCRIPTION = "centroid error vs sample size: trained heads, KMeans and spherical EM"

CONFIG = {
    "d": 10, "sigma": 0.3, "temperature": 30.0, "sizes": [30, 100, 300, 1000, 3000, 10000],
    "n_runs": 10, "n_steps": 1000, "step_size": 0.5, "population_steps": 3000,
}
QUICK = {**CONFIG, "sizes": [30, 300, 3000], "n_runs": 3, "n_steps": 300,
         "population_steps": 600}

METHODS = ("attention heads", "KMeans", "spherical EM")


def _estimate(method: str, X: np.ndarray, config: dict, rng: np.random.Generator) -> np.ndarray:
    seed = int(rng.integers(2**31))
    if method == "KMeans":
        return KMeans(2, n_init=1, random_state=seed).fit(X).cluster_centers_
    if method == "spherical EM":
        return SklearnGMM(2, covariance_type="spherical", random_state=seed).fit(X).means_
    # attention heads: PGD on the empirical risk, full batch, from a random init on S^{d-1}
    heads0 = init_on_sphere(2, X.shape[1], rng)
    res = pgd(X, heads0, temperature=config["temperature"], step_size=config["step_size"],
              n_steps=config["n_steps"], record_every=config["n_steps"], rng=rng)
    return res.heads.numpy()


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    mix = running_example(config["sigma"], config["d"])
    sizes = config["sizes"]
    error = np.empty((len(METHODS), config["n_runs"], len(sizes)))
    jobs = [(r, j) for r in range(config["n_runs"]) for j in range(len(sizes))]
    for (r, j), child in track(zip(jobs, rng.spawn(len(jobs)), strict=True), desc=NAME,
                               total=len(jobs)):
        X = mix.sample(sizes[j], child)
        for m, method in enumerate(METHODS):
            error[m, r, j] = centroid_distance(_estimate(method, X, config, child),
                                               mix.centroids).max
    # the population minimizer at the same temperature: the floor of the layer's error
    pop = pgd(mix, torch.tensor(mix.centroids), temperature=config["temperature"],
              step_size=config["step_size"], n_steps=config["population_steps"],
              record_every=config["population_steps"])
    bias = centroid_distance(pop.heads, mix.centroids).max
    summary = {method: {f"n_{n}": float(np.median(error[m, :, j])) for j, n in enumerate(sizes)}
               for m, method in enumerate(METHODS)}
    summary["population_minimizer_distance"] = float(bias)
    return FigureResult(config, {"size": np.asarray(sizes), "error": error,
                                 "population_bias": np.asarray(bias)}, summary)


def plot(result: FigureResult, out) -> None:
    a = result.arrays
    fig, (ax,) = new_figure()
    for m, method in enumerate(METHODS):
        band(ax, a["size"], a["error"][m], label=method, color=COLORS[m], log=True)
    ax.axhline(float(a["population_bias"]), color=COLORS[0], ls="--", lw=1,
               label="population minimizer of the layer")
    ax.set_xscale("log")
    ax.set_xlabel("sample size n")
    ax.set_ylabel("centroid error (matched max distance)")
    lam = result.config["temperature"]
    ax.set_title(rf"running example, $\sigma={result.config['sigma']:g}$, $\lambda={lam:g}$")
    ax.legend()
    save(fig, out)

"""Figure 9: the trained heads against classical estimators on the same samples.

For growing sample sizes ``n`` we draw ``n`` tokens of the running example and estimate
the centroids with (a) the two-head layer trained by PGD on the empirical risk, at two
inverse temperatures, (b) scikit-learn's ``KMeans(n_init=1)`` and (c) its spherical
``GaussianMixture`` (EM). The error is the matched max distance to the true centroids;
median and 95% band over 10 samples. The layer converges to its population minimizer,
which is biased at a finite temperature (dashed lines, from PGD on the population
risk): at ``lambda = 3`` its error levels off at that bias, while at ``lambda = 30`` the
bias lies below the sampling error of every ``n`` shown and the layer matches k-means
and EM.
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
    "d": 10, "sigma": 0.3, "temperatures": [3.0, 30.0],
    "sizes": [30, 100, 300, 1000, 3000, 10000], "n_runs": 10, "n_steps": 1000,
    "step_size": 0.5, "population_steps": 3000,
}
QUICK = {**CONFIG, "sizes": [30, 300, 3000], "n_runs": 3, "n_steps": 300,
         "population_steps": 600}


def _methods(config: dict) -> list[str]:
    return [f"attention heads, lambda={lam:g}" for lam in config["temperatures"]] + [
        "KMeans", "spherical EM"]


def _estimate(method: str, X: np.ndarray, config: dict, rng: np.random.Generator) -> np.ndarray:
    seed = int(rng.integers(2**31))
    if method == "KMeans":
        return KMeans(2, n_init=1, random_state=seed).fit(X).cluster_centers_
    if method == "spherical EM":
        return SklearnGMM(2, covariance_type="spherical", random_state=seed).fit(X).means_
    # attention heads: PGD on the empirical risk, full batch, from a random init on S^{d-1}
    lam = float(method.rsplit("=", 1)[1])
    res = pgd(X, init_on_sphere(2, X.shape[1], rng=rng), temperature=lam,
              step_size=config["step_size"], n_steps=config["n_steps"],
              record_every=config["n_steps"], rng=rng)
    return res.heads.numpy()


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    mix = running_example(config["sigma"], config["d"])
    sizes, methods = config["sizes"], _methods(config)
    error = np.empty((len(methods), config["n_runs"], len(sizes)))
    jobs = [(r, j) for r in range(config["n_runs"]) for j in range(len(sizes))]
    for (r, j), child in track(zip(jobs, rng.spawn(len(jobs)), strict=True), desc=NAME,
                               total=len(jobs)):
        X = mix.sample(sizes[j], child)
        for m, method in enumerate(methods):
            error[m, r, j] = centroid_distance(_estimate(method, X, config, child),
                                               mix.centroids).max
    # the population minimizer at each temperature: the floor of the layer's error
    bias = np.array([
        centroid_distance(pgd(mix, torch.tensor(mix.centroids), temperature=lam,
                              step_size=config["step_size"], n_steps=config["population_steps"],
                              record_every=config["population_steps"]).heads,
                          mix.centroids).max
        for lam in config["temperatures"]])
    summary = {method: {f"n_{n}": float(np.median(error[m, :, j])) for j, n in enumerate(sizes)}
               for m, method in enumerate(methods)}
    summary["population_minimizer_distance"] = {
        f"lambda_{lam:g}": float(b) for lam, b in zip(config["temperatures"], bias, strict=True)}
    return FigureResult(config, {"size": np.asarray(sizes), "error": error,
                                 "population_bias": bias}, summary)


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

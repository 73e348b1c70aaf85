"""Figure 1: distance to the centroids along PGD on the population risk, init on M.

The running example (``d = 10``, ``sigma = 0.3``, ``mu*_0 = e_10``, ``mu*_1 = -e_1``),
minimizing ``R`` without regularization (``rho = 0``), heads initialized uniformly on
the unit circle of ``span(mu*_0, mu*_1)``. One curve per inverse temperature: the
median over ``n_inits`` runs (all of them in one batched PGD call) with its 95%
percentile band. At finite lambda the minimizer of ``R`` is biased away from the
centroids, so each curve levels off at its own distance. The summary gives, with 95%
Wilson intervals, the fraction of inits that end farther than ``failure_distance`` from
the centroids (a *dead head*, which wins no token) and the fraction within 0.05.
"""

from __future__ import annotations

import numpy as np

from ._common import manifold_figure, plot_manifold_figure, running_example
from ._runner import FigureResult
from ._style import styled

NAME = "fig1"
DESCRIPTION = "distance to centroids vs PGD iterations, population risk, init on M"

CONFIG = {
    "d": 10, "sigma": 0.3, "inverse_temperatures": [1.0, 3.0, 10.0, 30.0], "n_inits": 1000,
    "n_steps": 400, "step_size": 0.5, "record_every": 4, "init": "manifold",
    "failure_distance": 0.5, "tol": 1e-12,
}
QUICK = {**CONFIG, "inverse_temperatures": [3.0, 10.0, 30.0], "n_steps": 200, "n_inits": 50}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    return manifold_figure(running_example(config["sigma"], config["d"]), config, rng)


plot = styled(plot_manifold_figure)

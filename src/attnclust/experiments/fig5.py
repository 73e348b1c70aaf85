"""Figure 5: figure 1 on the degenerate Dirac mixture (``sigma = 0``).

Every token is one of the two centroids, so the risk is a finite sum; PGD from an
init on M drives the heads towards the centroids, with a bias that vanishes as the
inverse temperature grows.
"""

from __future__ import annotations

import numpy as np

from . import fig1
from ._common import running_example
from ._runner import FigureResult

NAME = "fig5"
DESCRIPTION = "figure 1 on the Dirac mixture (sigma = 0)"

CONFIG = {**fig1.CONFIG, "sigma": 0.0}
QUICK = {**fig1.QUICK, "sigma": 0.0}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    return fig1.pgd_figure(running_example(config["sigma"], config["d"]), config, rng, NAME)


plot = fig1.plot

"""Figure 5: figure 1 on the degenerate Dirac mixture (``sigma = 0``).

Every token is one of the two centroids, so the risk is a finite sum; PGD from an
init on M drives the heads towards the centroids, with a bias that vanishes as the
inverse temperature grows, unless a head starts where it wins no token (a dead head,
frequent at large ``lambda``): the summary gives that rate over ``n_inits`` inits with
its 95% Wilson interval.
"""

from __future__ import annotations

import numpy as np

from . import fig1
from ._common import manifold_figure, plot_manifold_figure, running_example
from ._runner import FigureResult
from ._style import styled

NAME = "fig5"
DESCRIPTION = "figure 1 on the Dirac mixture (sigma = 0)"

CONFIG = {**fig1.CONFIG, "sigma": 0.0}
QUICK = {**fig1.QUICK, "sigma": 0.0}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    return manifold_figure(running_example(config["sigma"], config["d"]), config, rng)


plot = styled(plot_manifold_figure)

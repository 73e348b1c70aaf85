"""Figure 4: inputs vs outputs of the identity attention layer (in-context quantization).

The same prompt as figure 3 (``d = 10``, ``sigma = 0.3``, ``L = 500``,
``lambda = 1/(1 + 2 sigma^2)``), passed through one step of attention whose query, key
and value matrices are the identity: no parameter is trained, the clusters are read
off the prompt itself. PCA fitted on the inputs projects both to 2-D.
"""

from __future__ import annotations

import numpy as np

from ..in_context import identity_attention
from ..metrics import limit_distance, spread_ratio
from . import fig3
from ._common import inverse_temperature_of, projected, prompt
from ._runner import FigureResult

NAME = "fig4"
DESCRIPTION = "inputs vs outputs of the identity attention layer (PCA of the inputs)"

# figure 3's prompt and lambda; nothing is trained
CONFIG = {key: fig3.CONFIG[key] for key in ("d", "sigma", "length", "inverse_temperature")}
QUICK = dict(CONFIG)


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    lam = inverse_temperature_of(config)
    _, data_rng = rng.spawn(2)          # figure 3's prompt: its draw from the same seed
    mix, X, z = prompt(config, data_rng)
    Y = identity_attention(X, lam, backend="dense")
    arrays = {**projected(X, Y), "labels": z}
    summary = {
        "inverse_temperature": lam,
        "within_cluster_spread_ratio": spread_ratio(X, Y, z).ratio,
        "mean_distance_to_infinite_prompt_limit":
            limit_distance(X, Y, mix, inverse_temperature=lam).mean,
    }
    return FigureResult(config, arrays, summary)


plot = fig3.plot_of("identity attention")

"""attnclust: attention layers as clustering and quantization operators.

Two halves: :mod:`attnclust.study` (the paper's layer: mixtures, risks, projected
gradient descent, in-context quantization, the figures' experiments) and
:mod:`attnclust.cluster` (the clusterer built on it: the estimator, the k-means engine,
the temperature path, shaped heads, streaming, data-parallel fits). The public names
below are the library's contract; everything else is private.
"""

import importlib
import sys

from ._deprecation import MovedModules, moved_module, warn_deprecated
from .cluster.annealing import TemperaturePath, temperature_path
from .cluster.cluster_choice import ClusterChoice, Plateau
from .cluster.clustering import AttentionClustering, DegenerateFitWarning
from .cluster.communicator import Communicator
from .cluster.shaped import ShapedAttentionHeads, shaped_attention, shaped_weights
from .study import descent
from .study.descent import PGDHistory, PGDResult, pgd
from .study.heads import AttentionHeads, attention_heads, head_weights
from .study.in_context import identity_attention, infinite_prompt_limit
from .study.inits import init_on_manifold, init_on_sphere
from .study.metrics import (
    AssignmentError,
    CentroidDistance,
    ClusterCount,
    LimitDistance,
    SpreadRatio,
    adjusted_rand_index,
    assignment_error,
    centroid_distance,
    count_clusters,
    distortion,
    limit_distance,
    spread_ratio,
)
from .study.mixture import GaussianMixture
from .study.objectives import Balance, EmpiricalRisk, PopulationRisk, Repulsion, ValueAndGrad
from .study.quantizer import AttentionQuantizer, estimate_sigma
from .study.results import History, IterationInfo, SolverResult
from .study.risk import RiskEstimate, balance, empirical_risk, population_risk, qmc_risk, repulsion
from .study.sphere import normalize, random_sphere, riemannian_gradient, tangent

__version__ = "0.2.0"

# the modules of 0.2, by their old paths: importing one warns until 0.4
_MOVED = {f"{__name__}.{old}": f"{__name__}.{half}.{old}" for half, olds in {
    "study": ["experiments", "heads", "in_context", "metrics", "mixture", "objectives",
              "quantizer", "results", "risk", "sphere"],
    "cluster": ["clustering", "communicator", "distributed", "fixed_point", "warm_start"],
}.items() for old in olds}
sys.meta_path.insert(0, MovedModules(_MOVED))


def __getattr__(name: str):
    """``attnclust.<old module>`` read as an attribute, as the modules of 0.2 were."""
    new = _MOVED.get(f"{__name__}.{name}")
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_deprecated(f"the module {__name__}.{name} is now {new}; it will be removed from "
                    "its old path in 0.4", stacklevel=2)
    return importlib.import_module(new)


# the module of 0.2 named attnclust.pgd is attnclust.study.descent: `from attnclust.pgd import X`
# warns until 0.4, and importing it leaves attnclust.pgd the function
sys.modules[__name__ + ".pgd"] = moved_module(__name__ + ".pgd", descent)

__all__ = [
    "AssignmentError",
    "AttentionClustering",
    "AttentionHeads",
    "AttentionQuantizer",
    "Balance",
    "CentroidDistance",
    "ClusterChoice",
    "EmpiricalRisk",
    "ClusterCount",
    "Communicator",
    "DegenerateFitWarning",
    "GaussianMixture",
    "LimitDistance",
    "History",
    "IterationInfo",
    "PGDHistory",
    "PGDResult",
    "Plateau",
    "SolverResult",
    "PopulationRisk",
    "Repulsion",
    "RiskEstimate",
    "ShapedAttentionHeads",
    "SpreadRatio",
    "ValueAndGrad",
    "__version__",
    "adjusted_rand_index",
    "assignment_error",
    "attention_heads",
    "balance",
    "centroid_distance",
    "count_clusters",
    "distortion",
    "empirical_risk",
    "estimate_sigma",
    "head_weights",
    "identity_attention",
    "infinite_prompt_limit",
    "limit_distance",
    "init_on_manifold",
    "init_on_sphere",
    "normalize",
    "pgd",
    "population_risk",
    "qmc_risk",
    "random_sphere",
    "repulsion",
    "riemannian_gradient",
    "shaped_attention",
    "shaped_weights",
    "spread_ratio",
    "tangent",
    "temperature_path",
    "TemperaturePath",
]

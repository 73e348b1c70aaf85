"""attnclust: attention layers as clustering and quantization operators.

The public names below are the library's contract; everything else is private.
"""

import sys

from . import descent
from ._deprecation import moved_module
from .annealing import TemperaturePath, temperature_path
from .cluster_choice import ClusterChoice, Plateau
from .clustering import AttentionClustering, DegenerateFitWarning
from .communicator import Communicator
from .descent import PGDHistory, PGDResult, pgd
from .heads import AttentionHeads, attention_heads, head_weights
from .in_context import identity_attention, infinite_prompt_limit
from .inits import init_on_manifold, init_on_sphere
from .metrics import (
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
from .mixture import GaussianMixture
from .objectives import Balance, EmpiricalRisk, PopulationRisk, Repulsion, ValueAndGrad
from .quantizer import AttentionQuantizer, estimate_sigma
from .results import History, IterationInfo, SolverResult
from .risk import RiskEstimate, balance, empirical_risk, population_risk, qmc_risk, repulsion
from .shaped import ShapedAttentionHeads, shaped_attention, shaped_weights
from .sphere import normalize, random_sphere, riemannian_gradient, tangent

__version__ = "0.2.0"

# the module of 0.2 named attnclust.pgd is attnclust.descent: `from attnclust.pgd import X`
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

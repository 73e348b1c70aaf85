"""attnclust: attention layers as clustering and quantization operators.

Two halves: :mod:`attnclust.study` (the paper's layer: mixtures, risks, projected
gradient descent, in-context quantization, the figures' experiments) and
:mod:`attnclust.cluster` (the clusterer built on it: the estimator, the k-means engine,
the temperature path, shaped heads, streaming, data-parallel fits). The public names
below are the library's contract; everything else is private.

The names are imported when first read (PEP 562): ``import attnclust`` alone does not
import torch, so the command line's ``--help`` and ``--version`` answer at once. The
first public name read imports them all, as an eager ``import`` would.
"""

import importlib
import sys

from ._deprecation import REMOVED_IN, MovedModules, moved_module, warn_deprecated

__version__ = "0.4.0.dev0"

# public name -> the module that defines it (imported on first read)
_NAMES = {
    "TemperaturePath": "cluster.annealing", "temperature_path": "cluster.annealing",
    "ClusterChoice": "cluster.choice.plateaus", "Plateau": "cluster.choice.plateaus",
    "AttentionClustering": "cluster.clustering", "DegenerateFitWarning": "cluster.clustering",
    "Communicator": "cluster.communicator", "FitSettings": "cluster.settings",
    "MergeSettings": "cluster.settings",
    "WeakChoiceWarning": "cluster.choice.k_choice",
    "load_model": "cluster.model_file", "save_model": "cluster.model_file",
    "plot_path": "plotting.path", "plot_clusters": "plotting.clusters",
    "ShapedAttentionHeads": "cluster.mixture.shaped",
    "shaped_attention": "cluster.mixture.shaped", "shaped_weights": "cluster.mixture.shaped",
    "PGDHistory": "study.descent", "PGDResult": "study.descent", "pgd": "study.descent",
    "AttentionHeads": "layer.heads", "attention_heads": "layer.heads",
    "head_weights": "layer.heads",
    "identity_attention": "study.in_context", "infinite_prompt_limit": "study.in_context",
    "init_on_manifold": "study.inits", "init_on_sphere": "study.inits",
    **dict.fromkeys(["AssignmentError", "CentroidDistance", "ClusterCount", "LimitDistance",
                     "SpreadRatio", "adjusted_rand_index", "assignment_error",
                     "centroid_distance", "count_clusters", "distortion", "limit_distance",
                     "spread_ratio"], "study.metrics"),
    "GaussianMixture": "study.mixture",
    **dict.fromkeys(["Balance", "EmpiricalRisk", "PopulationRisk", "Repulsion",
                     "ValueAndGrad"], "study.objectives"),
    "AttentionQuantizer": "study.quantizer", "estimate_sigma": "study.quantizer",
    "History": "layer.results", "IterationInfo": "layer.results",
    "SolverResult": "layer.results",
    **dict.fromkeys(["RiskEstimate", "balance", "empirical_risk", "population_risk",
                     "qmc_risk", "repulsion"], "study.risk"),
    **dict.fromkeys(["normalize", "random_sphere", "riemannian_gradient", "tangent"],
                    "layer.sphere"),
}
# modules that the package exposed as attributes (``attnclust.descent``)
_MODULES = {"descent": "study.descent", "study": "study", "cluster": "cluster", "layer": "layer"}

# the modules of 0.2, by their old paths: importing one warns until 0.5
_MOVED = {f"{__name__}.{old}": f"{__name__}.{half}.{old}" for half, olds in {
    "study": ["experiments", "in_context", "metrics", "mixture", "objectives", "quantizer",
              "risk"],
    "layer": ["heads", "results", "sphere"],
    "cluster": ["clustering", "communicator", "distributed", "fixed_point", "warm_start"],
}.items() for old in olds}
sys.meta_path.insert(0, MovedModules(_MOVED))
# the modules of 0.3 that moved in 0.4, by their old paths: importing one warns until 0.5
_MOVED_03 = {f"{__name__}.{old}": f"{__name__}.{new}" for old, new in {
    **{f"study.{m}": f"layer.{m}"
       for m in ("geometry", "heads", "results", "schedules", "sphere")},
    **{f"cluster.{m}": f"cluster.mixture.{m}"
       for m in ("covariance", "likelihood", "noise_head",
                 "shape_choice", "shaped", "valley")},
    "cluster.shape_em": "cluster.mixture.em", "cluster.shaped_fit": "cluster.mixture.tempered",
    "cluster.candidate_em": "cluster.mixture.candidates",
    "cluster.lean_fits": "cluster.mixture.candidates",
    "cluster.k_choice": "cluster.choice.k_choice",
    "cluster.cluster_choice": "cluster.choice.path_choice",
    "cluster.picture": "plotting.clusters", "cluster.path_plot": "plotting.path",
}.items()}
sys.meta_path.insert(0, MovedModules(_MOVED_03, removed_in="0.5"))


def _load_all() -> None:
    """Bind every public name (and the modules above), as an eager import did: once one
    is read, ``attnclust.study.<module>`` and the rest are there as before."""
    for name, where in {**_NAMES, **_MODULES}.items():
        module = importlib.import_module(f"{__name__}.{where}")
        globals()[name] = module if name in _MODULES else getattr(module, name)


def __getattr__(name: str):
    """A public name, imported on first read; ``attnclust.<old module>`` read as an
    attribute, as the modules of 0.2 were (with a warning)."""
    if name in _NAMES or name in _MODULES:
        _load_all()
        return globals()[name]
    new = _MOVED.get(f"{__name__}.{name}")
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_deprecated(f"the module {__name__}.{name} is now {new}; it will be removed from "
                    f"its old path in {REMOVED_IN}", stacklevel=2)
    return importlib.import_module(new)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_MODULES))


class _LazyModule:
    """Stands for a module not imported yet: its names are read from it on first use."""

    def __init__(self, name: str):
        self.__name__ = name

    def __getattr__(self, name: str):
        return getattr(importlib.import_module(self.__name__), name)


# the module of 0.2 named attnclust.pgd is attnclust.study.descent: `from attnclust.pgd import X`
# warns until 0.5, and importing it leaves attnclust.pgd the function
sys.modules[__name__ + ".pgd"] = moved_module(__name__ + ".pgd",
                                              _LazyModule(__name__ + ".study.descent"))

__all__ = [
    "AssignmentError",
    "AttentionClustering",
    "AttentionHeads",
    "AttentionQuantizer",
    "Balance",
    "CentroidDistance",
    "ClusterChoice",
    "ClusterCount",
    "Communicator",
    "DegenerateFitWarning",
    "EmpiricalRisk",
    "FitSettings",
    "GaussianMixture",
    "History",
    "IterationInfo",
    "LimitDistance",
    "MergeSettings",
    "PGDHistory",
    "PGDResult",
    "Plateau",
    "PopulationRisk",
    "Repulsion",
    "RiskEstimate",
    "ShapedAttentionHeads",
    "SolverResult",
    "SpreadRatio",
    "TemperaturePath",
    "ValueAndGrad",
    "WeakChoiceWarning",
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
    "init_on_manifold",
    "init_on_sphere",
    "limit_distance",
    "load_model",
    "normalize",
    "pgd",
    "plot_clusters",
    "plot_path",
    "population_risk",
    "qmc_risk",
    "random_sphere",
    "repulsion",
    "riemannian_gradient",
    "save_model",
    "shaped_attention",
    "shaped_weights",
    "spread_ratio",
    "tangent",
    "temperature_path",
]

"""STUB (contract for the implementer; replace this whole file).

population_risk(heads, mix, temperature, *, method="auto", n_samples=2**14, rng=0) -> Tensor
    0-dim tensor, differentiable w.r.t. ``heads`` ((K, d) tensor). method in
    {"auto", "exact", "qmc"}; "auto" = exact for K <= 3, QMC otherwise.
qmc_risk(heads, mix, temperature, *, n_samples=2**14, rng=0) -> RiskEstimate(value, stderr)
empirical_risk(heads, X, temperature, *, batch_size=None) -> Tensor
repulsion(heads) -> Tensor ; balance(heads, data_or_mix, temperature, *, target=None) -> Tensor
"""

__all__ = ["RiskEstimate", "population_risk", "qmc_risk", "empirical_risk", "repulsion", "balance"]


class RiskEstimate:  # noqa: D101
    pass


def population_risk(*args, **kwargs):
    raise NotImplementedError


qmc_risk = empirical_risk = repulsion = balance = population_risk

"""STUB (contract for the implementer; replace this whole file).

pgd(objective, heads0, *, temperature, step_size=..., n_steps=..., penalty=None, rho=0.0,
    rho_schedule="constant", temperature_schedule=None, riemannian=True, tol=0.0,
    record_every=10, batch_size=None, centroids=None, rng=None) -> PGDResult
"""

__all__ = ["PGDResult", "PGDHistory", "pgd", "init_on_manifold", "init_on_sphere"]


class PGDResult:  # noqa: D101
    pass


class PGDHistory:  # noqa: D101
    pass


def pgd(*args, **kwargs):
    raise NotImplementedError


init_on_manifold = init_on_sphere = pgd

"""Pieces shared by several figures: repeated PGD runs from independent seeds."""

from __future__ import annotations

import numpy as np

from ..mixture import GaussianMixture
from ..pgd import init_on_manifold, init_on_sphere, pgd
from ._runner import track

__all__ = ["pgd_runs", "running_example"]


def running_example(sigma: float, d: int = 10) -> GaussianMixture:
    """The paper's running example: ``mu*_0 = e_d``, ``mu*_1 = -e_1``."""
    return GaussianMixture.orthogonal(d=d, k=2, sigma=sigma)


def pgd_runs(mix: GaussianMixture, *, init: str, n_runs: int, rng: np.random.Generator,
             desc: str, **pgd_kwargs) -> dict[str, np.ndarray]:
    """``n_runs`` PGD runs from independent initializations (``"manifold"`` or ``"sphere"``).

    Returns the recorded steps ``(T,)``, matched max distance to the centroids
    ``(n_runs, T)``, and the final heads ``(n_runs, K, d)``.
    """
    distances, heads = [], []
    steps = None
    for child in track(rng.spawn(n_runs), desc=desc, total=n_runs):
        if init == "manifold":
            heads0 = init_on_manifold(mix, child)
        elif init == "sphere":
            heads0 = init_on_sphere(mix.k, mix.d, rng=child)
        else:
            raise ValueError(f"init must be 'manifold' or 'sphere', got {init!r}")
        res = pgd(mix, heads0, rng=child, **pgd_kwargs)
        steps = res.history.step
        distances.append(res.history.distance_max)
        heads.append(res.heads.numpy())
    return {"step": np.asarray(steps), "distance": np.stack(distances), "heads": np.stack(heads)}

"""PGD on the population risk: seconds per 10,000 steps (target for K = 2 exact: < 2 s).

Rows: the K = 2 exact path (the batched NumPy kernel with its written-out gradient, at
R = 1), K = 3 exact (autograd through the fused integral, run by run), K = 8 QMC (the
batched QMC kernel), and a baseline measured in the same run: 10,000
minimal torch autograd steps (one (2, 10) Gram matrix, backward, sphere update), the
per-step overhead any autograd implementation pays. Paths slower than the target are
timed on fewer steps and extrapolated linearly (column ``steps_timed``).
"""

from __future__ import annotations

import time

import torch

import attnclust as ac


def _autograd_baseline(n_steps: int) -> float:
    heads = ac.init_on_manifold(ac.GaussianMixture.orthogonal(d=10, k=2), rng=0)
    start = time.perf_counter()
    for _ in range(n_steps):
        h = heads.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad((h @ h.T).square().sum(), h)
        heads = ac.normalize(heads - 1e-3 * ac.tangent(heads, grad))
    return time.perf_counter() - start


def _time_pgd(mix, n_steps: int, **kwargs) -> float:
    heads0 = ac.init_on_manifold(mix, rng=0)
    ac.pgd(mix, heads0, inverse_temperature=30.0, step_size=0.05, n_steps=2, **kwargs)  # warm-up
    start = time.perf_counter()
    ac.pgd(mix, heads0, inverse_temperature=30.0, step_size=0.05, n_steps=n_steps, **kwargs)
    return time.perf_counter() - start


def run(quick: bool) -> list[dict]:
    """One row per path; ``s_per_10k`` is measured (10k steps) or extrapolated."""
    k2 = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    k3 = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.3)
    k8 = ac.GaussianMixture.random(d=16, k=8, sigma=0.1, min_angle=1.0, rng=0)
    n_base = 2_000 if quick else 10_000
    base = _autograd_baseline(n_base) * 10_000 / n_base
    cases = [
        ("K=2 exact, batched kernel at R=1 (pgd default)", k2,
         2_000 if quick else 10_000, {}),
        ("K=3 exact, autograd through the fused integral", k3, 10 if quick else 100, {}),
        ("K=8 QMC, 2^14 points, batched kernel at R=1", k8, 10 if quick else 100, {}),
    ]
    rows = [{"path": "baseline: minimal torch autograd step", "steps_timed": n_base,
             "s_per_10k": base, "x_baseline": 1.0, "target_s": ""}]
    for name, mix, n_steps, kwargs in cases:
        seconds = _time_pgd(mix, n_steps, **kwargs)
        per_10k = seconds * 10_000 / n_steps
        rows.append({"path": name + ("" if n_steps == 10_000 else " (extrapolated)"),
                     "steps_timed": n_steps, "s_per_10k": per_10k,
                     "x_baseline": per_10k / base,
                     "target_s": 2.0 if name.startswith("K=2 exact") else ""})
    return rows


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick=False)))

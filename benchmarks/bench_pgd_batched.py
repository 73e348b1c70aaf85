"""Batched PGD against a Python loop of single runs: R = 200 runs, the same iterates.

Each row times one batched ``pgd`` call on heads of shape ``(R, K, d)`` and the loop of
``R`` calls on ``(K, d)`` heads (the baseline, measured in the same run; in quick mode
20 of the looped runs are timed and scaled to ``R``), and checks that both give the same
final heads (``max_abs_diff``). Target: 20x at R = 200 (issue 11).
"""

from __future__ import annotations

import time

import numpy as np
import torch

import attnclust as ac


def _cases(quick: bool):
    d = 10
    run = ac.GaussianMixture.orthogonal(d=d, k=2, sigma=0.1)
    many = [ac.GaussianMixture.random(d, 5, 0.1, min_angle=np.deg2rad(60), rng=r)
            for r in range(200)]
    X = torch.from_numpy(ac.GaussianMixture.orthogonal(d=d, k=2, sigma=0.3).sample(2000, rng=0))
    steps = 100 if quick else 400
    return [
        ("K=2 exact, sigma=0.1, lambda=100 (figure 2)", run, 2, {"inverse_temperature": 100.0},
         steps),
        ("K=2 Dirac mixture, lambda=30 (figure 5)", run.with_sigma(0.0), 2,
         {"inverse_temperature": 30.0}, steps),
        ("K=5 QMC, 64 points, own mixture per run (figure 6)", many, 5,
         {"inverse_temperature": 10.0, "method": "qmc", "n_samples": 64, "rng": 0}, steps // 4),
        ("K=2 empirical risk, n=2000 shared (figure 9)", X, 2, {"inverse_temperature": 10.0},
         steps // 4),
    ]


def run(quick: bool, n_runs: int = 200) -> list[dict]:
    torch.set_num_threads(1)  # as the figures run
    rows = []
    n_looped = 20 if quick else n_runs
    for name, objective, K, kwargs, n_steps in _cases(quick):
        heads0 = torch.stack([ac.init_on_sphere(K, 10, rng=r) for r in range(n_runs)])
        common = dict(step_size=0.5, n_steps=n_steps, record_every=n_steps, **kwargs)
        start = time.perf_counter()
        batched = ac.pgd(objective, heads0, **common)
        t_batched = time.perf_counter() - start
        start = time.perf_counter()
        looped = [ac.pgd(objective[r] if isinstance(objective, list) else objective,
                         heads0[r], **common).heads for r in range(n_looped)]
        t_looped = (time.perf_counter() - start) * n_runs / n_looped
        diff = float((batched.heads[:n_looped] - torch.stack(looped)).abs().max())
        rows.append({"case": name, "R": n_runs, "steps": n_steps,
                     "batched_s": t_batched, "looped_s": t_looped,
                     "speedup": t_looped / t_batched, "max_abs_diff": diff})
    return rows


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick=False)))

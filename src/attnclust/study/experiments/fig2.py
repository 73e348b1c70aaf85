"""Figure 2: PGD from a random init on the sphere, regularized or not.

Heads start uniformly on ``S^{d-1}``. With tight clusters (``sigma = 0.1``) and a sharp
softmax (``lambda = 100``), a head that starts farther than the other head from every
centroid wins almost no token and receives almost no gradient: a *dead head*, which
plain PGD cannot revive. We minimize the regularized risk ``R + rho Pen`` with ``rho``
decaying to 0 (so the final minimizer is that of ``R``), for the ``repulsion`` and
``balance`` penalties, and anneal the inverse temperature (``lambda / 100`` to ``lambda`` over
the first half of the steps), beside plain ``R``: ``n_runs`` inits per variant, the
four variants of one dimension in one batched PGD call.

Top row: the success rate (every head within ``success_tol`` of a distinct centroid)
along the iterations, with its 95% Wilson interval. Bottom row: a few individual runs.
"""

from __future__ import annotations

import numpy as np

from ..descent import pgd
from ._common import (
    distance_max,
    in_span,
    initial_heads,
    overlapping,
    rate_summary,
    rates_over_time,
    running_example,
    schedule_arguments,
)
from ._runner import FigureResult
from ._style import COLORS, new_figure, rate_band, save, styled

NAME = "fig2"
DESCRIPTION = "random init on the sphere: regularized risk and annealing vs plain risk"

VARIANTS = {  # label -> penalty, its weight rho (decayed to 0?), lambda annealed?
    "no penalty": {"penalty": None, "rho": 0.0, "decay": False, "anneal": False},
    "repulsion": {"penalty": "repulsion", "rho": 1.0, "decay": True, "anneal": False},
    "balance": {"penalty": "balance", "rho": 1.0, "decay": True, "anneal": False},
    "annealing": {"penalty": None, "rho": 0.0, "decay": False, "anneal": True},
}

CONFIG = {
    "dims": [10, 100], "sigma": 0.1, "inverse_temperature": 100.0, "n_runs": 200, "n_steps": 2000,
    "step_size": 0.5, "record_every": 20, "success_tol": 0.05, "variants": list(VARIANTS),
    "n_shown": 4, "tol": 1e-12,
}
QUICK = {**CONFIG, "dims": [10], "n_runs": 24, "n_steps": 400}


def per_run_arguments(variants: list[str], n_runs: int, lam: float, n_steps: int
                      ) -> dict[str, list]:
    """``schedule_arguments`` of ``VARIANTS`` spread over runs: ``n_runs`` consecutive
    runs per variant."""
    each = [schedule_arguments(VARIANTS[v], lam, n_steps) for v in variants]
    return {key: [args[key] for args in each for _ in range(n_runs)]
            for key in ("penalty", "rho", "inverse_temperature")}


def run(config: dict, rng: np.random.Generator) -> FigureResult:
    arrays, summary = {}, {}
    variants, n = config["variants"], config["n_runs"]
    for d, child in zip(config["dims"], rng.spawn(len(config["dims"])), strict=True):
        mix = running_example(config["sigma"], d)
        streams = [s for v in child.spawn(len(variants)) for s in v.spawn(n)]
        # the descent stays in span(heads0, centroids): solved there, whatever d is
        mixes, heads0, _ = in_span([mix] * len(streams), initial_heads(mix, "sphere", streams))
        res = pgd(mixes, heads0, step_size=config["step_size"], n_steps=config["n_steps"],
                  record_every=config["record_every"], tol=config["tol"],
                  **per_run_arguments(variants, n, config["inverse_temperature"],
                                      config["n_steps"]))
        dist = distance_max(res.history.heads, mixes).reshape(-1, len(variants), n)  # (T, v, r)
        arrays["step"] = res.history.step
        per_d = {}
        for i, variant in enumerate(variants):
            success = dist[:, i] < config["success_tol"]  # (T, n)
            arrays[f"success_d{d}_{variant}"] = rates_over_time(success)  # rate, lo, hi
            arrays[f"shown_d{d}_{variant}"] = dist[:, i, :config["n_shown"]].T
            per_d[variant] = {**rate_summary(success[-1]),
                              "final_distance_median": float(np.median(dist[-1, i]))}
            summary[f"d{d}_{variant}"] = per_d[variant]
        summary[f"d{d}_not_distinguishable"] = overlapping(per_d)
    return FigureResult(config, arrays, summary)


@styled
def plot(result: FigureResult, out) -> None:
    cfg, a = result.config, result.arrays
    dims = cfg["dims"]
    fig, axes = new_figure(len(dims), width=4.4, height=3.2, n_rows=2)
    for j, d in enumerate(dims):
        top, bottom = axes[0, j], axes[1, j]
        for i, variant in enumerate(cfg["variants"]):
            s = result.summary[f"d{d}_{variant}"]
            lo, hi = s["wilson_95"]
            rate, rlo, rhi = a[f"success_d{d}_{variant}"]
            rate_band(top, a["step"], rate, rlo, rhi, color=COLORS[i],
                      label=f"{variant}: {s['count']}/{s['runs']} [{lo:.0%}, {hi:.0%}]")
            for k, curve in enumerate(a[f"shown_d{d}_{variant}"]):
                bottom.plot(a["step"], curve, color=COLORS[i], lw=0.9, alpha=0.8,
                            label=variant if k == 0 else None)
        top.set_ylim(-0.02, 1.02)
        top.set_title(f"random init on the sphere, d={d}, {cfg['n_runs']} runs per variant",
                      fontsize=8)
        top.legend(fontsize=7, loc="lower right",
                   title="final success, 95% Wilson interval", title_fontsize=7)
        bottom.set_yscale("log")
        bottom.set_xlabel("PGD iteration")
        bottom.set_title(f"{cfg['n_shown']} individual runs per variant", fontsize=8)
    axes[0, 0].set_ylabel(f"success rate (all heads within {cfg['success_tol']:g})")
    axes[1, 0].set_ylabel("distance to centroids (matched max)")
    axes[1, 0].legend(fontsize=7)
    save(fig, out)

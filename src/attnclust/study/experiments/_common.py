"""Pieces shared by several figures: batched PGD runs, success rates with their
intervals, the running example's prompt and the inputs-vs-outputs panels."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy.stats import norm
from sklearn.decomposition import PCA

from ...layer.schedules import Anneal, Decay
from ..inits import init_on_manifold, init_on_sphere
from ..metrics import centroid_distance
from ..mixture import GaussianMixture
from ._style import COLORS, new_figure, save

__all__ = ["distance_max", "running_example", "initial_heads", "wilson", "rate_summary",
           "rates_over_time", "overlapping", "inverse_temperature_of", "prompt", "projected",
           "inputs_vs_outputs", "manifold_runs", "manifold_figure", "plot_manifold_figure",
           "in_span"]


def distance_max(heads, mixes) -> np.ndarray:
    """Largest matched distance of each run's heads to its mixture's centroids.

    ``heads`` is ``(..., R, K, d)`` (e.g. a PGD history ``(T, R, K, d)``), ``mixes`` one
    mixture per run or one for all; the result has shape ``(..., R)``. For ``K <= 4``
    every matching is tried at once (the Hungarian matching of
    :func:`attnclust.centroid_distance` gives the same), beyond that run by run.
    """
    heads = np.asarray(heads, dtype=np.float64)
    mixes = mixes if isinstance(mixes, (list, tuple)) else [mixes]
    cents = np.stack([mix.centroids for mix in mixes])            # (R or 1, k, d)
    K, k = heads.shape[-2], cents.shape[1]
    lead = heads.shape[:-2]
    cents = np.broadcast_to(cents, lead[-1:] + cents.shape[1:])
    if K > 4:
        flat = heads.reshape(-1, *heads.shape[-3:])
        return np.array([[centroid_distance(h, c).max for h, c in zip(hs, cents, strict=True)]
                         for hs in flat]).reshape(lead)
    perms = np.array(list(itertools.permutations(range(K), k)))   # (P, k)
    dist = np.linalg.norm(cents[..., :, None, :] - heads[..., None, :, :], axis=-1)  # (.., k, K)
    matched = dist[..., np.arange(k), perms]                        # (..., P, k)
    best = np.take_along_axis(matched, matched.sum(-1).argmin(-1)[..., None, None], -2)
    return best[..., 0, :].max(-1)


def running_example(sigma: float, d: int = 10) -> GaussianMixture:
    """The paper's running example: ``mu*_0 = e_d``, ``mu*_1 = -e_1``."""
    return GaussianMixture.orthogonal(d=d, k=2, sigma=sigma)


def initial_heads(mix: GaussianMixture, init: str, streams) -> torch.Tensor:
    """One init per stream, ``(R, K, d)``: ``"manifold"`` (uniform on the unit sphere of
    the centroids' span) or ``"sphere"`` (uniform on ``S^{d-1}``)."""
    rules = {"manifold": lambda s: init_on_manifold(mix, s),
             "sphere": lambda s: init_on_sphere(mix.k, mix.d, rng=s)}
    if init not in rules:
        raise ValueError(f"init must be 'manifold' or 'sphere', got {init!r}")
    return torch.stack([rules[init](s) for s in streams])


def wilson(successes, n, z: float = norm.ppf(0.975)):
    """Wilson score interval of a binomial proportion (95% by default).

    ``(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``, with ``p = s / n``;
    unlike ``p +- z sqrt(p(1-p)/n)`` it stays inside ``[0, 1]`` and is not empty at
    ``p = 0`` or ``1``.

    Examples
    --------
    >>> lo, hi = wilson(0, 200)
    >>> float(lo), round(float(hi), 4)
    (0.0, 0.0188)
    """
    s, n = np.asarray(successes, dtype=float), np.asarray(n, dtype=float)
    p = s / n
    denom = 1.0 + z**2 / n
    center = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    # exact ends where rounding would leave 1e-19 above 0 (no success) or below 1
    lo = np.where(s == 0, 0.0, np.clip(center - half, 0.0, 1.0))
    hi = np.where(s == n, 1.0, np.clip(center + half, 0.0, 1.0))
    return lo, hi


def rate_summary(flags) -> dict:
    """A success (or failure) rate, its count and its 95% Wilson interval."""
    flags = np.asarray(flags, dtype=bool)
    lo, hi = wilson(flags.sum(), flags.size)
    return {"rate": float(flags.mean()), "count": int(flags.sum()), "runs": int(flags.size),
            "wilson_95": [float(lo), float(hi)]}


def rates_over_time(success) -> np.ndarray:
    """Rate and Wilson interval along the records: ``(3, T)`` from flags ``(T, runs)``."""
    success = np.asarray(success, dtype=bool)
    lo, hi = wilson(success.sum(1), success.shape[1])
    return np.stack([success.mean(1), lo, hi])


def overlapping(summaries: dict) -> list[list[str]]:
    """Pairs of labels whose 95% intervals overlap: not distinguishable at this size."""
    names = list(summaries)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (la, ha), (lb, hb) = summaries[a]["wilson_95"], summaries[b]["wilson_95"]
            if la <= hb and lb <= ha:
                pairs.append([a, b])
    return pairs


# -- figures 3 and 4: one prompt of the running example, inputs vs outputs -------------------
def inverse_temperature_of(config: dict) -> float:
    """The caption's ``lambda = 1/(1 + 2 sigma^2)`` unless the config gives a number."""
    lam = config["inverse_temperature"]
    return 1.0 / (1.0 + 2.0 * config["sigma"] ** 2) if isinstance(lam, str) else float(lam)


def prompt(config: dict, rng: np.random.Generator):
    """One prompt of the running example and its labels."""
    mix = running_example(config["sigma"], config["d"])
    X, z = mix.sample(config["length"], rng, return_labels=True)
    return mix, X, z


def projected(X: np.ndarray, outputs: np.ndarray, extra: np.ndarray | None = None) -> dict:
    """PCA fitted on the inputs, applied to inputs, outputs (and ``extra`` points)."""
    pca = PCA(n_components=2).fit(X)
    arrays = {"inputs_2d": pca.transform(X), "outputs_2d": pca.transform(outputs)}
    if extra is not None:
        arrays["heads_2d"] = pca.transform(extra)
    return arrays


def inputs_vs_outputs(result, out, *, title: str) -> None:
    """Two panels, inputs and outputs in the inputs' PCA plane, coloured by cluster."""
    a = result.arrays
    fig, axes = new_figure(2, width=3.6, height=3.4)
    for ax, key, name in zip(axes, ("inputs_2d", "outputs_2d"), ("inputs", "outputs"),
                             strict=True):
        for k in np.unique(a["labels"]):
            pts = a[key][a["labels"] == k]
            ax.scatter(pts[:, 0], pts[:, 1], s=5, alpha=0.6, color=COLORS[int(k)],
                       label=f"cluster {int(k)}")
        if "heads_2d" in a:
            ax.scatter(a["heads_2d"][:, 0], a["heads_2d"][:, 1], marker="*", s=140,
                       color="black", label="heads")
        ax.set_title(name)
        ax.set_xlabel("PC 1")
        ax.set_aspect("equal", adjustable="box")
    # the same limits on both panels, so the contraction shows
    lims = np.concatenate([a["inputs_2d"], a["outputs_2d"]])
    for ax in axes:
        ax.set_xlim(lims[:, 0].min() - 0.1, lims[:, 0].max() + 0.1)
        ax.set_ylim(lims[:, 1].min() - 0.1, lims[:, 1].max() + 0.1)
    axes[0].set_ylabel("PC 2")
    axes[1].legend(loc="best", fontsize=7)
    fig.suptitle(title)
    save(fig, out)


# -- figures 1 and 5: PGD from inits on M, one batch of runs per lambda -------------------
def manifold_runs(mix: GaussianMixture, config: dict, rng: np.random.Generator):
    """Every init of every inverse temperature in one batched PGD call.

    Returns the recorded steps ``(T,)`` and matched max distances ``(T, n_temps, n_inits)``.
    """
    from ..descent import pgd  # the function

    lams, n = config["inverse_temperatures"], config["n_inits"]
    streams = [s for child in rng.spawn(len(lams)) for s in child.spawn(n)]
    heads0 = initial_heads(mix, config["init"], streams)  # (n_temps * n, K, d)
    res = pgd(mix, heads0, inverse_temperature=np.repeat(lams, n), step_size=config["step_size"],
              n_steps=config["n_steps"], record_every=config["record_every"], tol=config["tol"])
    dist = distance_max(res.history.heads, mix).reshape(len(res.history.step), len(lams), n)
    return res.history.step, dist


def manifold_figure(mix: GaussianMixture, config: dict, rng: np.random.Generator):
    """Arrays and summary of figures 1 and 5 (distance curves and dead-head rates)."""
    from ._runner import FigureResult

    step, dist = manifold_runs(mix, config, rng)
    arrays, summary = {"step": step}, {}
    for i, lam in enumerate(config["inverse_temperatures"]):
        # the plotted band: 2.5%, 50% and 97.5% percentiles over the inits, (3, T)
        arrays[f"distance_lambda_{lam:g}"] = np.percentile(dist[:, i], [2.5, 50, 97.5], axis=1)
        final = dist[-1, i]
        summary[f"lambda_{lam:g}"] = {
            "final_distance_median": float(np.median(final)),
            "final_distance_max": float(final.max()),
            "within_0.05": rate_summary(final < 0.05),
            "dead_head": rate_summary(final > config["failure_distance"]),
        }
    return FigureResult(config, arrays, summary)


def plot_manifold_figure(result, out) -> None:
    """Median distance with its 95% percentile band per inverse temperature; dead-head rates."""
    fig, (ax,) = new_figure(width=4.8, height=3.6)
    step = result.arrays["step"]
    for i, lam in enumerate(result.config["inverse_temperatures"]):
        dead = result.summary[f"lambda_{lam:g}"]["dead_head"]
        lo, hi = dead["wilson_95"]
        p_lo, median, p_hi = result.arrays[f"distance_lambda_{lam:g}"]
        ax.plot(step, median, color=COLORS[i], lw=1.6,
                label=rf"$\lambda={lam:g}$: dead heads {dead['rate']:.1%} [{lo:.1%}, {hi:.1%}]")
        ax.fill_between(step, p_lo, p_hi, color=COLORS[i], alpha=0.22, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("PGD iteration")
    ax.set_ylabel("distance to centroids (matched max)")
    cfg = result.config
    ax.set_title(f"init on M, d={cfg['d']}, " + rf"$\sigma={cfg['sigma']:g}$, "
                 f"{cfg['n_inits']} inits per " + r"$\lambda$" + " (median, 95% band)",
                 fontsize=8)
    ax.legend(fontsize=7, title="dead-head rate, 95% Wilson interval", title_fontsize=7)
    save(fig, out)


# -- the descent stays in span(heads0, centroids): solve it in those coordinates -----------
def in_span(mixes: list[GaussianMixture], heads0: torch.Tensor):
    """Each run in the coordinates of an orthonormal basis ``B_r`` of
    ``span(heads0_r, centroids_r)`` (dimension ``m = K + k`` at most).

    Every gradient of the population risk and of the penalties lies in the span of the
    heads and the centroids (the projections ``P = mu X`` see the noise only through
    ``G = mu mu^T``), and so does each retraction: the descent never leaves that span.
    In coordinates ``mu B`` and ``mu* B`` the Gram matrix, the projections' law and every
    distance are those of ``R^d``, so the iterates are the same up to rounding (tested),
    at a cost that no longer grows with ``d``. Risk values differ by the constant
    ``(d - m) sigma^2`` of ``E||X||^2``.

    Returns the mixtures in ``R^m``, the heads ``(R, K, m)`` and the bases ``(R, d, m)``.
    """
    K, d = heads0.shape[1], heads0.shape[2]
    m = min(d, K + mixes[0].k)
    if m == d:
        return mixes, heads0, None
    stacked = np.concatenate([heads0.numpy(), np.stack([mix.centroids for mix in mixes])], 1)
    bases = np.linalg.qr(stacked.transpose(0, 2, 1))[0][..., :m]  # (R, d, m) orthonormal
    small = []
    for mix, b in zip(mixes, bases, strict=True):
        cents = mix.centroids @ b  # unit norm up to rounding: the centroids are in the span
        small.append(GaussianMixture(cents / np.linalg.norm(cents, axis=1, keepdims=True),
                                     sigma=mix.sigma, weights=mix.weights))
    return small, torch.from_numpy(heads0.numpy() @ bases), bases


def schedule_arguments(spec: dict, lam: float, n_steps: int) -> dict:
    """``penalty``, ``rho`` and ``inverse_temperature`` of :func:`~attnclust.pgd` for a
    figure's variant ``spec`` (``penalty``, ``rho``, ``decay``, ``anneal``): with
    ``decay``, ``rho`` decays linearly to 0 over the first half of the ``n_steps``; with
    ``anneal``, ``lambda`` rises geometrically from ``lambda / 100`` over the first half."""
    return {"penalty": spec["penalty"],
            "rho": Decay(spec["rho"], steps=n_steps / 2) if spec["decay"] else spec["rho"],
            "inverse_temperature": (Anneal(lam, ratio=100.0, steps=n_steps / 2)
                                    if spec["anneal"] else lam)}

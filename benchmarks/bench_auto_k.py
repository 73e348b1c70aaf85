"""Choosing K, and starting without a seed: ``n_clusters="auto"`` against the usual recipes.

``real-like``: families generated like the public benchmark sets (unequal feature
scales, elongated clusters, touching clusters, 10-20% uniform noise, unbalanced sizes,
2-D shape sets of 8-15 clusters, SIPU G2 pairs in d = 2-64, two clusters of rows at a
Gaussian-distributed distance from their centres (``bench_collapse.radial_pair``, 2,000
rows, d = 2-32, centres 1.5-3 spreads apart), and all of these mixed),
``SEEDS`` draws each, and scikit-learn's iris, wine, breast cancer and digits (its 10
leading principal components). With ``max_clusters = max(10, 2K)`` for every method:
exact-K hits and mean ARI (noise rows not scored) of ``AttentionClustering(
n_clusters="auto")`` (the default, which also chooses the shape; and with
``covariance_type="spherical"`` and ``"full"``), the
path's widest plateau (the rule before this criterion, :mod:`attnclust.cluster.choice.path_choice`,
then the default fit at that K), BIC over ``GaussianMixture`` (full and spherical, K =
1..max), the best silhouette of ``KMeans(n_init=10)`` (K = 2..max), ``HDBSCAN()`` (its
noise one more label), the gap statistic (``KMeans(n_init=3)``, 10 uniform references
in the principal box, Tibshirani's one-standard-error rule) and
``BayesianGaussianMixture`` (full, ``max`` components, K = the components that hold a
row); the time of the auto fit over the BIC-full sweep.
``one cluster``: how often each method finds K >= 2 in one Gaussian (2-D, 5-D), a
uniform square and an elongated Gaussian (5:1), 500 rows, ``ONE_SEEDS`` each.
``--quick``: one seed per family, 3 per one-cluster kind, 6 mixtures per ``d``, and only
the peers of ``QUICK_PEERS`` (the silhouette, gap and BayesianGMM sweeps take minutes).

``dev battery``: the public development battery (``bench_peers.py``: ``.npz`` sets in
``$ATTNCLUST_DEV_DATA`` or ``../shared/datasets/dev``), its sets with 2 to 12 clusters,
``DEV_SEEDS`` seeds each (one with ``--quick``, on ``bench_peers.QUICK``), with
``max_clusters = max(10, 2K)``: ``n_clusters="auto"`` against BIC over
``GaussianMixture(full)`` (``d <= 64``), the best silhouette of ``KMeans(n_init=3)`` and
``HDBSCAN()`` (its defaults; the rows it calls noise are one more label in the ARI, and
not a cluster in its K); per group of sets (2-D and 3-D artificial, real-world) and
overall, mean ARI (noise rows of the labels not scored), exact K and the answers K = 1;
the time of each over the BIC sweep's (sums). The battery's one-cluster set (golfball)
and the one-cluster kinds above plus a ring: how often each answers K = 1.

``auto K``: mixtures of 2-10 isotropic blobs of unequal spread (0.6-1.4 times a unit
sigma; 100-300 rows each), centres drawn in a box and at least 5 sigma apart, in d = 2,
5 and 20. On each, how often the chosen K is the true one for
``AttentionClustering(n_clusters="auto")`` (max_clusters 12), BIC over
``GaussianMixture(covariance_type="spherical")`` for K = 1..12, and the silhouette of
``KMeans(n_init=10)`` over K = 2..12; and the time of the auto fit over that of the BIC
sweep (sums over all mixtures, one run each, one thread each; the machine's load is in
both).

``anneal init``: on the development battery (``bench_battery.py``'s sets, true K),
``AttentionClustering(init="anneal")`` and the default ``init="kmeans++"`` (spherical
heads, whose fit is k-means's; ``random_state=0``) against ``KMeans(n_init=10)``: the
k-means objective (sum of
squared distances to the nearest centre, of our centres over KMeans's), the adjusted
Rand index of each, and the time of the anneal fit over the default's (one fit each, one
thread; the path is the cost).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import HDBSCAN, KMeans
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score, silhouette_score
from sklearn.mixture import BayesianGaussianMixture, GaussianMixture
from threadpoolctl import threadpool_limits

import attnclust as ac
from attnclust._threads import torch_threads
from attnclust.cluster.choice.path_choice import choose_from_path

sys.path.insert(0, str(Path(__file__).parent))
from bench_battery import _fit, datasets  # noqa: E402
from bench_collapse import radial_pair  # noqa: E402
from bench_peers import GMM_MAX_D, data_folder  # noqa: E402
from bench_peers import datasets as dev_datasets  # noqa: E402

SEEDS = range(4)
ONE_SEEDS = range(25)


def mixture(k: int, d: int, rng: np.random.Generator, sep: float = 5.0):
    """``k`` blobs at least ``sep`` apart, spreads 0.6-1.4, 100-300 rows each."""
    side = sep * max(2.0, 2.0 * k ** (1.0 / d))
    centres: list[np.ndarray] = []
    while len(centres) < k:
        c = rng.uniform(0.0, side, d)
        if all(np.linalg.norm(c - o) >= sep for o in centres):
            centres.append(c)
    spreads, sizes = rng.uniform(0.6, 1.4, k), rng.integers(100, 301, k)
    X = np.concatenate([c + s * rng.standard_normal((m, d))
                        for c, s, m in zip(centres, spreads, sizes, strict=True)])
    return X, np.repeat(np.arange(k), sizes)


def _bic_k(X) -> int:
    return 1 + int(np.argmin([GaussianMixture(k, covariance_type="spherical", random_state=0)
                              .fit(X).bic(X) for k in range(1, 13)]))


def _silhouette_k(X) -> int:
    scores = [silhouette_score(X, KMeans(k, n_init=10, random_state=0).fit_predict(X))
              for k in range(2, 13)]
    return 2 + int(np.argmax(scores))


def auto_k_rows(quick: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    per_d = 6 if quick else 30
    rows = []
    for d in (2, 5, 20):
        right = {"auto": 0, "BIC": 0, "BIC full": 0, "silhouette": 0}
        t_auto = t_bic = t_full = 0.0
        for _ in range(per_d):
            k = int(rng.integers(2, 11))
            X, _ = mixture(k, d, rng)
            est, t = _fit(lambda X: ac.AttentionClustering("auto", max_clusters=12,
                                                             random_state=0).fit(X), X)
            t_auto += t
            bic, t = _fit(_bic_k, X)
            t_bic += t
            right["auto"] += est.n_clusters_ == k
            right["BIC"] += bic == k
            (full, _), t = _fit(lambda X: _bic(X, 12, "full"), X)
            t_full += t
            right["BIC full"] += full == k
            right["silhouette"] += _silhouette_k(X) == k
        rows.append({"d": d, "mixtures": per_d, **{f"{m} right": f"{c}/{per_d}"
                                                   for m, c in right.items()},
                     "time auto / BIC": round(t_auto / t_bic, 2),
                     "time auto / BIC full": round(t_auto / t_full, 2)})
    return rows


def anneal_rows(quick: bool) -> list[dict]:
    rows = []
    for name, X, y in datasets(quick):
        X = np.asarray(X, dtype=np.float64)
        keep = y >= 0                   # background noise: clustered, not scored
        k = len(np.unique(y[keep]))
        km = KMeans(k, n_init=10, random_state=0).fit(X)
        row, seconds = {"data": name, "K": k}, {}
        for label, init in (("anneal", "anneal"), ("k-means++", "kmeans++")):
            ours, seconds[label] = _fit(
                lambda X, k=k, init=init: ac.AttentionClustering(
                    k, init=init, covariance_type="spherical", random_state=0).fit(X),
                X)
            inertia = ((X[:, None, :] - ours.cluster_centers_[None]) ** 2).sum(-1).min(1).sum()
            row[f"objective {label} / KMeans(10)"] = round(float(inertia / km.inertia_), 4)
            row[f"ARI {label}"] = round(adjusted_rand_score(y[keep], ours.labels_[keep]), 3)
        rows.append({**row, "ARI KMeans(10)": round(
            adjusted_rand_score(y[keep], km.labels_[keep]), 3),
            "time anneal / k-means++": round(seconds["anneal"] / seconds["k-means++"], 2)})
    return rows


# -- the real-like battery --------------------------------------------------------------
def _rotation(d, rng):
    return np.linalg.qr(rng.standard_normal((d, d)))[0]


def _gaussians(k, d, rng, sizes, sep, longest=1.0):
    """``k`` Gaussian clusters whose axes' standard deviations lie in ``[1/longest, 1]``
    (randomly rotated), centres at least ``sep`` apart in a box that holds them."""
    side, centres, tries = sep * max(2.0, 2.0 * k ** (1.0 / d)), [], 0
    while len(centres) < k:
        c, tries = rng.uniform(0, side, d), tries + 1
        if all(np.linalg.norm(c - o) >= sep for o in centres):
            centres.append(c)
        if tries > 20_000:
            side, tries = side * 1.2, 0
    parts = []
    for c, m in zip(centres, sizes, strict=True):
        axes = np.exp(rng.uniform(-np.log(longest), 0, d)) if longest > 1 else np.ones(d)
        axes[0] = 1.0
        R = _rotation(d, rng)
        parts.append(c + (rng.standard_normal((m, d)) * axes) @ R.T)
    return np.concatenate(parts), np.repeat(np.arange(k), sizes)


def _noise(X, y, fraction, rng):
    m = int(round(fraction * len(X)))
    lo, hi = X.min(0), X.max(0)
    N = rng.uniform(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), (m, X.shape[1]))
    return np.r_[X, N], np.r_[y, -np.ones(m, dtype=int)]


FAMILIES = ("scales", "elongated", "touching", "noise", "unbalanced", "shapes 2-D", "G2",
            "cores and tails", "mixed")


def family(name: str, seed: int):
    """One set ``(X, y)`` of a family (``y = -1``: background noise)."""
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    k, d = int(rng.integers(3, 7)), int(rng.integers(2, 6))
    if name == "scales":
        d = int(rng.integers(4, 9))
        X, y = _gaussians(k, d, rng, rng.integers(80, 250, k), rng.uniform(4, 7), 2.0)
        return X * 10 ** rng.uniform(-1, 3, d), y
    if name == "elongated":
        return _gaussians(k, d, rng, rng.integers(100, 300, k), rng.uniform(4, 7), 8.0)
    if name == "touching":
        k = int(rng.integers(3, 8))
        return _gaussians(k, d, rng, rng.integers(100, 300, k), rng.uniform(3, 4), 1.5)
    if name == "noise":
        X, y = _gaussians(k, d, rng, rng.integers(100, 300, k), rng.uniform(4.5, 7), 2.0)
        return _noise(X, y, rng.uniform(0.1, 0.2), rng)
    if name == "unbalanced":
        sizes = np.r_[rng.integers(600, 1000), rng.integers(40, 150, k - 1)]
        return _gaussians(k, d, rng, sizes, rng.uniform(4, 7), 2.0)
    if name == "shapes 2-D":
        k = int(rng.integers(8, 16))
        return _gaussians(k, 2, rng, rng.integers(100, 250, k), rng.uniform(3.5, 5), 3.0)
    if name == "G2":
        d, sd = int(rng.choice([2, 8, 16, 32, 64])), rng.uniform(15, 45)
        return (np.r_[rng.normal(500, sd, (1024, d)), rng.normal(600, sd, (1024, d))],
                np.repeat([0, 1], 1024))
    if name == "cores and tails":            # two clusters peaked at their centres
        return radial_pair(2000, int(rng.choice([2, 4, 8, 32])), rng.uniform(1.5, 3.0), rng)
    k, d = int(rng.integers(3, 6)), int(rng.integers(3, 7))            # "mixed"
    sizes = np.r_[rng.integers(300, 600), rng.integers(60, 300, k - 1)]
    X, y = _gaussians(k, d, rng, sizes, rng.uniform(5, 7), 3.0)
    X, y = _noise(X, y, 0.1, rng)
    return X * 10 ** rng.uniform(0, 2, d), y


def real_like(quick: bool = False):
    """``(family, name, X, y)`` of the battery."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine

    seeds = range(1) if quick else SEEDS
    out = [(f, f"{f} {s}", *family(f, s)) for f in FAMILIES for s in seeds]
    digits, labels = load_digits(return_X_y=True)
    out += [("real", n, *loader(return_X_y=True)) for n, loader in (
        ("iris", load_iris), ("wine", load_wine), ("breast cancer", load_breast_cancer))]
    return out + [("real", "digits (10 PCs)", PCA(10, random_state=0).fit_transform(digits),
                   labels)]


def one_cluster(kind: str, seed: int, n: int = 500) -> np.ndarray:
    rng = np.random.default_rng([seed, 77, len(kind)])
    if kind == "Gaussian 2-D":
        return rng.standard_normal((n, 2))
    if kind == "Gaussian 5-D":
        return rng.standard_normal((n, 5))
    if kind == "uniform square":
        return rng.uniform(0, 1, (n, 2))
    return rng.standard_normal((n, 2)) * [5.0, 1.0] @ _rotation(2, rng)      # elongated


ONE = ("Gaussian 2-D", "Gaussian 5-D", "uniform square", "elongated Gaussian")


def _bic(X, top, cov):
    fits = [GaussianMixture(k, covariance_type=cov, random_state=0).fit(X)
            for k in range(1, top + 1)]
    best = fits[int(np.argmin([g.bic(X) for g in fits]))]
    return best.n_components, best.predict(X)


def _silhouette(X, top):
    runs = [KMeans(k, n_init=10, random_state=0).fit_predict(X) for k in range(2, top + 1)]
    scores = [silhouette_score(X, r, sample_size=min(len(X), 3000), random_state=0)
              for r in runs]
    return 2 + int(np.argmax(scores)), runs[int(np.argmax(scores))]


def _gap(X, top, B=10):
    rng = np.random.default_rng(0)
    Xc = X - X.mean(0)
    P = Xc @ np.linalg.svd(Xc, full_matrices=False)[2].T
    refs = [rng.uniform(P.min(0), P.max(0), P.shape) for _ in range(B)]
    gaps, sds, labels = [], [], {}
    for k in range(1, top + 1):
        km = KMeans(k, n_init=3, random_state=0).fit(P)
        labels[k] = km.labels_
        ref = np.log([KMeans(k, n_init=3, random_state=0).fit(R).inertia_ for R in refs])
        gaps.append(ref.mean() - np.log(km.inertia_))
        sds.append(ref.std() * np.sqrt(1 + 1 / B))
        if k >= 2 and gaps[-2] >= gaps[-1] - sds[-1]:
            return k - 1, labels[k - 1]
    return top, labels[top]


def _bgmm(X, top):
    labels = BayesianGaussianMixture(n_components=top, covariance_type="full", max_iter=500,
                                     random_state=0).fit(X).predict(X)
    return len(np.unique(labels)), labels


def _path_rule(X, top):
    K = choose_from_path(X, top, geometry="euclidean", random_state=0)[0].n_clusters
    return K, (np.zeros(len(X), int) if K == 1 else
               ac.AttentionClustering(K, random_state=0).fit(X).labels_)


def _auto(cov):
    def fit(X, top):
        est = ac.AttentionClustering("auto", covariance_type=cov, max_clusters=top,
                                     random_state=0).fit(X)
        return est.n_clusters_, est.labels_
    return fit


def _hdbscan(X, top):
    labels = HDBSCAN().fit_predict(X)
    return len(np.unique(labels[labels >= 0])), labels


QUICK_PEERS = ("auto", "auto, spherical", "auto, full", "BIC full",  # --quick: the fast ones
               "BIC spherical", "HDBSCAN")
PEERS = {"auto": _auto("auto"), "auto, spherical": _auto("spherical"),
         "auto, full": _auto("full"), "path rule": _path_rule,
         "BIC full": lambda X, top: _bic(X, top, "full"),
         "BIC spherical": lambda X, top: _bic(X, top, "spherical"),
         "silhouette": _silhouette, "gap": _gap, "BayesianGMM": _bgmm, "HDBSCAN": _hdbscan}


def _peers(quick: bool) -> dict:
    return {m: f for m, f in PEERS.items() if not quick or m in QUICK_PEERS}


def real_like_rows(quick: bool) -> list[dict]:
    """Exact-K hits, mean ARI and K = 1 answers per family; the time of each method over
    the BIC-full sweep (sums over the sets)."""
    per: dict[str, dict[str, list]] = {}
    peers = _peers(quick)
    seconds = dict.fromkeys(peers, 0.0)
    for fam, _, X, y in real_like(quick):
        keep = y >= 0
        K = len(np.unique(y[keep]))
        top = max(10, 2 * K)
        for method, fit in peers.items():
            (k, labels), t = _fit(lambda X, fit=fit, top=top: fit(X, top), X)
            seconds[method] += t
            ari = adjusted_rand_score(y[keep], labels[keep])
            per.setdefault(fam, {}).setdefault(method, []).append((k == K, ari, k == 1))
    rows = []
    for fam in [*per, "all"]:
        cells = [c for f in per for c in per[f]] if fam == "all" else None
        row = {"family": fam}
        for method in peers:
            got = ([r for f in per for r in per[f][method]] if cells is not None
                   else per[fam][method])
            hits, ari, ones = (np.array(v) for v in zip(*got, strict=True))
            row[method] = f"{int(hits.sum())}/{len(hits)} {ari.mean():.2f}" + (
                f" K=1:{int(ones.sum())}" if ones.any() else "")
        rows.append(row)
    rows.append({"family": "time / BIC full", **{m: f"{t / seconds['BIC full']:.2f}"
                                                 for m, t in seconds.items()}})
    return rows


def one_cluster_rows(quick: bool) -> list[dict]:
    """Share of one-cluster sets where each method answers K >= 2 (false positives)."""
    seeds = range(3) if quick else ONE_SEEDS
    rows = []
    for kind in ONE:
        found = dict.fromkeys(_peers(quick), 0)
        for s in seeds:
            X = one_cluster(kind, s)
            for method, fit in _peers(quick).items():
                found[method] += fit(X, 10)[0] >= 2
        rows.append({"one cluster": kind, **{m: f"{c}/{len(seeds)}" for m, c in found.items()}})
    return rows


DEV_SEEDS = range(5)
DEV_PEERS = ("auto", "BIC full", "silhouette", "HDBSCAN")


def _silhouette3(X, top):
    """The best silhouette of ``KMeans(n_init=3)`` over ``K = 2..top``."""
    runs = [KMeans(k, n_init=3, random_state=0).fit_predict(X) for k in range(2, top + 1)]
    scores = [silhouette_score(X, r, sample_size=min(len(X), 3000), random_state=0)
              for r in runs]
    return 2 + int(np.argmax(scores)), runs[int(np.argmax(scores))]


def _dev_methods(seed: int, d: int) -> dict:
    def auto(X, top):
        est = ac.AttentionClustering("auto", max_clusters=top, random_state=seed).fit(X)
        return est.n_clusters_, est.labels_
    methods = {"auto": auto, "silhouette": _silhouette3, "HDBSCAN": _hdbscan}
    if d <= GMM_MAX_D:
        methods["BIC full"] = lambda X, top: _bic(X, top, "full")
    return methods


def dev_rows(quick: bool) -> list[dict]:
    """The development battery (module docstring): per group and overall, per method,
    ``exact/sets mean-ARI K=1:count``; the times over the BIC sweep's; the one-cluster
    sets' share of K = 1 answers."""
    folder = data_folder()
    if folder is None:
        return [{"dev set": "not found: set ATTNCLUST_DEV_DATA (bench_peers.py)"}]
    per: dict[str, dict[str, list]] = {}
    seconds = dict.fromkeys(DEV_PEERS, 0.0)
    seeds = range(1) if quick else DEV_SEEDS
    for _, group, X, y in dev_datasets(folder, quick):
        keep = y > 0
        K = len(np.unique(y[keep]))
        if K > 12:
            continue
        top = max(10, 2 * K)
        for seed in seeds:
            methods = _dev_methods(seed, X.shape[1])
            for method, fit in methods.items():
                (k, labels), t = _fit(lambda X, fit=fit, top=top: fit(X, top), X)
                if "BIC full" in methods:           # the times of the sets BIC runs on
                    seconds[method] += t
                ari = adjusted_rand_score(y[keep], labels[keep])
                for g in (group, "all"):
                    per.setdefault(g, {}).setdefault(method, []).append((k == K, ari, k == 1))
    rows = []
    for group, methods in sorted(per.items(), key=lambda item: item[0] == "all"):
        row = {"dev set": group}
        for method, got in methods.items():
            hits, ari, ones = (np.array(v) for v in zip(*got, strict=True))
            row[method] = f"{int(hits.sum())}/{len(hits)} {ari.mean():.3f} K=1:{int(ones.sum())}"
        rows.append(row)
    rows.append({"dev set": "time / BIC full (sets with d <= 64)",
                 **{m: f"{t / seconds['BIC full']:.2f}" for m, t in seconds.items()
                    if seconds["BIC full"] > 0}})
    return rows + _one_cluster_dev_rows(folder, seeds)


def _one_cluster_dev_rows(folder, seeds) -> list[dict]:
    """K = 1 answers on one cluster: the battery's one-cluster sets, the kinds of
    :func:`one_cluster` and a noisy ring."""
    sets = []
    index = json.loads((folder / "index.json").read_text())
    for name in index:
        with np.load(folder / f"{name}.npz") as f:
            X, y = f["X"].astype(np.float64), f["y"]
        if len(np.unique(y[y > 0])) == 1:
            sets.append((name, lambda seed, X=X: X))
    sets += [(kind, lambda seed, kind=kind: one_cluster(kind, seed)) for kind in ONE]
    sets.append(("ring", _ring))
    rows = []
    for name, make in sets:
        ones = dict.fromkeys(DEV_PEERS, 0)
        for seed in seeds:
            X = make(seed)
            for method, fit in _dev_methods(seed, X.shape[1]).items():
                ones[method] += _fit(lambda X, fit=fit: fit(X, 10), X)[0][0] == 1
        rows.append({"one cluster": name, **{m: f"K=1 {c}/{len(seeds)}"
                                             for m, c in ones.items()}})
    return rows


def _ring(seed: int, n: int = 500) -> np.ndarray:
    rng = np.random.default_rng([seed, 78])
    angle = rng.uniform(0, 2 * np.pi, n)
    return np.c_[np.cos(angle), np.sin(angle)] + rng.normal(0, 0.1, (n, 2))


def run(quick: bool = False) -> list[dict]:
    with threadpool_limits(1), torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (auto_k_rows(quick) + real_like_rows(quick) + one_cluster_rows(quick)
                + anneal_rows(quick) + dev_rows(quick))


if __name__ == "__main__":
    from attnclust._bench import format_table

    rows = run(quick="--quick" in sys.argv)
    for key in ("d", "family", "one cluster", "data", "dev set"):
        print(format_table([r for r in rows if key in r]))

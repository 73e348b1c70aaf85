"""The temperature path: where the heads split, against the derivation and independent
formulas; determinism; no clusters of a handful of rows."""

import matplotlib
import numpy as np
import pytest
import torch

import attnclust as ac
from attnclust.annealing import predicted_first_split, temperature_path

matplotlib.use("Agg")


def _two_blobs(n=600, sigma=0.3, d=2, rng=0):
    return ac.GaussianMixture.antipodal(d=d, sigma=sigma).sample(n, rng=rng)


def _blobs(k, n_each=150, sep=6.0, d=2, rng=0, outliers=0):
    gen = np.random.default_rng(rng)
    centres = sep * np.eye(max(k, d))[:k, :d] if k <= d else gen.uniform(0, 4 * sep, (k, d))
    X = np.concatenate([c + gen.standard_normal((n_each, d)) for c in centres])
    if outliers:
        X = np.concatenate([X, 40.0 * sep + gen.standard_normal((outliers, d))])
    return X


def test_one_cluster_below_the_critical_value_and_two_above():
    X = _two_blobs()
    lam_c = 1.0 / np.linalg.eigvalsh(np.cov(X.T, bias=True)).max()   # independent
    grid = lam_c * np.geomspace(0.7, 1.4, 36)
    path = temperature_path(X, max_clusters=2, inverse_temperatures=grid, max_iter=5000,
                            tol=1e-10)
    assert path.predicted_first_split == pytest.approx(lam_c, rel=1e-10)
    split = path.split_inverse_temperatures[0]
    assert lam_c <= split <= 1.05 * lam_c           # the derivation, to 5% (the figure's)
    assert np.all(path.n_clusters[path.inverse_temperatures < split] == 1)
    assert np.all(path.n_clusters[path.inverse_temperatures >= split] == 2)


def test_the_path_is_deterministic_and_does_not_depend_on_row_order():
    X = _blobs(3, d=3)
    a, b = temperature_path(X, max_clusters=5), temperature_path(X, max_clusters=5)
    np.testing.assert_array_equal(a.heads, b.heads)
    np.testing.assert_array_equal(a.n_clusters, b.n_clusters)
    perm = np.random.default_rng(1).permutation(len(X))
    c = temperature_path(X[perm], max_clusters=5)
    np.testing.assert_array_equal(a.n_clusters, c.n_clusters)
    np.testing.assert_allclose(a.heads, c.heads, atol=1e-8)


def test_more_heads_than_clusters_finds_the_clusters_without_outlier_clusters():
    X = _blobs(3, d=3, outliers=3)
    path = temperature_path(X, max_clusters=8)
    choice = path.choose_n_clusters()
    assert choice.n_clusters == 3, choice.reason
    assert np.all(choice.plateau.sizes >= 150)      # the 3 outliers are no cluster
    for plateau in path.plateaus:
        assert np.all(plateau.sizes >= path.min_cluster_size)


def test_one_gaussian_blob_is_one_cluster_and_clear_blobs_are_found():
    X = np.random.default_rng(0).standard_normal((400, 2))
    assert temperature_path(X, max_clusters=8).choose_n_clusters().n_clusters == 1
    X = _blobs(4, d=4, rng=2)
    assert temperature_path(X, max_clusters=8).choose_n_clusters().n_clusters == 4


def test_second_variation_of_the_risk_at_the_mean_is_negative_at_every_lambda():
    # R(+-eps v) - R(0) = -2 lambda eps^2 v^T C v + O(eps^4), with a dense formula
    X = _two_blobs(n=400, sigma=0.5)
    X = X - X.mean(0)
    C = X.T @ X / len(X)
    v = np.linalg.eigh(C)[1][:, -1]
    for lam in (0.05, 0.5, 5.0):
        eps = 1e-3 / np.sqrt(lam)
        heads = np.stack([eps * v, -eps * v])
        logits = lam * X @ heads.T - 0.5 * lam * (heads**2).sum(1)
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        change = ((X - a @ heads) ** 2).sum(1).mean() - (X**2).sum(1).mean()
        assert change == pytest.approx(-2 * lam * eps**2 * v @ C @ v, rel=1e-4)


def test_the_risk_path_has_no_merged_phase():
    X = _two_blobs(sigma=0.3)
    lam_c = predicted_first_split(X)
    path = temperature_path(X, max_clusters=2, objective="risk",
                            inverse_temperatures=[0.05 * lam_c])
    assert path.predicted_first_split == 0.0
    assert path.n_distinct[0] == 2 and path.n_clusters[0] == 2
    gap = np.linalg.norm(path.heads[0, 0] - path.heads[0, 1])
    assert gap > 2 * np.sqrt(np.trace(np.cov(X.T)))      # far outside the data


def test_sphere_split_agrees_with_its_derivation():
    mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    X = mix.sample(4000, rng=0)
    lam_c = predicted_first_split(X, geometry="sphere")
    # population value sqrt(2) / (1 + 2 sigma^2), up to sampling error
    assert lam_c == pytest.approx(np.sqrt(2) / (1 + 2 * 0.09), rel=0.05)
    path = temperature_path(X, max_clusters=2, geometry="sphere", max_iter=5000,
                            inverse_temperatures=lam_c * np.geomspace(0.7, 1.4, 36))
    assert lam_c <= path.split_inverse_temperatures[0] <= 1.05 * lam_c
    assert np.allclose(np.linalg.norm(path.heads, axis=2), 1.0)


def test_plot_and_summary():
    path = temperature_path(_two_blobs(), max_clusters=3)
    fig = path.plot()
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    summary = path.to_dict()
    assert summary["n_clusters"] == path.n_clusters.tolist()
    assert summary["plateaus"][0]["n_clusters"] == 1


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(X=[[0.0, np.nan], [1.0, 1.0]]), "NaN"),
    (dict(X=[[1.0, 2.0]]), "n >= 2"),
    (dict(X=[[1.0, 2.0], [1.0, 2.0]]), "no spread"),
    (dict(max_clusters=0), "max_clusters"),
    (dict(objective="loss"), "objective"),
    (dict(geometry="torus"), "geometry"),
    (dict(inverse_temperatures=[1.0, -1.0]), "positive"),
])
def test_bad_inputs_name_the_bad_value(kwargs, match):
    args = dict(X=_two_blobs(n=50), max_clusters=2) | kwargs
    with pytest.raises(ValueError, match=match):
        temperature_path(args.pop("X"), **args)


def test_heads_stay_in_the_dtype_independent_path():
    X = torch.as_tensor(_two_blobs(n=200), dtype=torch.float32)
    path = temperature_path(X, max_clusters=2)
    assert path.heads.dtype == np.float64 and path.n_clusters[-1] == 2

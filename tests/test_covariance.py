"""The covariance types as objects (``attnclust.cluster.mixture.covariance``): names resolve
once, the operations agree with scikit-learn's mixture, and no module but covariance.py compares
covariance names."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.mixture import GaussianMixture as SklearnGMM

import attnclust as ac
from _tolerance import eps
from attnclust.cluster.mixture.covariance import (
    COVARIANCE_TYPES,
    Covariance,
    Diag,
    Full,
    Spherical,
    as_covariance,
)
from attnclust.cluster.mixture.floor import covariance_floor

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnclust"


def test_names_resolve_to_objects_and_objects_pass_through():
    assert [as_covariance(name).name for name in COVARIANCE_TYPES] == list(COVARIANCE_TYPES)
    assert isinstance(as_covariance("spherical"), Spherical)
    assert isinstance(as_covariance("diag"), Diag) and isinstance(as_covariance("full"), Full)
    obj = Full()
    assert as_covariance(obj) is obj and Full() == as_covariance("full") != Diag()
    assert [as_covariance(n).shaped for n in COVARIANCE_TYPES] == [False, True, True]
    for bad in ("tied", None, 3):
        with pytest.raises(ValueError, match=f"covariance_type must be 'spherical', 'diag' or "
                                             f"'full', got {bad!r}"):
            as_covariance(bad)
    with pytest.raises(TypeError):
        Covariance()


@pytest.mark.parametrize("name", COVARIANCE_TYPES)
def test_free_parameters_are_scikit_learns(name):
    X = np.random.default_rng(0).standard_normal((40, 3))
    gmm = SklearnGMM(4, covariance_type=name, random_state=0).fit(X)
    assert as_covariance(name).n_parameters(4, 3) == gmm._n_parameters()


def _factor_rel(covariances: np.ndarray) -> float:
    """Relative difference (to the largest entry) allowed between two computations of the
    factors ``U`` (``U U^T = Sigma^{-1}``): Cholesky's backward error ``(d + 1) u |R^T| |R|``
    moves ``R`` by ``cond(Sigma) (d + 1) u`` of its size, inverting the triangle adds
    ``cond(R) d u``; two computations, twice (``eps = 2 u``). Per coordinate (spherical,
    diag) an inverse square root: ``d = 1``, ``cond = 1``."""
    if covariances.ndim < 3:
        return 3 * eps()
    d = covariances.shape[-1]
    return (2 * d + 1) * eps() * float(np.linalg.cond(covariances).max())


@pytest.mark.parametrize("name", COVARIANCE_TYPES)
def test_factors_shapes_and_log_joint_are_the_mixtures(name):
    """The factors of scikit-learn's fitted covariances are its ``precisions_cholesky_``,
    and the log-joint's log-sum-exp is its per-row log-likelihood."""
    X = np.random.default_rng(1).standard_normal((60, 3)) @ np.diag([1.0, 2.0, 0.5])
    gmm = SklearnGMM(2, covariance_type=name, random_state=0).fit(X)
    cov = as_covariance(name)
    factors = cov.factors(torch.as_tensor(gmm.covariances_))
    assert tuple(factors.shape) == cov.shape(2, 3) == gmm.precisions_cholesky_.shape
    # our Cholesky and triangular inverse (torch) against scikit-learn's (SciPy): the
    # entries near 0 of a full factor make the bound absolute, scaled to the largest entry
    rel = _factor_rel(gmm.covariances_)
    U, P = gmm.precisions_cholesky_, gmm.precisions_
    np.testing.assert_allclose(factors.numpy(), U, rtol=0, atol=rel * np.abs(U).max())
    np.testing.assert_allclose(cov.precisions(factors).numpy(), P, rtol=0,
                               atol=2 * rel * np.abs(P).max())       # a product of two factors
    joint = cov.log_joint(torch.as_tensor(X), torch.as_tensor(gmm.means_), factors,
                          torch.as_tensor(gmm.weights_).log(), 1.0)
    # per head, (1/2) ||(x - mu) U||^2 moves by rel (U's error, squared) and (d + 2) eps of
    # ||x - mu||^2 ||U||^2 (its evaluation); log det U by d rel; the log-sum-exp by K eps
    # of the value
    d = X.shape[1]
    U_norm = np.abs(U).reshape(2, -1).max(1) * (d if U.ndim == 3 else 1)   # >= ||U_h||_2
    sq = ((X[:, None] - gmm.means_[None]) ** 2).sum(-1) * U_norm**2              # (n, K)
    score = gmm.score_samples(X)
    tol = (rel + (d + 2) * eps()) * sq.max(1) + d * rel + 2 * eps() * np.abs(score)
    excess = np.abs(torch.logsumexp(joint, 1).numpy() - score) / tol
    assert excess.max() <= 1, excess.max()


def test_a_covariance_object_fits_like_its_name():
    X = ac.GaussianMixture.orthogonal(d=4, k=3, sigma=0.1).sample(300, rng=0)
    for name in ("diag", "full"):
        by_name = ac.AttentionClustering(3, covariance_type=name, random_state=0).fit(X)
        by_obj = ac.AttentionClustering(3, covariance_type=as_covariance(name),
                                        random_state=0).fit(X)
        # the name resolves to the same object: the same fit, bit for bit
        np.testing.assert_array_equal(by_obj.covariances_, by_name.covariances_)
        np.testing.assert_array_equal(by_obj.predict(X), by_name.predict(X))


# -- no module outside covariance.py compares covariance names --------------------------------
def covariance_comparisons(source: str, where: str) -> list[str]:
    """Comparisons of a covariance name (``"spherical"``, ``"diag"``, ``"full"``) or of
    something called ``covariance_type`` or ``cov`` in ``source``, and dictionaries keyed
    by covariance names, as ``where:line``."""
    found = []
    names = ("covariance_type", "cov")

    def is_covariance(node) -> bool:
        if isinstance(node, ast.Constant) and node.value in COVARIANCE_TYPES:
            return True
        if isinstance(node, ast.Name | ast.Attribute):
            return (node.id if isinstance(node, ast.Name) else node.attr) in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_covariance(e) for e in node.elts)
        return False
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(is_covariance(n) for n in
                                                 [node.left, *node.comparators]):
            found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.Dict) and any(is_covariance(k) for k in node.keys
                                                if k is not None):
            found.append(f"{where}:{node.lineno}")
    return sorted(found, key=lambda hit: int(hit.rsplit(":", 1)[1]))


def test_no_module_but_covariance_compares_covariance_names():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "covariance.py"
             for hit in covariance_comparisons(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert found == []


def test_the_covariance_comparison_check_can_fail():
    source = ('if covariance_type == "full":\n    pass\n'
              'x = self.covariance_type != "spherical"\n'
              'y = {"full": 1, "diag": 2}[cov]\n'
              'z = cov in ("diag", "full")\n'
              'w = init == "kmeans++"\n')
    assert covariance_comparisons(source, "m") == ["m:1", "m:3", "m:4", "m:5"]


def test_floor_follows_each_feature_down_to_its_own_scale():
    """The floor of a feature is ``reg_covar`` times its own variance however far below the
    others it is (down to 1e-10 of their mean), and a constant feature's comes from the
    others': the formula, evaluated independently."""
    v = torch.tensor([1e10, 1.0, 0.0], dtype=torch.float64)
    floor = covariance_floor(v, 1e-6)
    mean = float(v.mean())
    expected = torch.tensor([1e-6 * 1e10, 1e-6 * 1.0, 1e-6 * 1e-10 * mean], dtype=torch.float64)
    assert torch.equal(floor, expected)
    assert float(floor[1]) < 1e-3 * 1.0      # far below the small feature's own spread


def _random_mixture(cov, rng, K=4, d=3, n=200):
    """Rows, means, covariances (floor included) and a floor for ``cov``'s layout."""
    floor = rng.uniform(0.01, 0.2, d)
    A = rng.normal(size=(K, d, d))
    covs = {"spherical": rng.uniform(0.5, 3.0, K), "diag": rng.uniform(0.5, 3.0, (K, d)),
            "full": A @ A.transpose(0, 2, 1) + np.diag(floor)}[cov.name]
    return rng.normal(size=(n, d)), rng.normal(size=(K, d)), covs, floor


@pytest.mark.parametrize("cov", [Spherical(), Diag(), Full()], ids=lambda c: c.name)
def test_the_floor_ratio_is_one_formula_in_numpy_and_torch(cov):
    """The lean EM's floor test (NumPy) and the chunked EM's (torch) run the same method:
    the same result to eigvalsh's rounding."""
    _, _, covs, floor = _random_mixture(cov, np.random.default_rng(0))
    expected = cov.floor_ratio(torch.as_tensor(covs), torch.as_tensor(floor)).numpy()
    ours = cov.floor_ratio(covs, floor)
    assert isinstance(ours, np.ndarray)
    np.testing.assert_allclose(ours, expected, rtol=0,
                               atol=64 * eps() * float(np.abs(expected).max()) * len(floor))


@pytest.mark.parametrize("cov", [Spherical(), Diag(), Full()], ids=lambda c: c.name)
def test_the_m_step_update_is_one_formula_in_numpy_and_torch(cov):
    """Covariance.update on NumPy arrays (the lean EM) and on tensors (the chunked EM):
    element by element the same operations, so equal but for the spherical sum over the
    features (``d`` terms, any order); a dead head keeps its previous covariance."""
    rng = np.random.default_rng(1)
    X, _, previous, floor = _random_mixture(cov, rng)
    K, d = 4, X.shape[1]
    rw = rng.uniform(size=(K, X.shape[0]))
    rw[2] = 0.0                                                        # a dead head
    n = np.maximum(rw.sum(1), 1e-300)
    shift = (rw @ X) / n[:, None]
    second = cov.second_moments(rw, X, cov.row_moments(X, K))
    alive = rw.sum(1) > 0
    ours = cov.update(second, n, shift, floor, alive, previous)
    theirs = cov.update(*(torch.as_tensor(a) for a in (second, n, shift, floor, alive,
                                                        previous))).numpy()
    assert isinstance(ours, np.ndarray) and ours.shape == previous.shape
    np.testing.assert_allclose(ours, theirs, rtol=4 * d * eps(), atol=0)
    np.testing.assert_array_equal(ours[2], previous[2])
    # and it is the weighted covariance about the head's mean, plus the floor
    diff = X - shift[0]
    emp = (rw[0][:, None, None] * diff[:, :, None] * diff[:, None, :]).sum(0) / n[0]
    want = {"spherical": np.trace(emp) / d + floor.mean(), "diag": np.diag(emp) + floor,
            "full": emp + np.diag(floor)}[cov.name]
    np.testing.assert_allclose(ours[0], want, rtol=1e-10 * X.shape[0], atol=0)


@pytest.mark.parametrize("cov", [Spherical(), Diag(), Full()], ids=lambda c: c.name)
@pytest.mark.parametrize("keep_moments", [True, False])
def test_whole_rows_log_joint_is_the_layers(cov, keep_moments):
    """The lean EM's log-joint (quadratic forms from the rows' second moments) against the
    layer's (Covariance.log_joint on differences, torch): the cancellation of ``x^T P x -
    2 mu^T P x + mu^T P mu`` bounds the gap by about ``(d + 2) eps (|x| + |mu|)^2 |P|``."""
    from attnclust.cluster.mixture.em import log_joint

    rng = np.random.default_rng(2)
    X, means, covs, floor = _random_mixture(cov, rng)
    K, d = means.shape
    log_w = np.log(rng.dirichlet(np.ones(K)))
    moments = cov.row_moments(X, K if keep_moments else 1)
    ours = log_joint(X, means, covs, log_w, cov, floor, moments)
    factors = cov.factors(torch.as_tensor(covs))
    theirs = cov.log_joint(torch.as_tensor(X), torch.as_tensor(means), factors,
                           torch.as_tensor(log_w), 1.0, torch.as_tensor(floor)).numpy().T
    big = float(np.abs(X).max() + np.abs(means).max()) ** 2 * d
    P = float(np.abs(cov.precisions(factors.numpy())).max())
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=64 * (d + 2) * eps() * big * P)

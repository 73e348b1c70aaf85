"""Tests of :mod:`attnclust.layer.geometry`: each geometry's layer, steps and warm-start rules
against independent formulas, the resolver, and the rule that no module outside the
geometry module compares geometry names."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import assert_same_labels, eps, sum_tol
from attnclust.cluster.plan import resolve
from attnclust.layer.geometry import GEOMETRIES, Euclidean, Geometry, Sphere, as_geometry

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnclust"


def _logit_tol(X, heads, lam):
    """Two computations of the logits ``-lambda ||x - mu||^2 / 2`` (up to a row's own
    term): the expanded form is within ``(d + 2) eps (|x| + |mu|)^2`` (Higham (3.5)),
    times ``lambda``; the softmax's weights move by at most as much."""
    s = float(X.norm(dim=-1).max() + heads.norm(dim=-1).max())
    return lam * (X.shape[-1] + 2) * eps() * s * s


def _rows(n=40, d=5, k=3, seed=0):
    gen = np.random.default_rng(seed)
    return (torch.as_tensor(gen.standard_normal((n, d))),
            torch.as_tensor(gen.standard_normal((k, d))))


# -- the resolver ---------------------------------------------------------------------------
def test_as_geometry_resolves_names_and_passes_objects_through():
    assert GEOMETRIES == ("sphere", "euclidean")
    assert isinstance(as_geometry("sphere"), Sphere)
    assert isinstance(as_geometry("euclidean"), Euclidean)
    obj = Euclidean()
    assert as_geometry(obj) is obj
    assert [as_geometry(name).name for name in GEOMETRIES] == list(GEOMETRIES)
    assert Sphere() == as_geometry("sphere") != Euclidean()
    assert len({Sphere(), Sphere(), Euclidean()}) == 2


@pytest.mark.parametrize("bad", ["Sphere", "torus", None, 3, ""])
def test_as_geometry_names_the_bad_value(bad):
    with pytest.raises(ValueError, match=f"geometry must be 'sphere' or 'euclidean', got "
                                         f"{bad!r}"):
        as_geometry(bad)


# -- the layer ------------------------------------------------------------------------------
def test_euclidean_attention_is_the_softmax_of_minus_half_squared_distances():
    X, heads = _rows()
    lam = 1.3
    ref = torch.softmax(-lam * torch.cdist(X, heads) ** 2 / 2, dim=1)   # no key bias used
    got = torch.softmax(Euclidean().logits(X, heads, lam), dim=1)
    tol = _logit_tol(X, heads, lam)       # the key bias against cdist's own expansion
    torch.testing.assert_close(got, ref, rtol=0, atol=tol)
    # the logits are those of the distances up to the row's own ||x||^2 term
    full = -lam * torch.cdist(X, heads) ** 2 / 2 + lam * (X * X).sum(1, keepdim=True) / 2
    torch.testing.assert_close(Euclidean().logits(X, heads, lam), full, rtol=0, atol=2 * tol)


def test_sphere_logits_have_no_bias_and_coincide_with_euclidean_for_unit_heads():
    X, heads = _rows()
    unit = ac.normalize(heads)
    torch.testing.assert_close(Sphere().logits(X, heads, 2.0), 2.0 * X @ heads.T)
    assert Sphere().key_bias(heads, 2.0) is None
    same = torch.softmax(Euclidean().logits(X, unit, 2.0), 1)
    # the key bias -||mu||^2 / 2 of unit heads is -1/2 to (d + 2) eps: logits apart by
    # 2 lambda that, and the inner products in another order
    tol = 2.0 * (X.shape[1] + 2) * eps() * (1 + float(X.norm(dim=1).max()))
    torch.testing.assert_close(torch.softmax(Sphere().logits(X, unit, 2.0), 1), same,
                               rtol=0, atol=2 * tol)


def test_head_logits_and_the_layer_use_the_geometry():
    X, heads = _rows()
    for name in GEOMETRIES:
        torch.testing.assert_close(ac.layer.heads.head_logits(X, heads, 0.7, name),
                                   as_geometry(name).logits(X, heads, 0.7), rtol=0, atol=0)
        layer = ac.AttentionHeads(heads, inverse_temperature=0.7, geometry=as_geometry(name))
        assert layer.geometry == name
        torch.testing.assert_close(layer.heads.detach(), as_geometry(name).projx(heads))


def test_precise_logits_keep_the_attention():
    X, heads = _rows()
    X, heads = X + 1e3, heads + 1e3                    # far from the origin
    for geometry in (Sphere(), Euclidean()):
        torch.testing.assert_close(torch.softmax(geometry.precise_logits(X, heads, 0.5), 1),
                                   torch.softmax(geometry.logits(X, heads, 0.5), 1),
                                   rtol=0, atol=_logit_tol(X, heads, 0.5))  # the plain ones'


def test_precise_logits_resolve_near_heads_beside_a_far_one():
    """Rows near 0, two heads near them and one at 1e9: the expanded form's terms are
    about 1e17 there, whose rounding (16) is the size of the near heads' difference."""
    gen = np.random.default_rng(0)
    x = torch.as_tensor(gen.normal(size=(200, 2)))
    heads = torch.tensor([[0.0, 0.1], [1.0, 1.2], [1e9, 0.0]], dtype=torch.float64)
    nearest = torch.cdist(x, heads).argmin(1)
    logits = Euclidean().precise_logits(x, heads, 1e-10)
    # off rows within rounding of a tie of the near heads (the far one is never nearest)
    assert_same_labels(logits.argmax(1).numpy(), nearest.numpy(), x.numpy(), heads.numpy())
    dist2 = torch.cdist(x, heads, compute_mode="donot_use_mm_for_euclid_dist").square()
    for lam in (1e-10, 1e-3, 1.0):            # the attention of exact distances
        # the far head's weight underflows; the near heads' logits round as the
        # differences' squares do (d + 2 roundings of (|x| + |mu|)^2)
        torch.testing.assert_close(torch.softmax(Euclidean().precise_logits(x, heads, lam), 1),
                                   torch.softmax(-0.5 * lam * dist2, 1), rtol=0,
                                   atol=_logit_tol(x, heads[:2], lam) + 3 * eps())
    centred = Euclidean().logits(x - heads.mean(0), heads - heads.mean(0), 1e-10)
    assert (centred.argmax(1) != nearest).any()       # the claim can fail: any one frame


# -- the manifold ---------------------------------------------------------------------------
def test_sphere_operations_are_those_of_the_unit_sphere():
    _, heads = _rows(seed=1)
    mu, g = ac.normalize(heads), torch.as_tensor(np.random.default_rng(2).standard_normal((3, 5)))
    sphere = Sphere()
    rg = sphere.egrad2rgrad(mu, g)
    # <g - <g, mu> mu, mu> = 0 up to inner products of length d of terms |g| (absolute)
    tol = 2 * (mu.shape[1] + 2) * eps() * float(g.norm(dim=1).max())
    torch.testing.assert_close((rg * mu).sum(1), torch.zeros(3, dtype=mu.dtype), atol=tol,
                               rtol=0)
    torch.testing.assert_close(g - rg, (g * mu).sum(1, keepdim=True) * mu)  # radial part
    torch.testing.assert_close(sphere.proju(mu, g), rg)
    torch.testing.assert_close(sphere.retr(mu, 0.3 * rg).norm(dim=1), torch.ones(3,
                               dtype=mu.dtype), atol=(mu.shape[1] + 2) * eps(), rtol=0)
    torch.testing.assert_close(sphere.projx(heads).norm(dim=1), torch.ones(3, dtype=mu.dtype))


def test_sphere_gradient_is_the_derivative_along_great_circles():
    """<egrad2rgrad, u> = d/dt f(cos t mu + sin t u) at 0, for a unit tangent u."""
    gen = np.random.default_rng(3)
    mu = ac.normalize(torch.as_tensor(gen.standard_normal(6)))
    a = torch.as_tensor(gen.standard_normal(6))
    u = ac.normalize(ac.tangent(mu, torch.as_tensor(gen.standard_normal(6))))
    x = mu.clone().requires_grad_(True)
    (torch.dot(a, x) ** 3).backward()
    rg = Sphere().egrad2rgrad(mu[None], x.grad[None])[0]
    h = 1e-6
    fd = (float(torch.dot(a, np.cos(h) * mu + np.sin(h) * u) ** 3)
          - float(torch.dot(a, np.cos(-h) * mu + np.sin(-h) * u) ** 3)) / (2 * h)
    # the quotient's rounding: eps |f| / h (f = <a, x>^3, |f| <= |a|^3)
    assert float(torch.dot(rg, u)) == pytest.approx(fd, rel=1e-7,
                                                    abs=4 * eps() * float(a.norm()) ** 3 / h)


def test_euclidean_operations_are_the_identity_and_the_sum():
    _, heads = _rows()
    g = heads.flip(0)
    euc = Euclidean()
    for out, ref in ((euc.projx(heads), heads), (euc.proju(heads, g), g),
                     (euc.egrad2rgrad(heads, g), g), (euc.retr(heads, g), heads + g)):
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


# -- the estimator's steps --------------------------------------------------------------------
@pytest.mark.parametrize("geometry", [Sphere(), Euclidean()])
def test_lloyd_step_is_the_cell_mean_or_its_direction(geometry):
    gen = np.random.default_rng(4)
    X = torch.as_tensor(gen.standard_normal((60, 3)))
    heads = geometry.projx(X[:3].clone())
    labels = geometry.logits(X, heads, 1.0).argmax(1)
    sums = torch.zeros_like(heads).index_add_(0, labels, X)
    counts = torch.bincount(labels, minlength=3).double()
    new = geometry.lloyd_step(sums, counts, heads)
    for h in range(3):
        mean = X[labels == h].mean(0)
        ref = mean / mean.norm() if geometry.unit_heads else mean
        # index_add in row order against torch's mean: n_h roundings of terms |x| (a mean
        # may be near 0: absolute), over |mean| once normalized
        tol = sum_tol(int((labels == h).sum()) + 2) * float(X.abs().max()) * 2
        if geometry.unit_heads:
            tol /= float(mean.norm())
        torch.testing.assert_close(new[h], ref, rtol=0, atol=tol)
    # an empty cell keeps its head
    counts[1], sums[1] = 0, 0
    torch.testing.assert_close(geometry.lloyd_step(sums, counts, heads)[1], heads[1])


def test_euclidean_fixed_point_step_is_a_scaled_gradient_step():
    _, heads = _rows()
    grad = heads.flip(0)
    counts = torch.tensor([0.5, 0.0, 0.25], dtype=heads.dtype)
    new = Euclidean().fixed_point_step(heads, grad, counts, None, 0.5)
    torch.testing.assert_close(new[0], heads[0] - 0.5 * grad[0] / 1.0)
    torch.testing.assert_close(new[1], heads[1])       # no attention: stays
    torch.testing.assert_close(new[2], heads[2] - 0.5 * grad[2] / 0.5)


def test_sphere_fixed_point_step_keeps_the_heads_on_the_sphere_and_fixes_critical_points():
    _, heads = _rows()
    mu = ac.normalize(heads)
    counts = torch.tensor([0.2, 0.3, 0.5], dtype=mu.dtype)
    radial = torch.tensor([1.0, -2.0, 0.5], dtype=mu.dtype)
    # a radial gradient of the key part (value part 0) is dropped: no step at all
    grad = radial[:, None] * mu
    zero = torch.zeros(3, dtype=mu.dtype)
    torch.testing.assert_close(Sphere().fixed_point_step(mu, grad, counts, zero, 1.0), mu)
    # a radial value part is kept: mu_h (1 - r_h / (2 N_h)), normalized (the sign of 1 - ...)
    sign = torch.sign(1 - radial / (2 * counts))[:, None]
    torch.testing.assert_close(Sphere().fixed_point_step(mu, grad, counts, radial, 1.0),
                               sign * mu)
    step = Sphere().fixed_point_step(mu, heads.flip(0), counts, radial, 0.7)
    torch.testing.assert_close(step.norm(dim=1), torch.ones(3, dtype=mu.dtype))


@pytest.mark.parametrize("geometry", [Sphere(), Euclidean()])
def test_nearest_boundary_normal_is_orthogonal_to_the_boundary(geometry):
    """The normal ``mu_c - g mu_h`` of the nearest boundary: the logits of heads h and c
    differ by a constant times it, and its squared norm is the one returned."""
    gen = np.random.default_rng(6)
    heads = geometry.projx(torch.as_tensor(gen.standard_normal((4, 5))))
    c, g, norm2 = geometry.nearest_boundary(heads @ heads.T)
    dist = torch.cdist(heads, heads) + torch.diag(torch.full((4,), float("inf"),
                                                             dtype=heads.dtype))
    # nearest, as a chord, up to the gram's rounding of squared distances (a tie's either)
    size = 2 * float(heads.norm(dim=1).max())
    d2 = dist.square().numpy()
    rows = np.arange(4)
    assert (d2[rows, c.numpy()] - d2.min(1) <= 2 * (5 + 2) * eps() * size**2).all()
    for h in range(4):
        normal = heads[c[h]] - g[h] * heads[h]
        # ||mu_c||^2 - 2 g <mu_c, mu_h> + g^2 ||mu_h||^2 from the gram: d + 2 roundings
        # of terms (|mu_c| + |g| |mu_h|)^2 (absolute: it cancels)
        terms = float(heads[c[h]].norm() + abs(g[h]) * heads[h].norm()) ** 2
        assert float(normal @ normal) == pytest.approx(float(norm2[h]),
                                                       abs=2 * (5 + 2) * eps() * terms)
        if geometry.unit_heads and float(1 - (heads[h] @ heads[c[h]]) ** 2) >= 1e-3:
            assert abs(float(normal @ heads[h])) < 2 * (5 + 2) * eps() * terms**0.5  # tangent
        # moving along the normal raises the logit of c against that of h
        x = torch.zeros(5, dtype=heads.dtype)
        step = geometry.logits(x + 1e-3 * normal, heads, 1.0) - geometry.logits(x, heads, 1.0)
        assert float(step[c[h]] - step[h]) > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("geometry", [Sphere(), Euclidean()])
def test_heads_on_top_of_each_other_have_no_boundary_between_them(geometry, dtype):
    """Heads 1 and 2 coincide: each one's nearest boundary is with head 0, the distinct
    one (a boundary of norm 0 made the "auto" lambda about 1e-292 and the attention
    uniform); heads that all coincide cross no boundary (norm inf). A head is never its
    own neighbour, even where float32's ``<mu, mu>`` falls short of 1."""
    gen = np.random.default_rng(4)
    many = geometry.projx(torch.as_tensor(gen.standard_normal((50, 8)), dtype=dtype))
    c, _, _ = geometry.nearest_boundary(many @ many.T)
    assert not (c == torch.arange(50)).any()
    twice = torch.cat([many, many])          # head h and h + 50 equal, bit for bit
    c, _, norm2 = geometry.nearest_boundary(twice @ twice.T)
    assert (c % 50 != torch.arange(100) % 50).all()     # neither itself nor its twin
    assert float(norm2.min()) > 1e-3
    heads = geometry.projx(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=dtype))
    c, _, norm2 = geometry.nearest_boundary(heads @ heads.T)
    assert c.tolist() == [1, 0, 0]
    chord = 1.0 if geometry.unit_heads else 2.0        # the tangent's, or the chord's
    assert norm2.tolist() == pytest.approx([chord] * 3)
    same = heads[[1, 1, 1]]
    assert torch.isinf(geometry.nearest_boundary(same @ same.T)[2]).all()


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
def test_more_heads_than_distinct_rows_predict_their_labels(geometry):
    """Two distinct rows, three heads: two heads coincide (to rounding). The "auto" lambda
    is at its cap (with the warning that says so) and predict gives the heads of labels_
    (it gave head 0 for every row: the attention was uniform)."""
    X = np.repeat([[0.3, -0.2], [1.3, 0.8]], 50, axis=0)
    with pytest.warns(ac.DegenerateFitWarning, match="no spread"):
        fit = ac.AttentionClustering(3, geometry=geometry, random_state=0).fit(X)
    centers = fit.cluster_centers_
    # coinciding heads are means of the same rows to n roundings: either may be the label
    np.testing.assert_allclose(centers[fit.predict(X)], centers[fit.labels_], rtol=0,
                               atol=2 * sum_tol(len(X)) * np.abs(X).max())
    assert fit.inverse_temperature_ >= 1e12


def test_init_directions_and_start_heads():
    gen = np.random.default_rng(7)
    draws = gen.standard_normal((3, 4))
    unit = Euclidean().init_directions(draws.copy())
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=(4 + 2) * eps())
    centers = np.array([[3.0, 0, 0, 0], [0, 0, 0, 0], [0, 2.0, 0, 0]])
    on = Sphere().start_heads(Sphere().init_directions(centers.copy()), gen)
    np.testing.assert_allclose(np.linalg.norm(on, axis=1), 1.0, rtol=(4 + 2) * eps())
    np.testing.assert_array_equal(on[[0, 2]], [[1.0, 0, 0, 0], [0, 1.0, 0, 0]])  # 3/3, 2/2
    np.testing.assert_array_equal(Euclidean().start_heads(centers, gen), centers)


def test_estimator_defaults_are_the_geometrys():
    def plan(**params):
        return resolve(ac.AttentionClustering(**params).get_params())
    for geometry in (Sphere(), Euclidean()):
        auto = plan(geometry=geometry.name, inverse_temperature=1.0)   # a soft ending
        assert auto.normalize == geometry.normalize and auto.tol == geometry.tol
        assert (len(auto.anneal) > 1) == geometry.anneal
        assert auto.n_init == geometry.n_init(True)
        assert plan(init=np.eye(8), geometry=geometry.name).n_init \
            == geometry.n_init(False) == 1
        given = plan(tol=0.5, n_init=7, geometry=geometry.name)
        assert (given.tol, given.n_init) == (0.5, 7)
    assert (Sphere().n_init(True), Euclidean().n_init(True), Euclidean().n_init(False)) \
        == (1, 10, 1)


def test_a_geometry_object_fits_like_its_name():
    X = ac.GaussianMixture.orthogonal(d=4, k=3, sigma=0.1).sample(300, rng=0)
    for name in GEOMETRIES:
        by_name = ac.AttentionClustering(3, geometry=name, random_state=0).fit(X)
        by_obj = ac.AttentionClustering(3, geometry=as_geometry(name), random_state=0).fit(X)
        np.testing.assert_array_equal(by_obj.cluster_centers_, by_name.cluster_centers_)


def test_a_geometry_is_abstract_until_it_has_every_operation():
    with pytest.raises(TypeError):
        Geometry()

    class Half(Euclidean):          # a third geometry needs no change elsewhere to be held
        name = "half"
    assert as_geometry(Half()).logits is not None


# -- no module outside geometry.py compares geometry names ------------------------------------
def geometry_comparisons(source: str, where: str) -> list[str]:
    """Comparisons of a geometry name (``"sphere"``, ``"euclidean"``) or of something called
    ``geometry`` (a name or an attribute) in ``source``, as ``where:line``."""
    found = []

    def is_geometry(node) -> bool:
        if isinstance(node, ast.Constant) and node.value in GEOMETRIES:
            return True
        if isinstance(node, ast.Name | ast.Attribute):
            return (node.id if isinstance(node, ast.Name) else node.attr) == "geometry"
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_geometry(e) for e in node.elts)
        return False
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(is_geometry(n) for n in
                                                 [node.left, *node.comparators]):
            found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.match_case) and is_geometry(getattr(node.pattern, "value",
                                                                      None)):
            found.append(f"{where}:{node.pattern.lineno}")
    return found


@pytest.mark.slow
def test_no_module_but_geometry_compares_geometry_names():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "geometry.py"
             for hit in geometry_comparisons(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert found == []


def test_the_geometry_comparison_check_can_fail():
    source = ('if geometry == "sphere":\n    pass\n'
              'x = self.geometry != "euclidean"\n'
              'y = "sphere" in (a, b)\n'
              'z = g in ("sphere", "euclidean")\n'
              'w = init == "kmeans++"\n'
              'match geometry:\n    case "sphere":\n        pass\n')
    assert geometry_comparisons(source, "m") == ["m:1", "m:3", "m:4", "m:5", "m:8"]


def test_a_far_row_does_not_make_near_heads_coincide():
    """Two blobs 6 apart and a row at 2e9: their heads are far from the working space's
    origin (the mean), and a tolerance of 1e-12 of their squared norms took them for one
    head (lambda at its cap, a warning of no spread); the gram's rounding is 1e-16."""
    gen = np.random.default_rng(0)
    X = np.vstack([gen.normal(size=(100, 2)), gen.normal(size=(100, 2)) + 6, [[2e9, 0]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ac.DegenerateFitWarning)
        fit = ac.AttentionClustering(3, random_state=0).fit(X)
    assert fit.inverse_temperature_ < 1e-6


def test_precise_logits_recompute_only_the_rows_rounding_could_reorder(monkeypatch):
    """Rows near three heads, a few on the boundary between two of them: only those are
    recomputed from the differences, and every row's highest logit is its exact nearest
    head (the boundary rows' ties broken as exact distances break them)."""
    gen = np.random.default_rng(3)
    heads = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    x = torch.as_tensor(gen.normal(size=(300, 2)) * 2.0)
    x[:20, 0], x[:20, 1] = 1.5, torch.as_tensor(gen.normal(size=20) - 2.0)   # x = 1.5
    x[:20, 0] += torch.as_tensor(gen.uniform(-1e-15, 1e-15, 20))           # to rounding
    recomputed = []
    real = torch.cdist
    monkeypatch.setattr(torch, "cdist", lambda a, b, **k: recomputed.append(len(a)) or
                        real(a, b, **k))
    logits = Euclidean().precise_logits(x, heads, 1.0)
    assert 0 < sum(recomputed) < len(x)                  # some rows, not all
    monkeypatch.setattr(torch, "cdist", real)
    exact = torch.cdist(x, heads, compute_mode="donot_use_mm_for_euclid_dist")
    # the rows rounding could reorder are recomputed by this very cdist: exact
    torch.testing.assert_close(logits.argmax(1), exact.argmin(1), rtol=0, atol=0)

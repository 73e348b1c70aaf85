"""Tests of the fixed-point solver (``attnclust.cluster.fixed_point``), both geometries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import eps, sum_tol
from attnclust.cluster.fixed_point import _fixed_point_step, _risk_pass, fixed_point_fit
from attnclust.layer.geometry import Euclidean, as_geometry
from attnclust.layer.heads import attention_heads
from attnclust.layer.schedules import Stages


def _pass_tols(X, heads, lam, row_loss):
    """Absolute tolerances ``(loss, grad)`` between the pass (chunked sums, closed-form
    gradient, ``||x||^2 - 2 <x, T> + ||T||^2``) and autograd of ``row_loss(h)`` (each row's
    loss, ``(n,)``) at ``heads``. Per row the logits (``d``-term products, or squared
    distances: ``lambda (d + 2) eps (||x|| + max ||mu||)^2``) move each weight by twice
    that relatively, plus ``(K + d + 2) eps`` for the output's and residual's sums: ``c_i``
    relative on a row's loss and gradient terms, plus the expansion's absolute ``(d + 2)
    eps (||x|| + max ||mu||)^2`` on its loss; the mean adds n terms in another order
    (``sum_tol``, relative to the mean of the terms' sizes: the gradient has small entries)."""
    K, d = heads.shape
    scale = (X.norm(dim=1) + heads.norm(dim=1).max()) ** 2
    c = (K + d + 2) * eps() + 2 * lam * (d + 2) * eps() * scale
    h = heads.detach().clone()
    rows = row_loss(h).detach()
    terms = torch.autograd.functional.jacobian(row_loss, h).abs()        # (n, K, d)
    loss_tol = float((c * rows + (d + 2) * eps() * scale).mean()) \
        + sum_tol(len(X)) * float(rows.mean())
    grad_tol = ((c[:, None, None] + sum_tol(len(X))) * terms).mean(0)
    return loss_tol, grad_tol


def _close(a, b, tol) -> None:
    """``|a - b| <= tol`` entrywise (``tol`` a tensor of a's shape)."""
    excess = ((a - b).abs() / tol).max()
    assert float(excess) <= 1, f"{float(excess):.3g} times the tolerance"


def _risk_autograd(heads, X, lam):
    """Independent reference: mean ||x - softmax(lam X mu^T) mu||^2 by plain torch."""
    A = torch.softmax(lam * X @ heads.T, dim=1)
    return ((X - A @ heads) ** 2).sum(1).mean()


@pytest.mark.parametrize("penalty", [None, "repulsion", "balance"])
def test_pass_gradient_matches_autograd(penalty):
    gen = np.random.default_rng(0)
    X = torch.as_tensor(gen.standard_normal((300, 6)))
    heads = ac.normalize(torch.as_tensor(gen.standard_normal((4, 6))))
    lam, rho = 2.5, 0.7
    p = _risk_pass(X, (X * X).sum(1), heads, lam, chunk=97, penalty=penalty, rho=rho)
    h = heads.clone().requires_grad_(True)
    ref = _risk_autograd(h, X, lam)
    if penalty == "repulsion":
        G = h @ h.T
        ref = ref + rho * ((G - torch.diag(torch.diagonal(G))) ** 2).sum() / 2
    elif penalty == "balance":
        N = torch.softmax(lam * X @ h.T, dim=1).mean(0)
        ref = ref + rho * ((N - 0.25) ** 2).sum()
    (g,) = torch.autograd.grad(ref, h)
    loss_tol, grad_tol = _pass_tols(X, heads, lam, lambda m: (
        (X - torch.softmax(lam * X @ m.T, dim=1) @ m) ** 2).sum(1))
    if penalty is not None:         # the penalty's own rounding: K^2 eps of its terms' size
        pen_loss, pen_grad = _penalty_tols(heads, X, lam, rho, penalty)
        loss_tol, grad_tol = loss_tol + pen_loss, grad_tol + pen_grad
    assert float(p.loss.detach()) == pytest.approx(float(ref.detach()), rel=0, abs=loss_tol)
    _close(p.grad, g, grad_tol)
    torch.testing.assert_close(p.counts, torch.softmax(lam * X @ heads.T, 1).mean(0))
    if penalty is None:
        assert float(p.loss) == pytest.approx(
            float(ac.empirical_risk(heads, X, inverse_temperature=lam)), rel=0, abs=loss_tol)


def _penalty_tols(heads, X, lam, rho, penalty):
    """Absolute ``(loss, grad)`` tolerances of ``rho`` times a penalty computed two ways.
    Repulsion ``sum_{g != h} G_gh^2 / 2``: ``K^2`` terms, each a ``d``-term product, within
    ``(K^2 + d) eps`` of ``sum G^2``, its gradient ``2 sum_g G_hg mu_g`` within ``(K + d)
    eps`` of ``2 sum_g |G_hg| |mu_g|``. Balance ``sum_h (N_h - 1/K)^2``, ``N`` a mean over
    ``n`` rows of softmax weights (``lambda d eps ||x|| ||mu||`` relative each, then
    ``sum_tol``): each ``N_h`` within ``e = (sum_tol(n) + 2 lambda d eps max ||x|| max ||mu||)
    N_h``, the penalty within ``2 |N_h - 1/K| e``, its gradient (``2 (N_h - 1/K)`` times
    the derivative of ``N_h``, at most ``2 lambda max ||x||`` of ``N``) within as much times
    ``2 lambda max ||x||`` plus its rounding."""
    K, d = heads.shape
    if penalty == "repulsion":
        G = (heads @ heads.T).abs()
        loss = (K * K + d) * eps() * float((G**2).sum())
        grad = (K + d) * eps() * 2 * (G @ heads.abs())
        return rho * loss, rho * grad
    N = torch.softmax(lam * X @ heads.T, dim=1).mean(0)
    xmax = float(X.norm(dim=1).max())
    e = (sum_tol(len(X)) + 2 * lam * d * eps() * xmax * float(heads.norm(dim=1).max())) * N
    loss = float((2 * (N - 1 / K).abs() * e).sum()) + K * eps() * float(((N - 1 / K) ** 2).sum())
    grad = (2 * lam * xmax) * float((2 * (N - 1 / K).abs() * e + e ** 2).sum()
                                    + sum_tol(len(X)) * (N - 1 / K).abs().sum())
    return rho * loss, rho * grad * torch.ones_like(heads)


@pytest.mark.parametrize("geometry, penalty", [("sphere", "repulsion"), ("sphere", "balance"),
                                               ("euclidean", "repulsion")])
def test_pass_penalty_is_the_one_definition(geometry, penalty):
    """The pass's closed-form penalty (what it adds to the loss and gradient) against autograd
    of :func:`attnclust.repulsion` / :func:`attnclust.balance` on the same rows; the
    balance of the key-biased layer is not defined (the estimator refuses it)."""
    gen = np.random.default_rng(5)
    X = torch.as_tensor(gen.standard_normal((250, 6)))
    heads = torch.as_tensor(gen.standard_normal((3, 6)))
    heads = ac.normalize(heads) if geometry == "sphere" else heads
    lam, rho = 1.7, 0.6
    args = dict(chunk=60, geometry=as_geometry(geometry), penalty=penalty)
    plain = _risk_pass(X, (X * X).sum(1), heads, lam, rho=0.0, **args)
    pen = _risk_pass(X, (X * X).sum(1), heads, lam, rho=rho, **args)
    h = heads.clone().requires_grad_(True)
    ref = ac.repulsion(h) if penalty == "repulsion" else \
        ac.balance(h, X, inverse_temperature=lam, batch_size=100)
    (g,) = torch.autograd.grad(ref, h)
    # the passes' risk parts are the same operations; the difference leaves their rounding
    # (eps of each loss) and the penalties' (closed form against autograd)
    loss_tol, grad_tol = _penalty_tols(heads, X, lam, rho, penalty)
    loss_tol += eps() * (abs(float(pen.loss)) + abs(float(plain.loss)))
    grad_tol = grad_tol + eps() * (pen.grad.abs() + plain.grad.abs())
    assert float(pen.loss - plain.loss) == pytest.approx(rho * float(ref), rel=0, abs=loss_tol)
    _close(pen.grad - plain.grad, rho * g, grad_tol)
    torch.testing.assert_close(pen.counts, plain.counts, rtol=0, atol=0)   # the same pass

def test_step_is_spherical_lloyd_when_attention_is_hard():
    gen = np.random.default_rng(1)
    X = torch.as_tensor(gen.standard_normal((400, 5)))
    heads = ac.normalize(torch.as_tensor(gen.standard_normal((3, 5))))
    top2 = (X @ heads.T).sort(1).values
    X = X[top2[:, -1] - top2[:, -2] > 0.05]  # every point at least 0.05 from a boundary
    lam = 2000.0  # attention is one-hot up to exp(-100)
    p = _risk_pass(X, (X * X).sum(1), heads, lam, chunk=100)
    labels = (X @ heads.T).argmax(1)
    lloyd = ac.normalize(torch.stack([X[labels == h].sum(0) for h in range(3)]))
    # sums of n rows in other orders (relative to sum ||x||, normalized: over the sum's
    # norm), the other cells' weights below exp(-100)
    sums = torch.stack([X[labels == h].sum(0) for h in range(3)])
    tol = (sum_tol(len(X)) + np.exp(-100.0)) * float(X.norm(dim=1).sum() / sums.norm(dim=1).min())
    torch.testing.assert_close(_fixed_point_step(heads, p, 1.0), lloyd, rtol=0, atol=2 * tol)


def test_fixed_point_fit_example_converges_from_far():
    X = torch.as_tensor(ac.GaussianMixture.antipodal(d=3, sigma=0.1).sample(400, rng=0))
    h0 = ac.normalize(torch.tensor([[0.2, 1.0, 0.0], [0.1, 0.0, 1.0]], dtype=torch.float64))
    res = fixed_point_fit(X, h0, inverse_temperature=Stages([1.0, 10.0, 50.0], [5, 5, 500]),
                          n_steps=510, tol=1e-10)
    assert res.converged
    assert ac.centroid_distance(res.heads, [[1, 0, 0], [-1, 0, 0]]).max < 0.05


# -- Euclidean heads -----------------------------------------------------------------------
def test_euclidean_pass_gradient_matches_autograd():
    """Loss and gradient of the key-biased layer against plain torch autograd."""
    gen = np.random.default_rng(2)
    X = torch.as_tensor(1.5 * gen.standard_normal((300, 5)) + 1.0)
    heads = torch.as_tensor(gen.standard_normal((4, 5)))
    lam = 0.7
    p = _risk_pass(X, (X * X).sum(1), heads, lam, chunk=77, geometry=Euclidean())
    h = heads.clone().requires_grad_(True)
    A = torch.softmax(-lam * torch.cdist(X, h) ** 2 / 2, dim=1)   # independent of head_logits
    ref = ((X - A @ h) ** 2).sum(1).mean()
    (g,) = torch.autograd.grad(ref, h)
    loss_tol, grad_tol = _pass_tols(X, heads, lam, lambda m: (
        (X - torch.softmax(-lam * torch.cdist(X, m) ** 2 / 2, dim=1) @ m) ** 2).sum(1))
    assert float(p.loss.detach()) == pytest.approx(float(ref.detach()), rel=0, abs=loss_tol)
    _close(p.grad, g, grad_tol)
    torch.testing.assert_close(p.counts, A.detach().mean(0))


def test_euclidean_step_is_lloyd_when_attention_is_hard():
    gen = np.random.default_rng(3)
    X = torch.as_tensor(gen.standard_normal((400, 3)) * 2)
    heads = torch.as_tensor(gen.standard_normal((4, 3)))
    d2 = torch.cdist(X, heads) ** 2
    top2 = d2.sort(1).values
    X = X[top2[:, 1] - top2[:, 0] > 0.1]          # every point clear of a boundary
    lam = 2000.0                                   # one-hot attention up to exp(-100)
    p = _risk_pass(X, (X * X).sum(1), heads, lam, chunk=100, geometry=Euclidean())
    labels = torch.cdist(X, heads).argmin(1)
    means = torch.stack([X[labels == h].mean(0) for h in range(4)])
    # means of the same cells, summed in other orders; the other cells' weights below
    # exp(-100)
    tol = (sum_tol(len(X)) + np.exp(-100.0)) * float(X.abs().max())
    torch.testing.assert_close(_fixed_point_step(heads, p, 1.0, Euclidean()), means,
                               rtol=0, atol=2 * tol)


@pytest.mark.parametrize("lam", [0.5, 3.0])
def test_euclidean_fixed_point_has_zero_gradient(lam):
    """A converged fit is a stationary point of the risk (autograd gradient ~ 0)."""
    mix = ac.GaussianMixture.orthogonal(d=4, k=3, sigma=0.4)
    X = torch.as_tensor(3 * mix.sample(1500, rng=0) + 1.0)
    h0 = X[[0, 1, 2]].clone()
    res = fixed_point_fit(X, h0, inverse_temperature=lam, n_steps=2000, tol=1e-12,
                          geometry="euclidean")
    assert res.converged
    h = res.heads.clone().requires_grad_(True)
    risk = ((X - attention_heads(X, h, inverse_temperature=lam, geometry="euclidean")) ** 2).sum(1)
    (g,) = torch.autograd.grad(risk.mean(), h)
    h0g = h0.clone().requires_grad_(True)
    risk0 = ((X - attention_heads(X, h0g, inverse_temperature=lam,
                                  geometry="euclidean")) ** 2).sum(1)
    (g0,) = torch.autograd.grad(risk0.mean(), h0g)
    assert float(g.norm()) < 1e-9 * float(g0.norm())
    losses = res.history.risk
    assert np.all(np.diff(losses) <= 1e-12 * abs(losses[0]))     # the safeguard


def test_euclidean_fit_equals_lloyd_at_large_lambda():
    """Hard limit: the fixed point is the k-means (Lloyd) fixed point from the same start."""
    from sklearn.cluster import KMeans

    gen = np.random.default_rng(4)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    X = np.concatenate([c + gen.standard_normal((200, 2)) for c in centers])
    start = X[[0, 200, 400]]
    km = KMeans(3, init=start, n_init=1, tol=0, max_iter=100).fit(X)
    res = fixed_point_fit(torch.as_tensor(X), torch.as_tensor(start), inverse_temperature=1e4,
                          n_steps=100, tol=1e-12, geometry="euclidean")
    # means of n rows in other orders, and the soft weight exp(-lambda gap / 2) of a row
    # whose nearest two squared distances are gap apart, times its distance to the head
    D = ((X[:, None] - km.cluster_centers_[None]) ** 2).sum(-1)
    two = np.sort(D, 1)
    soft = np.exp(-1e4 * (two[:, 1] - two[:, 0]) / 2) * np.sqrt(two[:, 1])
    cells = np.bincount(D.argmin(1), minlength=3)
    assert cells.min() > 0                          # a mean per cell: none empty
    tol = sum_tol(len(X)) * np.abs(X).max() + soft.sum() / cells.min()
    np.testing.assert_allclose(res.heads.numpy(), km.cluster_centers_, rtol=0, atol=tol)


@pytest.mark.parametrize("geometry", ["sphere", "euclidean"])
def test_workers_share_chunks_without_changing_the_result(geometry):
    """Chunks summed in their order whatever thread computed them: bitwise the same fit."""
    X = torch.as_tensor(ac.GaussianMixture.orthogonal(d=5, k=3, sigma=0.3).sample(2000, rng=0))
    h0 = ac.normalize(X[[0, 1, 2]].clone())
    fits = [fixed_point_fit(X, h0, inverse_temperature=20.0, n_steps=50,
                            chunk_size=150, geometry=geometry, workers=w) for w in (1, 3)]
    assert torch.equal(fits[0].heads, fits[1].heads)
    np.testing.assert_array_equal(fits[0].history.risk, fits[1].history.risk)


@pytest.mark.parametrize("geometry", ["sphere", "euclidean"])
def test_history_and_callback_are_the_shared_types(geometry):
    """The fixed-point solver reports through the same types as pgd: every accepted step
    in the history (the first iterate of each stage at its own lambda), the callback's
    loss the objective after the step, its heads those the history records."""
    X = torch.as_tensor(ac.GaussianMixture.orthogonal(d=5, k=3, sigma=0.2).sample(600, rng=0))
    h0 = ac.normalize(X[[0, 1, 2]].clone())
    infos = []
    res = fixed_point_fit(X, h0, inverse_temperature=Stages([5.0, 20.0], [4, 200]), n_steps=204,
                          tol=1e-10, geometry=geometry, callback=infos.append)
    assert isinstance(res, ac.SolverResult) and isinstance(res.history, ac.History)
    h = res.history
    assert len(h.step) == res.n_iter + 2 and h.step[-1] == res.n_iter
    assert list(h.inverse_temperature[:6]) == [5.0] * 5 + [20.0]   # stage 2 starts at step 4
    assert h.step[4] == h.step[5] == 4
    firsts = {0, 5}
    np.testing.assert_array_equal([i.heads.numpy() for i in infos],
                                  [x for t, x in enumerate(h.heads) if t not in firsts])
    np.testing.assert_allclose([i.loss for i in infos],
                               [x for t, x in enumerate(h.risk) if t not in firsts], rtol=1e-14)
    assert res.converged and h.grad_norm[-1] < 1e-8 < h.grad_norm[0]


def test_balance_on_euclidean_heads_is_refused():
    """The pass's balance gradient leaves out the key bias: refused, not silently wrong."""
    X = torch.as_tensor(ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.2).sample(50, rng=0))
    with pytest.raises(ValueError, match="geometry='sphere' only"):
        fixed_point_fit(X, X[:2].clone(), inverse_temperature=5.0, n_steps=3,
                        geometry="euclidean", penalty="balance", rho=1.0)
    with pytest.raises(ValueError, match="penalty must be"):
        fixed_point_fit(X, X[:2].clone(), inverse_temperature=5.0, n_steps=3,
                        penalty="ridge", rho=1.0)


def test_forget_heads_is_the_sums_without_their_rows_under_hard_attention():
    """With hard attention the statistics of a head are those of the rows it wins: the
    sums without heads 1 and 3 are the sums of the other rows (the summed error kept)."""
    from attnclust.cluster.fixed_point import forget_heads, pass_sums

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(300, 3, generator=gen, dtype=torch.float64)
    heads = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    lam = 1e9
    won = ((X[:, None, :] - heads[None]) ** 2).sum(-1).argmin(1)
    kept = (won != 1) & (won != 3)
    forgot = forget_heads(pass_sums(X, heads, lam, geometry="euclidean"), 4, 3, [1, 3])
    ref = pass_sums(X[kept], heads, lam, geometry="euclidean")
    full = pass_sums(X, heads, lam, geometry="euclidean")
    # the full sums less the forgotten heads' against sums of the kept rows: n terms of
    # size at most (max ||x|| + max ||mu||)^2 each, in other orders and cancelling
    size = float((X.norm(dim=1).max() + heads.norm(dim=1).max()) ** 2)
    torch.testing.assert_close(forgot[1:], ref[1:], rtol=0, atol=2 * len(X) * sum_tol(len(X))
                               * size)
    assert forgot[0] == full[0]


def test_old_stage_lists_warn_and_fit_the_same():
    """0.2's inverse_temperatures / stage_steps are a Stages schedule: same fit, warned."""
    X = torch.as_tensor(ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.3).sample(300, rng=0))
    h0 = X[:2].clone() / X[:2].norm(dim=1, keepdim=True)
    with pytest.warns(FutureWarning, match="stage_steps are deprecated"):
        old = fixed_point_fit(X, h0, inverse_temperatures=[2.0, 10.0], stage_steps=[3, 50])
    new = fixed_point_fit(X, h0, inverse_temperature=Stages([2.0, 10.0], [3, 50]), n_steps=53)
    torch.testing.assert_close(new.heads, old.heads, rtol=0, atol=0)      # the same schedule
    np.testing.assert_array_equal(new.history.inverse_temperature,
                                  old.history.inverse_temperature)
    with pytest.raises(ValueError, match="not both"):
        fixed_point_fit(X, h0, inverse_temperature=2.0, n_steps=3, stage_steps=[3])

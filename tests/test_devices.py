"""Every device path against the CPU in float64: the layer, the risks, PGD, identity
attention, the estimator, and data-parallel fitting (NCCL on one CUDA device, gloo on the
CPU).

Each test runs once per device: ``cpu`` always (the same code, so the paths are exercised
everywhere), ``cuda`` under the ``cuda`` marker, skipped with its reason where no CUDA
device is present. ``python -m pytest -m cuda`` runs the CUDA half alone
(``benchmarks/cuda_check.sh`` runs it and the device benchmark; see docs/guide/gpu.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import attention_risk_tol, eps, sum_tol
from attnclust.cluster import distributed as ddp
from attnclust.study import _population, _quadrature
from attnclust.study.in_context import fused_available

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
MIX = ac.GaussianMixture.orthogonal(d=6, k=3, sigma=0.15)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def _scale(X, heads) -> float:
    """``r + H`` of :func:`attention_risk_tol`: the largest row and head norms."""
    return float(np.linalg.norm(_cpu(X), axis=1).max() + np.linalg.norm(_cpu(heads), axis=1).max())


def _fit_tol(X, est) -> float:
    """Centers of two fits whose sums differ in order (a device, a process group): each
    step is a weighted mean of ``n`` rows of size ``s`` with logits of condition
    ``lambda s^2`` (:func:`attention_risk_tol`'s steps); the steps' errors add."""
    K, d = est.cluster_centers_.shape
    s, lam = _scale(X, est.cluster_centers_), est.inverse_temperature_
    return est.n_iter_ * (len(X) + K * K + d + lam * s * s) * eps() * s


def _pgd_tols(X, heads0, lam, step_size, n_steps):
    """(heads, risk) of two PGD paths: each step within step_size times the gradient's
    bound, the steps adding; a risk within its bound plus the gradient's size times the
    heads' difference."""
    K, d = heads0.shape
    s = _scale(X, heads0)
    vtol, gtol = attention_risk_tol(len(X), s, lam, K, d)
    htol = n_steps * step_size * gtol
    return htol, vtol + 2 * s * (1 + lam * s * s) * htol * np.sqrt(K * d)


def _cpu(t) -> np.ndarray:
    return t.detach().cpu().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def test_layer_and_its_gradient(device):
    X = torch.as_tensor(MIX.sample(500, rng=0))
    heads = ac.init_on_manifold(MIX, rng=1)
    outs = {}
    for where in ("cpu", device):
        layer = ac.AttentionHeads(heads, inverse_temperature=4.0).to(where)
        y = layer(X.to(where))
        (y**2).sum().backward()
        outs[where] = (_cpu(y), _cpu(layer.heads.grad))
        assert y.device.type == torch.device(where).type
    # y = a @ heads per row (K + d roundings, the softmax's condition lambda s^2, heads of
    # norm <= 1); the gradient of sum y^2 sums n rows' gradients (attention_risk_tol's
    # per unit weight, times n)
    K, d = heads.shape
    vtol, gtol = attention_risk_tol(len(X), _scale(X, heads), 4.0, K, d)
    tols = ((K + d + 4.0 * _scale(X, heads) ** 2) * eps(), len(X) * gtol)
    for a, b, tol in zip(outs["cpu"], outs[device], tols, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=tol)


def test_population_and_empirical_risk(device):
    heads = ac.init_on_manifold(MIX, rng=2)
    X = torch.as_tensor(MIX.sample(2000, rng=0))
    ref = (float(ac.population_risk(heads, MIX, inverse_temperature=3.0)),
           float(ac.empirical_risk(heads, X, inverse_temperature=3.0, batch_size=512)))
    h = heads.to(device)
    got = (float(ac.population_risk(h, MIX, inverse_temperature=3.0)),
           float(ac.empirical_risk(h, X.to(device), inverse_temperature=3.0, batch_size=512)))
    # the same nodes (K = 3 exact rule) or rows, summed in another order on the device
    nodes = _population.exact_samples(heads, MIX, 3.0, _quadrature.rule())[2].numel()
    r = _quadrature.second_moment(MIX) ** 0.5 + float(heads.norm(dim=1).max())
    K, d = heads.shape
    np.testing.assert_allclose(got[0], ref[0], rtol=0,
                               atol=attention_risk_tol(nodes, r, 3.0, K, d)[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=0,
                               atol=attention_risk_tol(len(X), _scale(X, heads), 3.0, K, d)[0])


def test_pgd_on_data(device):
    X = torch.as_tensor(MIX.sample(1500, rng=0))
    heads0 = ac.init_on_sphere(3, 6, rng=3)
    runs = [ac.pgd(X.to(where), heads0.to(where), inverse_temperature=10.0, step_size=0.5,
                   n_steps=40) for where in ("cpu", device)]
    assert torch.as_tensor(runs[1].heads).device.type == torch.device(device).type
    htol, rtol = _pgd_tols(X, heads0, 10.0, 0.5, 40)
    np.testing.assert_allclose(_cpu(runs[1].heads), _cpu(runs[0].heads), rtol=0, atol=htol)
    np.testing.assert_allclose(runs[1].history.risk, runs[0].history.risk, rtol=0, atol=rtol)


@pytest.mark.parametrize("backend", ["dense", "fused", "chunked"])
def test_identity_attention_backends(device, backend):
    """float32 on the device (the fused kernels' type on CUDA) against float64 dense on
    the CPU; ``fused`` refuses (ValueError) rather than fall back to an L x L kernel."""
    X = MIX.sample_prompts(2, 300, rng=0)                        # (B, L, d)
    ref = ac.identity_attention(X, 2.0, backend="dense")
    x = torch.as_tensor(X, dtype=torch.float32, device=device)
    assert backend != "fused" or fused_available(x.dtype, x.device)
    y = ac.identity_attention(x, 2.0, backend=backend, chunk_size=64)
    assert y.device.type == torch.device(device).type and y.dtype == torch.float32
    np.testing.assert_allclose(_cpu(y), ref, atol=2e-5)
    steps = ac.identity_attention(x, 2.0, backend=backend, n_steps=3, renormalize=True,
                                  chunk_size=64)
    np.testing.assert_allclose(_cpu(steps), ac.identity_attention(X, 2.0, n_steps=3,
                                                                  renormalize=True), atol=1e-4)


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
def test_estimator_fit_predict(device, geometry):
    X, z = MIX.sample(3000, rng=0, return_labels=True)
    params = dict(geometry=geometry, random_state=0, dtype="float64")
    ref = ac.AttentionClustering(3, **params).fit(X)
    est = ac.AttentionClustering(3, device=device, **params).fit(X)
    assert ac.adjusted_rand_index(z, est.labels_) == 1.0
    np.testing.assert_array_equal(est.labels_, ref.labels_)  # separated (ARI 1 above)
    tol = _fit_tol(X, ref)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=0, atol=tol)
    # logits move by 2 lambda s tol, plus their rounding (d + K, condition lambda s^2)
    lam, s = ref.inverse_temperature_, _scale(X, ref.cluster_centers_)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0,
                               atol=2 * lam * s * tol + (6 + 3 + lam * s * s) * eps())
    # lambda from the rows' spread: a variance of n rows of size |x|^2, relative to it
    spread = X.var(0).sum()
    assert est.inverse_temperature_ == pytest.approx(
        ref.inverse_temperature_, rel=2 * sum_tol(len(X)) * (X**2).sum(1).max() / spread)


def test_data_parallel_fit_on_one_device(device, tmp_path):
    """A process group of one rank (NCCL on CUDA, gloo on the CPU) gives one process's fit."""
    import torch.distributed as dist

    X = MIX.sample(2000, rng=1)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        est = ddp.fit_distributed(X, 3, device=device, random_state=0)
        heads0 = ac.init_on_sphere(3, 6, rng=3)
        res = ddp.pgd_distributed(torch.as_tensor(X, device=device), heads0,
                                  inverse_temperature=10.0, step_size=0.5, n_steps=20)
    finally:
        dist.destroy_process_group()
    ref = ac.AttentionClustering(3, random_state=0).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=0,
                               atol=_fit_tol(X, ref))
    np.testing.assert_array_equal(est.labels_, ref.labels_)  # separated clusters (sigma 0.15)
    single = ac.pgd(torch.as_tensor(X), heads0, inverse_temperature=10.0, step_size=0.5,
                    n_steps=20)
    np.testing.assert_allclose(_cpu(res.heads), _cpu(single.heads), rtol=0,
                               atol=_pgd_tols(X, heads0, 10.0, 0.5, 20)[0])

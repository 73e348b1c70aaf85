"""Every device path, timed on the device against the CPU in the same run, with the largest
difference of its result from the CPU's.

Paths: the K-head layer (forward and backward), the population risk and its gradient,
the empirical risk, PGD on data, identity attention (fused and chunked, float32), the
estimator's fit, and a data-parallel fit in a process group of one rank (NCCL on CUDA,
gloo on the CPU). ``attnclust bench --only devices --device cuda`` runs it on a GPU;
without ``--device`` it runs on CUDA when torch sees a device, else on the CPU against
itself (a smoke run: ratios near 1, differences 0). Columns: ``seconds`` on the device
(best of 3), ``cpu_over_device`` (the CPU's best time over the device's: above 1 is a
speed-up), ``max_abs_diff`` against the CPU's float64 (float32 for identity attention).
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

import attnclust as ac
from attnclust.cluster import distributed as ddp


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _best(fn, device: str, reps: int = 3):
    """(best seconds of ``reps`` calls, the last result); one untimed warm-up call."""
    out = fn()
    best = float("inf")
    for _ in range(reps):
        _sync(device)
        start = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best, out


def _np(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().double().numpy()
    return np.asarray(t, dtype=np.float64)


def _paths(quick: bool):
    """``name -> fn(device) -> result`` (tensors or arrays, compared with the CPU's)."""
    mix = ac.GaussianMixture.random(d=16, k=4, sigma=0.2, rng=0)
    n = 20_000 if quick else 400_000
    X = torch.as_tensor(mix.sample(n, rng=0))
    heads = ac.init_on_sphere(4, 16, rng=1)
    L = 4_000 if quick else 50_000
    prompt = torch.as_tensor(mix.sample(L, rng=1), dtype=torch.float32)

    def layer(dev):
        h = heads.detach().clone().to(dev).requires_grad_(True)
        y = ac.attention_heads(X.to(dev), h, inverse_temperature=4.0)
        (y**2).sum().backward()
        return torch.cat([y[:1000].reshape(-1), h.grad.reshape(-1)])

    def population(dev):
        h = heads[:3].detach().clone().to(dev).requires_grad_(True)   # exact: K <= 3
        r = ac.population_risk(h, ac.GaussianMixture.orthogonal(d=16, k=3, sigma=0.3),
                               inverse_temperature=3.0)
        r.backward()
        return torch.cat([r.reshape(1), h.grad.reshape(-1)])

    def empirical(dev):
        return ac.empirical_risk(heads.to(dev), X.to(dev), inverse_temperature=4.0,
                                 batch_size=65_536).reshape(1)

    def pgd(dev):
        return ac.pgd(X.to(dev), heads.to(dev), inverse_temperature=8.0, step_size=0.5,
                      n_steps=20 if quick else 100, record_every=1000).heads

    def fused(dev):
        return ac.identity_attention(prompt.to(dev), 1.0, backend="fused")

    def chunked(dev):
        return ac.identity_attention(prompt.to(dev), 1.0, backend="chunked")

    def estimator(dev):
        est = ac.AttentionClustering(4, device=dev, random_state=0, dtype="float64")
        return est.fit(X.numpy()).cluster_centers_

    def distributed(dev):
        backend = "nccl" if torch.device(dev).type == "cuda" else "gloo"
        with tempfile.TemporaryDirectory() as tmp:
            torch.distributed.init_process_group(backend, init_method=f"file://{tmp}/store",
                                                 rank=0, world_size=1)
            try:
                return ddp.fit_distributed(X.numpy(), 4, device=dev,
                                           random_state=0).cluster_centers_
            finally:
                torch.distributed.destroy_process_group()

    return {"layer fwd+bwd": layer, "population risk+grad": population,
            "empirical risk": empirical, "pgd on data": pgd,
            "identity fused f32": fused, "identity chunked f32": chunked,
            "estimator fit": estimator, "distributed 1 rank": distributed}


def run(quick: bool, device: str | None = None) -> list[dict]:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name, fn in _paths(quick).items():
        cpu_s, ref = _best(lambda fn=fn: fn("cpu"), "cpu")
        dev_s, out = _best(lambda fn=fn: fn(device), device)
        rows.append({"path": name, "device": device, "seconds": dev_s,
                     "cpu_over_device": cpu_s / dev_s,
                     "max_abs_diff": float(np.max(np.abs(_np(out) - _np(ref))))})
    return rows


if __name__ == "__main__":
    import sys

    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))

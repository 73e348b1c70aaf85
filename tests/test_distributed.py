"""Data-parallel fitting (gloo on loopback, real processes and simulated ranks) and devices."""

import copy
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import attnclust as ac
from _tolerance import assert_labels_off_ties, attention_risk_tol, balance_tol, eps
from attnclust.cluster import fixed_point, warm_start
from attnclust.cluster.clustering import AttentionClustering
from attnclust.cluster.communicator import Communicator
from attnclust.cluster.distributed import pass_bytes, pgd_distributed, shard_bounds, shard_rows
from attnclust.cluster.settings import FitSettings
from attnclust.study import _quadrature
from attnclust.study import risk as risk_module

WORKER = Path(__file__).with_name("_distributed_worker.py")
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                     reason="no CUDA device"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, port: int) -> dict:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               LOCAL_RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"          # loopback only
    return env


def _launch(mode: str, data: Path, out: Path, *, world: int = 2, extra: tuple = ()):
    port = _free_port()
    return [subprocess.Popen([sys.executable, str(WORKER), mode, str(data), str(out), *extra],
                             env=_env(r, world, port), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


def _finish(procs, timeout: float):
    """Wait for every process; a hang fails the test (after killing what is left)."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank did not finish within {timeout} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X = ac.GaussianMixture.orthogonal(d=6, k=4, sigma=0.25).sample(2001, rng=0) + 0.3
    path = tmp_path_factory.mktemp("dp") / "x.npy"
    np.save(path, X)
    return path, X


# -- sharding ---------------------------------------------------------------------------
@pytest.mark.parametrize("n, world", [(10, 3), (7, 7), (2001, 2), (5, 1)])
def test_shards_partition_the_rows_in_rank_order(tmp_path, n, world):
    X = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    np.save(tmp_path / "x.npy", X)
    parts = [shard_rows(tmp_path / "x.npy", r, world) for r in range(world)]
    assert all(isinstance(p, np.memmap) for p in parts)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    np.testing.assert_array_equal(np.concatenate(parts), X)
    assert [shard_bounds(n, r, world)[0] for r in range(world)] == list(np.cumsum([0] + sizes[:-1]))


def test_shard_rows_bad_input(tmp_path):
    np.save(tmp_path / "v.npy", np.zeros(5))
    with pytest.raises(ValueError, match="2-D"):
        shard_rows(tmp_path / "v.npy", 0, 2)
    with pytest.raises(ValueError, match="no such file"):
        shard_rows(tmp_path / "missing.npy", 0, 2)
    with pytest.raises(ValueError, match="rank"):
        shard_bounds(10, 2, 2)


# -- simulated ranks: threads sharing a summing barrier ------------------------------------
class _ThreadGroup:
    """``world`` threads that sum (or broadcast) tensors in rank order, like an all-reduce."""

    def __init__(self, world: int):
        self.world, self.slots = world, [None] * world
        self.barrier = threading.Barrier(world)
        self.bytes = 0

    def _exchange(self, rank, t, combine):
        self.slots[rank] = t.clone()
        self.barrier.wait()
        out = combine(self.slots)
        if rank == 0:
            self.bytes += t.numel() * t.element_size()
        self.barrier.wait()
        return out

    def context(self, rank, offset, n_total):
        return Communicator(lambda t: self._exchange(rank, t, lambda s: sum(s[1:], s[0])),
                            lambda t: self._exchange(rank, t, lambda s: s[0].clone()),
                            offset, n_total, rank, self.world)


def _run_ranks(group, body):
    """``body(r)`` for every rank ``r`` of ``group``, one thread each; returns the results.

    A rank that raises aborts the barrier (so the others stop too) and fails the test; so
    does a rank still running after 60 s.
    """
    results, errors = [None] * group.world, []

    def run(r):
        try:
            results[r] = body(r)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
            group.barrier.abort()
    threads = [threading.Thread(target=run, args=(r,)) for r in range(group.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads), "a simulated rank hung"
    return results


def _assert_labels_off_ties(labels, est, one, X):
    """``labels`` (of ``est``) equal ``one.labels_`` except within the two fits'
    difference of a tie (:func:`assert_labels_off_ties` on their log-probabilities, whose
    rounding is ``8 eps`` of their size): the fits agree only to their tolerance."""
    lp_one, lp_est = (np.log(np.maximum(e.predict_proba(X), np.finfo(float).tiny))
                      for e in (one, est))
    assert_labels_off_ties(one.labels_, labels, lp_one, lp_est,
                           slack=8 * eps() * (1.0 + np.abs(lp_one).max(1)))


def _holding(est, centers):
    """A copy of the fitted ``est`` with other ``centers`` (for their logits)."""
    held = copy.deepcopy(est)
    held.cluster_centers_ = np.asarray(centers)
    return held


def _pgd_tols(X, heads, lam, step_size, n_steps, penalty=None):
    """(heads, risk) differences allowed between two PGD paths whose gradients are sums
    over the same rows in other orders (shards, batches, devices): each step moves the
    heads by ``step_size`` times a gradient within :func:`attention_risk_tol` (plus the
    balance's), the steps' errors add; a recorded risk is within its own bound plus the
    gradient's size times the heads' difference."""
    X = np.asarray(X)
    K, d = heads.shape
    scale = float(np.linalg.norm(X, axis=1).max()) + float(heads.norm(dim=1).max())
    vtol, gtol = attention_risk_tol(len(X), scale, lam, K, d)
    if penalty == "balance":
        gtol += balance_tol(len(X), scale, lam, K, d)[1]
    htol = n_steps * step_size * gtol
    return htol, vtol + 2 * scale * (1 + lam * scale**2) * htol * np.sqrt(K * d)


def _fit_simulated(X, world, **params):
    group = _ThreadGroup(world)
    bounds = [shard_bounds(len(X), r, world) for r in range(world)]

    def body(r):
        est = AttentionClustering(**params)
        return est.fit(X[slice(*bounds[r])], comm=group.context(r, bounds[r][0], len(X)))
    return _run_ranks(group, body), group


@pytest.mark.parametrize("params", [
    dict(n_clusters=4, random_state=0),
    dict(n_clusters=4, init="sphere", random_state=3),
    dict(n_clusters=4, geometry="sphere", random_state=0),
    dict(n_clusters=4, geometry="sphere", init="sphere", normalize="center-scale",
         penalty="balance", rho=0.1, random_state=1),
    dict(n_clusters=3, geometry="sphere", inverse_temperature=20.0, penalty="repulsion", rho=0.1,
         anneal=False, chunk_size=300, random_state=2),
    dict(n_clusters=4, covariance_type="full", chunk_size=300, random_state=0),
])
def test_simulated_ranks_match_one_process(data, params):
    _, X = data
    params = dict(params, tol=1e-10, max_iter=300,
                  settings=FitSettings(warm_sample=500))        # exercise the warm-start sample
    one = AttentionClustering(**params).fit(X)
    ests, group = _fit_simulated(X, 3, **params)
    for est in ests:
        np.testing.assert_allclose(est.cluster_centers_, one.cluster_centers_, atol=1e-6, rtol=0)
        assert est.n_iter_ == one.n_iter_
        assert est.inverse_temperature_ == pytest.approx(one.inverse_temperature_)
        np.testing.assert_array_equal(est.cluster_centers_, ests[0].cluster_centers_)
    _assert_labels_off_ties(np.concatenate([e.labels_ for e in ests]), ests[0], one, X)
    assert group.bytes > 0


@pytest.mark.filterwarnings("ignore:AttentionClustering did not converge")
def test_seeding_sample_is_used_above_the_threshold(data, monkeypatch):
    _, X = data
    seen = []
    real = warm_start.sample_kmeans
    monkeypatch.setattr(warm_start, "sample_kmeans", lambda rows, *a, **k: seen.append(
        (tuple(rows.shape), k["n_init"])) or real(rows, *a, **k))
    small = FitSettings(warm_sample=500)
    AttentionClustering(4, random_state=0, max_iter=5, settings=small).fit(X[:400])
    AttentionClustering(4, random_state=0, max_iter=5, settings=small).fit(X)
    AttentionClustering(12, random_state=0, max_iter=5, settings=small).fit(X)
    # the default's warm start: KMeans of the sample, n_init="auto" = 7 seedings (it
    # chooses its shape); above the threshold the sample is 256 rows per head, at most the
    # threshold, and with ten heads or more (the swaps) the seedings one per five sample
    # sizes of rows
    n_init = small.shape_choice_seedings
    assert seen == [((400, 6), n_init), ((500, 6), n_init),
                    ((500, 6), max(1, min(n_init, len(X) // (small.seeding_rows * 500))))]
    assert seen[-1][1] < n_init


def test_pass_bytes_match_the_reduced_buffer():
    X = torch.randn(50, 5, dtype=torch.float64)
    heads = ac.normalize(torch.randn(3, 5, dtype=torch.float64))
    for penalty in (None, "balance"):
        sizes = []
        fixed_point._risk_pass(X, (X * X).sum(1), heads, 2.0, chunk=50, penalty=penalty,
                              rho=0.1, reduce=lambda t, s=sizes: s.append(t.numel() * 8) or t,
                              n_total=50)
        assert sizes == [pass_bytes(3, 5, penalty=penalty)]


# -- data-parallel pgd: simulated ranks ------------------------------------------------------
def _pgd_simulated(X, bounds, heads0, *, seed=None, **kwargs):
    """``pgd`` on the shards ``X[start:stop]``, one thread per shard, summing through ``reduce``."""
    world = len(bounds)
    group = _ThreadGroup(world)
    streams = np.random.default_rng(seed).spawn(world)

    def body(r):
        reduce = lambda t: group._exchange(r, t, lambda s: sum(s[1:], s[0]))  # noqa: E731
        return ac.pgd(X[slice(*bounds[r])], heads0, reduce=reduce, rng=streams[r], **kwargs)
    return _run_ranks(group, body), group


UNEQUAL = [(0, 300), (300, 1250), (1250, 2001)]          # shards of unequal sizes


@pytest.mark.parametrize("penalty", [None, "repulsion", "balance"])
def test_pgd_simulated_ranks_match_one_process(data, penalty):
    _, X = data
    heads0 = ac.init_on_sphere(4, X.shape[1], rng=3)
    kwargs = dict(inverse_temperature=5.0, step_size=0.5, n_steps=30, record_every=10,
                  penalty=penalty, rho=0.2)
    one = ac.pgd(X, heads0, **kwargs)
    results, group = _pgd_simulated(X, UNEQUAL, heads0, **kwargs)
    assert one.history.risk[-1] < one.history.risk[0] - 1e-3   # it moved: a real check
    htol, rtol = _pgd_tols(X, heads0, 5.0, 0.5, 30, penalty)  # shards' sums, other order
    for res in results:   # every rank applies the same reduced step: the same bits
        torch.testing.assert_close(res.heads, results[0].heads, rtol=0, atol=0)
        np.testing.assert_array_equal(res.history.risk, results[0].history.risk)
        torch.testing.assert_close(res.heads, one.heads, rtol=0, atol=htol)
        np.testing.assert_allclose(res.history.risk, one.history.risk, rtol=0, atol=rtol)
        np.testing.assert_allclose(res.history.grad_norm, one.history.grad_norm, rtol=1e-8)
    # one all-reduce of 1 + K d numbers per step (+ K for balance), + the row count
    per_step = 1 + 4 * X.shape[1] + (4 if penalty == "balance" else 0)
    assert group.bytes == 8 * (1 + (kwargs["n_steps"] + 1) * per_step)


def test_pgd_simulated_minibatch_is_stratified(data, monkeypatch):
    _, X = data
    heads0 = ac.init_on_sphere(3, X.shape[1], rng=4)
    kwargs = dict(inverse_temperature=5.0, step_size=0.3, n_steps=12, record_every=4)
    # a global batch of all rows: every shard draws all its rows, weighted n_r / n
    whole, _ = _pgd_simulated(X, UNEQUAL, heads0, batch_size=len(X), seed=0, **kwargs)
    full = ac.pgd(X, heads0, **kwargs)
    htol, rtol = _pgd_tols(X, heads0, 5.0, 0.3, 12)  # weighted shard sums, other order
    torch.testing.assert_close(whole[0].heads, full.heads, rtol=0, atol=htol)
    drawn, real = [], risk_module.empirical_risk

    def spy(heads, xb, *, inverse_temperature, **kw):  # the steps' calls: no batch_size keyword
        if "batch_size" not in kw:
            drawn.append(xb.shape[0])
        return real(heads, xb, inverse_temperature=inverse_temperature, **kw)
    monkeypatch.setattr(risk_module, "empirical_risk", spy)
    sgd, _ = _pgd_simulated(X, UNEQUAL, heads0, batch_size=300, seed=1, **kwargs)
    # each shard draws its share round(300 n_r / n) of the global batch of 300 rows
    assert sorted(set(drawn)) == [45, 113, 142]
    for res in sgd:   # independent streams per rank, yet the same step on every rank
        torch.testing.assert_close(res.heads, sgd[0].heads, rtol=0, atol=0)
        np.testing.assert_array_equal(res.history.risk, sgd[0].history.risk)
    # the recorded risk is the global full-data risk at the recorded heads
    assert abs(sgd[0].history.risk[-1] - float(real(sgd[0].heads, X, inverse_temperature=5.0))) \
        < _pgd_tols(X, heads0, 5.0, 0.3, 0)[1]  # the shards' sums against one sum
    assert not torch.equal(sgd[0].heads, full.heads)          # a stochastic path
    assert ac.centroid_distance(sgd[0].heads, full.heads).max < 0.2


def test_pgd_reduce_bad_inputs(data):
    _, X = data
    mix = ac.GaussianMixture.orthogonal(d=6, k=2)
    with pytest.raises(ValueError, match="GaussianMixture"):
        ac.pgd(mix, ac.init_on_manifold(mix, rng=0), inverse_temperature=1.0, reduce=lambda t: t)
    with pytest.raises(ValueError, match="reduce must be a callable"):
        ac.pgd(X, ac.init_on_sphere(2, 6, rng=0), inverse_temperature=1.0, reduce=3)
    with pytest.raises(ValueError, match="initialized process group"):
        pgd_distributed(X, ac.init_on_sphere(2, 6, rng=0), inverse_temperature=1.0)


def test_pgd_reduce_of_one_rank_is_pgd(data):
    _, X = data
    heads0 = ac.init_on_sphere(2, X.shape[1], rng=0)
    kwargs = dict(inverse_temperature=3.0, n_steps=10, batch_size=200, rng=5)
    # one rank: n_r / n = 1 and the reduce is the identity, the same operations: exact
    torch.testing.assert_close(ac.pgd(X, heads0, reduce=lambda t: t.clone(), **kwargs).heads,
                               ac.pgd(X, heads0, **kwargs).heads, rtol=0, atol=0)


# -- real processes, gloo on loopback ----------------------------------------------------
@pytest.mark.slow
def test_pgd_two_processes_match_one_process(data, tmp_path):
    path, X = data
    heads0 = ac.init_on_sphere(4, X.shape[1], rng=3)
    full = dict(inverse_temperature=5.0, step_size=0.5, n_steps=40, record_every=10)
    sgd = dict(inverse_temperature=5.0, step_size=0.3, n_steps=20, record_every=10, batch_size=256,
               rng=0)
    spec = json.dumps({"heads0": heads0.tolist(), "full": full, "sgd": sgd})
    results = _finish(_launch("pgd", path, tmp_path / "p", extra=(spec,)), timeout=120)
    assert all(rc == 0 for rc, _, _ in results), [err[-1500:] for _, _, err in results]
    r0, r1 = (np.load(tmp_path / f"p.pgd{r}.npz") for r in range(2))
    for key in ("full", "full_risk", "sgd", "sgd_risk"):      # identical on every rank
        np.testing.assert_array_equal(r0[key], r1[key])
    one = ac.pgd(X, heads0, **full)
    htol, rtol = _pgd_tols(X, heads0, 5.0, 0.5, 40)  # two shards' sums, other order
    np.testing.assert_allclose(r0["full"], one.heads.numpy(), atol=htol, rtol=0)
    np.testing.assert_allclose(r0["full_risk"], one.history.risk, rtol=0, atol=rtol)
    assert abs(r0["sgd_risk"][-1] - float(ac.empirical_risk(
        torch.from_numpy(r0["sgd"]), X, inverse_temperature=5.0))) < _pgd_tols(
            X, heads0, 5.0, 0.3, 0)[1]
    assert r0["sgd_risk"][-1] < r0["sgd_risk"][0]


# -- real processes, gloo on loopback ----------------------------------------------------
@pytest.mark.slow
def test_torchrun_cli_matches_single_process(data, tmp_path):
    path, X = data
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           "-m", "attnclust", "fit", str(path), "-k", "4", "--seed", "5", "--distributed",
           "--timeout", "30", "--out", str(tmp_path / "dp"), "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote ") == 1 and "ranks=2 (gloo)" in proc.stdout
    one = AttentionClustering(4, random_state=5).fit(X)
    np.testing.assert_allclose(np.load(tmp_path / "dp.centers.npy"), one.cluster_centers_,
                               atol=1e-6, rtol=0)
    # off near ties (the centers agree to 1e-6; the argmax does not depend on lambda)
    _assert_labels_off_ties(np.load(tmp_path / "dp.labels.npy"),
                            _holding(one, np.load(tmp_path / "dp.centers.npy")), one, X)


@pytest.mark.slow
def test_api_two_processes_identical_centers(data, tmp_path):
    path, X = data
    results = _finish(_launch("fit", path, tmp_path / "c"), timeout=120)
    assert all(rc == 0 for rc, _, _ in results), [err[-1500:] for _, _, err in results]
    c0, c1 = (np.load(tmp_path / f"c.rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(c0, c1)
    one = AttentionClustering(4, geometry="sphere", init="sphere", normalize="center-scale",
                              penalty="balance", rho=0.05, tol=1e-10, max_iter=200,
                              random_state=7).fit(X)
    np.testing.assert_allclose(c0, one.cluster_centers_, atol=1e-6, rtol=0)
    labels = np.concatenate([np.load(tmp_path / f"c.labels{r}.npy") for r in range(2)])
    # off near ties (the argmax does not depend on lambda)
    _assert_labels_off_ties(labels, _holding(one, c0), one, X)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["crash", "hang"])
def test_a_failing_rank_stops_the_others(data, tmp_path, mode):
    path, _ = data
    procs = _launch(mode, path, tmp_path / "c")
    start = time.monotonic()
    rc0, _, err0 = _finish(procs[:1], timeout=90)[0]
    elapsed = time.monotonic() - start
    for p in procs[1:]:                               # the hanging rank is ours to stop
        p.kill()
        p.wait()
    assert rc0 != 0
    assert "DistributedError" in err0 and "rank 0" in err0, err0[-1500:]
    assert elapsed < 60
    assert not (tmp_path / "c.rank0.npy").exists()


def _cli_ranks(paths, tmp_path, *, world: int = 2, extra: tuple = (), timeout: str = "20"):
    """``attnclust fit --distributed`` on ``world`` ranks; rank r reads ``paths[r]``."""
    port = _free_port()
    return [subprocess.Popen([sys.executable, "-m", "attnclust", "fit", str(paths[r]), "-k", "2",
                              "--distributed", "--timeout", timeout, "--out",
                              str(tmp_path / "o"), *extra],
                             env=_env(r, world, port), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


@pytest.mark.slow
def test_cli_rank_without_data_stops_every_rank(data, tmp_path):
    path, _ = data
    missing = tmp_path / "missing.npy"
    results = _finish(_cli_ranks([path, missing], tmp_path), timeout=90)
    for rc, _, err in results:          # the same status and the same one line on every rank
        assert rc == 2 and err == f"attnclust fit: error: rank 1: {missing}: no such file\n"
    assert not list(tmp_path.glob("o.*"))


def _bad_file(tmp_path, case: str):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)) + 2.0
    if case == "complex":
        X = X * (1 + 0.5j)                           # one process refuses it; so must every rank
    elif case == "timedelta":
        X = np.arange(60).reshape(20, 3).astype("timedelta64[s]")
    elif case == "nan on rank 1":
        X[13, 1] = np.nan                            # row 14 of the file, in rank 1's half
    elif case == "zero row on rank 1":
        X[17] = 0.0
    elif case == "fewer rows than ranks":
        X = X[:1]
    path = tmp_path / "bad.npy"
    np.save(path, X)
    return path


_BAD_DATA = {
    "complex": "complex array (dtype complex128); the data must be real numbers",
    "timedelta": "non-numeric array of dtype timedelta64[s]",
    "nan on rank 1": "NaN or inf at row 14, column 2",
    "zero row on rank 1": "row 18 is all zeros",
    "fewer rows than ranks": "1 rows, fewer rows than ranks (2); run at most 1 processes",
}


@pytest.mark.parametrize("case", list(_BAD_DATA))
def test_each_rank_checks_its_rows_like_one_process(tmp_path, case):
    """The checks every rank runs on its rows before the fit (rows counted in the file)."""
    from types import SimpleNamespace

    from attnclust.cli.fit_distributed import load_shard

    path = _bad_file(tmp_path, case)
    args = SimpleNamespace(data=str(path), normalize="auto", geometry="sphere", header="auto",
                           weight_column=None, sample_weight=None)
    failing = []
    for rank in range(2):
        try:
            load_shard(args, rank, 2)
        except ValueError as exc:
            failing.append(rank)
            assert str(exc).startswith(f"{path}: ") and _BAD_DATA[case] in str(exc)
    assert failing == ([1] if "rank 1" in case else [0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("case, message", [
    ("complex", _BAD_DATA["complex"]),                               # every rank fails
    ("nan on rank 1", "rank 1: {path}: NaN or inf at row 14, column 2"),   # one rank fails
])
def test_cli_bad_data_gives_every_rank_status_2_and_the_same_line(tmp_path, case, message):
    path = _bad_file(tmp_path, case)
    results = _finish(_cli_ranks([path, path], tmp_path), timeout=90)
    lines = [err.strip().splitlines() for _, _, err in results]
    assert [rc for rc, _, _ in results] == [2, 2], lines
    assert all(len(ln) == 1 for ln in lines) and lines[0] == lines[1], lines
    assert lines[0][0].startswith("attnclust fit: error: ")
    assert message.format(path=path) in lines[0][0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npy"]


@pytest.mark.slow
def test_under_torchrun_our_line_comes_before_the_launchers_report(tmp_path):
    """What a user of torchrun sees for bad data: our line from each rank, then torchrun's."""
    path = _bad_file(tmp_path, "nan on rank 1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           "-m", "attnclust", "fit", str(path), "-k", "2", "--distributed", "--timeout", "30"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    lines = proc.stderr.splitlines()
    ours = f"attnclust fit: error: rank 1: {path}: NaN or inf at row 14, column 2"
    # the first rank to exit has printed its line; torchrun may stop the other one with
    # SIGTERM before it prints the same line (it then says it was interrupted)
    assert lines[0] == ours, proc.stderr[-2000:]
    assert set(lines[1:2]) <= {ours, "attnclust: interrupted"} or "torch" in lines[1]
    assert proc.returncode == 1 and "exitcode  : 2" in proc.stderr   # torchrun's summary


@pytest.mark.slow
def test_cli_failure_after_the_checks_leaves_no_folder_behind(data, tmp_path):
    """Rank 0 creates the output folder when it checks it; a later failure removes it."""
    path, _ = data
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "attnclust", "fit", str(path), "-k",
                               "3000", "--distributed", "--timeout", "20", "--out",
                               str(tmp_path / "new" / "o")],
                              env=_env(r, 2, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = _finish(procs, timeout=90)
    for rc, _, err in results:          # the estimator refuses K > n on every rank
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert "n_clusters" in err or "--n-clusters" in err
    assert list(tmp_path.iterdir()) == []


def test_shard_rows_refuses_what_one_process_refuses(tmp_path):
    for case in ("complex", "timedelta"):
        path = _bad_file(tmp_path, case)
        with pytest.raises(ValueError, match="complex array|non-numeric array"):
            shard_rows(path, 0, 2)
    with open(tmp_path / "huge.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 8)})
    with pytest.raises(ValueError, match="truncated or inconsistent"):
        shard_rows(tmp_path / "huge.npy", 0, 2)


@pytest.mark.parametrize("timeout", ["inf", "1e20", "nan", "0", "-5"])
def test_cli_timeout_out_of_range_is_a_usage_error(data, capsys, timeout):
    from attnclust.cli import main

    assert main(["fit", str(data[0]), "-k", "2", "--distributed", "--timeout", timeout]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout must be a positive number of seconds, at most 1e+07" \
        in err[0]


@pytest.mark.slow
def test_rendezvous_that_never_appears_is_one_line_within_the_timeout(data, tmp_path):
    """Rank 1 of 2 alone: rank 0 (the store) never starts."""
    path, _ = data
    proc = subprocess.Popen([sys.executable, "-m", "attnclust", "fit", str(path), "-k", "2",
                             "--distributed", "--timeout", "3", "--out", str(tmp_path / "o")],
                            env=_env(1, 2, _free_port()), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    rc, _, err = _finish([proc], timeout=60)[0]
    elapsed = time.monotonic() - start
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "rank 1/2: no rendezvous at 127.0.0.1:" in err and "within 3 s" in err
    assert elapsed < 3 + 15            # the timeout plus start-up, not twice the timeout


def test_cli_distributed_without_launcher_is_a_clear_error(data, capsys, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    from attnclust.cli import main

    assert main(["fit", str(data[0]), "-k", "2", "--distributed"]) == 2
    assert "torchrun" in capsys.readouterr().err


# -- devices: the same checks on CPU and, where present, CUDA --------------------------------
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_estimator_on_device(data, device):
    _, X = data
    ref = AttentionClustering(4, random_state=0).fit(X)
    est = AttentionClustering(4, random_state=0, device=device).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, atol=1e-8)
    assert isinstance(est.cluster_centers_, np.ndarray)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_pgd_on_device(device):
    mix = ac.GaussianMixture.orthogonal(d=5, k=2, sigma=0.2)
    X = torch.as_tensor(mix.sample(500, rng=0))
    h0 = ac.init_on_manifold(mix, rng=0)
    ref = ac.pgd(X, h0, inverse_temperature=10.0, step_size=0.5, n_steps=50)
    res = ac.pgd(X.to(device), h0.to(device), inverse_temperature=10.0, step_size=0.5, n_steps=50)
    htol = _pgd_tols(X, h0, 10.0, 0.5, 50)[0]  # another device's sums and kernels
    torch.testing.assert_close(res.heads.cpu(), ref.heads, atol=htol, rtol=0)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_risk_and_layers_on_device(device):
    mix = ac.GaussianMixture.orthogonal(d=6, k=2, sigma=0.3)
    heads = ac.init_on_manifold(mix, rng=1)
    ref = ac.population_risk(heads, mix, inverse_temperature=2.0)
    val = ac.population_risk(heads.to(device), mix, inverse_temperature=2.0)
    # the rule's nodes (k times grid and graded offsets times Gauss points) in another order
    rule = _quadrature.rule()
    nodes = mix.k * (rule.grid.size + rule.offsets.size) * rule.gl_x.size
    scale = _quadrature.second_moment(mix) ** 0.5 + float(heads.norm(dim=1).max())
    assert val.device.type == device
    assert abs(float(val) - float(ref)) < attention_risk_tol(nodes, scale, 2.0, 2, 6)[0]
    X = torch.as_tensor(mix.sample(300, rng=0))
    emp = ac.empirical_risk(heads.to(device), X.to(device), inverse_temperature=2.0)
    scale = float(X.norm(dim=1).max() + heads.norm(dim=1).max())
    assert abs(float(emp) - float(ac.empirical_risk(heads, X, inverse_temperature=2.0))) \
        < attention_risk_tol(len(X), scale, 2.0, 2, 6)[0]  # the rows in another order
    Y = ac.identity_attention(X.to(device), 1.5)
    assert Y.device.type == device
    torch.testing.assert_close(Y.cpu(), ac.identity_attention(X, 1.5))
    layer = ac.AttentionHeads(heads, inverse_temperature=2.0).to(device)
    out = layer(X.to(device))
    assert out.device.type == device
    torch.testing.assert_close(out.detach().cpu(), ac.attention_heads(X, heads,
                                                                      inverse_temperature=2.0))


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_quantizer_on_device(device):
    X = ac.GaussianMixture.orthogonal(d=6, k=2, sigma=0.3).sample(400, rng=0)
    ref = ac.identity_attention(X, 0.8)
    out = ac.AttentionQuantizer(inverse_temperature=0.8, device=device).fit_transform(X)
    assert isinstance(out, np.ndarray)
    # softmax(lambda X X^T) X on another device: sums of n rows of size r, inner products
    # of length d, the softmax's condition lambda r^2 (r the largest row norm)
    r = float(np.linalg.norm(X, axis=1).max())
    np.testing.assert_allclose(out, ref, rtol=0,
                               atol=(len(X) + X.shape[1] + 0.8 * r * r) * eps() * r)


def test_balance_on_a_shard_counts_its_share_of_the_rows():
    """Balance(X_shard, reduce=f) alone: W identical shards (reduce = W * t) must give the
    penalty and the summed gradient of Balance on the rows themselves, not W times them."""
    X = ac.GaussianMixture.orthogonal(d=5, k=3, sigma=0.3).sample(400, rng=0)
    heads = torch.stack([ac.init_on_sphere(3, 5, rng=r) for r in range(2)])
    lam = torch.tensor([3.0, 8.0], dtype=torch.float64)
    whole = ac.Balance(X).value_and_grad(heads, lam)
    W = 4
    shard = ac.Balance(X, reduce=lambda t: W * t).value_and_grad(heads, lam)
    assert float(whole.value.min()) > 1e-4  # a penalty far from zero: the check can fail
    # W = 4 and n W = 1600: scalings by a power of 2, otherwise the same operations: exact
    torch.testing.assert_close(shard.value, whole.value, rtol=0, atol=0)
    torch.testing.assert_close(W * shard.grad, whole.grad, rtol=0, atol=0)


def test_every_public_name_of_distributed_is_used():
    """No dead public name: each name of attnclust.cluster.distributed.__all__ is used by the rest
    of the package or by the tests."""
    root = Path(ac.__file__).parent
    text = "".join(p.read_text() for p in [*root.rglob("*.py"), *Path(__file__).parent.glob("*.py")]
                   if p.name not in ("distributed.py", "test_distributed.py"))
    text += Path(__file__).read_text().split("def test_every_public_name_of_distributed")[0]
    unused = [name for name in ac.cluster.distributed.__all__ if name not in text]
    assert unused == []


def test_a_communicator_whose_counts_disagree_with_the_rows_is_refused():
    """n_total is every rank's rows: a local communicator of 10**6 rows over 2,000 fitted
    them with sums divided by 10**6 (centres 1.04 off), one of 50 failed inside torch."""
    X = np.random.default_rng(0).normal(size=(200, 2))
    for comm in (Communicator.local(10**6), Communicator.local(50)):
        with pytest.raises(ValueError, match=r"comm: the ranks hold 200 rows, but n_total"):
            AttentionClustering(2, random_state=0).fit(X, comm=comm)

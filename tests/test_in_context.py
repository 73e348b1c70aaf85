"""Identity attention: backends against an independent reference, the infinite-prompt
limit, quantization measured by the metrics, and input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import attnclust as ac
from _tolerance import eps
from attnclust.study.in_context import fused_available, identity_attention, infinite_prompt_limit
from attnclust.study.metrics import count_clusters, limit_distance, spread_ratio

SIGMA = 0.3
LAM = 1.0 / (1.0 + 2.0 * SIGMA**2)  # the running example's inverse temperature
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def mix():
    return ac.GaussianMixture.orthogonal(d=10, k=2, sigma=SIGMA)


def _tol(X, lam, steps=1, dtype=np.float64):
    """Outputs of two computations of ``steps`` steps ``x <- sum_j softmax(lam <x, x_j>)
    x_j`` over prompts of ``L`` tokens (backends, chunks, the loop): each step is a weighted
    mean of ``L`` tokens of norm at most ``r``, within ``(L + d + lam r^2) eps r`` (the sum,
    inner products of length ``d``, the softmax's condition), and moves the next step by
    at most ``1 + 2 lam r^2`` times its input's error (the weighted mean's Lipschitz
    constant)."""
    X = np.asarray(X.cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    L, d = X.shape[-2:]
    r = max(float(np.linalg.norm(X, axis=-1).max()), 1.0)      # renormalized rows: 1
    one = (L + d + lam * r * r) * eps(dtype) * r
    return one * sum((1 + 2 * lam * r * r) ** j for j in range(steps))


def loop_reference(X: np.ndarray, lam: float, exclude_self: bool = False) -> np.ndarray:
    """Q(X)_i token by token, written from the formula with NumPy only."""
    out = np.empty_like(X)
    for i, x in enumerate(X):
        logits = lam * (X @ x)
        if exclude_self:
            logits[i] = -np.inf
        w = np.exp(logits - logits.max())
        out[i] = (w / w.sum()) @ X
    return out


# -- the reference ---------------------------------------------------------------------
@pytest.mark.parametrize("exclude_self", [False, True])
def test_dense_matches_the_formula(mix, exclude_self):
    X = mix.sample(40, rng=1)
    np.testing.assert_allclose(identity_attention(X, 2.0, backend="dense",
                                                  exclude_self=exclude_self),
                               loop_reference(X, 2.0, exclude_self), rtol=0, atol=_tol(X, 2.0))


# -- backends agree ----------------------------------------------------------------------
CASES = [  # (backend, chunk_size)
    ("fused", None),
    ("chunked", None),
    ("chunked", 37),  # blocks that do not divide L, diagonal crossing block edges
    ("chunked", (16, 64)),
    ("auto", None),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(("backend", "chunk_size"), CASES)
def test_backends_agree_with_dense(mix, dtype, exclude_self, batched, backend, chunk_size):
    if backend == "fused" and exclude_self:
        pytest.skip("fused refuses exclude_self (tested below)")
    X = torch.as_tensor(mix.sample_prompts(3, 150, rng=2) if batched else mix.sample(150, rng=2),
                        dtype=dtype)
    ref = identity_attention(X, LAM, exclude_self=exclude_self, backend="dense")
    out = identity_attention(X, LAM, exclude_self=exclude_self, backend=backend,
                             chunk_size=chunk_size)
    assert out.dtype == dtype and out.shape == X.shape
    torch.testing.assert_close(out, ref, rtol=0, atol=_tol(X, LAM, dtype=dtype))


def test_the_fused_kernel_over_blocks_of_queries_is_each_row_s_attention(mix):
    """9,000 tokens: the fused backend calls the kernel on blocks of queries against all
    keys (an interrupt is handled between calls); every row's attention is the chunked
    online softmax's, to the same rounding bound as the backends' agreement above."""
    from attnclust.study.in_context import _FUSED_SCORES

    X = torch.as_tensor(mix.sample(9000, rng=4), dtype=torch.float64)
    assert _FUSED_SCORES // len(X) < len(X)              # more than one call
    out = identity_attention(X, LAM, backend="fused")
    ref = identity_attention(X, LAM, backend="chunked")
    torch.testing.assert_close(out, ref, rtol=0, atol=_tol(X, LAM))


@pytest.mark.parametrize("backend", ["fused", "chunked"])
def test_repeated_steps_and_renormalization_agree(mix, backend):
    X = mix.sample(120, rng=3)
    kw = dict(n_steps=4, renormalize=True)
    out = identity_attention(X, 3.0, backend=backend, **kw)
    np.testing.assert_allclose(out, identity_attention(X, 3.0, backend="dense", **kw), rtol=0,
                               atol=_tol(X, 3.0, steps=4))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=0,
                               atol=(X.shape[1] + 2) * np.finfo(float).eps)  # a norm, a quotient
    # n_steps applications are n_steps compositions of one step
    step = X
    for _ in range(4):
        step = loop_reference(step, 3.0)
        step /= np.linalg.norm(step, axis=1, keepdims=True)
    np.testing.assert_allclose(out, step, rtol=0, atol=_tol(X, 3.0, steps=4))


@pytest.mark.parametrize("exclude_self", [False, True])
def test_chunked_survives_scores_that_grow_along_the_prompt(exclude_self):
    # Token norms grow along the prompt, so every later key block holds scores far above
    # the running normalizer of the first: the optimistic exponentials overflow and the
    # exact (running maximum) path must take over.
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 5)) * np.linspace(0.1, 6.0, 300)[:, None]
    ref = loop_reference(X, 5.0, exclude_self)
    for dtype, tol in ((np.float64, _tol(X, 5.0) / np.abs(ref).max()), (np.float32, 1e-3)):
        out = identity_attention(X.astype(dtype), 5.0, backend="chunked",
                                 exclude_self=exclude_self, chunk_size=32)
        assert np.all(np.isfinite(out))
        # float32 scores reach ~1e3 here; its rounding of them sets the tolerance
        np.testing.assert_allclose(out, ref, rtol=0, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("chunk_size", [1, (1, 3), (5, 1)])
def test_chunked_with_one_token_blocks(exclude_self, chunk_size):
    # blocks holding a single key: with exclude_self a row's first block can be all -inf
    X = np.random.default_rng(10).standard_normal((2, 13, 3))
    out = identity_attention(X, 1.5, backend="chunked", exclude_self=exclude_self,
                             chunk_size=chunk_size)
    for b in range(2):
        np.testing.assert_allclose(out[b], loop_reference(X[b], 1.5, exclude_self), rtol=0,
                                   atol=_tol(X[b], 1.5))


def test_exclude_self_two_tokens_swap():
    X = np.array([[1.0, 2.0], [3.0, -1.0]])
    for backend in ("dense", "chunked", "auto"):   # weights exactly 1 and 0: exact outputs
        np.testing.assert_array_equal(
            identity_attention(X, 7.0, exclude_self=True, backend=backend), X[::-1])


# -- which kernel runs -----------------------------------------------------------------
def _sdpa_ops(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if "attention" in e.key}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(200, 10), (3, 200, 10)])
def test_fused_runs_the_flash_kernel_not_the_math_fallback(dtype, shape):
    # A non-contiguous input, the one a naive (B, L, d) -> (B, 1, L, d) view gives
    # after a transpose, is exactly what makes the dispatcher fall back to math.
    X = torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=dtype).transpose(-1, -2)
    ops = _sdpa_ops(lambda: identity_attention(X, 1.0, backend="fused"))
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops, ops
    assert not any("math" in op for op in ops), ops
    # the detector tells the kernels apart: forced onto math, the op names change
    q = X.unsqueeze(-3).contiguous()
    with sdpa_kernel(SDPBackend.MATH):
        ops = _sdpa_ops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert "aten::_scaled_dot_product_attention_math" in ops
    assert not any("flash" in op for op in ops), ops


def test_auto_uses_fused_without_exclude_self_and_never_an_l_by_l_mask():
    X = torch.randn(300, 8, dtype=torch.float64)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in _sdpa_ops(
        lambda: identity_attention(X, 1.0))
    assert not _sdpa_ops(lambda: identity_attention(X, 1.0, exclude_self=True))


def _largest_allocation(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(e.cpu_memory_usage for e in prof.events())


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "exclude_self"), [("fused", False), ("chunked", False),
                                                      ("chunked", True)])
def test_fused_and_chunked_memory_grows_linearly_not_quadratically(backend, exclude_self):
    # Largest single allocation at L and 4L: an L x L matrix would grow 16x; what these
    # backends allocate (O(L d) tensors, fixed-size blocks or kernel workspaces) at most 4x.
    def largest(L, backend):
        X = torch.randn(L, 10, dtype=torch.float64)
        return _largest_allocation(lambda: identity_attention(
            X, 1.0, backend=backend, exclude_self=exclude_self, chunk_size=(500, 500)))

    assert largest(4000, "dense") >= 4000**2 * 8  # the detector sees an L x L matrix
    small, big = largest(1000, backend), largest(4000, backend)
    assert big <= 4.2 * small, (small, big)
    assert big < 4000**2 * 8 / 20, big


def test_fused_refuses_exclude_self():
    with pytest.raises(ValueError, match="exclude_self"):
        identity_attention(np.eye(3), 1.0, backend="fused", exclude_self=True)


def test_fused_availability_table():
    assert fused_available(torch.float32, "cpu") and fused_available(torch.float64, "cpu")
    assert fused_available(torch.float32, "cuda") and not fused_available(torch.float64, "cuda")


# -- types -------------------------------------------------------------------------------
def test_numpy_in_numpy_out_keeps_float32():
    X = np.random.default_rng(0).standard_normal((20, 3))
    assert identity_attention(X, 1.0).dtype == np.float64
    out32 = identity_attention(X.astype(np.float32), 1.0)
    assert isinstance(out32, np.ndarray) and out32.dtype == np.float32
    assert identity_attention(X.tolist(), 1.0).dtype == np.float64


def test_autograd_through_dense_and_fused():
    X = torch.randn(30, 4, dtype=torch.float64, requires_grad=True)
    for backend in ("dense", "fused"):
        assert torch.autograd.gradcheck(
            lambda x, b=backend: identity_attention(x, 0.7, backend=b), (X,))
    with pytest.raises(ValueError, match="autograd"):
        identity_attention(X, 1.0, backend="chunked")


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_cuda_backends_agree_with_cpu_dense(mix, dtype, exclude_self):
    X = torch.as_tensor(mix.sample_prompts(2, 500, rng=5), dtype=dtype)
    ref = identity_attention(X, LAM, backend="dense", exclude_self=exclude_self)
    backends = ["auto", "dense", "chunked"]
    if not exclude_self and fused_available(dtype, "cuda"):
        backends.append("fused")
    for backend in backends:
        out = identity_attention(X.cuda(), LAM, backend=backend, exclude_self=exclude_self)
        assert out.device.type == "cuda" and out.dtype == dtype
        # float32 on CUDA may use TF32-free kernels with other summation orders
        torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=_tol(X, LAM, dtype=dtype))


@cuda
def test_cuda_fused_float64_refuses_instead_of_falling_back():
    with pytest.raises(ValueError, match="fused"):
        identity_attention(torch.eye(4, dtype=torch.float64, device="cuda"), 1.0,
                           backend="fused")


# -- the infinite-prompt limit -----------------------------------------------------------
def test_limit_matches_gaussian_tilting_by_monte_carlo():
    # Independent route: E[X e^{lam<x,X>}] / E[e^{lam<x,X>}] by plain Monte Carlo on
    # 400,000 tokens, against the closed form. Monte Carlo error ~ 1/sqrt(n) ~ 2e-3.
    mix = ac.GaussianMixture(np.array([[0.0, 1.0, 0.0], [0.6, -0.8, 0.0]]), sigma=0.4,
                             weights=[0.3, 0.7])
    tokens = mix.sample(400_000, rng=6)
    queries = np.array([[0.2, 0.5, -0.1], [1.0, 0.0, 0.3]])
    for x in queries:
        w = np.exp(1.3 * tokens @ x)
        mc = (w @ tokens) / w.sum()
        np.testing.assert_allclose(infinite_prompt_limit(x, mix, inverse_temperature=1.3), mc,
                                   atol=1e-2)
    batch = infinite_prompt_limit(torch.as_tensor(queries), mix, inverse_temperature=1.3)
    assert isinstance(batch, torch.Tensor) and batch.shape == (2, 3)


def test_limit_of_the_dirac_mixture_is_the_posterior_mean():
    mix = ac.GaussianMixture.antipodal(d=2, sigma=0.0)
    x = np.array([0.3, 0.0])
    expected = np.tanh(0.3 * 2.0) * np.array([1.0, 0.0])  # softmax of +-0.6 on +-e_1
    # a softmax of two terms against tanh: a few roundings of terms at most 1
    np.testing.assert_allclose(infinite_prompt_limit(x, mix, inverse_temperature=2.0), expected,
                               rtol=0, atol=4 * np.finfo(float).eps)


def test_finite_prompts_converge_to_the_limit_like_one_over_sqrt_l(mix):
    # The output is a self-normalized Monte Carlo estimate over L tokens, so its error is
    # ~ c / sqrt(L) (plus an O(1/L) bias, from the ratio and from the token's own term).
    # Measured over three seeds: slopes of log(error) vs log(L) in [-0.57, -0.54] and
    # sqrt(L) * error between 0.94 and 1.31. We assert the slope within +-0.15 of -1/2
    # (the O(1/L) bias steepens it at L = 100) and sqrt(L) * error constant within a
    # factor 1.6, which leaves about 5x the seed-to-seed spread we measured.
    lengths, batches = (100, 1000, 10_000), (16, 4, 1)
    errors = []
    for L, B in zip(lengths, batches, strict=True):
        X = mix.sample_prompts(B, L, rng=L)
        errors.append(limit_distance(X, identity_attention(X, LAM), mix,
                                     inverse_temperature=LAM).mean)
    errors = np.array(errors)
    assert np.all(np.diff(errors) < 0), errors
    slope = np.polyfit(np.log(lengths), np.log(errors), 1)[0]
    assert -0.65 <= slope <= -0.35, (slope, errors)
    scaled = errors * np.sqrt(lengths)
    assert scaled.max() / scaled.min() < 1.6, scaled


# -- quantization, measured by the metrics ------------------------------------------------
def test_outputs_of_one_cluster_are_squeezed(mix):
    # Measured on the running example (L = 500): the within-cluster spread of the
    # outputs is 2.2% of that of the inputs (and 2.3% for the infinite-prompt limit).
    # We assert below 5%, and that the finite prompt agrees with the limit's ratio.
    X, z = mix.sample(500, rng=0, return_labels=True)
    res = spread_ratio(X, identity_attention(X, LAM), z)
    assert res.ratio < 0.05, res
    assert np.all(res.per_cluster < 0.05)
    np.testing.assert_allclose(res.input_spread, 10 * SIGMA**2, rtol=0.1)
    limit = spread_ratio(X, infinite_prompt_limit(X, mix, inverse_temperature=LAM), z)
    assert abs(res.ratio - limit.ratio) < 0.25 * limit.ratio, (res.ratio, limit.ratio)


@pytest.mark.parametrize(("lam", "expected"), [(LAM, 1), (10.0, 2)])
def test_repeated_steps_collapse_or_keep_metastable_clusters(lam, expected):
    # One step moves every token (no two coincide); repeated steps on the sphere merge
    # the two clusters at the running example's inverse temperature, while at lambda = 10 the
    # cross-cluster weight e^{-10} is too small to merge them within 100 steps.
    X = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3).sample(200, rng=8)
    one = identity_attention(X, lam, renormalize=True)
    assert count_clusters(one, tol=1e-3).n_clusters == 200
    counts = [count_clusters(identity_attention(X, lam, n_steps=n, renormalize=True),
                             tol=1e-3).n_clusters for n in (30, 100)]
    assert counts == [expected, expected]


# -- bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(("X", "kwargs", "match"), [
    (np.array([[1.0, np.nan]]), {}, "NaN or inf"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), {}, "NaN or inf"),
    (np.ones(3), {}, "ndim=1"),
    (np.ones((1, 2, 3, 4)), {}, "ndim=4"),
    (np.ones((0, 3)), {}, "empty"),
    (np.ones((3, 0)), {}, "empty"),
    (np.ones((2, 0, 3)), {}, "empty"),
    (np.ones((2, 3)), {"inverse_temperature": 0.0}, "inverse_temperature"),
    (np.ones((2, 3)), {"inverse_temperature": -1.0}, "inverse_temperature"),
    (np.ones((2, 3)), {"inverse_temperature": math.nan}, "inverse_temperature"),
    (np.ones((2, 3)), {"inverse_temperature": "hot"}, "inverse_temperature"),
    (np.ones((2, 3)), {"backend": "flash"}, "backend"),
    (np.ones((2, 3)), {"n_steps": 0}, "n_steps"),
    (np.ones((2, 3)), {"chunk_size": 0}, "chunk_size"),
    (np.ones((1, 3)), {"exclude_self": True}, "at least 2 tokens"),
    ([["a", "b"]], {}, "numeric"),
])
def test_bad_input_names_the_problem(X, kwargs, match):
    kwargs = {"inverse_temperature": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        identity_attention(X, **kwargs)


def test_limit_inputs_are_checked(mix):
    with pytest.raises(ValueError, match="shape"):
        infinite_prompt_limit(np.ones(3), mix, inverse_temperature=LAM)
    with pytest.raises(ValueError, match="inverse_temperature"):
        infinite_prompt_limit(np.ones(10), mix, inverse_temperature=0.0)


# -- overflow and memory: refused, never NaN or an allocator crash (issue 10) --------------
@pytest.mark.parametrize("backend", ["dense", "fused", "chunked"])
@pytest.mark.parametrize("scale, lam", [(1e200, 1.0), (1.0, 1e308), (1e20, 1.0)])
def test_overflowing_scores_raise_instead_of_nan(backend, scale, lam):
    X = np.random.default_rng(0).normal(size=(30, 3))
    X = (X * scale).astype(np.float32) if scale == 1e20 else X * scale   # float32 overflows
    with pytest.raises(ValueError, match=r"non-finite values \(overflow\) at step 1") as info:
        identity_attention(X, lam, backend=backend)
    assert ("float32" if scale == 1e20 else "float64") in str(info.value)


def test_scores_near_the_limit_but_finite_are_exact():
    """No false alarm: 1e150-scaled orthogonal tokens have scores 0 and 1e300, both finite."""
    X = np.array([[1.0, 0.0], [0.0, 1.0]]) * 1e150
    for backend in ("dense", "fused", "chunked"):   # weights exactly 1 and 0 (exp(-1e300))
        np.testing.assert_array_equal(identity_attention(X, 1.0, n_steps=3, backend=backend),
                                      X)
    with pytest.raises(ValueError, match="at step 1"):
        identity_attention(X * 1e5, 1.0, n_steps=3)


@pytest.mark.parametrize("exclude_self, fits", [(False, "'fused' or 'chunked'"),
                                                (True, "'chunked' (memory")])
def test_dense_refuses_when_its_matrices_do_not_fit(monkeypatch, exclude_self, fits):
    from attnclust.study import in_context

    monkeypatch.setattr(in_context, "_available_memory", lambda device: 10 * 2**20)   # 10 MiB
    X = np.random.default_rng(0).normal(size=(2, 1000, 4))              # 2 x 1000 x 1000
    with pytest.raises(ValueError, match=r"needs 30\.5 MiB" if not exclude_self
                       else r"needs 31\.5 MiB") as info:
        identity_attention(X, 1.0, backend="dense", exclude_self=exclude_self)
    assert "B=2, L=1000, float64" in str(info.value) and fits in str(info.value)
    assert "10.0 MiB of memory available on cpu" in str(info.value)
    # the backends it names do run, and auto never picks dense at this size
    Y = identity_attention(X, 1.0, backend="chunked", exclude_self=exclude_self)
    monkeypatch.undo()
    np.testing.assert_allclose(Y, identity_attention(X, 1.0, backend="dense",
                                                     exclude_self=exclude_self), rtol=0,
                               atol=_tol(X, 1.0))


def test_available_memory_is_a_positive_number_here():
    from attnclust.study.in_context import _available_memory, dense_bytes

    free = _available_memory(torch.device("cpu"))
    assert free is None or free > 0
    assert dense_bytes((100_000, 16), torch.float64) == 160 * 10**9
    assert dense_bytes((3, 10, 4), torch.float32, exclude_self=True) == 2 * 3 * 100 * 4 + 100


def test_available_memory_on_cuda_is_the_free_device_memory(monkeypatch):
    from attnclust.study.in_context import _available_memory

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * 2**30, 80 * 2**30))
    assert _available_memory(torch.device("cuda", 0)) == 3 * 2**30
    assert _available_memory(torch.device("meta")) is None        # cannot tell: no refusal

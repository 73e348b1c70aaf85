"""AttentionQuantizer: the auto lambda rule, the sigma estimate, the scikit-learn contract."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

import attnclust as ac
from _tolerance import eps, sum_tol
from attnclust.study.in_context import identity_attention
from attnclust.study.quantizer import AttentionQuantizer, estimate_sigma


def _attention_tol(X, lam, steps):
    """Outputs of two computations of ``steps`` steps ``x <- sum_j softmax(lam <x, x_j>) x_j``
    (chunks against dense, another process): each step is a weighted mean of ``n`` rows of
    norm at most ``r``, within ``(n + d + lam r^2) eps r`` (the sum, the inner products,
    the softmax's condition), and moves the next step's output by at most ``1 + 2 lam r^2``
    times its input's error (the weighted mean's Lipschitz constant)."""
    X = np.asarray(X)
    r = float(np.linalg.norm(X, axis=1).max())
    one = (len(X) + X.shape[1] + lam * r * r) * eps() * r
    return one * sum((1 + 2 * lam * r * r) ** j for j in range(steps))


@pytest.mark.parametrize(("mix", "n"), [
    (ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3), 2000),  # the running example
    (ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.1), 2000),
    (ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.6), 2000),
    (ac.GaussianMixture.antipodal(d=2, sigma=0.2), 2000),  # d = K: no noise-only direction
    (ac.GaussianMixture.random(d=3, k=6, sigma=0.1, min_angle=0.8, rng=0), 2000),  # d < K
    (ac.GaussianMixture.random(d=50, k=8, sigma=0.2, rng=0), 2000),
])
def test_sigma_estimate_recovers_sigma(mix, n):
    # sigma_hat^2 = (mean ||x||^2 - 1) / d averages n i.i.d. terms of variance
    # 4 s^2 + 2 d s^4 (the cross term 2 s <mu, xi> and the chi-square), so its standard
    # error is sqrt((4 s^2 + 2 d s^4) / n) / d: 0.9% of sigma for the running example,
    # 7% for d = 3, sigma = 0.1. We assert each estimate within 4 standard errors
    # (chance of a false failure over these 18 draws ~ 1e-3), and the running example
    # within 3% of sigma.
    s2, d = mix.sigma**2, mix.d
    se = np.sqrt((4 * s2 + 2 * d * s2**2) / n) / d
    for seed in range(3):
        sigma_hat = estimate_sigma(mix.sample(n, rng=seed))
        assert abs(sigma_hat**2 - s2) < 4 * se, (seed, sigma_hat, se)
        if d == 10 and mix.sigma == 0.3:
            assert sigma_hat == pytest.approx(0.3, rel=0.03)


def test_sigma_estimate_of_the_dirac_mixture_is_zero():
    X = ac.GaussianMixture.orthogonal(d=10, k=3, sigma=0.0).sample(100, rng=0)
    assert estimate_sigma(X) == 0.0
    q = AttentionQuantizer().fit(X)
    assert q.sigma_ == 0.0 and q.inverse_temperature_ == 1.0


def test_sigma_of_rows_whose_squares_overflow_is_their_scale_times_sigma():
    """Rows of 1e200: ``sigma_hat`` is 1e200 times that of the rows (it was inf, the
    squared norms overflowing), and ``"auto"`` says that ``lambda`` leaves float64 (it
    reported ``inverse_temperature ... got 0.0``, which the caller never passed)."""
    X = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=3.0).sample(500, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        big = estimate_sigma(X * 1e200)
        # two sums of the n d squares, one of rows scaled by their largest entry (each
        # square off by 2 u more): 2 sum_tol; the 1 subtracted is 1e-400 of them there
        assert big / 1e200 == pytest.approx(np.sqrt((estimate_sigma(X) ** 2 * 10 + 1) / 10),
                                            rel=2 * sum_tol(X.size))
        q = AttentionQuantizer()
        with pytest.raises(ValueError, match=r"sigma_hat = .* below float64's range"):
            q.fit(X * 1e200)
        assert not hasattr(q, "inverse_temperature_")      # a failed fit leaves it unfitted


def test_auto_inverse_temperature_is_the_running_example_rule():
    mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    X = mix.sample(2000, rng=1)
    q = AttentionQuantizer().fit(X)
    assert q.n_features_in_ == 10
    # four roundings (square, product, sum, quotient), maybe in another order
    assert q.inverse_temperature_ == pytest.approx(1.0 / (1.0 + 2.0 * q.sigma_**2), rel=4 * eps())
    assert q.inverse_temperature_ == pytest.approx(1.0 / (1.0 + 2.0 * 0.3**2), rel=0.01)
    # a refit at a given lambda keeps no estimate of sigma (sigma_ is "auto"'s only)
    q.set_params(inverse_temperature=2.0).fit(X)
    assert q.inverse_temperature_ == 2.0 and not hasattr(q, "sigma_")


def test_transform_is_identity_attention_on_the_prompt():
    mix = ac.GaussianMixture.orthogonal(d=10, k=2, sigma=0.3)
    X, z = mix.sample(300, rng=2, return_labels=True)
    q = AttentionQuantizer(inverse_temperature=2.0, n_steps=2, exclude_self=True, backend="chunked",
                           chunk_size=64)
    Y = q.fit_transform(X)
    assert isinstance(Y, np.ndarray) and not hasattr(q, "sigma_")
    np.testing.assert_allclose(Y, identity_attention(X, 2.0, n_steps=2, exclude_self=True,
                                                     backend="dense"), rtol=0,
                               atol=_attention_tol(X, 2.0, 2))  # chunks against dense
    assert ac.spread_ratio(X, Y, z).ratio < 0.05


def test_float32_is_preserved():
    X = np.random.default_rng(3).standard_normal((50, 4)).astype(np.float32)
    assert AttentionQuantizer(inverse_temperature=1.0).fit_transform(X).dtype == np.float32


def test_scikit_learn_contract():
    # Every check passes but one that cannot hold by design: the output of a token
    # depends on the whole prompt, so transforming a subset changes it.
    expected = {"check_methods_subset_invariance":
                "in-context: each output depends on every token of the prompt"}
    check_estimator(AttentionQuantizer(), expected_failed_checks=expected)
    # and that check does fail, for the stated reason
    X = np.random.default_rng(4).standard_normal((20, 3))
    q = AttentionQuantizer(inverse_temperature=1.0).fit(X)
    assert not np.allclose(q.transform(X)[:10], q.transform(X[:10]))


@pytest.mark.parametrize(("params", "X", "match"), [
    ({"inverse_temperature": "hot"}, np.ones((3, 2)), "inverse_temperature"),
    ({"inverse_temperature": -1.0}, np.ones((3, 2)), "inverse_temperature"),
    ({"inverse_temperature": 0.0}, np.ones((3, 2)), "inverse_temperature"),
    ({"backend": "flash"}, np.ones((3, 2)), "backend"),
    ({}, np.array([[1.0, np.nan]]), "NaN"),
    ({}, np.array([[1.0, np.inf]]), "infinity"),
    ({}, np.ones((0, 2)), "0 sample"),
    ({}, np.ones(3), "2D array"),
    ({"n_steps": 0}, np.ones((3, 2)), "n_steps must be an integer >= 1, got 0"),
    ({"exclude_self": "no"}, np.ones((3, 2)), "exclude_self must be True or False"),
    ({"renormalize": "x"}, np.ones((3, 2)), "renormalize must be True or False"),
    ({"chunk_size": 0}, np.ones((3, 2)), "chunk_size must be a positive int"),
])
def test_fit_rejects_bad_input(params, X, match):
    with pytest.raises(ValueError, match=match):
        AttentionQuantizer(**params).fit(X)


def test_transform_checks_the_dimension():
    q = AttentionQuantizer().fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="3 features"):
        q.transform(np.ones((4, 2)))
    q.set_params(n_steps=0)                   # set after fit: transform checks it too
    with pytest.raises(ValueError, match="n_steps"):
        q.transform(np.ones((4, 3)))


# -- devices and tensor input: the shared checks (issue 10) -------------------------------------
@pytest.mark.parametrize("device, match", [("cuda", "CUDA is not available"),
                                           ("foo", "device 'foo' is not a torch device"),
                                           ("cuda:7", "CUDA is not available")])
def test_unusable_device_is_a_value_error_at_fit(monkeypatch, device, match):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=match):
        AttentionQuantizer(inverse_temperature=1.0, device=device).fit(np.ones((4, 2)))


def test_tensors_that_require_grad_are_accepted():
    import torch

    X = np.random.default_rng(5).standard_normal((40, 3))
    t = torch.tensor(X, requires_grad=True)
    q = AttentionQuantizer(inverse_temperature=1.5)
    np.testing.assert_allclose(q.fit_transform(t), identity_attention(X, 1.5), rtol=0,
                               atol=_attention_tol(X, 1.5, 1))
    assert q.n_features_in_ == 3 and t.grad is None
    lam = AttentionQuantizer().fit(X).inverse_temperature_
    assert AttentionQuantizer().fit(t).inverse_temperature_ == lam


@pytest.mark.slow
def test_read_only_input_gives_no_torch_warning(tmp_path):
    """A read-only memory map (or a pandas 3 frame's values) is only read: torch's "array is
    not writable" warning is not the user's business. torch warns once per process, so
    the check runs in a fresh one, with every warning an error."""
    import subprocess
    import sys

    X = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.3).sample(200, rng=0)
    np.save(tmp_path / "x.npy", X)
    code = ("import numpy as np, attnclust as ac\n"
            f"X = np.load({str(tmp_path / 'x.npy')!r}, mmap_mode='r')\n"
            "assert not X.flags.writeable\n"
            "Y = ac.AttentionQuantizer(inverse_temperature=2.0).fit_transform(X)\n"
            "np.save(__import__('sys').argv[1], Y)\n")
    run = subprocess.run([sys.executable, "-W", "error", "-c", code, str(tmp_path / "y.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.asarray(identity_attention(X, 2.0)),
                               rtol=0, atol=_attention_tol(X, 2.0, 1))  # another process

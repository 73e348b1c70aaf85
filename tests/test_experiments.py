"""The reproducible study: every figure's quick config runs, caches and plots.

Each figure has its own module fixture (``quick_fig1`` ... ``quick_fig10``) that runs
``attnclust reproduce FIG --quick`` once into a shared folder, so a test renders only the
figures it reads (``-k fig4`` renders figure 4 alone); the JSON sanity checks then read
that output, so a broken figure turns CI red.
"""

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import attnclust as ac
from _tolerance import attention_risk_tol, balance_tol, eps
from attnclust.cli import main
from attnclust.study import _quadrature
from attnclust.study.experiments import FIGURES, load_result, reproduce


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """The folder every figure's fixture renders into; it renders nothing itself."""
    return tmp_path_factory.mktemp("results")


def _quick_figure_fixture(name):
    @pytest.fixture(scope="module", name=f"quick_{name}")
    def fixture(quick_results):
        assert main(["reproduce", name, "--quick", "--quiet", "--out", str(quick_results)]) == 0
        return quick_results

    fixture.__doc__ = f"``attnclust reproduce {name} --quick``, run once; returns its folder."
    return fixture


for _name in FIGURES:
    globals()[f"_quick_{_name}"] = _quick_figure_fixture(_name)


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIGURES))
def test_quick_figure_files_and_json(request, name):
    quick_results = request.getfixturevalue(f"quick_{name}")   # this figure's render only
    for suffix in ("png", "pdf", "json", "npz"):
        path = quick_results / f"{name}-quick.{suffix}"
        assert path.exists() and path.stat().st_size > 0, path
    doc = json.loads((quick_results / f"{name}-quick.json").read_text())
    assert {"figure", "description", "config", "summary", "plotted", "seed", "quick",
            "wall_time_s"} <= set(doc)
    assert doc["figure"] == name and doc["quick"] is True
    numbers = list(_numbers(doc["summary"]))
    assert numbers and all(math.isfinite(v) for v in numbers)
    for key, values in doc["plotted"].items():
        arr = np.asarray(values, dtype=float)
        assert np.all(np.isfinite(arr)), key
        if "distance" in key or key == "error":
            assert np.all((arr >= 0) & (arr <= 2 + 1e-9)), key


# -- the qualitative claims of docs/study.md survive even the quick configs ------------------
# figure 10: the annealing splits at 1 / lambda_max(C) (to the grid), the risk never merges
@pytest.mark.slow
def test_quick_headlines_hold_fig10(quick_fig10):
    fig10 = _summary(quick_fig10, "fig10")
    split = fig10["annealing_first_split"]
    assert 1.0 <= split["measured_over_sample_prediction"]["min"]
    assert split["measured_over_sample_prediction"]["max"] <= split["grid_step"] + 1e-9
    curvature = fig10["risk_curvature_at_mean"]
    assert curvature["negative_at_every_lambda"]
    assert np.allclose(curvature["population_over_prediction"], 1.0, atol=0.01)
    assert fig10["sphere"]["risk_angle_deg_min"] > 45



def _summary(folder, name):
    return json.loads((folder / f"{name}-quick.json").read_text())["summary"]


# figure 1 and 5: PGD from an init on M reaches the centroids up to the inverse temperature
# bias (0.045 for the Dirac mixture at lambda = 3), in every run; on the Dirac
# mixture only for small lambda: at lambda >= 10 a head can start where it wins no
# token and stay there
@pytest.mark.slow
def test_quick_headlines_hold_fig1(quick_fig1):
    assert _summary(quick_fig1, "fig1")["lambda_30"]["final_distance_max"] < 0.01


@pytest.mark.slow
def test_quick_headlines_hold_fig5(quick_fig5):
    fig5 = _summary(quick_fig5, "fig5")
    assert fig5["lambda_3"]["final_distance_max"] < 0.05
    assert fig5["lambda_3"]["dead_head"]["count"] == 0
    # ... while on the Dirac mixture a sharp softmax leaves dead heads (figure 5)
    assert fig5["lambda_30"]["dead_head"]["wilson_95"][0] > 0.05


# figure 2 and 6: regularization or annealing beat plain PGD from random inits
@pytest.mark.slow
def test_quick_headlines_hold_fig2(quick_fig2):
    fig2 = _summary(quick_fig2, "fig2")
    assert fig2["d10_annealing"]["rate"] > fig2["d10_no penalty"]["rate"]


@pytest.mark.slow
def test_quick_headlines_hold_fig6(quick_fig6):
    fig6 = _summary(quick_fig6, "fig6")["success_rate_by_variant"]
    assert fig6["repulsion + annealing"]["wilson_95"][0] > fig6["plain"]["wilson_95"][1]


# figure 3 and 4: both layers shrink the within-cluster spread
@pytest.mark.slow
def test_quick_headlines_hold_fig3(quick_fig3):
    assert _summary(quick_fig3, "fig3")["within_cluster_spread_ratio"] < 0.5


@pytest.mark.slow
def test_quick_headlines_hold_fig4(quick_fig4):
    assert _summary(quick_fig4, "fig4")["within_cluster_spread_ratio"] < 0.1


def test_figures_3_and_4_pass_the_same_prompt():
    """Figure 4 is figure 3's prompt through identity attention, as the study compares the
    two spreads; it drew another prompt from the seed (cluster sizes 223/277 against
    262/238), and the comparison read from which prompt was drawn."""
    fig3, fig4 = FIGURES["fig3"], FIGURES["fig4"]
    trained = fig3.run({**fig3.QUICK, "n_steps": 1}, np.random.default_rng(0))
    identity = fig4.run(fig4.QUICK, np.random.default_rng(0))
    np.testing.assert_array_equal(trained.arrays["labels"], identity.arrays["labels"])
    np.testing.assert_array_equal(trained.arrays["inputs_2d"], identity.arrays["inputs_2d"])


# figure 8: the distance to the infinite-prompt limit decays like L^(-1/2)
@pytest.mark.slow
def test_quick_headlines_hold_fig8(quick_fig8):
    assert -0.7 < _summary(quick_fig8, "fig8")["log_log_slope"] < -0.35


@pytest.mark.slow
def test_cache_is_reused_and_replotted(quick_fig4, monkeypatch):
    quick_results = quick_fig4
    module = FIGURES["fig4"]
    before = (quick_results / "fig4-quick.npz").stat().st_mtime_ns
    (quick_results / "fig4-quick.png").unlink()

    def fail(*args, **kwargs):
        raise AssertionError("cached figure was recomputed")

    monkeypatch.setattr(module, "run", fail)
    paths = reproduce("fig4", out=quick_results, quick=True)
    assert paths.png.exists()
    assert (quick_results / "fig4-quick.npz").stat().st_mtime_ns == before
    result, meta = load_result(paths.json)
    assert meta["seed"] == 0 and set(result.arrays) >= {"inputs_2d", "outputs_2d", "labels"}


@pytest.mark.slow
def test_rates_carry_wilson_intervals(quick_fig1, quick_fig2, quick_fig5, quick_fig6):
    """Every success or failure rate in the JSON has its count, its runs and an interval
    that contains it; the interval is Wilson's (scipy's binomtest as the reference)."""
    quick_results = quick_fig1          # one folder: every figure's fixture renders into it
    from scipy.stats import binomtest

    found = 0
    for name in ("fig1", "fig2", "fig5", "fig6"):
        doc = json.loads((quick_results / f"{name}-quick.json").read_text())

        def walk(value):
            nonlocal found
            if isinstance(value, dict) and "wilson_95" in value:
                found += 1
                lo, hi = value["wilson_95"]
                assert lo <= value["rate"] <= hi
                ref = binomtest(value["count"], value["runs"]).proportion_ci(method="wilson")
                # a dozen roundings of terms at most (1 + z)^2 (p, z^2 / 2n, z sqrt(.)),
                # in another order, z = 1.96 from either quantile; the bounds near 0 or 1
                # cancel: absolute
                assert (lo, hi) == pytest.approx((ref.low, ref.high),
                                                 abs=16 * eps() * (1 + 1.96) ** 2)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
        walk(doc["summary"])
    assert found > 20


@pytest.mark.slow
def test_importing_the_study_leaves_matplotlib_alone(tmp_path):
    """No backend switch and no rcParams change on import or while plotting."""
    code = (
        "import matplotlib\n"
        "matplotlib.use('svg')\n"
        "before = dict(matplotlib.rcParams)\n"
        "import attnclust.study.experiments as ex\n"
        f"ex.reproduce('fig4', out={str(tmp_path)!r}, quick=True)\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
        "changed = [k for k, v in matplotlib.rcParams.items() if before.get(k) != v]\n"
        "assert not changed, changed\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "fig4-quick.png").exists()


def test_changed_config_recomputes(tmp_path, monkeypatch):
    module = FIGURES["fig4"]
    reproduce("fig4", out=tmp_path, quick=True)
    first = json.loads((tmp_path / "fig4-quick.json").read_text())
    monkeypatch.setattr(module, "QUICK", {**module.QUICK, "length": 200})
    reproduce("fig4", out=tmp_path, quick=True)
    second = json.loads((tmp_path / "fig4-quick.json").read_text())
    assert first["config"]["length"] == 500 and second["config"]["length"] == 200
    assert len(second["plotted"]["labels"]) == 200


def test_changed_seed_recomputes(tmp_path):
    reproduce("fig4", out=tmp_path, quick=True, seed=1)
    first = json.loads((tmp_path / "fig4-quick.json").read_text())
    reproduce("fig4", out=tmp_path, quick=True, seed=2)
    second = json.loads((tmp_path / "fig4-quick.json").read_text())
    assert first["seed"] == 1 and second["seed"] == 2
    assert first["plotted"]["inputs_2d"] != second["plotted"]["inputs_2d"]


def test_interrupted_run_leaves_no_cache(tmp_path, monkeypatch):
    module = FIGURES["fig4"]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reproduce("fig4", out=tmp_path, quick=True)
    assert list(tmp_path.iterdir()) == []


def test_a_run_stopped_before_its_json_leaves_no_cache_of_another_seed(tmp_path, monkeypatch):
    """A seed-1 run stopped after its arrays were renamed into place, before its JSON: the
    seed-0 JSON beside them vouched for them, and a later seed-0 run re-plotted seed 1's
    arrays. The old JSON is removed first, so the later run recomputes."""
    import attnclust.study.experiments._runner as runner

    reproduce("fig4", out=tmp_path, quick=True, seed=0)
    seed0 = json.loads((tmp_path / "fig4-quick.json").read_text())["plotted"]
    real = runner.atomic_path

    def stop_at_json(path, *args, **kwargs):
        if str(path).endswith(".json"):
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "atomic_path", stop_at_json)
    with pytest.raises(KeyboardInterrupt):
        reproduce("fig4", out=tmp_path, quick=True, seed=1, recompute=True)
    monkeypatch.setattr(runner, "atomic_path", real)
    assert runner._load_cached(tmp_path / "fig4-quick", FIGURES["fig4"].QUICK, 0) is None
    reproduce("fig4", out=tmp_path, quick=True, seed=0)
    again = json.loads((tmp_path / "fig4-quick.json").read_text())
    assert again["seed"] == 0 and again["plotted"] == seed0      # recomputed: seed 0's


def test_arrays_of_another_run_beside_a_json_are_recomputed(tmp_path):
    """Two runs into one folder can leave one run's JSON beside the other's arrays (or a
    user copies a .npz in): the JSON, which lists every plotted array, vouched for them by
    their names alone, and the figure was re-plotted from another seed's arrays. Now the
    arrays must be the JSON's, value for value."""
    import attnclust.study.experiments._runner as runner

    other = tmp_path / "other"
    reproduce("fig4", out=other, quick=True, seed=1)
    reproduce("fig4", out=tmp_path, quick=True, seed=0)
    stem = tmp_path / "fig4-quick"
    assert runner._load_cached(stem, FIGURES["fig4"].QUICK, 0) is not None
    (other / "fig4-quick.npz").replace(stem.with_suffix(".npz"))     # seed 1's arrays
    assert runner._load_cached(stem, FIGURES["fig4"].QUICK, 0) is None
    reproduce("fig4", out=tmp_path, quick=True, seed=0)
    meta = json.loads(stem.with_suffix(".json").read_text())
    with np.load(stem.with_suffix(".npz")) as arrays:
        assert all(runner._same_array(meta["plotted"][k], arrays[k]) for k in arrays.files)


def test_the_cached_arrays_check_reads_non_finite_numbers():
    from attnclust.study.experiments._runner import _jsonable, _same_array

    a = np.array([[1.5, np.nan], [np.inf, -2.0]], dtype=np.float32)
    assert _same_array(_jsonable(a), a)
    assert not _same_array(_jsonable(a), a[::-1]) and not _same_array([[1.5, None]], a)
    assert _same_array(_jsonable(np.arange(3)), np.arange(3))


def test_reproduce_all_runs_every_figure_in_order(tmp_path, monkeypatch, capsys):
    """``reproduce all`` is every figure of FIGURES, in order (the figures' own tests render
    one figure each; this checks the expansion without rendering any)."""
    import attnclust.study.experiments as ex

    done = []

    def fake(name, *, out, quick, **kwargs):
        done.append((name, out, quick))
        return SimpleNamespace(png=f"{out}/{name}-quick.png")

    monkeypatch.setattr(ex, "reproduce", fake)
    out = str(tmp_path / "r")
    assert main(["reproduce", "all", "--quick", "--quiet", "--out", out]) == 0
    assert done == [(name, out, True) for name in FIGURES]
    assert capsys.readouterr().out.splitlines() == [
        f"{name}: {out}/{name}-quick.png" for name in FIGURES]


def test_list_and_unknown_figure(capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(FIGURES)
    assert main(["reproduce", "fig42", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "unknown figure 'fig42'" in err and err.count("\n") == 1


@pytest.mark.slow
def test_descent_in_the_span_of_heads_and_centroids_is_the_descent_in_r_d():
    """Figures 2 and 6 solve each run in span(heads0, centroids): same iterates as in R^d."""
    import torch

    import attnclust as ac
    from attnclust.study.experiments._common import distance_max, in_span

    for K, d, kwargs in [(2, 40, dict(penalty=["balance", "repulsion"],
                                      rho=ac.layer.schedules.Decay(1.0, steps=30),
                                      inverse_temperature=30.0)),
                         (4, 60, dict(method="qmc", n_samples=256, rng=0, penalty="balance",
                                      rho=0.5, inverse_temperature=10.0))]:
        mixes = [ac.GaussianMixture.random(d, K, 0.1, min_angle=1.0, rng=r) for r in range(2)]
        heads0 = torch.stack([ac.init_on_sphere(K, d, rng=100 + r) for r in range(2)])
        full = ac.pgd(mixes, heads0, step_size=0.5, n_steps=60, record_every=60, **kwargs)
        small, h0, bases = in_span(mixes, heads0)
        assert h0.shape[-1] == 2 * K < d
        reduced = ac.pgd(small, h0, step_size=0.5, n_steps=60, record_every=60, **kwargs)
        back = reduced.heads.numpy() @ bases.transpose(0, 2, 1)  # (R, K, d)
        far = distance_max(full.history.heads, mixes)
        assert far[0].min() > 0.5  # it moved a long way: a real check
        # the same steps in 2K dimensions: the rule's nodes (or samples) summed in another
        # order, each step within step_size times the gradient's bound, the steps adding;
        # plus the map back through the bases (2K + d roundings of unit terms)
        r = max(_quadrature.second_moment(m) for m in mixes) ** 0.5
        rule = _quadrature.rule()
        n = mixes[0].k * (256 if kwargs.get("method") == "qmc" else
                          (rule.grid.size + rule.offsets.size) * rule.gl_x.size)
        lam = kwargs["inverse_temperature"]
        gtol = attention_risk_tol(n, r + 1.0, lam, K, d)[1] + \
            balance_tol(n, r + 1.0, lam, K, d)[1]
        htol = 60 * 0.5 * gtol + (2 * K + d) * eps()
        np.testing.assert_allclose(back, full.heads.numpy(), rtol=0, atol=htol)
        np.testing.assert_allclose(distance_max(reduced.history.heads, small), far, rtol=0,
                                   atol=2 * htol)  # a distance moves by its points' moves


@pytest.mark.parametrize("K, k", [(2, 2), (3, 2), (4, 4), (6, 3)])
def test_distance_max_is_the_hungarian_matched_distance(K, k):
    """The figures' batched distance (every matching at once for K <= 4, run by run
    beyond) against scipy's Hungarian matching in ``ac.centroid_distance``."""
    from attnclust.study.experiments._common import distance_max

    mixes = [ac.GaussianMixture.random(5, k, 0.1, rng=r) for r in range(3)]
    heads = np.stack([[ac.init_on_sphere(K, 5, rng=10 * t + r).numpy() for r in range(3)]
                      for t in range(4)])                                   # (T, R, K, d)
    expected = [[ac.centroid_distance(heads[t, r], mixes[r].centroids).max for r in range(3)]
                for t in range(4)]
    # distances between unit vectors (d = 5) by two computations: a squared distance is
    # within delta = (d + 2) eps (|h| + |c|)^2 = 28 eps, so a distance D within
    # min(sqrt(delta), delta / (2 D)) (the first where D is ~0: the heads of t = 0 are
    # the centroids themselves, drawn from the same seeds)
    def tol(D):
        D, delta = np.asarray(D), 28 * eps()
        return np.minimum(np.sqrt(delta), delta / (2 * np.maximum(D, 1e-300)))

    got = distance_max(heads, mixes)
    assert np.all(np.abs(got - np.asarray(expected)) <= tol(expected))
    expected0 = [ac.centroid_distance(h, mixes[0].centroids).max for h in heads[0]]
    assert np.all(np.abs(distance_max(heads[0], mixes[0]) - expected0) <= tol(expected0))

"""The package contract outside the mathematics: dependency floors that match the features
the code uses, value semantics of GaussianMixture, and the shared input checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnclust as ac
from attnclust._validation import (
    as_numpy_input,
    as_torch_dtype,
    check_device,
    check_finite,
    check_int,
)

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "\n".join(p.read_text() for p in sorted((ROOT / "src" / "attnclust").rglob("*.py")))

# feature the code uses -> (distribution, first release that has it, a token of the source
# that uses it, how to find the feature in the installed release)
FEATURES = {
    "validate_data function": ("scikit-learn", (1, 6), "import check_is_fitted, validate_data",
                               "sklearn.utils.validation:validate_data"),
    "__sklearn_tags__ protocol": ("scikit-learn", (1, 6), "def __sklearn_tags__",
                                  "sklearn.base:BaseEstimator.__sklearn_tags__"),
    "Generator.spawn": ("numpy", (1, 25), "rng.spawn(", "numpy.random:Generator.spawn"),
    "sdpa_kernel context": ("torch", (2, 3), "from torch.nn.attention import SDPBackend, "
                            "sdpa_kernel", "torch.nn.attention:sdpa_kernel"),
    "scaled_dot_product_attention(scale=)": ("torch", (2, 1), "scale=lam)",
                                             "torch.nn.functional:scaled_dot_product_attention"),
    "subplots(layout=)": ("matplotlib", (3, 5), 'layout="constrained"',
                          "matplotlib.figure:Figure"),
    "linear_sum_assignment": ("scipy", (1, 0), "import linear_sum_assignment",
                              "scipy.optimize:linear_sum_assignment"),
    "zip(strict=True)": ("python", (3, 10), "strict=True", "builtins:zip"),
}


def _floors(text: str | None = None) -> dict[str, tuple[int, ...]]:
    """``name -> floor`` of every dependency (and python) declared in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text() if text is None else text
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads(text)["project"]
        specs, python = project["dependencies"], project["requires-python"]
    else:  # pragma: no cover  (3.10 has no tomllib; the list is simple enough for a regex)
        specs = re.findall(r'^\s*"([^"]+)",?\s*$', text.split("dependencies = [")[1]
                           .split("]")[0], flags=re.M)
        python = re.search(r'requires-python = "([^"]+)"', text).group(1)
    floors = {}
    for spec in [*specs, f"python{python}"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", spec.strip())
        assert match, f"dependency {spec!r} has no plain '>=' floor"
        floors[match.group(1)] = tuple(int(x) for x in match.group(2).split("."))
    return floors


def _resolve(where: str):
    module, _, attr = where.partition(":")
    obj = __import__(module, fromlist=["_"])
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _too_low(floors: dict) -> list[str]:
    """The features of the table that the declared floors do not guarantee."""
    return [f"{feature} needs {dist} >= {'.'.join(map(str, since))}"
            for feature, (dist, since, _, _) in FEATURES.items()
            if floors.get(dist, (0,)) < since]


@pytest.mark.parametrize("feature", list(FEATURES))
def test_every_feature_in_the_table_is_real(feature):
    dist, _, token, where = FEATURES[feature]
    assert dist in _floors(), f"{dist} is used ({feature}) but not declared"
    assert token in SOURCE, f"the table is stale: the code no longer uses {feature!r}"
    assert _resolve(where) is not None          # and the installed release has it


def test_dependency_floors_have_the_features_the_code_uses():
    assert _too_low(_floors()) == []


def test_the_old_floors_are_caught():
    """The check can fail: the floors before issue 9 allowed releases without the features."""
    old = (ROOT / "pyproject.toml").read_text().replace('"numpy>=1.25"', '"numpy>=1.24"') \
        .replace('"scikit-learn>=1.6"', '"scikit-learn>=1.3"')
    assert sorted(_too_low(_floors(old))) == [
        "Generator.spawn needs numpy >= 1.25",
        "__sklearn_tags__ protocol needs scikit-learn >= 1.6",
        "validate_data function needs scikit-learn >= 1.6"]


# -- GaussianMixture: equality by value, hashable ---------------------------------------------
def test_mixture_equality_by_value():
    a = ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.3)
    b = ac.GaussianMixture(a.centroids.copy(), sigma=0.3, weights=[0.5, 0.5])
    assert a == b and not (a != b)
    assert a != ac.GaussianMixture.orthogonal(d=4, k=2, sigma=0.31)
    assert a != ac.GaussianMixture(a.centroids, sigma=0.3, weights=[0.25, 0.75])
    assert a != ac.GaussianMixture(a.centroids[::-1], sigma=0.3)
    assert a != ac.GaussianMixture.orthogonal(d=5, k=2, sigma=0.3)    # other shape
    assert a != "mixture" and a.__eq__(3) is NotImplemented


def test_mixture_is_hashable_and_equal_mixtures_hash_alike():
    a = ac.GaussianMixture.orthogonal(d=3, k=2, sigma=0.1)
    signed_zero = a.centroids.copy()
    signed_zero[signed_zero == 0] = -0.0                  # equal values, different bytes
    b = ac.GaussianMixture(signed_zero, sigma=0.1)
    assert a == b and hash(a) == hash(b)
    cache = {a: "fitted"}
    assert cache[b] == "fitted"
    assert len({a, b, ac.GaussianMixture.antipodal(d=3, sigma=0.1)}) == 2


# -- the shared checks of device, dtype and tensor input -----------------------------------------
@pytest.mark.parametrize("device, match", [
    ("foo", "device 'foo' is not a torch device"),
    ("cuda", "device 'cuda': CUDA is not available"),
    ("cuda:3", "CUDA is not available"),
    ("mps", "device 'mps' is not supported"),
    ("meta", "device 'meta' is not supported"),
])
def test_check_device_names_the_device(monkeypatch, device, match):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=re.escape(match)):
        check_device(device)


def test_check_device_cuda_index_beyond_the_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"no such CUDA device, this machine has 2"):
        check_device("cuda:2")


@pytest.mark.parametrize("dtype, expected", [
    ("float32", torch.float32), (np.float64, torch.float64), (torch.float32, torch.float32)])
def test_as_torch_dtype(dtype, expected):
    assert as_torch_dtype(dtype) == expected


@pytest.mark.parametrize("dtype", ["int8", "float16", torch.int64, None, "nonsense"])
def test_as_torch_dtype_refuses(dtype):
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        as_torch_dtype(dtype)


def test_as_numpy_input_detaches():
    t = torch.arange(6.0).reshape(3, 2).requires_grad_(True)
    out = as_numpy_input(t)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, t.detach().numpy())
    X = np.ones((2, 2))
    assert as_numpy_input(X) is X            # non-tensors are left to validate_data
    assert as_numpy_input(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32


def test_check_finite_names_the_first_bad_index():
    x = torch.zeros(3, 4)
    x[2, 1], x[1, 3] = float("inf"), float("nan")
    with pytest.raises(ValueError, match=r"X contains NaN or inf \(first at index \(1, 3\)"):
        check_finite(x, "X")
    with pytest.raises(ValueError, match=r"index 2: inf"):
        check_finite(torch.tensor([0.0, 1.0, float("inf")]), "v")
    assert check_finite(x[0], "ok") is not None


@pytest.mark.parametrize("bad", [True, 2.0, "3", -1, None])
def test_check_int_refuses_non_integers(bad):
    with pytest.raises(ValueError, match=f"n must be an integer >= 0, got {bad!r}"):
        check_int(bad, "n", 0)

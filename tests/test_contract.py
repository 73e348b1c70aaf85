"""The package contract outside the mathematics: dependency floors that match the features
the code uses, value semantics of GaussianMixture, and the shared input checks."""

from __future__ import annotations

import ast
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


# -- packaging: metadata that current setuptools builds without a deprecation -------------
def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression_with_a_setuptools_that_reads_it():
    """PEP 639: ``license`` is an SPDX string (the TOML table is deprecated, unsupported
    after 2027-02-18), which setuptools understands from 77 on."""
    meta = _pyproject()
    assert meta["project"]["license"] == "BSD-3-Clause"
    (spec,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools\s*>=\s*([0-9]+)", spec)
    assert floor and int(floor.group(1)) >= 77, spec


@pytest.mark.slow
def test_the_build_prints_no_deprecation_warning(tmp_path):
    """Build a wheel from a copy of the package (with the installed setuptools, so no
    network) and read the whole log: no ``SetuptoolsDeprecationWarning``."""
    import shutil
    import subprocess

    pytest.importorskip("setuptools", minversion="77")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                          "--no-build-isolation", "-v", "-w", str(tmp_path / "wheel")],
                         capture_output=True, text=True, cwd=tmp_path)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-2000:]
    assert "DeprecationWarning" not in log, log[log.find("DeprecationWarning") - 500:][:1500]
    assert list((tmp_path / "wheel").glob("attnclust-*.whl"))


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


# -- modules talk through public names ------------------------------------------------------------
PACKAGE = ROOT / "src" / "attnclust"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_module(dotted: str) -> bool:
    """Whether ``attnclust.x.y`` names a module (file or package) of the source tree."""
    parts = dotted.split(".")
    if parts[0] != "attnclust":
        return False
    path = PACKAGE.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_module(node: ast.ImportFrom, here: list[str]) -> str:
    """The absolute name of the module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    return ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))


def _scan_imports(tree, module: str, here: list[str]) -> tuple[dict[str, str], list[str]]:
    """Local names bound to attnclust modules, and the private names imported from others."""
    bound: dict[str, str] = {}                      # local name -> attnclust module it names
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attnclust":
                    bound[alias.asname or "attnclust"] = alias.name if alias.asname \
                        else "attnclust"
        elif isinstance(node, ast.ImportFrom):
            source_mod = _imported_module(node, here)
            if source_mod.split(".")[0] != "attnclust":
                continue
            for alias in node.names:
                target = f"{source_mod}.{alias.name}"
                if _is_module(target):
                    bound[alias.asname or alias.name] = target
                elif _is_private(alias.name) and source_mod != module:
                    found.append(f"{module}:{node.lineno} imports {target}")
    return bound, found


def private_crossings(source: str, module: str, *, package: bool = False) -> list[str]:
    """Private names of other attnclust modules that ``source`` (the module ``module``,
    e.g. ``attnclust.pgd``; ``package``: an ``__init__.py``) imports (``from .x import _y``)
    or reads (``x._y``), sorted by line.

    A private *module* may be imported or named (``from . import _io``); its public names
    are public to the package.
    """
    here = module.split(".") if package else module.split(".")[:-1]
    tree = ast.parse(source)
    bound, found = _scan_imports(tree, module, here)

    def resolve(node) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            base = resolve(node.value)
            if base is not None and _is_module(f"{base}.{node.attr}"):
                return f"{base}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = resolve(node.value)
            if owner is not None and owner != module and not _is_module(f"{owner}.{node.attr}"):
                found.append(f"{module}:{node.lineno} reads {owner}.{node.attr}")
    return sorted(found, key=lambda hit: (int(hit.split(":")[1].split()[0]), hit))


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        yield ".".join(parts[:-1] if package else parts), path, package


def test_no_module_uses_a_private_name_of_another():
    found = [hit for module, path, package in _modules()
             for hit in private_crossings(path.read_text(), module, package=package)]
    assert found == []


def test_the_private_name_check_can_fail():
    """Each form the check looks for, in a module that would commit it."""
    source = ("from . import _quadrature as _q\n"
              "from . import risk as _risk\n"
              "from ._quadrature import _rule, graded_nodes\n"
              "from .objectives import _Objective\n"
              "from .. import _io\n"
              "import attnclust.study.risk\n"
              "def f():\n"
              "    from .experiments import _runner\n"
              "    return (_q._N_SCRAMBLES, _risk._second_moment, _risk.__name__, _q.rule,\n"
              "            attnclust.study.risk._exact_risk, _runner._private, _io.public)\n")
    assert private_crossings(source, "attnclust.study.pgd") == [
        "attnclust.study.pgd:3 imports attnclust.study._quadrature._rule",
        "attnclust.study.pgd:4 imports attnclust.study.objectives._Objective",
        "attnclust.study.pgd:9 reads attnclust.study._quadrature._N_SCRAMBLES",
        "attnclust.study.pgd:9 reads attnclust.study.risk._second_moment",
        "attnclust.study.pgd:10 reads attnclust.study.experiments._runner._private",
        "attnclust.study.pgd:10 reads attnclust.study.risk._exact_risk",
    ]
    # a module's own private names and relative imports inside a subpackage
    assert private_crossings("from . import _common\nx = _common._helper\n",
                             "attnclust.study.experiments.fig1") == [
        "attnclust.study.experiments.fig1:2 reads attnclust.study.experiments._common._helper"]
    assert private_crossings("from ._runner import reproduce as _reproduce\n",
                             "attnclust.study.experiments", package=True) == []


# -- the shared input checks ----------------------------------------------------------------
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

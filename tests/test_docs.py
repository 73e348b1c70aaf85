"""The front page and the documentation site's sources (no Sphinx needed here: CI builds
the site itself with warnings as errors)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import attnclust

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _docs_module(name: str):
    """The script ``docs/<name>.py``, imported (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _api_module():
    return _docs_module("_api")


def test_readme_is_a_front_page_of_at_most_300_lines():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 300, f"README.md has {n} lines; move the detail to a page under docs/"


def test_readme_relative_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    targets += re.findall(r'src="([^"]+)"', text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links no page of the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_api_pages_list_every_public_name(tmp_path):
    import attnclust.cluster.distributed as ddp

    _api_module().write_pages(tmp_path)
    listed = set()
    for page in tmp_path.glob("*.rst"):
        listed |= set(re.findall(r"^   ~(\S+)$", page.read_text(), flags=re.M))
    expected = {n for n in attnclust.__all__ if not n.startswith("__")}
    where = ddp.__name__.removeprefix("attnclust.")       # listed from attnclust's page
    expected |= {f"{where}.{n}" for n in ddp.__all__}
    # a callable module (attnclust.pgd) is documented as its function
    shown = {name if name.startswith(f"{where}.") else name.split(".")[-1] for name in listed}
    assert expected <= shown, f"not in the API reference: {sorted(expected - shown)}"
    index = (tmp_path / "index.rst").read_text()
    assert all(f"   {p.stem}\n" in index for p in tmp_path.glob("*.rst") if p.stem != "index")


@pytest.mark.parametrize("page", sorted((DOCS / "guide").glob("*.md")), ids=lambda p: p.name)
def test_guide_pages_follow_the_guide_rules(page):
    """docs/development.md: a guide page starts with a '# Title' line, is listed in the
    toctree of docs/guide/index.md, is at most 300 lines long and carries no dates."""
    text = page.read_text(encoding="utf-8")
    assert text.lstrip().splitlines()[0].startswith("# "), \
        f"{page.name} must start with a '# Title' line"
    assert len(text.splitlines()) <= 300, f"{page.name} is over 300 lines"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{page.name} carries a date"
    if page.name != "index.md":
        toctree = (DOCS / "guide" / "index.md").read_text(encoding="utf-8")
        assert re.search(rf"^{re.escape(page.stem)}$", toctree, re.M), \
            f"{page.name} is not in the toctree of docs/guide/index.md"


def test_the_source_tree_of_the_development_page_names_every_module():
    """docs/development.md's tree of src/attnclust/ lists every module, in the halves and
    the command line too (a new module added without a line there fails here); the
    figures' experiments are one line, "one module per figure"."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "development.md").read_text()
    tree = page[page.index("src/attnclust/"):page.index("benchmarks/ ")]
    package = root / "src" / "attnclust"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                     if not p.name.startswith("__") and "experiments" not in p.parts)
    missing = [m for m in modules if not re.search(rf"(^|[\s(]){re.escape(Path(m).name)}\b",
                                                   tree, flags=re.M)]
    assert not missing, f"docs/development.md's source tree lacks {missing}"


def _architecture():
    return _docs_module("architecture")


def test_the_architecture_picture_places_every_module_of_the_package():
    arch = _architecture()
    modules, _ = arch.layout()
    drawn = sum(len(rows) for part, rows in modules.items() if part in arch.POSITION)
    assert drawn == len(list((ROOT / "src" / "attnclust").rglob("*.py")))


def test_the_study_imports_the_clusterer_only_in_its_experiments():
    """What the architecture page says of the two halves, read off the source tree."""
    _, edges = _architecture().layout()
    into_cluster = {a for a, b in edges if b.startswith("attnclust.cluster")}
    assert "attnclust.study" not in into_cluster
    assert not any(a.startswith("attnclust.study") and b == "attnclust.cli" for a, b in edges)
    assert ("attnclust.study.experiments", "attnclust.cluster") in edges


@pytest.mark.slow
def test_the_architecture_picture_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    _architecture().draw(tmp_path / "architecture.png")
    assert (tmp_path / "architecture.png").stat().st_size > 10_000


def test_the_shaped_heads_page_example_runs():
    """docs/guide/shaped-heads.md's example, on blobs where the default fit chooses round
    heads: it read covariances_ after that fit, which round heads do not have (an
    AttributeError)."""
    from sklearn.datasets import make_blobs

    text = (DOCS / "guide" / "shaped-heads.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    X, _ = make_blobs(600, centers=3, random_state=0)
    scope = {"X": X}
    assert blocks
    for block in blocks:
        exec(block, scope)
    assert scope["est"].covariance_type_ == "spherical"       # the case the page missed
    assert scope["full"].covariances_.shape == (3, 2, 2)

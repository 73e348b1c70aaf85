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


def _api_module():
    spec = importlib.util.spec_from_file_location("_api", DOCS / "_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
def test_guide_pages_start_with_a_title(page):
    first = page.read_text(encoding="utf-8").lstrip().splitlines()[0]
    assert first.startswith("# "), f"{page.name} must start with a '# Title' line"


def test_the_source_tree_of_the_development_page_names_every_module():
    """docs/development.md's tree of src/attnclust/ lists every module (a new module
    added without a line there fails here)."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "development.md").read_text()
    tree = page[page.index("src/attnclust/"):page.index("benchmarks/ ")]
    modules = sorted(p.name for p in (root / "src" / "attnclust").glob("*.py")
                     if not p.name.startswith("__"))
    missing = [m for m in modules if f"  {m} " not in tree]
    assert not missing, f"docs/development.md's source tree lacks {missing}"

"""What the docstrings and documentation pages state about the code: notation tables that
reStructuredText can read, and the warm-start sample size the estimator actually uses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from attnclust.cluster.settings import FitSettings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnclust"
_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")


def broken_table_rows(text: str) -> list[int]:
    """Lines (1-based) of simple reST tables in ``text`` whose cells overflow their
    column: a non-blank character in a gap between two border columns (docutils then
    refuses the table or splits a cell)."""
    lines, bad, i = text.splitlines(), [], 0
    while i < len(lines):
        if _BORDER.match(lines[i]):
            spans = [m.span() for m in re.finditer(r"=+", lines[i])]
            j = i + 1
            while j < len(lines) and lines[j].strip():
                if not _BORDER.match(lines[j]) and any(
                        lines[j][end:start].strip() for (_, end), (start, _) in
                        zip(spans, spans[1:], strict=False)):
                    bad.append(j + 1)
                j += 1
            i = j
        i += 1
    return bad


def _docstrings(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", "module"), doc


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_notation_tables_are_readable(path):
    assert [(name, row) for name, doc in _docstrings(path)
            for row in broken_table_rows(doc)] == []


def test_the_table_check_can_fail():
    good = ("=====  ==========  =====\n"
            "a      ``lam``     x\n"
            "=====  ==========  =====\n")
    bad = good.replace("``lam``   ", "``inverse_temperature``")
    assert broken_table_rows(good) == [] and broken_table_rows(bad) == [2]


# statements of the warm-start sample's size, in docstrings and documentation pages
_SAMPLE = re.compile(r"(?:\bsample\s+of|\bseeds?\s+from)\s+(?:at\s+most\s+)?([\d,]+)\s+rows",
                     re.IGNORECASE)


def _stated_sample_sizes() -> list[tuple[str, int]]:
    texts = [(f"{p.name}:{name}", doc) for p in sorted(PACKAGE.rglob("*.py"))
             for name, doc in _docstrings(p)]
    texts += [(str(p.relative_to(ROOT)), p.read_text())
              for p in sorted((ROOT / "docs").rglob("*.md"))]
    return [(where, int(m.group(1).replace(",", ""))) for where, text in texts
            for m in _SAMPLE.finditer(text)]


def test_docs_state_the_warm_start_sample_the_code_uses():
    """Docstrings name the setting (``settings.warm_sample``); a number stated on a page
    is its default (which FitSettings' own docstring states: tests/test_settings.py)."""
    stated = _stated_sample_sizes()
    assert [(where, n) for where, n in stated if n != FitSettings().warm_sample] == []


def test_the_sample_statement_check_can_fail():
    text = ("Initial heads: k-means++ seeding (on a seeded sample of 100,000\n"
            "        rows when there are more); each on the sample of at most 20,000 rows;\n"
            "k-means++ seeds from at\nmost 30,000 rows; faiss: a subsample of 256 rows")
    assert [int(m.group(1).replace(",", "")) for m in _SAMPLE.finditer(text)] == [
        100_000, 20_000, 30_000]

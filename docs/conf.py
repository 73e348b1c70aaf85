"""Sphinx configuration of the attnclust documentation site.

Build it from the repository root (``pip install -e ".[docs]"`` first)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference is generated at each build from ``attnclust.__all__`` and
``attnclust.cluster.distributed.__all__`` (see ``_api.py``): a name added there appears on the
site without editing any page. The gallery runs the scripts of ``examples/``, and the
architecture page's picture is drawn from the source tree (``architecture.py``).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))              # _api.py, _gallery.py, architecture.py
sys.path.insert(0, str(HERE.parent / "src"))  # the checkout's package, installed or not

import _api  # noqa: E402
import architecture  # noqa: E402

import attnclust  # noqa: E402

# The gallery and the API pages run the library: keep it on the CPU, quiet and small.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

project = "attnclust"
author = "the attnclust developers"
copyright = "the attnclust developers, BSD-3-Clause"  # noqa: A001
release = attnclust.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["attnclust.css"]      # wide code blocks scroll inside the page

# --- MyST: the guide pages are Markdown -------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3


# --- autodoc / autosummary / numpydoc ------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"           # the numpydoc Parameters section says the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False  # the class template lists members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()  # style is reviewed, not enforced here

# numpydoc also reads the docstring of a callable object to find its signature; for the
# callable module attnclust.pgd that is the module's docstring, whose Notation heading
# it does not know (the page itself shows it, see _notation_as_rubric below).
warnings.filterwarnings("ignore", message="Unknown section Notation", category=UserWarning)

# --- sphinx-gallery -----------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    # simple to advanced, not by file name (tests/test_docs.py checks every script is here)
    "within_subsection_order": "_gallery.GalleryOrder",
    "matplotlib_animations": False,
    "reset_modules": ("matplotlib",),
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
}

# --- HTML ---------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"attnclust {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# The left column shows the pages of the current section (the guide's pages, the
# study's, the reference's): each section is an index page with its own toctree.
html_sidebars = {"index": [], "changelog": []}

# --- the API pages, generated from __all__ ------------------------------------------
_api.write_pages(HERE / "api")
architecture.draw()                       # docs/architecture.png, as the code is now


def _notation_as_rubric(app, what, name, obj, options, lines):
    """A module's ``Notation`` section is a heading numpydoc does not know: show it as a
    rubric (a plain heading) so that numpydoc keeps the table instead of dropping it."""
    if what != "module":
        return
    for i in range(len(lines) - 1):
        if lines[i].strip() == "Notation" and set(lines[i + 1].strip()) == {"-"}:
            lines[i : i + 2] = [".. rubric:: Notation", ""]
            break


def _skip_member(app, what, name, obj, skip, options):
    """Leave out methods a base class from another library attaches to ours (scikit-learn's
    ``set_fit_request`` and friends: their docstrings belong to that library's site), and
    the deprecated names of 0.1 (the changelog lists them)."""
    if type(obj).__name__ == "RenamedAttribute":
        return True
    module = getattr(obj, "__module__", None)
    if callable(obj) and isinstance(module, str) and not module.startswith("attnclust"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _notation_as_rubric, priority=100)
    app.connect("autodoc-skip-member", _skip_member)

"""The gallery's order: from the first clustering to data-parallel fitting.

sphinx-gallery sorts the scripts of ``examples/`` with :class:`GalleryOrder`
(``within_subsection_order`` in ``conf.py``); ``tests/test_docs.py`` checks that every
script is listed here.
"""

from __future__ import annotations

GALLERY_ORDER = [
    "plot_quickstart.py",         # cluster an array: a given K, then K chosen
    "plot_real_data.py",          # scikit-learn's tables, against KMeans
    "plot_any_shape.py",          # rings, crescents, spirals: heads merged into clusters
    "plot_geometry.py",           # cells against cones
    "plot_in_context.py",         # identity attention
    "plot_running_example.py",    # the study's two heads on the population risk
    "plot_study_figures.py",      # the figures of the study
    "plot_distributed.py",        # data-parallel fitting
]


class GalleryOrder:
    """Sort key: the scripts of ``GALLERY_ORDER`` in its order, any other after them."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename: str):
        if filename in GALLERY_ORDER:
            return (0, GALLERY_ORDER.index(filename), filename)
        return (1, 0, filename)

    def __repr__(self) -> str:             # Sphinx compares configurations by repr
        return "GalleryOrder()"

"""The reproducible study: one module per figure, and the runner that caches them.

>>> from attnclust.study.experiments import FIGURES
>>> list(FIGURES)[:3]
['fig1', 'fig2', 'fig3']
"""

from __future__ import annotations

from pathlib import Path

from . import fig1, fig2, fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10
from ._runner import FigurePaths, FigureResult, load_result
from ._runner import reproduce as _reproduce

__all__ = ["FIGURES", "FigurePaths", "FigureResult", "load_result", "reproduce"]

FIGURES = {m.NAME: m for m in (fig1, fig2, fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10)}


def reproduce(name: str, *, out: str | Path = "results", quick: bool = False, seed: int = 0,
              recompute: bool = False, progress: bool = False) -> FigurePaths:
    """Compute (or reuse the cached result of) figure ``name`` and plot it.

    Parameters
    ----------
    name : str
        ``"fig1"`` .. ``"fig10"``.
    out : path, default="results"
        Folder for ``NAME.{png,pdf,json,npz}`` (``NAME-quick.*`` with ``quick``).
    quick : bool
        Use the figure's small ``QUICK`` config.
    seed : int
        Root seed; each run draws an independent stream spawned from it.
    recompute : bool
        Ignore a cached result.
    progress : bool
        Show progress bars.
    """
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose from {', '.join(FIGURES)}")
    return _reproduce(FIGURES[name], out=out, quick=quick, seed=seed, recompute=recompute,
                      progress=progress)

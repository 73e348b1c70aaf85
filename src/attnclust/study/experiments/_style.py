"""One plotting style for every figure, applied inside a context: importing the study
changes neither the user's matplotlib backend nor their rcParams.

Figures are :class:`matplotlib.figure.Figure` objects written to files (no pyplot, no
window); :func:`styled` wraps a figure's ``plot`` in :func:`matplotlib.rc_context`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..._atomic import save_matrices

__all__ = ["band", "new_figure", "rate_band", "save", "styled", "COLORS", "RC"]

COLORS = matplotlib.colormaps["tab10"].colors

RC = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 9,
}


def styled(plot):
    """Run a figure's ``plot(result, out)`` under the study's rcParams only."""
    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(RC):
            return plot(*args, **kwargs)
    return wrapper


def new_figure(n_panels: int = 1, *, width: float = 4.2, height: float = 3.2, n_rows: int = 1):
    """A figure with ``n_rows x n_panels`` axes (a flat array when ``n_rows == 1``)."""
    fig = Figure(figsize=(width * n_panels, height * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_panels, squeeze=False)
    return fig, (axes[0] if n_rows == 1 else axes)


def band(ax, x, runs, *, label: str, color, log: bool = False) -> None:
    """Median over runs (axis 0) with the 2.5%-97.5% percentile band."""
    runs = np.asarray(runs, dtype=float)
    lo, med, hi = np.nanpercentile(runs, [2.5, 50, 97.5], axis=0)
    ax.plot(x, med, color=color, label=label, lw=1.6)
    ax.fill_between(x, lo, hi, color=color, alpha=0.22, lw=0)
    if log:
        ax.set_yscale("log")


def rate_band(ax, x, rate, lo, hi, *, label: str, color, **kwargs) -> None:
    """A success rate with its 95% Wilson interval as a shaded band."""
    ax.plot(x, rate, color=color, label=label, lw=1.6, **kwargs)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)


def save(fig, out: str | Path) -> None:
    """Write ``out.png`` and ``out.pdf``, both or neither: an interrupt or a failure
    leaves no png without its pdf (:func:`attnclust._atomic.save_matrices`)."""
    out = Path(out)

    def writer(suffix):
        def write(tmp):
            fig.savefig(tmp, format=suffix)
            # the layout solved for the first file holds for the second: solve it once
            fig.set_layout_engine("none")
        return write

    save_matrices({out.with_suffix(".png"): writer("png"), out.with_suffix(".pdf"): writer("pdf")})

"""One plotting style for every figure: median curves with 95% percentile bands."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .._io import atomic_path  # noqa: E402

__all__ = ["band", "new_figure", "save", "COLORS"]

COLORS = plt.get_cmap("tab10").colors

plt.rcParams.update({
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 9,
})


def new_figure(n_panels: int = 1, *, width: float = 4.2, height: float = 3.2):
    """A figure with ``n_panels`` side-by-side axes (always returned as an array)."""
    fig, axes = plt.subplots(1, n_panels, figsize=(width * n_panels, height), squeeze=False,
                             layout="constrained")
    return fig, axes[0]


def band(ax, x, runs, *, label: str, color, log: bool = False) -> None:
    """Median over runs (axis 0) with the 2.5%-97.5% percentile band."""
    runs = np.asarray(runs, dtype=float)
    lo, med, hi = np.nanpercentile(runs, [2.5, 50, 97.5], axis=0)
    ax.plot(x, med, color=color, label=label, lw=1.6)
    ax.fill_between(x, lo, hi, color=color, alpha=0.22, lw=0)
    if log:
        ax.set_yscale("log")


def save(fig, out: str | Path) -> None:
    """Write ``out.png`` and ``out.pdf`` atomically and close the figure."""
    out = Path(out)
    for suffix in (".png", ".pdf"):
        with atomic_path(out.with_suffix(suffix)) as tmp:
            fig.savefig(tmp)
    plt.close(fig)
